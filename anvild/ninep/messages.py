"""9P message types and their wire codec: 9P2000, 9P2000.u and 9P2000.L. Pure: no I/O.

One frozen attrs class per message, the stat structure (with the .u extension), Rreaddir
entries, and `encode`/`decode` of whole frames (``size[4] type[1] tag[2] body``, little endian,
strings ``len[2]`` + UTF-8). Each class declares its body layout as data (`_LAYOUT`, with
per-dialect variants) and one interpreter does both directions, so a field added to a layout is
covered by both and by the round-trip tests. Decoding is strict: the size must equal the frame,
items must fit, strings are UTF-8, walks carry at most MAXWELEM (16) names, nothing is left
over; else `ProtocolError`. A well-framed message of a type the dialect lacks is
`UnknownMessageError` (with its tag). Dialect-only fields have defaults and are dropped when
encoding a dialect without them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import attrs

from anvild.ninep.constants import MAXWELEM, NONUNAME, Dialect
from anvild.ninep.errors import ProtocolError, UnknownMessageError

__all__ = [
    "HEADER_SIZE",
    "MESSAGE_TYPES",
    "TRUNCATED",
    "Dirent",
    "Message",
    "Qid",
    "Stat",
    "decode",
    "decode_dirents",
    "decode_header",
    "decode_stat",
    "decode_stats",
    "encode",
    "encode_dirent",
    "encode_stat",
    "fit_ename",
]

HEADER_SIZE = 7  # size[4] type[1] tag[2]

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<IBH")
_QID = struct.Struct("<BIQ")


@attrs.frozen
class Qid:
    """intro(5): the server's unique identification of a file: type[1] version[4] path[8]."""

    type: int
    version: int
    path: int


@attrs.frozen
class Stat:
    """stat(5) machine-independent directory entry; the last four fields are 9P2000.u only.

    ``type`` and ``dev`` are for kernel use; ``mode`` carries DMDIR etc.; times are seconds.
    """

    type: int
    dev: int
    qid: Qid
    mode: int
    atime: int
    mtime: int
    length: int
    name: str
    uid: str
    gid: str
    muid: str
    extension: str = ""
    n_uid: int = NONUNAME
    n_gid: int = NONUNAME
    n_muid: int = NONUNAME

    @classmethod
    def dont_touch(cls) -> Stat:
        """stat(5): a Twstat entry whose every field says "don't touch"."""
        return cls(
            type=0xFFFF,
            dev=0xFFFFFFFF,
            qid=Qid(0xFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF),
            mode=0xFFFFFFFF,
            atime=0xFFFFFFFF,
            mtime=0xFFFFFFFF,
            length=0xFFFFFFFFFFFFFFFF,
            name="",
            uid="",
            gid="",
            muid="",
        )


@attrs.frozen
class Dirent:
    """One 9P2000.L Rreaddir entry: qid[13] offset[8] type[1] name[s]."""

    qid: Qid
    offset: int
    type: int
    name: str


# --- primitive readers/writers -------------------------------------------------------------


class _Reader:
    """Bounds-checked cursor over one message body; every failure is a ProtocolError."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def _take(self, n: int, what: str) -> int:
        pos = self.pos
        if pos + n > self.end:
            raise ProtocolError(f"truncated message: {what} needs {n} bytes, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def u8(self, what: str = "u8") -> int:
        return int(_U8.unpack_from(self.buf, self._take(1, what))[0])

    def u16(self, what: str = "u16") -> int:
        return int(_U16.unpack_from(self.buf, self._take(2, what))[0])

    def u32(self, what: str = "u32") -> int:
        return int(_U32.unpack_from(self.buf, self._take(4, what))[0])

    def u64(self, what: str = "u64") -> int:
        return int(_U64.unpack_from(self.buf, self._take(8, what))[0])

    def raw(self, n: int, what: str) -> bytes:
        pos = self._take(n, what)
        return bytes(self.buf[pos : pos + n])

    def string(self, what: str = "string") -> str:
        n = self.u16(f"{what} length")
        data = self.raw(n, what)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{what} is not valid UTF-8") from exc

    def qid(self, what: str = "qid") -> Qid:
        t, v, p = _QID.unpack_from(self.buf, self._take(13, what))
        return Qid(t, v, p)

    def remaining(self) -> int:
        return self.end - self.pos


def _put_string(out: bytearray, s: str) -> None:
    data = s.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ProtocolError(f"string of {len(data)} bytes does not fit a 9P string (max 65535)")
    out += _U16.pack(len(data))
    out += data


def _put_qid(out: bytearray, q: Qid) -> None:
    out += _QID.pack(q.type, q.version, q.path)


# --- stat(5) ------------------------------------------------------------------------------------


def encode_stat(stat: Stat, dialect: Dialect) -> bytes:
    """stat(5): size[2] type[2] dev[4] qid[13] mode[4] atime[4] mtime[4] length[8] name[s]
    uid[s] gid[s] muid[s] and, for 9P2000.u, extension[s] n_uid[4] n_gid[4] n_muid[4]."""
    body = bytearray()
    body += struct.pack("<HI", stat.type, stat.dev)
    _put_qid(body, stat.qid)
    body += struct.pack("<IIIQ", stat.mode, stat.atime, stat.mtime, stat.length)
    for s in (stat.name, stat.uid, stat.gid, stat.muid):
        _put_string(body, s)
    if dialect is Dialect.P9P2000_U:
        _put_string(body, stat.extension)
        body += struct.pack("<III", stat.n_uid, stat.n_gid, stat.n_muid)
    if len(body) > 0xFFFF:
        raise ProtocolError("stat entry larger than 65535 bytes")
    return _U16.pack(len(body)) + bytes(body)


def _read_stat(r: _Reader, dialect: Dialect) -> Stat:
    size = r.u16("stat size")
    if size > r.remaining():
        raise ProtocolError(f"stat size {size} exceeds the {r.remaining()} bytes that follow")
    sub = _Reader(r.buf, r.pos, r.pos + size)
    r.pos += size
    type_ = sub.u16("stat type")
    dev = sub.u32("stat dev")
    qid = sub.qid("stat qid")
    mode = sub.u32("stat mode")
    atime = sub.u32("stat atime")
    mtime = sub.u32("stat mtime")
    length = sub.u64("stat length")
    name = sub.string("stat name")
    uid = sub.string("stat uid")
    gid = sub.string("stat gid")
    muid = sub.string("stat muid")
    extension = ""
    n_uid = n_gid = n_muid = NONUNAME
    if dialect is Dialect.P9P2000_U:
        extension = sub.string("stat extension")
        n_uid = sub.u32("stat n_uid")
        n_gid = sub.u32("stat n_gid")
        n_muid = sub.u32("stat n_muid")
    if sub.remaining():
        raise ProtocolError(f"stat entry has {sub.remaining()} unexpected trailing bytes")
    return Stat(
        type_, dev, qid, mode, atime, mtime, length, name, uid, gid, muid,
        extension, n_uid, n_gid, n_muid,
    )  # fmt: skip


def decode_stat(data: bytes, dialect: Dialect) -> Stat:
    """Decode exactly one stat entry (with its size prefix)."""
    r = _Reader(data)
    stat = _read_stat(r, dialect)
    if r.remaining():
        raise ProtocolError(f"{r.remaining()} trailing bytes after a stat entry")
    return stat


def decode_stats(data: bytes, dialect: Dialect) -> list[Stat]:
    """Decode a 9P2000/.u directory read: a sequence of whole stat entries (read(5))."""
    r = _Reader(data)
    out: list[Stat] = []
    while r.remaining():
        out.append(_read_stat(r, dialect))
    return out


def encode_dirent(d: Dirent) -> bytes:
    out = bytearray()
    _put_qid(out, d.qid)
    out += struct.pack("<QB", d.offset, d.type)
    _put_string(out, d.name)
    return bytes(out)


def decode_dirents(data: bytes) -> list[Dirent]:
    """Decode the data of an Rreaddir (9P2000.L): whole entries only."""
    r = _Reader(data)
    out: list[Dirent] = []
    while r.remaining():
        qid = r.qid("dirent qid")
        offset = r.u64("dirent offset")
        type_ = r.u8("dirent type")
        name = r.string("dirent name")
        out.append(Dirent(qid, offset, type_, name))
    return out


# What an Rerror's text ends with when it had to be cut to fit msize.
TRUNCATED = "… [truncated; the full text is in the server's log]"
_TRUNCATED_BYTES = TRUNCATED.encode("utf-8")


def fit_ename(ename: str, msize: int, dialect: Dialect) -> str:
    """``ename`` as an Rerror of at most ``msize`` bytes can carry it (version(5): no message
    may exceed msize; a 9P string holds at most 65535 bytes): unchanged when it fits, else cut at
    a character boundary and ended with `TRUNCATED`. Lone surrogates, which UTF-8 cannot encode,
    become '?'. Rlerror (9P2000.L) carries no text and always fits."""
    # Rerror: size[4] type[1] tag[2] ename[s], and errno[4] in 9P2000.u.
    room = msize - HEADER_SIZE - 2 - (4 if dialect is Dialect.P9P2000_U else 0)
    room = max(min(room, 0xFFFF), 0)  # below 9 bytes (13 in .u) not even an empty Rerror fits
    if len(ename) <= room and ename.isascii():
        return ename  # the usual case: no encoding needed to know it fits
    data = ename.encode("utf-8", "replace")
    if len(data) <= room:
        return data.decode("utf-8")
    keep = max(room - len(_TRUNCATED_BYTES), 0)
    # "ignore" drops only the character cut in half at the end (data is valid UTF-8).
    head = data[:keep].decode("utf-8", "ignore")
    return head + TRUNCATED if keep else _TRUNCATED_BYTES[:room].decode("utf-8", "ignore")


# --- layouts -----------------------------------------------------------------------------------
#
# A layout is a tuple of (field, kind). Kinds: u8 u16 u32 u64 s (string) qid, wnames (n[2] then
# n strings), qids (n[2] then n qids), data (count[4] then bytes), stat (n[2] then one stat entry),
# u32opt (a trailing u32 some senders omit: Linux sends Tfsync datasync, older peers do not).

Layout = tuple[tuple[str, str], ...]


class Message:
    """Base of every message class. ``TYPE`` is the wire type number."""

    TYPE: ClassVar[int]
    _LAYOUT: ClassVar[Layout]
    _LAYOUTS: ClassVar[dict[Dialect, Layout]] = {}
    tag: int

    @classmethod
    def layout(cls, dialect: Dialect) -> Layout:
        return cls._LAYOUTS.get(dialect, cls._LAYOUT)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _qid_tuple(value: Iterable[Qid]) -> tuple[Qid, ...]:
    return tuple(value)


_L = Dialect.P9P2000_L
_U = Dialect.P9P2000_U


def _msg(type_: int, layout: Layout, **per_dialect: Layout) -> Callable[[type[Any]], type[Any]]:
    def wrap(cls: type[Any]) -> type[Any]:
        cls.TYPE = type_
        cls._LAYOUT = layout
        cls._LAYOUTS = {{"u": _U, "L": _L}[key]: value for key, value in per_dialect.items()}
        return cls

    return wrap


# 9P2000 (intro(5) and section 5 of the Plan 9 manual) ------------------------------------------

_AUTH = (("afid", "u32"), ("uname", "s"), ("aname", "s"))
_AUTH_U = (*_AUTH, ("n_uname", "u32"))
_ATTACH = (("fid", "u32"), ("afid", "u32"), ("uname", "s"), ("aname", "s"))
_ATTACH_U = (*_ATTACH, ("n_uname", "u32"))
_CREATE = (("fid", "u32"), ("name", "s"), ("perm", "u32"), ("mode", "u8"))


@_msg(100, (("msize", "u32"), ("version", "s")))
@attrs.frozen
class Tversion(Message):
    tag: int
    msize: int
    version: str


@_msg(101, (("msize", "u32"), ("version", "s")))
@attrs.frozen
class Rversion(Message):
    tag: int
    msize: int
    version: str


@_msg(102, _AUTH, u=_AUTH_U, L=_AUTH_U)
@attrs.frozen
class Tauth(Message):
    tag: int
    afid: int
    uname: str
    aname: str
    n_uname: int = NONUNAME


@_msg(103, (("aqid", "qid"),))
@attrs.frozen
class Rauth(Message):
    tag: int
    aqid: Qid


@_msg(104, _ATTACH, u=_ATTACH_U, L=_ATTACH_U)
@attrs.frozen
class Tattach(Message):
    tag: int
    fid: int
    afid: int
    uname: str
    aname: str
    n_uname: int = NONUNAME


@_msg(105, (("qid", "qid"),))
@attrs.frozen
class Rattach(Message):
    tag: int
    qid: Qid


@_msg(107, (("ename", "s"),), u=(("ename", "s"), ("errno", "u32")))
@attrs.frozen
class Rerror(Message):
    tag: int
    ename: str
    errno: int = 0


@_msg(108, (("oldtag", "u16"),))
@attrs.frozen
class Tflush(Message):
    tag: int
    oldtag: int


@_msg(109, ())
@attrs.frozen
class Rflush(Message):
    tag: int


@_msg(110, (("fid", "u32"), ("newfid", "u32"), ("wnames", "wnames")))
@attrs.frozen
class Twalk(Message):
    tag: int
    fid: int
    newfid: int
    wnames: tuple[str, ...] = attrs.field(converter=_str_tuple)


@_msg(111, (("qids", "qids"),))
@attrs.frozen
class Rwalk(Message):
    tag: int
    qids: tuple[Qid, ...] = attrs.field(converter=_qid_tuple)


@_msg(112, (("fid", "u32"), ("mode", "u8")))
@attrs.frozen
class Topen(Message):
    tag: int
    fid: int
    mode: int


@_msg(113, (("qid", "qid"), ("iounit", "u32")))
@attrs.frozen
class Ropen(Message):
    tag: int
    qid: Qid
    iounit: int


@_msg(114, _CREATE, u=(*_CREATE, ("extension", "s")))
@attrs.frozen
class Tcreate(Message):
    tag: int
    fid: int
    name: str
    perm: int
    mode: int
    extension: str = ""


@_msg(115, (("qid", "qid"), ("iounit", "u32")))
@attrs.frozen
class Rcreate(Message):
    tag: int
    qid: Qid
    iounit: int


@_msg(116, (("fid", "u32"), ("offset", "u64"), ("count", "u32")))
@attrs.frozen
class Tread(Message):
    tag: int
    fid: int
    offset: int
    count: int


@_msg(117, (("data", "data"),))
@attrs.frozen
class Rread(Message):
    tag: int
    data: bytes


@_msg(118, (("fid", "u32"), ("offset", "u64"), ("data", "data")))
@attrs.frozen
class Twrite(Message):
    tag: int
    fid: int
    offset: int
    data: bytes


@_msg(119, (("count", "u32"),))
@attrs.frozen
class Rwrite(Message):
    tag: int
    count: int


@_msg(120, (("fid", "u32"),))
@attrs.frozen
class Tclunk(Message):
    tag: int
    fid: int


@_msg(121, ())
@attrs.frozen
class Rclunk(Message):
    tag: int


@_msg(122, (("fid", "u32"),))
@attrs.frozen
class Tremove(Message):
    tag: int
    fid: int


@_msg(123, ())
@attrs.frozen
class Rremove(Message):
    tag: int


@_msg(124, (("fid", "u32"),))
@attrs.frozen
class Tstat(Message):
    tag: int
    fid: int


@_msg(125, (("stat", "stat"),))
@attrs.frozen
class Rstat(Message):
    tag: int
    stat: Stat


@_msg(126, (("fid", "u32"), ("stat", "stat")))
@attrs.frozen
class Twstat(Message):
    tag: int
    fid: int
    stat: Stat


@_msg(127, ())
@attrs.frozen
class Rwstat(Message):
    tag: int


# 9P2000.L (Linux include/net/9p/9p.h, net/9p/client.c; diod libnpfs) --------------------------


@_msg(7, (("ecode", "u32"),))
@attrs.frozen
class Rlerror(Message):
    tag: int
    ecode: int


@_msg(8, (("fid", "u32"),))
@attrs.frozen
class Tstatfs(Message):
    tag: int
    fid: int


@_msg(
    9,
    (
        ("type", "u32"), ("bsize", "u32"), ("blocks", "u64"), ("bfree", "u64"),
        ("bavail", "u64"), ("files", "u64"), ("ffree", "u64"), ("fsid", "u64"),
        ("namelen", "u32"),
    ),
)  # fmt: skip
@attrs.frozen
class Rstatfs(Message):
    tag: int
    type: int
    bsize: int
    blocks: int
    bfree: int
    bavail: int
    files: int
    ffree: int
    fsid: int
    namelen: int


@_msg(12, (("fid", "u32"), ("flags", "u32")))
@attrs.frozen
class Tlopen(Message):
    tag: int
    fid: int
    flags: int


@_msg(13, (("qid", "qid"), ("iounit", "u32")))
@attrs.frozen
class Rlopen(Message):
    tag: int
    qid: Qid
    iounit: int


@_msg(14, (("fid", "u32"), ("name", "s"), ("flags", "u32"), ("mode", "u32"), ("gid", "u32")))
@attrs.frozen
class Tlcreate(Message):
    tag: int
    fid: int
    name: str
    flags: int
    mode: int
    gid: int


@_msg(15, (("qid", "qid"), ("iounit", "u32")))
@attrs.frozen
class Rlcreate(Message):
    tag: int
    qid: Qid
    iounit: int


@_msg(16, (("fid", "u32"), ("name", "s"), ("symtgt", "s"), ("gid", "u32")))
@attrs.frozen
class Tsymlink(Message):
    tag: int
    fid: int
    name: str
    symtgt: str
    gid: int


@_msg(17, (("qid", "qid"),))
@attrs.frozen
class Rsymlink(Message):
    tag: int
    qid: Qid


@_msg(
    18,
    (("dfid", "u32"), ("name", "s"), ("mode", "u32"), ("major", "u32"), ("minor", "u32"),
     ("gid", "u32")),
)  # fmt: skip
@attrs.frozen
class Tmknod(Message):
    tag: int
    dfid: int
    name: str
    mode: int
    major: int
    minor: int
    gid: int


@_msg(19, (("qid", "qid"),))
@attrs.frozen
class Rmknod(Message):
    tag: int
    qid: Qid


@_msg(20, (("fid", "u32"), ("dfid", "u32"), ("name", "s")))
@attrs.frozen
class Trename(Message):
    tag: int
    fid: int
    dfid: int
    name: str


@_msg(21, ())
@attrs.frozen
class Rrename(Message):
    tag: int


@_msg(22, (("fid", "u32"),))
@attrs.frozen
class Treadlink(Message):
    tag: int
    fid: int


@_msg(23, (("target", "s"),))
@attrs.frozen
class Rreadlink(Message):
    tag: int
    target: str


@_msg(24, (("fid", "u32"), ("request_mask", "u64")))
@attrs.frozen
class Tgetattr(Message):
    tag: int
    fid: int
    request_mask: int


@_msg(
    25,
    (
        ("valid", "u64"), ("qid", "qid"), ("mode", "u32"), ("uid", "u32"), ("gid", "u32"),
        ("nlink", "u64"), ("rdev", "u64"), ("size", "u64"), ("blksize", "u64"),
        ("blocks", "u64"), ("atime_sec", "u64"), ("atime_nsec", "u64"), ("mtime_sec", "u64"),
        ("mtime_nsec", "u64"), ("ctime_sec", "u64"), ("ctime_nsec", "u64"),
        ("btime_sec", "u64"), ("btime_nsec", "u64"), ("gen", "u64"), ("data_version", "u64"),
    ),
)  # fmt: skip
@attrs.frozen
class Rgetattr(Message):
    tag: int
    valid: int
    qid: Qid
    mode: int
    uid: int
    gid: int
    nlink: int
    rdev: int
    size: int
    blksize: int
    blocks: int
    atime_sec: int
    atime_nsec: int
    mtime_sec: int
    mtime_nsec: int
    ctime_sec: int
    ctime_nsec: int
    btime_sec: int
    btime_nsec: int
    gen: int
    data_version: int


@_msg(
    26,
    (
        ("fid", "u32"), ("valid", "u32"), ("mode", "u32"), ("uid", "u32"), ("gid", "u32"),
        ("size", "u64"), ("atime_sec", "u64"), ("atime_nsec", "u64"), ("mtime_sec", "u64"),
        ("mtime_nsec", "u64"),
    ),
)  # fmt: skip
@attrs.frozen
class Tsetattr(Message):
    tag: int
    fid: int
    valid: int
    mode: int
    uid: int
    gid: int
    size: int
    atime_sec: int
    atime_nsec: int
    mtime_sec: int
    mtime_nsec: int


@_msg(27, ())
@attrs.frozen
class Rsetattr(Message):
    tag: int


@_msg(30, (("fid", "u32"), ("newfid", "u32"), ("name", "s")))
@attrs.frozen
class Txattrwalk(Message):
    tag: int
    fid: int
    newfid: int
    name: str


@_msg(31, (("size", "u64"),))
@attrs.frozen
class Rxattrwalk(Message):
    tag: int
    size: int


@_msg(32, (("fid", "u32"), ("name", "s"), ("attr_size", "u64"), ("flags", "u32")))
@attrs.frozen
class Txattrcreate(Message):
    tag: int
    fid: int
    name: str
    attr_size: int
    flags: int


@_msg(33, ())
@attrs.frozen
class Rxattrcreate(Message):
    tag: int


@_msg(40, (("fid", "u32"), ("offset", "u64"), ("count", "u32")))
@attrs.frozen
class Treaddir(Message):
    tag: int
    fid: int
    offset: int
    count: int


@_msg(41, (("data", "data"),))
@attrs.frozen
class Rreaddir(Message):
    tag: int
    data: bytes


@_msg(50, (("fid", "u32"), ("datasync", "u32opt")))
@attrs.frozen
class Tfsync(Message):
    tag: int
    fid: int
    datasync: int = 0


@_msg(51, ())
@attrs.frozen
class Rfsync(Message):
    tag: int


@_msg(
    52,
    (("fid", "u32"), ("type", "u8"), ("flags", "u32"), ("start", "u64"), ("length", "u64"),
     ("proc_id", "u32"), ("client_id", "s")),
)  # fmt: skip
@attrs.frozen
class Tlock(Message):
    tag: int
    fid: int
    type: int
    flags: int
    start: int
    length: int
    proc_id: int
    client_id: str


@_msg(53, (("status", "u8"),))
@attrs.frozen
class Rlock(Message):
    tag: int
    status: int


_GETLOCK = (("type", "u8"), ("start", "u64"), ("length", "u64"), ("proc_id", "u32"),
            ("client_id", "s"))  # fmt: skip


@_msg(54, (("fid", "u32"), *_GETLOCK))
@attrs.frozen
class Tgetlock(Message):
    tag: int
    fid: int
    type: int
    start: int
    length: int
    proc_id: int
    client_id: str


@_msg(55, _GETLOCK)
@attrs.frozen
class Rgetlock(Message):
    tag: int
    type: int
    start: int
    length: int
    proc_id: int
    client_id: str


@_msg(70, (("dfid", "u32"), ("fid", "u32"), ("name", "s")))
@attrs.frozen
class Tlink(Message):
    tag: int
    dfid: int
    fid: int
    name: str


@_msg(71, ())
@attrs.frozen
class Rlink(Message):
    tag: int


@_msg(72, (("dfid", "u32"), ("name", "s"), ("mode", "u32"), ("gid", "u32")))
@attrs.frozen
class Tmkdir(Message):
    tag: int
    dfid: int
    name: str
    mode: int
    gid: int


@_msg(73, (("qid", "qid"),))
@attrs.frozen
class Rmkdir(Message):
    tag: int
    qid: Qid


@_msg(74, (("olddirfid", "u32"), ("oldname", "s"), ("newdirfid", "u32"), ("newname", "s")))
@attrs.frozen
class Trenameat(Message):
    tag: int
    olddirfid: int
    oldname: str
    newdirfid: int
    newname: str


@_msg(75, ())
@attrs.frozen
class Rrenameat(Message):
    tag: int


@_msg(76, (("dirfd", "u32"), ("name", "s"), ("flags", "u32")))
@attrs.frozen
class Tunlinkat(Message):
    tag: int
    dirfd: int
    name: str
    flags: int


@_msg(77, ())
@attrs.frozen
class Runlinkat(Message):
    tag: int


# --- the message tables ------------------------------------------------------------------------

_BASE: tuple[type[Message], ...] = (
    Tversion, Rversion, Tauth, Rauth, Tattach, Rattach, Tflush, Rflush, Twalk, Rwalk,
    Tread, Rread, Twrite, Rwrite, Tclunk, Rclunk, Tremove, Rremove,
)  # fmt: skip
# Messages 9P2000.L keeps from 9P2000 are _BASE; Topen/Tcreate/Tstat/Twstat and Rerror are
# replaced by Tlopen/Tlcreate/Tgetattr/Tsetattr and Rlerror.
_CLASSIC: tuple[type[Message], ...] = (
    Rerror, Topen, Ropen, Tcreate, Rcreate, Tstat, Rstat, Twstat, Rwstat,
)  # fmt: skip
_DOTL: tuple[type[Message], ...] = (
    Rlerror, Tstatfs, Rstatfs, Tlopen, Rlopen, Tlcreate, Rlcreate, Tsymlink, Rsymlink,
    Tmknod, Rmknod, Trename, Rrename, Treadlink, Rreadlink, Tgetattr, Rgetattr, Tsetattr,
    Rsetattr, Txattrwalk, Rxattrwalk, Txattrcreate, Rxattrcreate, Treaddir, Rreaddir, Tfsync,
    Rfsync, Tlock, Rlock, Tgetlock, Rgetlock, Tlink, Rlink, Tmkdir, Rmkdir, Trenameat,
    Rrenameat, Tunlinkat, Runlinkat,
)  # fmt: skip

MESSAGE_TYPES: dict[Dialect, dict[int, type[Message]]] = {
    Dialect.P9P2000: {c.TYPE: c for c in (*_BASE, *_CLASSIC)},
    Dialect.P9P2000_U: {c.TYPE: c for c in (*_BASE, *_CLASSIC)},
    Dialect.P9P2000_L: {c.TYPE: c for c in (*_BASE, *_DOTL)},
}


# --- encode / decode ---------------------------------------------------------------------------


def _encode_field(out: bytearray, kind: str, value: Any, dialect: Dialect) -> None:
    try:
        if kind == "u32" or kind == "u32opt":
            out += _U32.pack(value)
        elif kind == "s":
            _put_string(out, value)
        elif kind == "u64":
            out += _U64.pack(value)
        elif kind == "qid":
            _put_qid(out, value)
        elif kind == "u8":
            out += _U8.pack(value)
        elif kind == "u16":
            out += _U16.pack(value)
        elif kind == "data":
            out += _U32.pack(len(value))
            out += value
        elif kind == "wnames":
            if len(value) > MAXWELEM:
                raise ProtocolError(f"a walk carries at most {MAXWELEM} names, not {len(value)}")
            out += _U16.pack(len(value))
            for name in value:
                _put_string(out, name)
        elif kind == "qids":
            if len(value) > MAXWELEM:
                raise ProtocolError(f"a walk returns at most {MAXWELEM} qids, not {len(value)}")
            out += _U16.pack(len(value))
            for qid in value:
                _put_qid(out, qid)
        elif kind == "stat":
            entry = encode_stat(value, dialect)
            out += _U16.pack(len(entry))
            out += entry
        else:  # pragma: no cover - layouts are static data checked by the tests
            raise AssertionError(f"unknown layout kind {kind!r}")
    except struct.error as exc:
        raise ProtocolError(f"value {value!r} out of range for a {kind} field") from exc


def encode(msg: Message, dialect: Dialect) -> bytes:
    """Encode one message as a complete frame (size field included)."""
    fast = _fast(dialect)[0].get(type(msg))
    if fast is not None:
        try:
            return fast(msg)
        except (_Decline, struct.error, TypeError, AttributeError):
            pass  # the interpreter says precisely what is wrong
    return _encode(msg, dialect)


def _encode(msg: Message, dialect: Dialect) -> bytes:
    out = bytearray(b"\0\0\0\0")
    try:
        out += _U8.pack(msg.TYPE)
        out += _U16.pack(msg.tag)
    except struct.error as exc:
        raise ProtocolError(f"tag {msg.tag!r} out of range") from exc
    for name, kind in msg.layout(dialect):
        _encode_field(out, kind, getattr(msg, name), dialect)
    if len(out) > 0xFFFFFFFF:
        raise ProtocolError("message larger than 4 GiB")
    _U32.pack_into(out, 0, len(out))
    return bytes(out)


def decode_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """Return (size, type, tag) of a frame, checking only that the header is there."""
    if len(frame) < HEADER_SIZE:
        raise ProtocolError(f"frame of {len(frame)} bytes is shorter than a 9P header (7)")
    size, type_, tag = _HEADER.unpack_from(frame, 0)
    return int(size), int(type_), int(tag)


def _decode_field(r: _Reader, kind: str, name: str, dialect: Dialect) -> Any:
    if kind == "u32":
        return r.u32(name)
    if kind == "s":
        return r.string(name)
    if kind == "u64":
        return r.u64(name)
    if kind == "qid":
        return r.qid(name)
    if kind == "u8":
        return r.u8(name)
    if kind == "u16":
        return r.u16(name)
    if kind == "data":
        n = r.u32(f"{name} count")
        return r.raw(n, name)
    if kind == "wnames":
        n = r.u16("nwname")
        if n > MAXWELEM:
            raise ProtocolError(f"Twalk with {n} names; walk(5) allows at most {MAXWELEM}")
        return tuple(r.string("wname") for _ in range(n))
    if kind == "qids":
        n = r.u16("nwqid")
        if n > MAXWELEM:
            raise ProtocolError(f"Rwalk with {n} qids; walk(5) allows at most {MAXWELEM}")
        return tuple(r.qid("wqid") for _ in range(n))
    if kind == "stat":
        n = r.u16("stat length")
        if n > r.remaining():
            raise ProtocolError(f"stat length {n} exceeds the {r.remaining()} bytes that follow")
        sub = _Reader(r.buf, r.pos, r.pos + n)
        r.pos += n
        stat = _read_stat(sub, dialect)
        if sub.remaining():
            raise ProtocolError("stat length and the stat entry's own size disagree")
        return stat
    if kind == "u32opt":
        return r.u32(name) if r.remaining() else 0
    raise AssertionError(f"unknown layout kind {kind!r}")  # pragma: no cover


def decode(frame: bytes | memoryview, dialect: Dialect) -> Message:
    """Decode one complete frame. Raises `ProtocolError` for anything malformed."""
    length = len(frame)
    if length >= HEADER_SIZE:
        fast = _fast(dialect)[1].get(frame[4])
        if fast is not None:
            try:
                return fast(frame, length)
            except (_Decline, ProtocolError, struct.error, ValueError):
                pass  # the interpreter says precisely what is wrong
    size, type_, tag = decode_header(frame)
    if size != len(frame):
        raise ProtocolError(f"size field says {size} bytes but the frame has {len(frame)}")
    cls = MESSAGE_TYPES[dialect].get(type_)
    if cls is None:
        raise UnknownMessageError(
            f"message type {type_} is not part of {dialect.value}", msg_type=type_, tag=tag
        )
    r = _Reader(frame, HEADER_SIZE)
    values: dict[str, Any] = {"tag": tag}
    for name, kind in cls.layout(dialect):
        values[name] = _decode_field(r, kind, name, dialect)
    if r.remaining():
        raise ProtocolError(f"{cls.__name__} has {r.remaining()} unexpected trailing bytes")
    return cls(**values)


def iter_message_classes() -> Iterator[type[Message]]:
    """Every message class, once (for tests and tools)."""
    seen: set[type[Message]] = set()
    for table in MESSAGE_TYPES.values():
        for cls in table.values():
            if cls not in seen:
                seen.add(cls)
                yield cls


# --- precompiled fast paths ----------------------------------------------------------------------
#
# The interpreter above is the reference. For every (class, dialect) whose layout is fixed-size
# integers and qids, optionally followed by one trailing ``data`` field (Tread, Tclunk, Tlopen,
# Tgetattr, Rlopen, Rgetattr, Rclunk, Rread, Twrite, ...), one precompiled `struct.Struct` does
# the whole frame at once. Anything else, and any value the fast path cannot pack, goes through
# the interpreter, so the errors stay the same.

_FIXED_FORMATS = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "qid": "BIQ"}
_Encoder = Callable[[Any], bytes]
_Decoder = Callable[[Any, int], "Message"]


def _positional(cls: type[Message], names: list[str]) -> bool:
    fields = attrs.fields(cls)  # type: ignore[arg-type]
    if [f.name for f in fields[: len(names) + 1]] != ["tag", *names]:
        return False
    return all(f.default is not attrs.NOTHING for f in fields[len(names) + 1 :])


def _compile(cls: type[Message], dialect: Dialect) -> tuple[_Encoder | None, _Decoder | None]:
    layout = cls.layout(dialect)
    trailing_data = bool(layout) and layout[-1][1] == "data"
    fixed = layout[:-1] if trailing_data else layout
    if any(kind not in _FIXED_FORMATS for _, kind in fixed):
        return None, None
    names = [name for name, _ in layout]
    if not _positional(cls, names):
        return None, None
    fmt = (
        "<IBH" + "".join(_FIXED_FORMATS[kind] for _, kind in fixed) + ("I" if trailing_data else "")
    )
    st = struct.Struct(fmt)
    size = st.size
    type_ = cls.TYPE
    qids = [i for i, (_, kind) in enumerate(fixed) if kind == "qid"]
    fixed_names = names[: len(fixed)]

    def values(msg: Any) -> list[Any]:
        out: list[Any] = []
        for i, name in enumerate(fixed_names):
            v = getattr(msg, name)
            if i in qids:
                out += (v.type, v.version, v.path)
            else:
                out.append(v)
        return out

    get: Callable[[Any], list[Any]] = values
    if not qids and len(fixed_names) == 1:
        only = fixed_names[0]

        def get(msg: Any) -> list[Any]:
            return [getattr(msg, only)]

    elif not fixed_names:

        def get(msg: Any) -> list[Any]:
            return []

    if trailing_data:
        data_name = names[-1]

        def encode_fast(msg: Any) -> bytes:
            data = getattr(msg, data_name)
            return bytes(st.pack(size + len(data), type_, msg.tag, *get(msg), len(data)) + data)

    else:

        def encode_fast(msg: Any) -> bytes:
            return bytes(st.pack(size, type_, msg.tag, *get(msg)))

    decode_fast: _Decoder | None = None
    new: Callable[..., Message] = cls
    if not qids:  # the T-messages (servers decode those); replies with qids use the interpreter
        if trailing_data:

            def decode_fast(frame: Any, length: int) -> Message:
                *head, count = st.unpack_from(frame, 0)
                if head[0] != length or size + count != length:
                    raise _Decline
                return new(*head[2:], bytes(frame[size:length]))

        else:

            def decode_fast(frame: Any, length: int) -> Message:
                fields = st.unpack_from(frame, 0)
                if length != size or fields[0] != length:
                    raise _Decline
                return new(*fields[2:])

    return encode_fast, decode_fast


class _Decline(Exception):
    """A fast path leaves the message to the interpreter."""


_TWALK_HEAD = struct.Struct("<IBHIIH")
_RWALK_HEAD = struct.Struct("<IBHH")


def _decode_twalk(frame: Any, length: int) -> Message:
    size, _, tag, fid, newfid, n = _TWALK_HEAD.unpack_from(frame, 0)
    if size != length or n > MAXWELEM:
        raise _Decline
    pos = _TWALK_HEAD.size
    names = []
    for _ in range(n):
        (k,) = _U16.unpack_from(frame, pos)
        pos += 2
        end = pos + k
        if end > length:
            raise _Decline
        names.append(bytes(frame[pos:end]).decode("utf-8"))
        pos = end
    if pos != length:
        raise _Decline
    return Twalk(tag, fid, newfid, names)


def _encode_rwalk(msg: Any) -> bytes:
    qids = msg.qids
    n = len(qids)
    if n > MAXWELEM:
        raise _Decline
    head = _RWALK_HEAD.pack(_RWALK_HEAD.size + 13 * n, Rwalk.TYPE, msg.tag, n)
    return head + b"".join([_QID.pack(q.type, q.version, q.path) for q in qids])


_FAST: dict[Dialect, tuple[dict[type[Message], _Encoder], dict[int, _Decoder]]] = {}
for _dialect, _table in MESSAGE_TYPES.items():
    _encoders: dict[type[Message], _Encoder] = {}
    _decoders: dict[int, _Decoder] = {}
    for _cls in _table.values():
        _enc, _dec = _compile(_cls, _dialect)
        if _enc is not None:
            _encoders[_cls] = _enc
        if _dec is not None:
            _decoders[_cls.TYPE] = _dec
    _encoders[Rwalk] = _encode_rwalk
    _decoders[Twalk.TYPE] = _decode_twalk
    _FAST[_dialect] = (_encoders, _decoders)
_FAST_9P, _FAST_U, _FAST_L = _FAST[Dialect.P9P2000], _FAST[Dialect.P9P2000_U], _FAST[_L]


def _fast(dialect: Dialect) -> tuple[dict[type[Message], _Encoder], dict[int, _Decoder]]:
    # Identity tests: hashing an Enum member runs Python code, a measurable share per message.
    if dialect is _L:
        return _FAST_L
    if dialect is _U:
        return _FAST_U
    return _FAST_9P
