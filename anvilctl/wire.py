"""anvilctl's 9P2000 codec for the messages its file commands exchange: no attrs, no project.

`anvild.ninep.messages` is the reference codec. This module is a fast path in front of it for
one-shot commands, whose start-up is most of their run time (why: docs/decisions.md, "anvilctl
has its own small 9P2000 codec"). It encodes the nine requests the commands send and decodes the
ten replies they expect, byte for byte as the reference does (tests/unit/anvilctl/test_wire.py).
Anything it does not take raises `Unhandled` and the caller asks the reference instead: a value
out of range, a string UTF-8 cannot encode, a reply of another type, any malformed byte. So the
reference still produces every error message, and this module only has to be right about
well-formed input. The protocol constants the commands need are repeated here (intro(5), open(5),
stat(5)); a test checks them against `anvild.ninep.constants`.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

__all__ = ["ENCODERS", "REPLY_NAMES", "REQUEST_TYPES", "Qid", "Stat", "Unhandled", "stats"]

NOTAG = 0xFFFF
NOFID = 0xFFFFFFFF
NONUNAME = 0xFFFFFFFF
MAXWELEM = 16
IOHDRSZ = 24
HEADER_SIZE = 7
OREAD, OWRITE, ORDWR, OTRUNC = 0, 1, 2, 0x10
DMDIR, DMAPPEND, DMEXCL, DMAUTH = 0x80000000, 0x40000000, 0x20000000, 0x08000000
VERSION = "9P2000"

RERROR = 107
# The requests this module encodes (name: wire type); each reply's type is the request's + 1.
REQUEST_TYPES = {
    "Tversion": 100, "Tauth": 102, "Tattach": 104, "Twalk": 110, "Topen": 112, "Tread": 116,
    "Twrite": 118, "Tclunk": 120, "Tstat": 124,
}  # fmt: skip
REPLY_NAMES = {t + 1: "R" + name[1:] for name, t in REQUEST_TYPES.items()} | {RERROR: "Rerror"}


class Unhandled(Exception):
    """Not for this codec: the caller asks `anvild.ninep.messages`, which decides."""


class Qid:
    """intro(5) qid: type[1] version[4] path[8] (the reference's `Qid`, without attrs)."""

    __slots__ = ("path", "type", "version")

    def __init__(self, type: int, version: int, path: int) -> None:
        self.type = type
        self.version = version
        self.path = path

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Qid):
            return NotImplemented
        return (self.type, self.version, self.path) == (other.type, other.version, other.path)

    def __hash__(self) -> int:
        return hash((self.type, self.version, self.path))

    def __repr__(self) -> str:
        return f"Qid(type={self.type}, version={self.version}, path={self.path})"


_STAT_FIELDS = ("type", "dev", "qid", "mode", "atime", "mtime", "length", "name", "uid", "gid",
                "muid", "extension", "n_uid", "n_gid", "n_muid")  # fmt: skip


class Stat:
    """stat(5) entry with the reference `Stat`'s fields (the 9P2000.u ones keep their defaults)."""

    __slots__ = _STAT_FIELDS

    def __init__(
        self, type: int, dev: int, qid: Qid, mode: int, atime: int, mtime: int, length: int,
        name: str, uid: str, gid: str, muid: str, extension: str = "", n_uid: int = NONUNAME,
        n_gid: int = NONUNAME, n_muid: int = NONUNAME,
    ) -> None:  # fmt: skip
        self.type = type
        self.dev = dev
        self.qid = qid
        self.mode = mode
        self.atime = atime
        self.mtime = mtime
        self.length = length
        self.name = name
        self.uid = uid
        self.gid = gid
        self.muid = muid
        self.extension = extension
        self.n_uid = n_uid
        self.n_gid = n_gid
        self.n_muid = n_muid

    def __repr__(self) -> str:
        return "Stat(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _STAT_FIELDS) + ")"


# --- requests ------------------------------------------------------------------------------------

_U16 = struct.Struct("<H")
_FID = struct.Struct("<IBHI")  # Tclunk, Tstat
_TOPEN = struct.Struct("<IBHIB")
_TREAD = struct.Struct("<IBHIQI")
_TWRITE = struct.Struct("<IBHIQI")
_TWALK = struct.Struct("<IBHIIH")
_TATTACH = struct.Struct("<IBHII")
_TAUTH = struct.Struct("<IBHI")
_TVERSION = struct.Struct("<IBHI")


def _string(text: str) -> bytes:
    try:
        data = text.encode("utf-8")
        return _U16.pack(len(data)) + data
    except (UnicodeError, struct.error) as exc:  # the reference says which (and how) it fails
        raise Unhandled from exc


def _frame(head: struct.Struct, type_: int, *values: int, tail: bytes = b"") -> bytes:
    try:
        return head.pack(head.size + len(tail), type_, *values) + tail
    except struct.error as exc:
        raise Unhandled from exc


def tversion(tag: int, msize: int, version: str) -> bytes:
    return _frame(_TVERSION, 100, tag, msize, tail=_string(version))


def tauth(tag: int, afid: int, uname: str, aname: str) -> bytes:
    return _frame(_TAUTH, 102, tag, afid, tail=_string(uname) + _string(aname))


def tattach(tag: int, fid: int, afid: int, uname: str, aname: str) -> bytes:
    return _frame(_TATTACH, 104, tag, fid, afid, tail=_string(uname) + _string(aname))


def twalk(tag: int, fid: int, newfid: int, wnames: tuple[str, ...]) -> bytes:
    if len(wnames) > MAXWELEM:
        raise Unhandled
    names = b"".join([_string(name) for name in wnames])
    return _frame(_TWALK, 110, tag, fid, newfid, len(wnames), tail=names)


def topen(tag: int, fid: int, mode: int) -> bytes:
    return _frame(_TOPEN, 112, tag, fid, mode)


def tread(tag: int, fid: int, offset: int, count: int) -> bytes:
    return _frame(_TREAD, 116, tag, fid, offset, count)


def twrite(tag: int, fid: int, offset: int, data: bytes) -> bytes:
    if not isinstance(data, bytes):
        raise Unhandled
    return _frame(_TWRITE, 118, tag, fid, offset, len(data), tail=data)


def tclunk(tag: int, fid: int) -> bytes:
    return _frame(_FID, 120, tag, fid)


def tstat(tag: int, fid: int) -> bytes:
    return _frame(_FID, 124, tag, fid)


ENCODERS: dict[str, Callable[..., bytes]] = {
    "Tversion": tversion, "Tauth": tauth, "Tattach": tattach, "Twalk": twalk, "Topen": topen,
    "Tread": tread, "Twrite": twrite, "Tclunk": tclunk, "Tstat": tstat,
}  # fmt: skip


# --- replies -------------------------------------------------------------------------------------
#
# Each decoder takes a whole frame whose size field the caller's framing already matched to its
# length, and returns the reply's fields; a byte out of place raises Unhandled.

_QID = struct.Struct("<BIQ")
_STAT_HEAD = struct.Struct("<HHIBIQIIIQ")  # size type dev qid[13] mode atime mtime length


class _Cursor:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        self.buf, self.pos, self.end = buf, pos, end

    def take(self, n: int) -> int:
        pos = self.pos
        if pos + n > self.end:
            raise Unhandled
        self.pos = pos + n
        return pos

    def u16(self) -> int:
        return int.from_bytes(self.buf[self.take(2) : self.pos], "little")

    def u32(self) -> int:
        return int.from_bytes(self.buf[self.take(4) : self.pos], "little")

    def string(self) -> str:
        n = self.u16()
        start = self.take(n)
        try:
            return self.buf[start : self.pos].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Unhandled from exc

    def qid(self) -> Qid:
        return Qid(*_QID.unpack_from(self.buf, self.take(13)))

    def stat(self) -> Stat:
        """stat(5): size[2] then the entry, which must fill exactly `size` bytes."""
        head = _STAT_HEAD.unpack_from(self.buf, self.take(_STAT_HEAD.size))
        size, type_, dev, qtype, qversion, qpath, mode, atime, mtime, length = head
        end = self.pos - _STAT_HEAD.size + 2 + size
        if end > self.end:
            raise Unhandled
        outer, self.end = self.end, end
        name, uid, gid, muid = self.string(), self.string(), self.string(), self.string()
        if self.pos != end:
            raise Unhandled
        self.end = outer
        qid = Qid(qtype, qversion, qpath)
        return Stat(type_, dev, qid, mode, atime, mtime, length, name, uid, gid, muid)

    def done(self) -> None:
        if self.pos != self.end:
            raise Unhandled


def _body(frame: bytes) -> _Cursor:
    return _Cursor(frame, HEADER_SIZE, len(frame))


def _whole(frame: bytes, read: Callable[[_Cursor], T]) -> T:
    """What `read` takes from the message body, which it must consume exactly."""
    c = _body(frame)
    value = read(c)
    c.done()
    return value


def rversion(frame: bytes) -> tuple[int, str]:
    return _whole(frame, lambda c: (c.u32(), c.string()))


def rerror(frame: bytes) -> str:
    return _whole(frame, _Cursor.string)


def rqid(frame: bytes) -> Qid:
    """Rauth, Rattach: qid[13]."""
    return _whole(frame, _Cursor.qid)


def rwalk(frame: bytes) -> tuple[Qid, ...]:
    c = _body(frame)
    n = c.u16()
    if n > MAXWELEM:
        raise Unhandled
    qids = tuple([c.qid() for _ in range(n)])
    c.done()
    return qids


def ropen(frame: bytes) -> tuple[Qid, int]:
    return _whole(frame, lambda c: (c.qid(), c.u32()))


def rread(frame: bytes) -> bytes:
    c = _body(frame)
    n = c.u32()
    start = c.take(n)
    c.done()
    return frame[start : start + n]


def rwrite(frame: bytes) -> int:
    return _whole(frame, _Cursor.u32)


def rempty(frame: bytes) -> None:
    """Rclunk: no body."""
    _body(frame).done()


def rstat(frame: bytes) -> Stat:
    """Rstat: n[2] then one stat entry of exactly n bytes (stat(5))."""
    c = _body(frame)
    n = c.u16()
    if c.pos + n != c.end:
        raise Unhandled
    try:
        stat = c.stat()
    except struct.error as exc:
        raise Unhandled from exc
    c.done()
    return stat


def stats(data: bytes) -> list[Stat]:
    """A 9P2000 directory read: whole stat entries only (read(5))."""
    c = _Cursor(data, 0, len(data))
    out: list[Stat] = []
    try:
        while c.pos < c.end:
            out.append(c.stat())
    except struct.error as exc:
        raise Unhandled from exc
    return out
