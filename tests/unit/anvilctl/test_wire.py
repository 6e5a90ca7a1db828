"""anvilctl's own codec against the reference (`anvild.ninep.messages`), and the fast command line
parser against argparse: same bytes, same values, same errors (hypothesis)."""

from __future__ import annotations

import os
import pathlib
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anvilctl import ninep_cli, wire
from anvilctl.__main__ import build_parser
from anvilctl.ninep_client import MAX_REPLY as Client_MAX
from anvilctl.ninep_client import Client, ClientError, ConnectError
from anvild.ninep import constants as c
from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect
from anvild.ninep.errors import ProtocolError
from anvild.ninep.framing import FrameReader

ROOT = pathlib.Path(__file__).resolve().parents[3]
D = Dialect.P9P2000

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)
text = st.text(max_size=20)
qids = st.builds(m.Qid, u8, u32, u64)
stats = st.builds(m.Stat, u16, u32, qids, u32, u32, u32, u64, text, text, text, text)
KINDS: dict[str, st.SearchStrategy[Any]] = {
    "u8": u8, "u16": u16, "u32": u32, "u64": u64, "s": text, "qid": qids,
    "data": st.binary(max_size=64), "wnames": st.lists(text, max_size=c.MAXWELEM).map(tuple),
    "qids": st.lists(qids, max_size=c.MAXWELEM).map(tuple), "stat": stats,
}  # fmt: skip
# Values the reference refuses or cannot encode, mixed in to check that wire refuses them too.
WILD: dict[str, st.SearchStrategy[Any]] = {
    "u8": st.integers(-1, 0x100), "u16": st.integers(-1, 0x10000),
    "u32": st.integers(-1, 0x100000000), "u64": st.integers(-1, 1 << 64),
    "s": st.one_of(text, st.just("\udcff"), st.just("x" * 0x10000)),
    "wnames": st.lists(text, max_size=c.MAXWELEM + 2).map(tuple),
}  # fmt: skip


def message(cls: type[m.Message], wild: bool = False) -> st.SearchStrategy[m.Message]:
    def field(kind: str) -> st.SearchStrategy[Any]:
        return st.one_of(KINDS[kind], WILD[kind]) if wild and kind in WILD else KINDS[kind]

    fields = [field(kind) for _, kind in cls.layout(D)]
    return st.builds(cls, st.one_of(u16, WILD["u16"]) if wild else u16, *fields)


def values_of(msg: m.Message) -> list[Any]:
    return [msg.tag, *(getattr(msg, name) for name, _ in msg.layout(D))]  # type: ignore[attr-defined]


def plain(value: Any) -> Any:
    """Qids and stats of either codec as tuples, to compare them."""
    if isinstance(value, m.Qid | wire.Qid):
        return ("qid", value.type, value.version, value.path)
    if isinstance(value, m.Stat | wire.Stat):
        return ("stat", *(plain(getattr(value, f)) for f in wire._STAT_FIELDS))
    if isinstance(value, tuple | list):
        return tuple(plain(v) for v in value)
    return value


def test_the_constants_are_the_references() -> None:
    for name in ("NOTAG", "NOFID", "NONUNAME", "MAXWELEM", "IOHDRSZ", "OREAD", "OWRITE", "ORDWR",
                 "OTRUNC", "DMDIR", "DMAPPEND", "DMEXCL", "DMAUTH"):  # fmt: skip
        assert getattr(wire, name) == getattr(c, name), name
    assert wire.HEADER_SIZE == m.HEADER_SIZE
    assert wire.VERSION == c.VERSION_9P2000
    for name, number in wire.REQUEST_TYPES.items():
        assert number == getattr(m, name).TYPE
        assert m.MESSAGE_TYPES[D][number + 1].__name__ == wire.REPLY_NAMES[number + 1]
    assert m.Rerror.TYPE == wire.RERROR
    assert set(wire.ENCODERS) == set(wire.REQUEST_TYPES)


@pytest.mark.parametrize("name", sorted(wire.ENCODERS))
@settings(max_examples=150)
@given(data=st.data())
def test_requests_byte_for_byte(name: str, data: st.DataObject) -> None:
    msg = data.draw(message(getattr(m, name), wild=True))
    try:
        expected: bytes | None = m.encode(msg, D)
    except (ProtocolError, UnicodeError):
        expected = None
    try:
        got: bytes | None = wire.ENCODERS[name](*values_of(msg))
    except wire.Unhandled:
        got = None
    assert got == expected


REPLIES: list[tuple[type[m.Message], Callable[[bytes], Any]]] = [
    (m.Rversion, wire.rversion), (m.Rerror, wire.rerror), (m.Rauth, wire.rqid),
    (m.Rattach, wire.rqid), (m.Rwalk, wire.rwalk), (m.Ropen, wire.ropen), (m.Rread, wire.rread),
    (m.Rwrite, wire.rwrite), (m.Rclunk, wire.rempty), (m.Rstat, wire.rstat),
]  # fmt: skip


def reference_values(msg: m.Message) -> Any:
    values = values_of(msg)[1:]
    if isinstance(msg, m.Rclunk):
        return None
    return plain(values[0] if len(values) == 1 else tuple(values))


def mutated(frame: bytes, data: st.DataObject) -> bytes:
    """The frame, or the frame cut short, extended, or with one byte changed; the size field is
    kept equal to the length (the client's framing guarantees that much)."""
    how = data.draw(st.sampled_from(["same", "cut", "extend", "flip"]))
    out = bytearray(frame)
    if how == "cut":
        del out[data.draw(st.integers(m.HEADER_SIZE, len(out))) :]
    elif how == "extend":
        out += data.draw(st.binary(min_size=1, max_size=4))
    elif how == "flip" and len(out) > m.HEADER_SIZE:
        at = data.draw(st.integers(m.HEADER_SIZE, len(out) - 1))
        out[at] = data.draw(u8)
    struct.pack_into("<I", out, 0, len(out))
    return bytes(out)


@pytest.mark.parametrize(("cls", "decode"), REPLIES, ids=lambda x: getattr(x, "__name__", ""))
@settings(max_examples=150)
@given(data=st.data())
def test_replies_decode_as_the_reference_does(
    cls: type[m.Message], decode: Callable[[bytes], Any], data: st.DataObject
) -> None:
    frame = mutated(m.encode(data.draw(message(cls)), D), data)
    try:
        expected = reference_values(m.decode(frame, D))
    except ProtocolError:
        expected = ProtocolError
    try:
        got = plain(decode(frame))
    except wire.Unhandled:
        got = ProtocolError
    assert got == expected


@settings(max_examples=200)
@given(data=st.data())
def test_directory_reads_decode_as_the_reference_does(data: st.DataObject) -> None:
    entries = data.draw(st.lists(stats, max_size=4))
    raw = bytearray(b"".join(m.encode_stat(s, D) for s in entries))
    if raw and data.draw(st.booleans()):
        if data.draw(st.booleans()):
            del raw[data.draw(st.integers(0, len(raw) - 1)) :]
        else:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(u8)
    try:
        expected = plain(m.decode_stats(bytes(raw), D))
    except ProtocolError:
        expected = ProtocolError
    try:
        got = plain(wire.stats(bytes(raw)))
    except wire.Unhandled:
        got = ProtocolError
    assert got == expected


# --- the client: each request on its fast path and through the reference, same outcome ---------

CALLS: list[tuple[str, Callable[[bytes], Any], tuple[Any, ...]]] = [
    ("Tversion", wire.rversion, (c.NOTAG, 8192, "9P2000")),
    ("Tauth", wire.rqid, (0, 0, "glenda", "")),
    ("Tattach", wire.rqid, (0, 0, c.NOFID, "glenda", "")),
    ("Twalk", wire.rwalk, (0, 0, 1, ("a", "b"))),
    ("Topen", wire.ropen, (0, 1, c.OREAD)),
    ("Tread", wire.rread, (0, 1, 0, 4096)),
    ("Twrite", wire.rwrite, (0, 1, 0, b"ping")),
    ("Tclunk", wire.rempty, (0, 1)),
    ("Tstat", wire.rstat, (0, 1)),
]


def outcome(action: Callable[[Client], Any], reply: bytes) -> Any:
    """What `action` returns or raises when the server's bytes are ``reply``, then EOF."""
    ours, server = socket.socketpair()
    with ours, server:
        server.sendall(reply)  # waiting before the request goes out
        server.shutdown(socket.SHUT_WR)
        try:
            return plain(action(Client(ours)))
        except ClientError as exc:
            return type(exc), str(exc)


@pytest.mark.parametrize(
    ("request_name", "decode", "fields"), CALLS, ids=[name for name, _, _ in CALLS]
)
@settings(max_examples=60)
@given(data=st.data())
def test_client_outcomes_match_the_reference_path(
    request_name: str, decode: Callable[[bytes], Any], fields: tuple[Any, ...], data: st.DataObject
) -> None:
    # Mostly the expected reply and errors; sometimes any other message of the dialect.
    expected_reply = m.MESSAGE_TYPES[D][wire.REQUEST_TYPES[request_name] + 1]
    others = sorted(m.MESSAGE_TYPES[D].values(), key=lambda cls: cls.TYPE)
    cls = data.draw(st.sampled_from([expected_reply, expected_reply, m.Rerror, *others]))
    reply = data.draw(message(cls))
    if data.draw(st.integers(0, 3)):  # usually the request's tag
        reply = m.decode(m.encode(reply, D), D)
        values = values_of(reply)
        reply = type(reply)(fields[0], *values[1:])
    frame = mutated(m.encode(reply, D), data)
    if data.draw(st.integers(0, 9)) == 0:
        frame = data.draw(st.binary(max_size=12))  # framing errors, EOF mid-frame

    def fast(client: Client) -> Any:
        return client._call(request_name, decode, *fields)

    def reference(client: Client) -> Any:
        return reference_values(client.rpc(getattr(m, request_name)(*fields)))

    assert outcome(fast, frame) == outcome(reference, frame)


@settings(max_examples=200)
@given(stream=st.binary(max_size=40), cuts=st.lists(st.integers(4, 16), max_size=3))
def test_client_framing_is_the_frame_readers(stream: bytes, cuts: list[int]) -> None:
    # Size fields from 0 to 16 so that short, empty and whole frames all occur.
    data = bytearray(stream)
    for at in cuts:
        if at + 4 <= len(data):
            struct.pack_into("<I", data, at - 4, data[at] % 17)
    # The reference reader is fed a byte at a time, as the client reads: the frames before a bad
    # header are delivered before the error (one `frames()` call on everything would lose them).
    reader = FrameReader(Client_MAX)
    expected: list[Any] = []
    try:
        for byte in bytes(data):
            reader.feed(bytes([byte]))
            expected += reader.frames()
        expected.append((ConnectError, "the server closed the connection"))
    except ProtocolError as exc:
        expected.append((ClientError, f"bad reply from the server: {exc}"))
    ours, server = socket.socketpair()
    with ours, server:
        server.sendall(bytes(data))
        server.shutdown(socket.SHUT_WR)
        client = Client(ours)
        got: list[Any] = []
        while True:
            try:
                got.append(client._frame())
            except ClientError as exc:
                got.append((type(exc), str(exc)))
                break
    assert got == expected


# --- the command line -------------------------------------------------------------------------

TOKENS = ["-a", "-A", "-n", "-l", "-h", "-", "--", "-x", "-al", "ls", "read", "write", "rdwr",
          "stat", "new", "agent/x", "agent", "", "a b", "tcp!127.0.0.1!564", "-1"]  # fmt: skip


@settings(max_examples=400)
@given(argv=st.lists(st.sampled_from(TOKENS), max_size=7))
def test_the_fast_parser_agrees_with_argparse(argv: list[str]) -> None:
    fast = ninep_cli.parse_args(argv)
    if fast is None:
        return
    parser, _ = build_parser(only_9p=True)
    assert vars(parser.parse_args(argv)) == vars(fast)


@pytest.mark.parametrize(
    "argv",
    [["ls", "agent"], ["ls", "-l", "agent", "agent/list"], ["read", "agent/version"],
     ["write", "agent/ctl"], ["write", "-l", "agent/ctl"], ["rdwr", "agent/ctl"],
     ["stat", "agent/list"], ["-n", "read", "agent/x"],
     ["-a", "tcp!127.0.0.1!5640", "-A", "TOKEN", "ls", "agent"]],
)  # fmt: skip
def test_what_scripts_write_takes_the_fast_path(argv: list[str]) -> None:
    assert ninep_cli.parse_args(argv) is not None


def test_the_9p_commands_import_neither_attrs_nor_argparse(tmp_path: Any) -> None:
    code = (
        "import sys\n"
        "from anvilctl.__main__ import main\n"
        "assert main(['read', 'agent/x']) == 1\n"
        "print(sorted(n for n in ('attrs', 'argparse', 'typing', 'anvild', 'getpass')"
        " if n in sys.modules))\n"
    )
    env = {**os.environ, "NAMESPACE": str(tmp_path), "USER": "glenda"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, cwd=ROOT, check=True
    )
    assert out.stdout == b"[]\n"
    assert b"anvilctl read agent/x: anvild is not running (no socket at " in out.stderr
