"""End to end: every writable file of a running `anvild` refuses hostile bytes by name.

One daemon serves the whole module (its config sets `[sessions] max_prompt_bytes = 65536`);
each test makes its own sessions, beads and convoys. Writes go through the anvilctl 9P client
in-process, with plan9port's request sequence (Twalk, Topen OWRITE|OTRUNC, Twrites of at most
msize-24 bytes, Tclunk). Each refusal is checked three ways: the error text names the problem
(never "internal error"), the previous state is intact, and the daemon serves the next request.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from anvilctl.ninep_client import CFid, Client, ServerError, dial
from anvild.ninep.constants import OREAD, OTRUNC, OWRITE
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer, start_daemon, user_config

CAP = 65536


@attrs.frozen
class Daemon:
    namespace: Path
    workdir: Path
    fake: FakeServer


@pytest.fixture(scope="module")
def anvild(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("hostile")
    fake = FakeServer(tmp, [{"text": "pong", "repeat": True}])
    config = user_config(tmp, fake.url)
    config.write_text(config.read_text() + f"\n[sessions]\nmax_prompt_bytes = {CAP}\n")
    workdir = tmp / "work"
    workdir.mkdir()
    daemon: Anvild = start_daemon(tmp / "ns", config)
    try:
        yield Daemon(tmp / "ns", workdir, fake)
    finally:
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log


def _client(d: Daemon) -> Client:
    return Client(dial(f"unix!{d.namespace}/agent"))


def write(d: Daemon, path: str, data: bytes) -> str | None:
    """`anvilctl write PATH`: one open, the data in msize pieces, clunk. The server's error (of
    the write, else of the clunk), or None."""
    with _client(d) as client:
        root = client.mount()
        fid = client.open(root, path, OWRITE | OTRUNC)
        try:
            fid.write(data)
        except ServerError as exc:
            _clunk_quietly(fid)
            return str(exc)
        try:
            fid.clunk()
        except ServerError as exc:
            return str(exc)
    return None


def _clunk_quietly(fid: CFid) -> None:
    with contextlib.suppress(ServerError):  # the refusal of the write is what is reported
        fid.clunk()


def read(d: Daemon, path: str) -> str:
    with _client(d) as client:
        root = client.mount()
        fid = client.open(root, path, OREAD)
        out = b""
        while chunk := fid.read(8192):
            out += chunk
        fid.clunk()
    return out.decode()


def rdwr(d: Daemon, path: str, line: str) -> str:
    """`anvilctl rdwr`: write one line on an ORDWR fid, then read its answer."""
    with _client(d) as client:
        root = client.mount()
        fid = client.open(root, path, 2)  # ORDWR
        fid.write(line.encode())
        answer = fid.pread(8192, 0).decode()
        fid.clunk()
    return answer.strip()


def serves(d: Daemon) -> None:
    """The daemon still answers: a read and a ctl write."""
    assert read(d, "version").strip()
    assert write(d, "ctl", b"ping\n") is None


_names = iter(range(1, 1_000_000))


def new_session(d: Daemon) -> tuple[str, str]:
    alias = f"s{next(_names)}"
    session = rdwr(d, "ctl", f"new cwd={d.workdir} alias={alias}")
    assert session.isalnum(), session
    return session, alias


def refused(error: str | None, expected: str) -> None:
    assert error is not None, "the write was accepted"
    assert expected in error, error
    assert "internal error" not in error


# --- outbox: the strict JSON reader ------------------------------------------------------------


def _message(**extra: Any) -> dict[str, Any]:
    return {"type": "QUESTION", "subject": "s", "body": "b", **extra}


def _raw(fields: str, *, to: str = "", encoding: str = "utf-8") -> Callable[[str], bytes]:
    """A message written by hand: `to` (the recipient, given at run time), then `fields`."""

    def make(recipient: str) -> bytes:
        head = '{"to": "' + (to or recipient) + '", "type": "QUESTION", '
        return (head + fields + "}").encode(encoding)

    return make


def _meta(**metadata: Any) -> Callable[[str], bytes]:
    return lambda to: json.dumps(_message(to=to, metadata=metadata)).encode()


OUTBOX_CASES = [
    pytest.param(
        _raw('"body": "x", "metadata": {"a": ' + "[" * 3000 + "]" * 3000 + "}"),
        "JSON nested deeper than 64 levels",
        id="nesting-3000",
    ),
    pytest.param(_meta(score=float("nan")), "NaN is not a JSON number", id="nan"),
    pytest.param(_meta(x=float("inf")), "Infinity is not a JSON number", id="infinity"),
    pytest.param(_meta(x=float("-inf")), "-Infinity is not a JSON number", id="minus-infinity"),
    pytest.param(
        _raw('"body": "x", "metadata": {"n": ' + "9" * 5000 + "}"),
        "integers are limited to +-9007199254740991",
        id="huge-integer",
    ),
    pytest.param(
        _raw('"body": "x", "metadata": {"n": 1e999}'),
        "does not fit a 64-bit float",
        id="float-overflow",
    ),
    pytest.param(
        _raw('"to": "user", "body": "x"'),
        'the key "to" appears twice in one object',
        id="duplicate-key",
    ),
    pytest.param(_meta(**{"bell\u0007": 1}), "holds a control character", id="control-in-key"),
    pytest.param(
        lambda to: json.dumps(_message(to=to + "\u001b[2J")).encode(),
        '"to" holds a control character',
        id="control-in-recipient",
    ),
    pytest.param(
        _raw('"body": "caf\xe9"', encoding="latin-1"),
        "not valid UTF-8 (bad byte at offset",
        id="invalid-utf8",
    ),
    pytest.param(_raw('"body": "\\ud800"'), "lone UTF-16 surrogate", id="lone-surrogate"),
]


@pytest.mark.parametrize(("make", "expected"), OUTBOX_CASES)
def test_the_outbox_refuses_hostile_json_by_name(anvild: Daemon, make: Any, expected: str) -> None:
    d = anvild
    dev, _ = new_session(d)
    rev, rev_alias = new_session(d)
    error = write(d, f"{dev}/outbox", make(rev_alias))
    refused(error, expected)
    assert error is not None
    assert error.startswith("outbox: ")
    # Nothing was sent: the recipient's inbox and the sender's sent box are empty; refused on
    # the Twrite (every client shows that), so no mail about it either.
    assert json.loads(read(d, f"{rev}/inbox")) == []
    assert read(d, f"{dev}/mail/sent") == ""
    assert json.loads(read(d, f"{dev}/inbox")) == []
    serves(d)
    # The same mailbox still sends: a good message is delivered.
    assert write(d, f"{dev}/outbox", json.dumps(_message(to=rev_alias)).encode()) is None
    [got] = json.loads(read(d, f"{rev}/inbox"))
    assert (got["from"], got["body"]) == (dev, "b")


def test_an_outbox_body_past_a_message_fails_the_write_that_crosses_it(anvild: Daemon) -> None:
    d = anvild
    dev, _ = new_session(d)
    rev, rev_alias = new_session(d)
    body = json.dumps(_message(to=rev_alias, body="x" * (2 << 20))).encode()
    refused(
        write(d, f"{dev}/outbox", body),
        f"outbox: body too large: {8168 * 17} bytes exceeds the limit of 131072 bytes (the "
        "size of one message)",  # the 17th Twrite of msize 8192 crosses it
    )
    assert json.loads(read(d, f"{rev}/inbox")) == []
    assert read(d, f"{dev}/mail/sent") == ""
    serves(d)


def test_what_the_outbox_archives_is_strict_json(anvild: Daemon) -> None:
    d = anvild
    dev, _ = new_session(d)
    rev, rev_alias = new_session(d)
    ok = _message(to=rev_alias, metadata={"n": 9007199254740991, "x": 1.5e300, "deep": [[[1]]]})
    assert write(d, f"{dev}/outbox", json.dumps(ok).encode()) is None
    text = read(d, f"{rev}/inbox")

    def no_constants(name: str) -> Any:
        raise AssertionError(f"{name} in the archive")

    [got] = json.loads(text, parse_constant=no_constants)
    assert got["metadata"] == ok["metadata"]


# --- in and context: the prompt cap -------------------------------------------------------------


@pytest.mark.parametrize("name", ["in", "context"])
def test_a_prompt_over_the_cap_fails_the_write_that_crosses_it(anvild: Daemon, name: str) -> None:
    d = anvild
    session, _ = new_session(d)
    big = b"x" * (5 << 20)
    with _client(d) as client:
        root = client.mount()
        fid = client.open(root, f"{session}/{name}", OWRITE | OTRUNC)
        with pytest.raises(ServerError) as info:
            fid.write(big)
        # Refused at the Twrite that crossed the cap, not at the clunk: what was accepted
        # before it is less than the cap.
        assert 0 < fid.offset <= CAP
        with pytest.raises(ServerError, match="body too large"):
            fid.clunk()  # and the clunk commits nothing
    refused(
        str(info.value),
        f"{name}: body too large: {fid.offset + 8168} bytes exceeds the limit of {CAP} bytes "
        "([sessions] max_prompt_bytes in the daemon's config)",
    )
    assert read(d, f"{session}/state") == "idle\n"
    assert read(d, f"{session}/first_prompt") == "-\n"
    assert read(d, f"{session}/queue") == ""
    assert read(d, f"{session}/context") == ""
    serves(d)
    # At the cap it is accepted.
    assert write(d, f"{session}/context", b"c" * CAP) is None
    assert len(read(d, f"{session}/context")) == CAP
    assert write(d, f"{session}/in", b"hello") is None
    assert read(d, f"{session}/wait") == "await\n"  # answered, answer not read yet
    assert read(d, f"{session}/out").strip() == "pong"


@pytest.mark.parametrize("name", ["description", "result", "context"])
def test_a_bead_text_over_a_mebibyte_is_refused_and_the_old_text_kept(
    anvild: Daemon, name: str
) -> None:
    d = anvild
    if name == "context":
        where = "convoys/" + rdwr(d, "convoys/ctl", 'new "Big text" "goal"')
    else:
        where = "beads/" + rdwr(d, "beads/ctl", 'new "Big text" developer "first"')
    assert write(d, f"{where}/{name}", b"kept\n") is None
    refused(
        write(d, f"{where}/{name}", b"y" * (3 << 20)),
        f"{name}: body too large: {8168 * 129} bytes exceeds the limit of 1048576 bytes (a "
        "bead's or convoy's text is at most 1 MiB)",
    )
    assert read(d, f"{where}/{name}") == "kept\n"
    serves(d)


# --- names --------------------------------------------------------------------------------------


def test_a_bead_title_with_a_control_character_is_refused(anvild: Daemon) -> None:
    d = anvild
    before = read(d, "beads/list")
    error = write(d, "beads/ctl", b'new "Fix \x1b[2Jit" developer\n')
    refused(error, "the bead title holds the control character U+001B")
    error = write(d, "convoys/ctl", b'new "Ship\x07" "goal"\n')
    refused(error, "the convoy title holds the control character U+0007")
    assert read(d, "beads/list") == before
    serves(d)
    bead = rdwr(d, "beads/ctl", 'new "Fix it" developer')
    assert read(d, f"beads/{bead}/title") == "Fix it\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"new alias=dev\x07", "alias=dev\x07 is not a name"),
        (b"new role=developer\x1b", "unknown role 'developer\\x1b'"),
    ],
)
def test_a_session_name_with_a_control_character_is_refused(
    anvild: Daemon, line: bytes, expected: str
) -> None:
    d = anvild
    before = read(d, "list")
    refused(write(d, "ctl", line + f" cwd={d.workdir}\n".encode()), expected)
    assert read(d, "list") == before
    serves(d)


# --- no client input reaches the catch-all ------------------------------------------------------

HOSTILE = [
    b"\xff\xfe\xfd",
    b"ok\x00nul",
    b"\x1b[2J\x07\x08",
    b"[" * 3000,
    b"{" * 3000 + b'"',
    b"'unbalanced",
    b'"unbalanced',
    b"new cwd=" + b"a" * 5000,
    b"x" * 100_000,
    b"\xed\xa0\x80",  # a UTF-8-encoded surrogate: not valid UTF-8
    "\u202e\u2066 bidi".encode(),
    b"new model=\x1b[31m budget=" + b"9" * 5000 + b" max_steps=1e999",
    b"new cwd=/proc/self/root/" + b"../" * 2000 + b" alias=" + b"a" * 300,
    b"kill " + b"k" * 10_000 + b"\nclaim " + b"s" * 10_000,
    b'new "' + b"t" * 10_000 + b'" ' + b"r" * 10_000 + b" convoy=" + b"c" * 1000,
    b"dep add " + b"a" * 3000 + b" " + b"b" * 3000,
]


def _writable(d: Daemon) -> list[str]:
    session, _ = new_session(d)
    bead = rdwr(d, "beads/ctl", 'new "Hostile target" developer')
    convoy = rdwr(d, "convoys/ctl", 'new "Hostile convoy" "goal"')
    return [
        "ctl",
        f"{session}/ctl",
        f"{session}/in",
        f"{session}/context",
        f"{session}/role",
        f"{session}/queue",
        f"{session}/approval",
        f"{session}/outbox",
        "user/outbox",
        "beads/ctl",
        f"beads/{bead}/ctl",
        f"beads/{bead}/description",
        f"beads/{bead}/result",
        "convoys/ctl",
        f"convoys/{convoy}/ctl",
        f"convoys/{convoy}/context",
    ]


@pytest.mark.parametrize("data", HOSTILE, ids=lambda b: repr(b[:12]))
def test_no_hostile_write_ends_in_an_internal_error(anvild: Daemon, data: bytes) -> None:
    d = anvild
    for path in _writable(d):
        error = write(d, path, data)
        assert error is None or "internal error" not in error, (path, error)
    serves(d)
