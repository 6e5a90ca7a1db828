"""End to end: every refusal of a body file arrives on a Twrite, with the errno that fits.

Clients never see a clunk's reply: plan9port's `9p write` drops the Rclunk (fsclose), v9fs and
FUSE clunk on release. So each refusal is driven four ways against one running `anvild`
(`[sessions] max_prompt_bytes = 65536`): `tests.support.p9write` (plan9port's `9p write`
sequence through python-9p; exit status from the writes only), `anvilctl write` (a subprocess),
and a 9P2000.L and a 9P2000.u client (our codec: Debian's diod tools cannot write) that check the
errno. After each refused write the session's state, `out`, queue, inboxes, sent mail and
records, and the bead's texts, are byte for byte as before.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from anvild.ninep import messages as m
from anvild.ninep.constants import (
    L_O_TRUNC,
    L_O_WRONLY,
    NOFID,
    OTRUNC,
    OWRITE,
    SETATTR_MODE,
    Dialect,
)
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_hostile_input_e2e import Daemon, rdwr, read, write
from tests.integration.test_sessions_e2e import FakeServer, start_daemon, user_config
from tests.support.p9write import p9write

CAP = 65536
MSIZE = 65536


@attrs.frozen
class Served:
    d: Daemon
    data_dir: Path

    @property
    def socket(self) -> str:
        return str(self.d.namespace / "agent")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("writes")
    fake = FakeServer(tmp, [{"text": "pong", "repeat": True}])
    config = user_config(tmp, fake.url)
    config.write_text(config.read_text() + f"\n[sessions]\nmax_prompt_bytes = {CAP}\n")
    workdir = tmp / "work"
    workdir.mkdir()
    daemon: Anvild = start_daemon(tmp / "ns", config)
    try:
        yield Served(Daemon(tmp / "ns", workdir, fake), daemon.data_dir)
    finally:
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log


# --- what a test writes to ------------------------------------------------------------------

_names = iter(range(1, 1_000_000))


@attrs.frozen
class World:
    """A fresh sender session, a recipient, a bead and a convoy."""

    s: Served
    dev: str
    rev: str
    rev_alias: str
    bead: str
    convoy: str

    def path(self, file: str) -> str:
        if file in ("description", "result"):
            return f"beads/{self.bead}/{file}"
        if file == "convoy-context":
            return f"convoys/{self.convoy}/context"
        if file == "user/outbox":
            return file
        return f"{self.dev}/{file}"

    def snapshot(self) -> dict[str, str | bytes]:
        d = self.s.d
        seen: dict[str, str | bytes] = {}
        for name in ("out", "state", "queue", "context", "role", "first_prompt", "inbox"):
            seen[name] = read(d, f"{self.dev}/{name}")  # out first: reading it may move await
        seen["rev inbox"] = read(d, f"{self.rev}/inbox")
        seen["user inbox"] = read(d, "user/inbox")
        for box in (f"{self.dev}/mail/sent", "user/mail/sent"):
            seen[box] = read(d, box)
        for sid in (self.dev, self.rev):
            seen[f"records {sid}"] = (self.s.data_dir / "sessions" / f"{sid}.jsonl").read_bytes()
        for name in ("description", "result", "status"):
            seen[f"bead {name}"] = read(d, f"beads/{self.bead}/{name}")
        seen["convoy context"] = read(d, f"convoys/{self.convoy}/context")
        return seen


def new_session(d: Daemon) -> tuple[str, str]:
    alias = f"w{next(_names)}"
    session = rdwr(d, "ctl", f"new cwd={d.workdir} alias={alias}")
    assert session.isalnum(), session
    return session, alias


def make_world(s: Served, setup: str) -> World:
    d = s.d
    dev, _ = new_session(d)
    rev, rev_alias = new_session(d)
    bead = rdwr(d, "beads/ctl", 'new "Write errors" developer "first"')
    convoy = rdwr(d, "convoys/ctl", 'new "Write errors" "goal"')
    if setup == "stopped":
        assert write(d, f"{dev}/ctl", b"stop\n") is None
    elif setup == "prompted":
        assert write(d, f"{dev}/in", b"hello") is None
        assert read(d, f"{dev}/wait") == "await\n"
        assert read(d, f"{dev}/out").strip() == "pong"
    elif setup == "in_progress":
        assert write(d, f"beads/{bead}/ctl", b"claim user\n") is None
    elif setup == "completed":
        assert write(d, f"beads/{bead}/ctl", b"claim user\n") is None
        assert write(d, f"beads/{bead}/ctl", b"complete done\n") is None
    return World(s, dev, rev, rev_alias, bead, convoy)


# --- the cases: every body file, every refusal ------------------------------------------------


def _msg(to: str, **extra: object) -> bytes:
    message = {"to": to, "type": "QUESTION", "subject": "s", "body": "b", **extra}
    return json.dumps(message, ensure_ascii=False).encode()


Data = Callable[[World], bytes]


@attrs.frozen
class Case:
    file: str
    data: Data
    expected: str
    code: int
    setup: str = ""


URANDOM = bytes(range(128, 256)) * 8  # 1024 bytes no UTF-8 text can start with


def fixed(data: bytes) -> Data:
    return lambda w: data


CASES = {
    # in: UTF-8, the cap, the session's state
    "in-urandom": Case("in", fixed(URANDOM), "in: not valid UTF-8", errno.EINVAL),
    "in-too-large": Case(
        "in", fixed(b"x" * (CAP + 1)), "max_prompt_bytes in the daemon's config", errno.EFBIG
    ),
    "in-stopped": Case(
        "in", fixed(b"hello\n"), "is stopped: write `start` to its ctl", errno.EBUSY, "stopped"
    ),
    # context
    "context-urandom": Case("context", fixed(URANDOM), "context: not valid UTF-8", errno.EINVAL),
    "context-too-large": Case(
        "context", fixed(b"c" * (CAP + 1)), "body too large: 65537 bytes", errno.EFBIG
    ),
    # role: one word and a newline, applied when the line is complete
    "role-unknown": Case("role", fixed(b"nosuchrole\n"), "unknown role", errno.EINVAL),
    "role-two-lines": Case("role", fixed(b"reviewer\ntester\n"), "one line per open", errno.EINVAL),
    "role-urandom": Case("role", fixed(URANDOM), "role: not valid UTF-8", errno.EINVAL),
    "role-too-large": Case("role", fixed(b"r" * 2000 + b"\n"), "role: body too large", errno.EFBIG),
    "role-after-a-prompt": Case(
        "role", fixed(b"reviewer\n"), "fixed once it has had a prompt", errno.EBUSY, "prompted"
    ),
    # outbox (and the human's): JSON checked as it arrives, the message when complete
    "outbox-malformed": Case(
        "outbox", fixed(b"{bad\n"), "outbox: malformed JSON at line 1 column 2", errno.EINVAL
    ),
    "outbox-unknown-recipient": Case(
        "outbox",
        lambda w: _msg("nobody-here"),
        "no live session has the id or alias 'nobody-here'",
        errno.ENOENT,
    ),
    "outbox-unknown-type": Case(
        "outbox",
        lambda w: _msg(w.rev_alias, type="GOSSIP"),
        'unknown message type "GOSSIP"',
        errno.EINVAL,
    ),
    "outbox-no-recipient": Case(
        "outbox", fixed(b'{"type": "QUESTION", "body": "x"}'), 'add "to"', errno.EINVAL
    ),
    "outbox-two-messages": Case(
        "outbox",
        lambda w: _msg(w.rev_alias) + b"\n" + _msg(w.rev_alias),
        "one message per open",
        errno.EINVAL,
    ),
    "outbox-nested": Case(
        "outbox", fixed(b"[" * 100), "JSON nested deeper than 64 levels", errno.EINVAL
    ),
    "outbox-nan": Case(
        "outbox",
        lambda w: _msg(w.rev_alias)[:-1] + b', "metadata": {"x": NaN}}',
        "NaN is not a JSON number",
        errno.EINVAL,
    ),
    "outbox-urandom": Case("outbox", fixed(URANDOM), "outbox: not valid UTF-8", errno.EINVAL),
    "outbox-too-large": Case(
        "outbox",
        lambda w: _msg(w.rev_alias, body="x" * 200_000),
        "exceeds the limit of 131072 bytes (the size of one message)",
        errno.EFBIG,
    ),
    "outbox-body-over-its-cap": Case(
        "outbox",
        lambda w: _msg(w.rev_alias, body="x" * 70_000),
        '"body" is 70000 bytes; the limit is 65536 bytes',
        errno.EINVAL,
    ),
    "user-outbox-unknown-recipient": Case(
        "user/outbox", lambda w: _msg("ghost"), "'ghost'", errno.ENOENT
    ),
    "user-outbox-malformed": Case(
        "user/outbox", fixed(b'{"to": "x",, }'), "malformed JSON", errno.EINVAL
    ),
    # a bead's and a convoy's texts: UTF-8, size, the bead's status
    "description-in-progress": Case(
        "description",
        fixed(b"new text\n"),
        "its description changes only while it is pending",
        errno.EBUSY,
        "in_progress",
    ),
    "description-urandom": Case(
        "description", fixed(URANDOM), "description: not valid UTF-8", errno.EINVAL
    ),
    "result-completed": Case(
        "result", fixed(b"another\n"), "its result is final", errno.EBUSY, "completed"
    ),
    "result-too-large": Case(
        "result", fixed(b"y" * (1 << 20 | 1)), "result: body too large", errno.EFBIG
    ),
    "convoy-context-urandom": Case(
        "convoy-context", fixed(URANDOM), "context: not valid UTF-8", errno.EINVAL
    ),
}

# --- clients ------------------------------------------------------------------------------------


def anvilctl_write(s: Served, path: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", "write", f"agent/{path}"],
        input=data,
        capture_output=True,
        timeout=60,
        env={**os.environ, "NAMESPACE": str(s.d.namespace)},
        check=False,
    )


class Raw:
    """A blocking 9P2000.L or .u client: open for writing, write in msize pieces, clunk."""

    def __init__(self, s: Served, dialect: Dialect) -> None:
        self.dialect = dialect
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(s.socket)
        self.buf = b""
        reply = self.rpc(m.Tversion(0xFFFF, MSIZE, dialect.value))
        assert isinstance(reply, m.Rversion), reply
        self.check(self.rpc(m.Tattach(0, 0, NOFID, "tester", "", os.getuid())))

    def close(self) -> None:
        self.sock.close()

    def rpc(self, msg: m.Message) -> m.Message:
        self.sock.sendall(m.encode(msg, self.dialect))
        while len(self.buf) < 4 or len(self.buf) < int.from_bytes(self.buf[:4], "little"):
            chunk = self.sock.recv(1 << 16)
            assert chunk, "the server hung up"
            self.buf += chunk
        size = int.from_bytes(self.buf[:4], "little")
        frame, self.buf = self.buf[:size], self.buf[size:]
        return m.decode(frame, self.dialect)

    @staticmethod
    def check(reply: m.Message) -> m.Message:
        assert not isinstance(reply, m.Rerror | m.Rlerror), reply
        return reply

    def write(self, path: str, data: bytes, piece: int = MSIZE - 24) -> m.Message | None:
        """The first error reply of the writes, else None; the fid is clunked either way."""
        self.check(self.rpc(m.Twalk(0, 0, 1, [p for p in path.split("/") if p])))
        if self.dialect is Dialect.P9P2000_L:
            self.check(self.rpc(m.Tlopen(0, 1, L_O_WRONLY | L_O_TRUNC)))
        else:
            self.check(self.rpc(m.Topen(0, 1, OWRITE | OTRUNC)))
        error = None
        for offset in range(0, max(len(data), 1), piece):
            reply = self.rpc(m.Twrite(0, 1, offset, data[offset : offset + piece]))
            if not isinstance(reply, m.Rwrite):
                error = reply
                break
        self.rpc(m.Tclunk(0, 1))
        return error


def dir_names(s: Served, path: str) -> list[str]:
    return os.listdir(s.data_dir / "mail" / path.replace("mail/", ""))


def raw_write(s: Served, dialect: Dialect, path: str, data: bytes) -> m.Message | None:
    client = Raw(s, dialect)
    try:
        return client.write(path, data)
    finally:
        client.close()


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_each_refusal_comes_on_a_twrite_with_its_errno(served: Served, name: str) -> None:
    case = CASES[name]
    w = make_world(served, case.setup)
    path, data = w.path(case.file), case.data(w)
    before = w.snapshot()

    # plan9port's `9p write`: exit status from the writes only
    status, err = p9write(served.socket, path, data)
    assert status == 1, f"9p write exited 0: the refusal was not on a Twrite ({err!r})"
    assert "write error: " in err
    assert case.expected in err
    assert w.snapshot() == before

    # anvilctl write
    done = anvilctl_write(served, path, data)
    assert done.returncode == 1, done
    assert case.expected in done.stderr.decode()
    assert w.snapshot() == before

    # 9P2000.L: only the errno; 9P2000.u: the errno and the text
    reply = raw_write(served, Dialect.P9P2000_L, path, data)
    assert reply == m.Rlerror(0, case.code), errno.errorcode.get(getattr(reply, "ecode", 0))
    reply = raw_write(served, Dialect.P9P2000_U, path, data)
    assert isinstance(reply, m.Rerror), reply
    assert reply.errno == case.code
    assert case.expected in reply.ename
    assert w.snapshot() == before


def test_an_80k_message_in_8k_writes_is_delivered_once_at_its_last_twrite(served: Served) -> None:
    w = make_world(served, "")
    head = _msg(w.rev_alias, body="é" * 30_000)  # two bytes each: many writes split one
    pad = 80 * 1024 - len(head)
    for before in (pad, pad - 1):  # blanks around the body so that pieces end inside an é
        message = head[:1] + b" " * before + head[1:-1] + b" " * (pad - before) + head[-1:]
        pieces = [message[i : i + 8192] for i in range(0, len(message), 8192)]
        if any(p[-1] == 0xC3 for p in pieces):
            break
    assert len(message) == 80 * 1024
    assert any(p[-1] == 0xC3 for p in pieces)  # a piece ends inside a character
    client = Raw(w.s, Dialect.P9P2000_U)
    try:
        client.check(client.rpc(m.Twalk(0, 0, 1, [w.dev, "outbox"])))
        client.check(client.rpc(m.Topen(0, 1, OWRITE | OTRUNC)))
        for i, piece in enumerate(pieces):
            assert json.loads(read(w.s.d, f"{w.rev}/inbox")) == []  # not before the last
            assert client.rpc(m.Twrite(0, 1, i * 8192, piece)) == m.Rwrite(0, len(piece))
        [got] = json.loads(read(w.s.d, f"{w.rev}/inbox"))  # delivered by the last Twrite
        assert (got["from"], got["body"]) == (w.dev, "é" * 30_000)
        # A second message on the same open fails its Twrite; the first stays delivered once.
        reply = client.rpc(m.Twrite(0, 1, len(message), _msg(w.rev_alias)))
        assert isinstance(reply, m.Rerror), reply
        assert "one message per open" in reply.ename
        assert reply.errno == errno.EINVAL
        assert client.rpc(m.Tclunk(0, 1)) == m.Rclunk(0)
    finally:
        client.close()
    assert json.loads(read(w.s.d, f"{w.rev}/inbox")) == []  # read above: now in received/
    assert len(dir_names(w.s, f"{w.rev}/mail/received")) == 1
    assert len(dir_names(w.s, f"{w.dev}/mail/sent")) == 1


def test_a_character_split_between_two_writes_is_fine(served: Served) -> None:
    w = make_world(served, "")
    message = _msg(w.rev_alias, body="naïve 🎉 done")
    cut = message.index("🎉".encode()) + 2
    client = Raw(w.s, Dialect.P9P2000_L)
    try:
        client.check(client.rpc(m.Twalk(0, 0, 1, [w.dev, "outbox"])))
        client.check(client.rpc(m.Tlopen(0, 1, L_O_WRONLY | L_O_TRUNC)))
        assert client.rpc(m.Twrite(0, 1, 0, message[:cut])) == m.Rwrite(0, cut)
        rest = message[cut:]
        assert client.rpc(m.Twrite(0, 1, cut, rest)) == m.Rwrite(0, len(rest))
        client.rpc(m.Tclunk(0, 1))
    finally:
        client.close()
    [got] = json.loads(read(w.s.d, f"{w.rev}/inbox"))
    assert got["body"] == "naïve 🎉 done"
    # The same through `in`: a prompt whose character is cut between two 9p writes.
    text = "é" * 4096  # 8192 bytes: `9p write` cuts it into two 4096-byte writes evenly
    assert p9write(served.socket, f"{w.dev}/context", ("x" + text).encode()) == (0, "")
    assert read(w.s.d, f"{w.dev}/context") == "x" + text


def test_9p_write_of_good_bodies_still_works(served: Served) -> None:
    w = make_world(served, "")
    assert p9write(served.socket, f"{w.dev}/role", b"reviewer\n") == (0, "")
    assert read(served.d, f"{w.dev}/role") == "reviewer\n"
    assert p9write(served.socket, f"{w.dev}/outbox", _msg(w.rev_alias)) == (0, "")
    assert len(json.loads(read(served.d, f"{w.rev}/inbox"))) == 1
    assert p9write(served.socket, f"{w.dev}/in", b"hello") == (0, "")
    assert read(served.d, f"{w.dev}/wait") == "await\n"


def test_the_urandom_pipeline_of_the_issue_exits_1(served: Served) -> None:
    """`head -c 1000 /dev/urandom | 9p write agent/ID/in`, with our `9p write`."""
    w = make_world(served, "")
    before = w.snapshot()
    done = subprocess.run(
        f"head -c 1000 /dev/urandom | {sys.executable} -m tests.support.p9write "
        f"{served.socket} {w.dev}/in",
        shell=True,
        capture_output=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    # 1000 random bytes are valid UTF-8 with a probability below 2**-500
    assert done.returncode == 1, done
    assert b"write error: in: not valid UTF-8" in done.stderr
    assert w.snapshot() == before


def test_what_only_a_clunk_can_know_is_still_refused_there(served: Served) -> None:
    """The clunk-only cases (docs/decisions.md): a body that ends before its JSON value, and an
    empty prompt. `9p write` cannot show them; the outbox's comes back as mail."""
    w = make_world(served, "")
    assert p9write(served.socket, f"{w.dev}/outbox", b'{"to": "' + w.rev.encode()) == (0, "")
    assert json.loads(read(served.d, f"{w.rev}/inbox")) == []
    [report] = json.loads(read(served.d, f"{w.dev}/inbox"))
    assert report["type"] == "ERROR_REPORT"
    assert "malformed JSON" in report["body"]
    assert "the prompt is empty" in (write(served.d, f"{w.dev}/in", b"  \n") or "")
    assert read(served.d, f"{w.dev}/first_prompt") == "-\n"


def test_the_other_kinds_reach_a_9p2000_l_client_with_their_errno(served: Served) -> None:
    """The rest of README's errno table that a client can cause: EACCES (a read-only file
    opened for writing), EPERM (an attribute other than a truncation), ENOENT (a walk)."""
    w = make_world(served, "")
    client = Raw(served, Dialect.P9P2000_L)
    try:
        client.check(client.rpc(m.Twalk(0, 0, 1, [w.dev, "state"])))
        assert client.rpc(m.Tlopen(0, 1, L_O_WRONLY)) == m.Rlerror(0, errno.EACCES)
        chmod = m.Tsetattr(0, 1, SETATTR_MODE, 0o777, 0, 0, 0, 0, 0, 0, 0)
        assert client.rpc(chmod) == m.Rlerror(0, errno.EPERM)
        assert client.rpc(m.Twalk(0, 0, 2, ["nosuch"])) == m.Rlerror(0, errno.ENOENT)
    finally:
        client.close()
