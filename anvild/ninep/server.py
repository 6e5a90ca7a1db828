"""The trio 9P server: one connection at a time over any `trio.abc.Stream`.

Theory of operation
-------------------
`Server` holds what is shared (the root factory, limits, counters); `Server.serve(stream)`
runs one connection until EOF or a protocol error. Each connection owns:

* a `FrameReader` (sans-IO framing bounded by msize) and the negotiated dialect;
* a fid table: fid -> `_Fid` (the walked path from the attach root, plus open state: a node
  `Handle`, or a directory-read snapshot);
* a tag table: tag -> `_Request` (its trio cancel scope and a "done" event).

The receive loop decodes frames in order and splits requests in two (the fast path):

* **Inline** — every request that cannot wait for anything outside itself is answered in the
  receive loop, before the next frame is decoded, with no task and no cancel scope: Tversion,
  Tauth, Tattach, Twalk, Tstat, Tgetattr, Tstatfs, directory reads, Treaddir, the lock and xattr
  refusals, Topen/Tlopen of a node whose ``open_blocks`` is False, and Tread/Twrite/Tclunk of a
  handle whose ``read_blocks``/``write_blocks``/``clunk_blocks`` is False (a snapshot read, a
  body write into memory, a clunk that only drops a cursor), plus every error found before a
  node is called (unknown fid, fid not open, ...). Node lookups (``walk``, ``list``) are inline
  too: the `Node` contract says they never wait for another request.
* **In a task** — everything that may block (a stream read waiting for data, a ctl write running
  a command, a clunk committing a body, create/remove/wstat/setattr/rename, Tflush itself) runs
  in its own task in the connection's nursery, with its cancel scope in the tag table, so
  several tags can be outstanding and a blocked read never stalls the connection (intro(5)).

Why this keeps flush(5): a Tflush names a request the client sent earlier. An inline request was
answered before the Tflush was even decoded, so it is no longer outstanding: the Tflush gets its
Rflush, after that reply, which is exactly what flush(5) prescribes for a request that already
took effect. A request in a task is outstanding until its reply is queued; Tflush (always a task)
cancels its scope and waits for it to finish: a request blocked in a read is cancelled and its
reply never sent, one that completed before the cancellation reached a checkpoint still sends
its reply, and the Rflush always follows it. Tversion stays inline (version(5): it aborts all
outstanding I/O and frees every fid before the reply).

The hot path: the requests of a small operation (Twalk, Topen/Tlopen, Tread, Tclunk) go from
the frame's bytes to the reply's bytes with precompiled `struct`s, calling the same checks and
node methods as their handlers (`_walk_qids`, `_open_qid`/`_lopen_qid`, `_open_fid`) but without
building message objects or passing through `_dispatch`. Each hot method declines, before it
has changed anything, whenever the generic path has something to decide: a tag in use (or
NOTAG, or the outstanding-request limit), an unknown fid, a call that may block (it needs a
task), a frame of an unusual length or with a name that is not UTF-8; `_dispatch` then handles
the frame exactly as it would have. Errors raised by the checks or the node get the same reply
as on the generic path (a unit test replays every branch through the synchronous path below,
the async hot path and `_dispatch`, and compares the bytes). In the connection's task each hot
method first tries its synchronous twin (below), then the node's async call.
A received batch that is exactly one whole frame (one request outstanding: the usual case) is
answered without going through the `FrameReader`.

The synchronous hot path and the shared poller: the same four requests can also be answered by
plain functions (`_now_walk`, `_now_open`/`_now_lopen`, `_now_read`, `_now_clunk`) that call the
node's synchronous twins (`Node.walk_now`, `Node.open_now`, `Handle.read_now`,
`Handle.clunk_now`; each may answer `LATER`, having done nothing). A function cannot reach a trio
checkpoint, so these may run in any task. When a socket connection's ``recv`` finds nothing, its
task parks on the run's `transport.Poller` instead of waiting for readiness: one system task with a
private level-triggered epoll that, when sockets become readable, receives, answers every frame
it can synchronously and sends the replies, for every ready connection in one wake, with the
connection's task still parked. The first frame it cannot answer (any other request, a node that
says LATER, a tag in use, a frame to refuse) is handed back to the connection's task with every
byte after it, so order is kept and everything else (tasks, Tflush, Tversion, errors, teardown)
happens exactly as described above; so are EOF, socket errors, replies that did not fit the
socket and more than a batch's share of frames. The poller's task exists while connections use
it (see `transport.Poller`).

I/O: on a `trio.SocketStream` the connection works on the socket itself, below trio's stream
layer: it tries the non-blocking ``recv``/``send`` first and waits for readiness only on EAGAIN
(every received batch of frames costs one ``recv``, and at most one scheduler pass when the
socket is empty), or parks on the poller. Replies are queued in order as they are produced
and the replies of one received batch go out in one ``send``; one task at a time sends, and the
receive loop waits until the queue is drained before reading more (backpressure). Any other
`trio.abc.Stream` (in-memory streams in tests) goes through ``receive_some``/``send_all`` with
the same queue. A request's tag is freed when its reply is queued, before the client can see
the reply and reuse the tag.

"Library validates, handler decides" (plan9port lib9p `srv.c`): before a node is called, the
server checks the fid exists and is (not) open, the open mode against the node's permission bits
(open(5)), the name of a walk/create, offsets of directory reads (read(5): 0 or the end of the
previous read) and Treaddir cookies, counts against msize, and that a non-empty write is never
answered with 0 (plan9port's `9p` loops forever on that). Directory reads are done here from
`Node.list()`; a read never splits an entry.

Dialects: 9P2000 errors are Rerror(message); 9P2000.u adds the errno; 9P2000.L sends
Rlerror(errno); each refusal is a kind whose errno is in `anvild.ninep.errors.ERRNO`. Tauth
always fails ("authentication not required"; 9P2000.L: ENOENT, which diod's tools require).
Walks from an open fid are refused in 9P2000/.u (walk(5)) and allowed in .L, where diod's tools
walk `.` and `..` from an open directory. `.` and `..` are resolved here from
the fid's path; `..` of the root is the root (intro(5)).

Teardown: at EOF (plan9port's `9p` never clunks its root fid), after a protocol error, or on a
second Tversion, in-flight requests are cancelled and every fid is dropped; open handles get
`Handle.abort()` (shielded, bounded by a timeout). `statistics()` reports connections, fids, open
handles and in-flight requests so tests can check nothing leaks.

A malformed frame, or one larger than msize, closes the connection with a logged reason. A node
that raises something other than `FsError` is a bug: it is logged with its traceback and the
client gets EIO "internal error", and the connection keeps going. Every reply is queued by
`_queue` (the fast paths' packed frames are bounded by construction), where an Rerror too long
for msize is cut with a marker (`messages.fit_ename`) and its full text logged at warning.

Limits (each refusal names its setting and what to do): a handshake deadline (`Server.serve`),
``max_connections`` at once, and per connection ``max_fids`` (EMFILE) and ``max_outstanding``
requests in tasks (EAGAIN; a Tflush has a reserve of the same size, so a client at the limit can
flush). The fast paths share these checks (`_tag_refused`, `_new_fid`).
"""

from __future__ import annotations

import errno
import inspect
import logging
import math
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import attrs
import trio

from anvild.ninep import messages as m
from anvild.ninep.backend import (
    LATER,
    AttachRequest,
    Handle,
    Later,
    Node,
    NodeStat,
    OpenMode,
    StatChange,
)
from anvild.ninep.constants import (
    AT_REMOVEDIR,
    DMDIR,
    DT_DIR,
    DT_REG,
    GETATTR_BASIC,
    IOHDRSZ,
    L_O_ACCMODE,
    L_O_APPEND,
    L_O_DIRECTORY,
    L_O_RDONLY,
    L_O_RDWR,
    L_O_TRUNC,
    L_O_WRONLY,
    LOCK_SUCCESS,
    LOCK_TYPE_UNLCK,
    MAXWELEM,
    MIN_MSIZE,
    NOFID,
    NONUNAME,
    NOTAG,
    OCEXEC,
    OEXEC,
    ORCLOSE,
    ORDWR,
    OREAD,
    OTRUNC,
    OWRITE,
    S_IFDIR,
    S_IFREG,
    SETATTR_ATIME,
    SETATTR_ATIME_SET,
    SETATTR_GID,
    SETATTR_MODE,
    SETATTR_MTIME,
    SETATTR_MTIME_SET,
    SETATTR_SIZE,
    SETATTR_UID,
    VERSION_UNKNOWN,
    Dialect,
)
from anvild.ninep.errors import (
    AccessDenied,
    AlreadyExists,
    BadFid,
    Busy,
    CrossDirectory,
    FsError,
    InvalidInput,
    IsADirectory,
    MessageTooLarge,
    NotADirectory,
    NotFound,
    NotInProtocol,
    NotPermitted,
    NotSupported,
    ProtocolError,
    TagInUse,
    TimedOut,
    TooManyFids,
    TryAgain,
    UnknownMessageError,
    errno_of,
)
from anvild.ninep.framing import FrameReader
from anvild.ninep.transport import ConnectionLost, transport_for

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_FIDS",
    "DEFAULT_MAX_MSIZE",
    "DEFAULT_MAX_OUTSTANDING",
    "AttachCheck",
    "RootFactory",
    "Server",
    "ServerStatistics",
]

log = logging.getLogger("anvild.ninep")

DEFAULT_MAX_MSIZE = 1 << 20
# Requests one connection may have outstanding at once; beyond this a request is refused at once
# (EAGAIN) instead of buffering without bound. Blocked stream reads count against it.
DEFAULT_MAX_OUTSTANDING = 256
# Fids one connection may hold; beyond this a walk or attach is refused (EMFILE).
DEFAULT_MAX_FIDS = 4096
# Connections served at once; the next one is refused (see `Server.serve`).
DEFAULT_MAX_CONNECTIONS = 1024
# Seconds a new connection has to finish its handshake (see `Server.serve`).
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
# A refused connection's Tversion is awaited this long at most, to answer it; at most this many
# refused connections wait at once (a flood beyond that is closed without a word).
_REFUSE_WAIT = 1.0
_REFUSING_MAX = 64
_TVERSION_MAX = 1024  # bytes: a Tversion is 13 + its version string
V9FS_MAGIC = 0x01021997
# Queued reply bytes that make the receive loop send before it decodes the next frame.
_SEND_AT = 1 << 18
# Frames of one received batch answered inline before the receive loop yields to other tasks.
_FAIRNESS_FRAMES = 128

# The hot path's frame layouts (see "The hot path" in the module docstring).
_TWALK = struct.Struct("<IBHIIH")
_RWALK = struct.Struct("<IBHH")
_QID = struct.Struct("<BIQ")
_TLOPEN = struct.Struct("<IBHII")
_TOPEN = struct.Struct("<IBHIB")
_ROPEN = struct.Struct("<IBHBIQI")  # Ropen and Rlopen: qid[13] iounit[4]
_TREAD = struct.Struct("<IBHIQI")
_RREAD = struct.Struct("<IBHI")
_TCLUNK = struct.Struct("<IBHI")
_RCLUNK = struct.Struct("<IBH")
_RCLUNK_SIZE = _RCLUNK.size
_SIZE = struct.Struct("<I")


def _twalk_fields(frame: bytes) -> tuple[int, int, int, list[str]] | None:
    """A Twalk frame's tag, fid, newfid and names, or None when the frame is not a well-formed
    walk of at most MAXWELEM names (the generic path then answers it with the codec's error)."""
    length = len(frame)
    if length < _TWALK.size:
        return None
    _, _, tag, fid, newfid, n = _TWALK.unpack_from(frame, 0)
    if n > MAXWELEM:
        return None
    pos = _TWALK.size
    names = []
    try:
        for _ in range(n):
            end = pos + 2 + (frame[pos] | frame[pos + 1] << 8)
            if end > length:
                return None
            names.append(frame[pos + 2 : end].decode("utf-8"))
            pos = end
    except (IndexError, UnicodeDecodeError):
        return None
    return (tag, fid, newfid, names) if pos == length else None


def _rwalk_bytes(tag: int, qids: Sequence[m.Qid]) -> bytes:
    """An Rwalk reply packed directly (the same bytes as the codec's)."""
    k = len(qids)
    return _RWALK.pack(_RWALK.size + 13 * k, m.Rwalk.TYPE, tag, k) + b"".join(
        [_QID.pack(q.type, q.version, q.path) for q in qids]
    )


_HEADER_SIZE = m.HEADER_SIZE

RootFactory: TypeAlias = Callable[[AttachRequest], Node | Awaitable[Node]]
AttachCheck: TypeAlias = Callable[[AttachRequest], Awaitable[None] | None]

_EPERM_LINKS = "links, symlinks and device nodes cannot be made in this file tree"


@attrs.frozen
class ServerStatistics:
    """A snapshot of what the server holds (trio `statistics()` convention)."""

    connections_open: int
    connections_total: int
    fids: int
    open_handles: int
    requests_in_flight: int
    connections_refused: int = 0  # over max_connections
    handshakes_timed_out: int = 0


@attrs.define(eq=False)
class _Fid:
    number: int
    path: tuple[Node, ...]
    uname: str
    opening: bool = False
    open_mode: OpenMode | None = None
    handle: Handle | None = None
    remove_on_close: bool = False
    # Directory reads: the snapshot of encoded entries, and where the next read must start.
    dir_entries: list[bytes] | None = None
    dir_index: int = 0
    dir_offset: int = 0
    # 9P2000.L readdir snapshot: (qid, dirent type, name) per entry, "." and ".." first.
    readdir_entries: list[tuple[m.Qid, int, str]] | None = None

    @property
    def node(self) -> Node:
        return self.path[-1]

    @property
    def is_open(self) -> bool:
        return self.open_mode is not None


@attrs.define(eq=False)
class _Request:
    tag: int
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)


_OPEN_MODES: dict[tuple[bool, bool, bool, bool], OpenMode] = {}


def _open_mode(read: bool, write: bool, truncate: bool, append: bool = False) -> OpenMode:
    """The shared (frozen) `OpenMode` for these bits: one allocation per kind, not per open."""
    key = (read, write, truncate, append)
    mode = _OPEN_MODES.get(key)
    if mode is None:
        mode = _OPEN_MODES[key] = OpenMode(read, write, truncate, append)
    return mode


def _check_name(name: str) -> None:
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise InvalidInput(f"invalid file name {name!r}")


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class Server:
    """Serves a synthetic tree over 9P2000, 9P2000.u and 9P2000.L.

    ``root`` is called at each Tattach with the `AttachRequest` and returns the root `Node` (it
    may be async, and may raise `FsError` to refuse). ``max_msize`` caps the negotiated msize;
    ``uid``/``gid`` are the numeric owner reported to 9P2000.u/.L when a node gives none (default:
    this process's). ``clunk_timeout`` bounds `Handle.clunk`/`abort` at teardown and flush.
    Limits: ``handshake_timeout`` (seconds, see `serve`), ``max_connections`` at once,
    ``max_fids`` and ``max_outstanding`` requests per connection.
    """

    def __init__(
        self,
        root: RootFactory,
        *,
        max_msize: int = DEFAULT_MAX_MSIZE,
        max_outstanding: int = DEFAULT_MAX_OUTSTANDING,
        max_fids: int = DEFAULT_MAX_FIDS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        uid: int | None = None,
        gid: int | None = None,
        clunk_timeout: float = 10.0,
    ) -> None:
        if max_msize < MIN_MSIZE:
            raise ValueError(f"max_msize must be at least {MIN_MSIZE}")
        for name, value in (
            ("max_outstanding", max_outstanding),
            ("max_fids", max_fids),
            ("max_connections", max_connections),
            ("handshake_timeout", handshake_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be greater than 0, not {value!r}")
        self.root = root
        self.max_msize = max_msize
        self.max_outstanding = max_outstanding
        self.max_fids = max_fids
        self.max_connections = max_connections
        self.handshake_timeout = handshake_timeout
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.clunk_timeout = clunk_timeout
        self._connections_open = 0
        self._connections_total = 0
        self._fids = 0
        self._open_handles = 0
        self._requests = 0
        self._refused = 0
        self._refusing = 0
        self._timed_out = 0

    def statistics(self) -> ServerStatistics:
        return ServerStatistics(
            connections_open=self._connections_open,
            connections_total=self._connections_total,
            fids=self._fids,
            open_handles=self._open_handles,
            requests_in_flight=self._requests,
            connections_refused=self._refused,
            handshakes_timed_out=self._timed_out,
        )

    async def serve(
        self,
        stream: trio.abc.Stream,
        *,
        check_attach: AttachCheck | None = None,
        peer: str = "",
    ) -> None:
        """Serve one connection until EOF or a protocol error; then close ``stream``.

        ``check_attach`` is called for each Tattach before the root factory; it raises `FsError`
        to refuse (the listener decides: e.g. a TCP listener requires its token as aname).
        The handshake must end within ``handshake_timeout`` seconds or the connection is closed:
        a successful Tversion, and with ``check_attach`` (authentication) a Tattach it passes.
        After that a connection is never timed out (a mount may sit idle for days). Beyond
        ``max_connections`` a connection is refused: its Tversion gets an error, then it is
        closed. Never raises for anything the peer does.
        """
        if self._connections_open >= self.max_connections:
            await self._refuse(stream, peer or "?")
            return
        conn = _Connection(self, stream, check_attach, peer)
        self._connections_open += 1
        self._connections_total += 1
        try:
            await conn.run()
        finally:
            self._connections_open -= 1

    async def _refuse(self, stream: trio.abc.Stream, peer: str) -> None:
        """Answer the Tversion of a connection over ``max_connections`` with an error, if it
        comes soon (every 9P client sends it first), and close it."""
        self._refused += 1
        limit = self.max_connections
        log.warning("9p %s: refused: %d connections are open (max_connections)", peer, limit)
        try:
            if self._refusing >= _REFUSING_MAX:
                return
            self._refusing += 1
            try:
                with trio.move_on_after(min(_REFUSE_WAIT, self.handshake_timeout)):
                    tversion = await _receive_tversion(stream)
                    if tversion is not None:
                        await stream.send_all(_busy_reply(tversion, limit))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                self._refusing -= 1
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)


async def _receive_tversion(stream: trio.abc.Stream) -> m.Tversion | None:
    """The peer's first frame if it is a Tversion, else None (after at most a few bytes)."""
    buf = bytearray()
    size = _TVERSION_MAX
    while len(buf) < size:
        data = await stream.receive_some(_TVERSION_MAX)
        if not data:
            return None
        buf += data
        if len(buf) >= 4:
            size = _SIZE.unpack_from(buf)[0]
            if not _HEADER_SIZE <= size <= _TVERSION_MAX:
                return None
    try:
        msg = m.decode(bytes(buf[:size]), Dialect.P9P2000)  # Tversion is alike in every dialect
    except ProtocolError:
        return None
    return msg if isinstance(msg, m.Tversion) else None


def _busy_reply(tversion: m.Tversion, limit: int) -> bytes:
    """The error that refuses a connection over the limit, in the dialect its Tversion asked
    for (a 9P2000.L client reads only an Rlerror's errno)."""
    text = (
        f"the server is busy: {limit} connections are open, its limit (max_connections); "
        "close connections you no longer use, or try again later"
    )
    version = tversion.version
    dialect = Dialect.P9P2000_U if version == Dialect.P9P2000_U.value else Dialect.P9P2000
    if version == Dialect.P9P2000_L.value:
        return m.encode(m.Rlerror(tversion.tag, errno_of(TryAgain)), Dialect.P9P2000_L)
    ename = m.fit_ename(text, tversion.msize, dialect)
    return m.encode(m.Rerror(tversion.tag, ename, errno_of(TryAgain)), dialect)


class _Connection:
    def __init__(
        self,
        server: Server,
        stream: trio.abc.Stream,
        check_attach: AttachCheck | None,
        peer: str,
    ) -> None:
        self.server = server
        self.stream = stream
        self.transport = transport_for(stream, self)
        self.check_attach = check_attach
        self.peer = peer or "?"
        self.dialect: Dialect | None = None
        self.msize = server.max_msize
        self.reader = FrameReader(server.max_msize)
        self.fids: dict[int, _Fid] = {}
        self.tags: dict[int, _Request] = {}
        self.nursery: trio.Nursery | None = None
        # Cancels the connection unless the handshake ends in time (see `Server.serve`).
        self._handshake: trio.CancelScope | None = None
        # Reply frames waiting to be sent, in order; one task at a time sends them.
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._sending = False
        self._drained: trio.Event | None = None
        # Message type byte -> hot-path method (set by Tversion for the negotiated dialect).
        self._hot: dict[int, Callable[[bytes], Awaitable[bool]]] = {}
        self._now: dict[int, Callable[[bytes], bool]] = {}
        self._handlers: dict[type[m.Message], Callable[[Any], Awaitable[m.Message]]] = {
            m.Tflush: self._flush,
            m.Tauth: self._auth,
            m.Tattach: self._attach,
            m.Twalk: self._walk,
            m.Topen: self._open,
            m.Tcreate: self._create,
            m.Tread: self._read,
            m.Twrite: self._write,
            m.Tclunk: self._clunk,
            m.Tremove: self._remove,
            m.Tstat: self._stat,
            m.Twstat: self._wstat,
            m.Tstatfs: self._statfs,
            m.Tlopen: self._lopen,
            m.Tlcreate: self._lcreate,
            m.Tsymlink: self._refuse_link,
            m.Tmknod: self._refuse_link,
            m.Tlink: self._refuse_link,
            m.Trename: self._rename,
            m.Trenameat: self._renameat,
            m.Treadlink: self._readlink,
            m.Tgetattr: self._getattr,
            m.Tsetattr: self._setattr,
            m.Txattrwalk: self._xattr,
            m.Txattrcreate: self._xattr,
            m.Treaddir: self._readdir,
            m.Tfsync: self._fsync,
            m.Tlock: self._lock,
            m.Tgetlock: self._getlock,
            m.Tmkdir: self._mkdir,
            m.Tunlinkat: self._unlinkat,
        }
        # Which requests may wait (see "Theory of operation"); every other one is inline.
        always: Callable[[Any], bool] = lambda msg: True  # noqa: E731
        self._may_block: dict[type[m.Message], Callable[[Any], bool]] = {
            # Rare, and it may wait for the flushed request; a task keeps two Tflushes that name
            # each other (sent in one write) from both being answered.
            m.Tflush: always,
            m.Tread: self._read_blocks,
            m.Twrite: self._write_blocks,
            m.Tclunk: self._clunk_blocks,
            m.Topen: self._open_blocks,
            m.Tlopen: self._open_blocks,
            m.Tcreate: always,
            m.Tlcreate: always,
            m.Tmkdir: always,
            m.Tremove: always,
            m.Twstat: always,
            m.Tsetattr: always,
            m.Trename: always,
            m.Trenameat: always,
            m.Tunlinkat: always,
        }

    @property
    def parkable(self) -> bool:
        """The shared poller may serve this connection once its dialect is negotiated."""
        return bool(self._now)

    # --- the connection's lifetime -------------------------------------------------------------

    async def run(self) -> None:
        timeout = self.server.handshake_timeout
        handshake = self._handshake = trio.CancelScope(deadline=trio.current_time() + timeout)
        try:
            with handshake:
                async with trio.open_nursery() as nursery:
                    self.nursery = nursery
                    try:
                        await self._read_loop()
                    finally:
                        nursery.cancel_scope.cancel()
            if handshake.cancelled_caught:
                self.server._timed_out += 1
                step = "Tversion" if self.dialect is None else "successful Tattach"
                log.warning("9p %s: closed: no %s within %g s", self.peer, step, timeout)
        finally:
            await self._drop_all_fids()
            self.transport.detach()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    async def _read_loop(self) -> None:
        transport = self.transport
        reader = self.reader
        while True:
            try:
                data = await transport.receive()
            except ConnectionLost as exc:
                log.debug("9p %s: connection lost: %s", self.peer, exc)
                return
            if data is None:  # the poller answered what came in; its replies are queued
                await self._send_queued(wait=True)
                continue
            if not data:
                log.debug("9p %s: EOF", self.peer)
                return
            if (
                type(data) is bytes
                and not reader.buffered
                and _HEADER_SIZE <= len(data) == _SIZE.unpack_from(data)[0] <= reader.max_size
            ):
                # Exactly one whole frame (one request outstanding: the usual case): answer
                # it without copying it through the frame reader.
                try:
                    hot = self._hot.get(data[4])
                    if hot is None or not await hot(data):
                        await self._dispatch(data)
                except ProtocolError as exc:
                    log.warning("9p %s: closing the connection: %s", self.peer, exc)
                    await self._send_queued(wait=True)
                    return
                await self._send_queued(wait=True)
                continue
            reader.feed(data)
            try:
                frames = 0
                while (frame := reader.next_frame()) is not None:
                    hot = self._hot.get(frame[4])
                    if hot is None or not await hot(frame):
                        await self._dispatch(frame)
                    frames += 1
                    if self._out_bytes >= _SEND_AT:
                        await self._send_queued(wait=True)
                    elif frames % _FAIRNESS_FRAMES == 0:
                        # 64 KiB of tiny inline requests must not stall the other connections.
                        await trio.lowlevel.checkpoint()
            except ProtocolError as exc:
                log.warning("9p %s: closing the connection: %s", self.peer, exc)
                await self._send_queued(wait=True)
                return
            # One send for every reply this batch of frames produced; and wait until the peer
            # takes them before reading more (backpressure: a client that never reads its
            # replies cannot make us buffer without bound).
            await self._send_queued(wait=True)

    async def _dispatch(self, frame: bytes) -> None:
        try:
            msg = m.decode(frame, self.dialect or Dialect.P9P2000)
        except UnknownMessageError as exc:
            self._fail(exc.tag, str(exc), NotSupported)
            return
        cls = type(msg)
        if cls is m.Tversion:
            await self._version(msg)  # type: ignore[arg-type]
            return
        tag = msg.tag
        if self.dialect is None:
            self._fail(tag, "the first message must be Tversion", NotInProtocol)
            return
        handler = self._handlers.get(cls)
        if handler is None and not cls.__name__.startswith("T"):
            name = cls.__name__
            self._fail(tag, f"{name} is a reply; a client sends T-messages", NotInProtocol)
            return
        if tag in self.tags or tag == NOTAG:
            self._fail(tag, f"tag {tag} is already in use by an outstanding request", TagInUse)
            return
        limit = self.server.max_outstanding
        # A client at the limit must still be able to flush (the refusal tells it to): Tflush
        # has a reserve of its own, so the task count stays bounded.
        if len(self.tags) >= (2 * limit if cls is m.Tflush else limit):
            self._fail(
                tag,
                f"too many outstanding requests on this connection (limit {limit}, "
                "max_outstanding); wait for replies or flush some",
                TryAgain,
            )
            return
        may_block = self._may_block.get(cls)
        if handler is None:
            self._queue(await self._answer(handler, msg))
            return
        if may_block is None or not may_block(msg):
            # Inline: answered before the next frame is even decoded (no task, no scope). The
            # same as `_answer`, spelled out: this is the path of almost every request.
            try:
                reply = await handler(msg)
            except FsError as exc:
                reply = self._error_reply(tag, exc)
            except Exception:
                reply = self._internal_error_reply(msg)
            self._queue(reply)
            return
        req = _Request(tag)
        self.tags[tag] = req
        self.server._requests += 1
        assert self.nursery is not None
        self.nursery.start_soon(self._run_request, req, handler, msg)

    async def _answer(
        self, handler: Callable[[Any], Awaitable[m.Message]] | None, msg: m.Message
    ) -> m.Message:
        try:
            if handler is None:
                raise NotSupported(f"{type(msg).__name__} is not supported by this server")
            return await handler(msg)
        except FsError as exc:
            return self._error_reply(msg.tag, exc)
        except Exception:
            return self._internal_error_reply(msg)

    def _internal_error_reply(self, msg: m.Message) -> m.Message:
        return self._internal_error_for(type(msg).__name__, msg.tag)

    def _internal_error_for(self, name: str, tag: int) -> m.Message:
        log.exception("9p %s: internal error handling %s (tag %d)", self.peer, name, tag)
        return self._error_reply(tag, _internal_error())

    async def _run_request(
        self, req: _Request, handler: Callable[[Any], Awaitable[m.Message]], msg: m.Message
    ) -> None:
        try:
            with req.scope:
                reply = await self._answer(handler, msg)
            if not req.scope.cancelled_caught:  # flushed (flush(5)): the reply is never sent
                self._queue(reply, req)
                await self._send_queued()
        finally:
            if self.tags.get(req.tag) is req:
                del self.tags[req.tag]
            self.server._requests -= 1
            req.done.set()

    # --- the hot path -----------------------------------------------------------------------------
    #
    # Twalk, Topen/Tlopen, Tread and Tclunk straight from the frame's bytes to the reply's bytes,
    # for the common case only: a method returns False, before it changes anything, whenever the
    # generic path must decide (tag in use, unknown fid, a call that may block, a malformed or
    # unusual frame), and `_dispatch` then handles the frame exactly as before.

    def _hot_table(self, dialect: Dialect | None) -> dict[int, Callable[[bytes], Awaitable[bool]]]:
        if dialect is None:
            return {}
        table: dict[int, Callable[[bytes], Awaitable[bool]]] = {
            m.Twalk.TYPE: self._hot_walk,
            m.Tread.TYPE: self._hot_read,
            m.Tclunk.TYPE: self._hot_clunk,
        }
        if dialect is Dialect.P9P2000_L:
            table[m.Tlopen.TYPE] = self._hot_lopen
        else:
            table[m.Topen.TYPE] = self._hot_open
        return table

    def _tag_refused(self, tag: int) -> bool:
        """True if `_dispatch` would refuse this tag (in use, NOTAG, too many outstanding)."""
        tags = self.tags
        return tag == NOTAG or tag in tags or len(tags) >= self.server.max_outstanding

    def _put(self, frame: bytes) -> None:
        self._out.append(frame)
        self._out_bytes += len(frame)

    def _put_error(self, name: str, tag: int, exc: Exception) -> None:
        if isinstance(exc, FsError):
            self._queue(self._error_reply(tag, exc))
        else:
            self._queue(self._internal_error_for(name, tag))

    async def _hot_walk(self, frame: bytes) -> bool:
        if self._now_walk(frame):
            return True
        walk = _twalk_fields(frame)
        if walk is None:
            return False
        tag, fid, newfid, names = walk
        if fid not in self.fids or self._tag_refused(tag):
            return False
        try:
            qids = await self._walk_qids(fid, newfid, names)
        except Exception as exc:
            self._put_error("Twalk", tag, exc)
            return True
        self._put(_rwalk_bytes(tag, qids))
        return True

    async def _hot_lopen(self, frame: bytes) -> bool:
        if self._now_lopen(frame):
            return True
        if len(frame) != _TLOPEN.size:
            return False
        _, _, tag, fid, flags = _TLOPEN.unpack(frame)
        entry = self.fids.get(fid)
        if entry is None or entry.node.open_blocks or self._tag_refused(tag):
            return False
        try:
            qid = await self._lopen_qid(entry, flags)
        except Exception as exc:
            self._put_error("Tlopen", tag, exc)
            return True
        self._put_opened(m.Rlopen(tag, qid, self._iounit()))
        return True

    async def _hot_open(self, frame: bytes) -> bool:
        if self._now_open(frame):
            return True
        if len(frame) != _TOPEN.size:
            return False
        _, _, tag, fid, mode = _TOPEN.unpack(frame)
        entry = self.fids.get(fid)
        if entry is None or entry.node.open_blocks or self._tag_refused(tag):
            return False
        try:
            qid = await self._open_qid(entry, mode)
        except Exception as exc:
            self._put_error("Topen", tag, exc)
            return True
        self._put_opened(m.Ropen(tag, qid, self._iounit()))
        return True

    def _put_opened(self, reply: m.Ropen | m.Rlopen) -> None:
        qid = reply.qid
        try:
            frame = _ROPEN.pack(
                _ROPEN.size, reply.TYPE, reply.tag, qid.type, qid.version, qid.path, reply.iounit
            )
        except struct.error:
            self._queue(reply)  # out-of-range qid fields: the codec says what is wrong
            return
        self._put(frame)

    async def _hot_read(self, frame: bytes) -> bool:
        if self._now_read(frame):
            return True
        if len(frame) != _TREAD.size:
            return False
        _, _, tag, fid, offset, count = _TREAD.unpack(frame)
        entry = self.fids.get(fid)
        if entry is None:
            return False
        handle = entry.handle
        mode = entry.open_mode
        if (
            handle is None
            or handle.read_blocks
            or mode is None
            or not mode.read
            or self._tag_refused(tag)
        ):
            return False
        count = min(count, self.msize - IOHDRSZ)
        try:
            data = await handle.read(offset, count)
        except Exception as exc:
            self._put_error("Tread", tag, exc)
            return True
        self._put_read(tag, handle, data, count)
        return True

    def _put_read(self, tag: int, handle: Handle, data: bytes, count: int) -> None:
        """Queue the Rread of `data` for a read of `count`, or the error the generic path gives."""
        try:
            n = len(data)
            if n <= count:
                # bytes(): the same conversion (and the same error for a non-bytes answer) as the
                # generic path; it copies nothing when the node returned bytes.
                reply = _RREAD.pack(_RREAD.size + n, m.Rread.TYPE, tag, n) + bytes(data)
        except Exception as exc:
            self._put_error("Tread", tag, exc)
            return
        if n > count:
            log.error("9p %s: %r returned %d bytes for a read of %d", self.peer, handle, n, count)
            self._queue(self._error_reply(tag, _internal_error()))
            return
        self._put(reply)

    async def _hot_clunk(self, frame: bytes) -> bool:
        if self._now_clunk(frame):
            return True
        if len(frame) != _TCLUNK.size:
            return False
        _, _, tag, fid = _TCLUNK.unpack(frame)
        entry = self.fids.get(fid)
        if entry is None or entry.remove_on_close or self._tag_refused(tag):
            return False
        handle = entry.handle
        if handle is not None and handle.clunk_blocks:
            return False
        self._forget_fid(fid)
        if handle is not None:
            try:
                await handle.clunk()
            except Exception as exc:
                self._put_error("Tclunk", tag, exc)
                return True
        self._put(_RCLUNK.pack(_RCLUNK_SIZE, m.Rclunk.TYPE, tag))
        return True

    # --- the synchronous hot path (the poller's) --------------------------------------------------
    #
    # The same four requests answered without waiting: the node's ``*_now`` calls instead of its
    # async ones. Each returns False, having changed nothing, when the generic path must decide
    # or a node answers LATER; otherwise it has queued the reply (the same bytes as `_hot_*` and
    # `_dispatch` would). These are plain functions: the shared poller runs them outside the
    # connection's task, which is safe only because nothing in them can reach a checkpoint.

    def _now_table(self, dialect: Dialect | None) -> dict[int, Callable[[bytes], bool]]:
        if dialect is None:
            return {}
        table: dict[int, Callable[[bytes], bool]] = {
            m.Twalk.TYPE: self._now_walk,
            m.Tread.TYPE: self._now_read,
            m.Tclunk.TYPE: self._now_clunk,
        }
        if dialect is Dialect.P9P2000_L:
            table[m.Tlopen.TYPE] = self._now_lopen
        else:
            table[m.Topen.TYPE] = self._now_open
        return table

    def serve_now(self, data: bytes, sock: socket.socket) -> tuple[bool, bytes | None]:
        """The poller's part: answer the frames in ``data`` and send the replies
        without waiting. Returns (True, None) when all is done and the connection stays with
        the poller; else (False, what the connection's task must process: the first frame
        not answered and everything after it, or None when only replies are left to send)."""
        reader = self.reader
        if (
            not reader.buffered
            and _HEADER_SIZE <= len(data) == _SIZE.unpack_from(data)[0] <= reader.max_size
        ):
            if not self.answer_now(data):
                return False, data
        else:
            reader.feed(data)
            frames = 0
            try:
                while (frame := reader.next_frame()) is not None:
                    if frames >= _FAIRNESS_FRAMES or self._out_bytes >= _SEND_AT:
                        return False, frame + reader.take()
                    if not self.answer_now(frame):
                        return False, frame + reader.take()
                    frames += 1
            except ProtocolError:
                return False, reader.take()  # the task meets the same error and closes
        if self._out:
            if self._sending:
                return False, None  # another task is sending: it takes these too
            out = self._out[0] if len(self._out) == 1 else b"".join(self._out)
            self._out.clear()
            self._out_bytes = 0
            try:
                sent = sock.send(out)
            except BlockingIOError:
                sent = 0
            except OSError:
                sent = 0  # the task's own send meets the error and ends the connection
            if sent < len(out):
                self._out.append(out[sent:])
                self._out_bytes = len(out) - sent
                return False, None
        return True, None

    def answer_now(self, frame: bytes) -> bool:
        """Answer one request frame without waiting, or return False having changed nothing."""
        now = self._now.get(frame[4])
        return now is not None and now(frame)

    def _now_walk(self, frame: bytes) -> bool:
        walk = _twalk_fields(frame)
        if walk is None:
            return False
        tag, fid, newfid, names = walk
        if fid not in self.fids or self._tag_refused(tag):
            return False
        try:
            qids = self._walk_now(fid, newfid, names)
        except Exception as exc:
            self._put_error("Twalk", tag, exc)
            return True
        if qids is LATER:
            return False
        self._put(_rwalk_bytes(tag, qids))
        return True

    def _now_lopen(self, frame: bytes) -> bool:
        return self._now_opened(frame, lopen=True)

    def _now_open(self, frame: bytes) -> bool:
        return self._now_opened(frame, lopen=False)

    def _now_opened(self, frame: bytes, *, lopen: bool) -> bool:
        """Tlopen (`lopen`) or Topen: the two differ in layout, mode bits and reply only."""
        layout = _TLOPEN if lopen else _TOPEN
        if len(frame) != layout.size:
            return False
        _, _, tag, fid, bits = layout.unpack(frame)
        entry = self.fids.get(fid)
        if entry is None or self._tag_refused(tag):
            return False
        try:
            if lopen:
                qid = self._open_now(entry, self._lopen_mode(entry, bits), False)
            else:
                qid = self._open_now(entry, self._omode(entry, bits), bool(bits & ORCLOSE))
        except Exception as exc:
            self._put_error("Tlopen" if lopen else "Topen", tag, exc)
            return True
        if qid is LATER:
            return False
        self._put_opened_now(m.Rlopen if lopen else m.Ropen, tag, qid)
        return True

    def _put_opened_now(self, cls: type[m.Ropen | m.Rlopen], tag: int, qid: m.Qid) -> None:
        iounit = self.msize - IOHDRSZ
        try:
            frame = _ROPEN.pack(_ROPEN.size, cls.TYPE, tag, qid.type, qid.version, qid.path, iounit)
        except struct.error:
            self._queue(cls(tag, qid, iounit))  # out-of-range qid fields: the codec says what
            return
        self._put(frame)

    def _now_read(self, frame: bytes) -> bool:
        if len(frame) != _TREAD.size:
            return False
        _, _, tag, fid, offset, count = _TREAD.unpack(frame)
        entry = self.fids.get(fid)
        if entry is None:
            return False
        handle = entry.handle
        mode = entry.open_mode
        if handle is None or mode is None or not mode.read or self._tag_refused(tag):
            return False
        count = min(count, self.msize - IOHDRSZ)
        try:
            data = handle.read_now(offset, count)
        except Exception as exc:
            self._put_error("Tread", tag, exc)
            return True
        if data is LATER:
            return False
        self._put_read(tag, handle, data, count)
        return True

    def _now_clunk(self, frame: bytes) -> bool:
        if len(frame) != _TCLUNK.size:
            return False
        _, _, tag, fid = _TCLUNK.unpack(frame)
        entry = self.fids.get(fid)
        if entry is None or entry.remove_on_close or self._tag_refused(tag):
            return False
        handle = entry.handle
        if handle is not None:
            try:
                if handle.clunk_now() is LATER:
                    return False
            except Exception as exc:
                self._forget_fid(fid)  # clunk(5): the fid is released even if the clunk fails
                self._put_error("Tclunk", tag, exc)
                return True
        self._forget_fid(fid)
        self._put(_RCLUNK.pack(_RCLUNK_SIZE, m.Rclunk.TYPE, tag))
        return True

    # --- which requests may wait ----------------------------------------------------------------

    def _read_blocks(self, msg: m.Tread) -> bool:
        entry = self.fids.get(msg.fid)
        return entry is not None and entry.handle is not None and entry.handle.read_blocks

    def _write_blocks(self, msg: m.Twrite) -> bool:
        entry = self.fids.get(msg.fid)
        return entry is not None and entry.handle is not None and entry.handle.write_blocks

    def _clunk_blocks(self, msg: m.Tclunk) -> bool:
        entry = self.fids.get(msg.fid)
        if entry is None:
            return False
        if entry.remove_on_close:
            return True
        return entry.handle is not None and entry.handle.clunk_blocks

    def _open_blocks(self, msg: m.Topen | m.Tlopen) -> bool:
        entry = self.fids.get(msg.fid)
        return entry is not None and entry.node.open_blocks

    # --- sending --------------------------------------------------------------------------------

    def _queue(self, msg: m.Message, req: _Request | None = None) -> None:
        """Encode a reply and queue it; `_send_queued` sends it."""
        assert self.dialect is not None or isinstance(msg, m.Rerror | m.Rversion)
        dialect = self.dialect or Dialect.P9P2000
        # Every error reply of every path (inline, task, hot path, poller) is bounded here.
        msg = self._fit_error(msg, dialect)
        try:
            frame = m.encode(msg, dialect)
        except ProtocolError as exc:
            log.error("9p %s: cannot encode %r: %s", self.peer, type(msg).__name__, exc)
            frame = m.encode(
                self._fit_error(
                    self._error_reply(msg.tag, FsError(f"reply could not be encoded: {exc}")),
                    dialect,
                ),
                dialect,
            )
        if len(frame) > self.msize:
            # Not an error reply (those were cut to fit above): e.g. the stat of a node with a
            # very long name. The client can ask for a larger msize.
            log.warning(
                "9p %s: %s of %d bytes exceeds msize %d",
                self.peer,
                type(msg).__name__,
                len(frame),
                self.msize,
            )
            problem = f"the reply ({len(frame)} bytes) is larger than the negotiated msize"
            frame = m.encode(
                self._fit_error(
                    self._error_reply(msg.tag, MessageTooLarge(f"{problem} {self.msize}")),
                    dialect,
                ),
                dialect,
            )
        # Free the tag before the reply can reach the client: a client may reuse it as soon as
        # it has the reply (plan9port's `9p` and diod's tools always send tag 0).
        if req is not None and self.tags.get(req.tag) is req:
            del self.tags[req.tag]
        self._out.append(frame)
        self._out_bytes += len(frame)

    async def _send_queued(self, *, wait: bool = False) -> None:
        """Send every queued reply, in order. One task sends at a time; a caller that finds
        another one sending leaves its frames to it (and with ``wait``, waits until they are
        out)."""
        if self._sending:
            while wait and self._sending:
                if self._drained is None:
                    self._drained = trio.Event()
                await self._drained.wait()
            return
        self._sending = True
        try:
            while self._out:
                out, self._out, self._out_bytes = self._out, [], 0
                await self.transport.send(out[0] if len(out) == 1 else b"".join(out))
        except ConnectionLost as exc:
            log.debug("9p %s: cannot send: %s", self.peer, exc)
            self._out.clear()
            self._out_bytes = 0
            if self.nursery is not None:
                self.nursery.cancel_scope.cancel()
        finally:
            self._sending = False
            if self._drained is not None:
                self._drained.set()
                self._drained = None

    def _fit_error(self, msg: m.Message, dialect: Dialect) -> m.Message:
        """An Rerror cut to fit msize (`messages.fit_ename`); the full text goes to the log, at
        warning: the client caused it, the server is fine. Other replies pass unchanged."""
        if type(msg) is not m.Rerror:
            return msg
        ename = m.fit_ename(msg.ename, self.msize, dialect)
        if ename == msg.ename:
            return msg
        log.warning(
            "9p %s: error reply (tag %d) cut to fit msize %d; full text: %s",
            self.peer,
            msg.tag,
            self.msize,
            msg.ename,
        )
        return m.Rerror(msg.tag, ename, msg.errno)

    def _fail(self, tag: int, message: str, kind: type[FsError]) -> None:
        self._queue(self._error_reply(tag, kind(message)))

    def _error_reply(self, tag: int, exc: FsError) -> m.Message:
        if self.dialect is Dialect.P9P2000_L:
            return m.Rlerror(tag, exc.errno or errno.EIO)  # Rlerror 0 would read as success
        if self.dialect is Dialect.P9P2000_U:
            return m.Rerror(tag, exc.message, exc.errno)
        return m.Rerror(tag, exc.message)

    # --- fid bookkeeping ----------------------------------------------------------------------

    def _fid(self, fid: int) -> _Fid:
        try:
            return self.fids[fid]
        except KeyError:
            raise BadFid(f"unknown fid {fid}") from None

    def _new_fid(self, fid: int, entry: _Fid) -> None:
        if fid in self.fids:
            raise BadFid(f"fid {fid} is already in use")
        if fid == NOFID:
            raise BadFid("NOFID cannot name a file")
        if len(self.fids) >= self.server.max_fids:
            raise TooManyFids(
                f"too many fids on this connection (limit {self.server.max_fids}, max_fids); "
                "clunk the fids you no longer use"
            )
        self.fids[fid] = entry
        self.server._fids += 1

    def _forget_fid(self, fid: int) -> _Fid:
        entry = self.fids.pop(fid)
        self.server._fids -= 1
        if entry.handle is not None:
            self.server._open_handles -= 1
        return entry

    async def _drop_all_fids(self) -> None:
        entries = [self._forget_fid(fid) for fid in list(self.fids)]
        with trio.CancelScope(shield=True):
            for entry in entries:
                if entry.handle is None:
                    continue
                with trio.move_on_after(self.server.clunk_timeout) as scope:
                    try:
                        await entry.handle.abort()
                    except Exception:
                        log.exception("9p %s: Handle.abort failed", self.peer)
                if scope.cancelled_caught:
                    log.error("9p %s: Handle.abort did not finish in time", self.peer)

    async def _reset(self) -> None:
        pending = list(self.tags.values())
        for req in pending:
            req.scope.cancel()
        for req in pending:
            await req.done.wait()
        await self._drop_all_fids()

    # --- stat conversions ---------------------------------------------------------------------

    def _to_stat(self, st: NodeStat) -> m.Stat:
        def u32(v: int) -> int:
            return min(max(v, 0), 0xFFFFFFFE)

        mtime = st.mtime_ns // 1_000_000_000
        atime = (st.atime_ns if st.atime_ns is not None else st.mtime_ns) // 1_000_000_000
        return m.Stat(
            type=0,
            dev=0,
            qid=st.qid,
            mode=st.mode,
            atime=u32(atime),
            mtime=u32(mtime),
            length=0 if st.is_dir else st.length,
            name=st.name,
            uid=st.owner,
            gid=st.group if st.group is not None else st.owner,
            muid=st.muid,
            n_uid=self.server.uid if st.uid is None else st.uid,
            n_gid=self.server.gid if st.gid is None else st.gid,
            n_muid=NONUNAME,
        )

    def _iounit(self) -> int:
        return self.msize - IOHDRSZ

    # --- version, auth, attach, flush ----------------------------------------------------------

    async def _version(self, msg: m.Tversion) -> None:
        # version(5): a Tversion aborts all outstanding I/O and frees all fids.
        await self._reset()
        self._hot = {}
        self._now = {}
        if msg.msize < MIN_MSIZE:
            self.dialect = None
            self._queue(
                m.Rerror(
                    msg.tag, (f"msize {msg.msize} is too small; at least {MIN_MSIZE} is required")
                )
            )
            return
        if msg.version == Dialect.P9P2000_L.value:
            dialect: Dialect | None = Dialect.P9P2000_L
        elif msg.version == Dialect.P9P2000_U.value:
            dialect = Dialect.P9P2000_U
        elif msg.version.startswith(Dialect.P9P2000.value):
            dialect = Dialect.P9P2000
        else:
            dialect = None
        self.msize = min(msg.msize, self.server.max_msize)
        self.reader.max_size = self.msize
        self.dialect = dialect
        self._hot = self._hot_table(dialect)
        self._now = self._now_table(dialect)
        if dialect is not None and self.check_attach is None:
            self._handshake_done()
        version = dialect.value if dialect is not None else VERSION_UNKNOWN
        self._queue(m.Rversion(msg.tag, self.msize, version))

    async def _flush(self, msg: m.Tflush) -> m.Message:
        # A Tflush flushed before its task ran (two Tflushes naming each other, sent in one
        # write) ends here without a reply and without cancelling the one that flushed it,
        # which then answers: without this checkpoint each cancelled the other and neither
        # tag was ever answered.
        await trio.lowlevel.checkpoint()
        old = self.tags.get(msg.oldtag)
        if old is not None and old.tag != msg.tag:
            old.scope.cancel()
            # The flushed request's reply (if it already took effect) goes out before Rflush.
            # Not shielded: two Tflushes naming each other must not wait on each other forever.
            await old.done.wait()
        return m.Rflush(msg.tag)

    async def _auth(self, msg: m.Tauth) -> m.Message:
        # diod's clients need ENOENT here; plan9port's `9p` accepts any error and carries on.
        raise NotFound("authentication not required")

    async def _attach(self, msg: m.Tattach) -> m.Message:
        if msg.afid != NOFID:
            raise InvalidInput("authentication not required: attach with afid NOFID")
        if msg.fid in self.fids:
            raise BadFid(f"fid {msg.fid} is already in use")
        assert self.dialect is not None
        request = AttachRequest(
            uname=msg.uname,
            aname=msg.aname,
            n_uname=None if msg.n_uname == NONUNAME else msg.n_uname,
            dialect=self.dialect.value,
            peer=self.peer,
        )
        if self.check_attach is not None:
            await _maybe_await(self.check_attach(request))
        root: Node = await _maybe_await(self.server.root(request))
        self._new_fid(msg.fid, _Fid(msg.fid, path=(root,), uname=msg.uname))
        self._handshake_done()
        return m.Rattach(msg.tag, root.stat().qid)

    def _handshake_done(self) -> None:
        """The connection is established: from now on it is never timed out."""
        if self._handshake is not None:
            self._handshake.deadline = math.inf
            self._handshake = None

    # --- walk ---------------------------------------------------------------------------------

    async def _walk(self, msg: m.Twalk) -> m.Message:
        return m.Rwalk(msg.tag, await self._walk_qids(msg.fid, msg.newfid, msg.wnames))

    async def _walk_qids(self, fid: int, newfid: int, wnames: Sequence[str]) -> tuple[m.Qid, ...]:
        entry = self._walk_check(fid, newfid)
        path = entry.path
        qids: list[m.Qid] = []
        for i, name in enumerate(wnames):
            try:
                path = await self._step(path, name)
            except FsError:
                if i == 0:
                    raise
                return tuple(qids)  # walk(5): partial walk, newfid untouched
            qids.append(path[-1].stat().qid)
        return self._walked(entry, fid, newfid, path, qids)

    def _walk_now(self, fid: int, newfid: int, wnames: Sequence[str]) -> tuple[m.Qid, ...] | Later:
        """`_walk_qids` without waiting, or LATER (nothing changed) if a node cannot."""
        entry = self._walk_check(fid, newfid)
        path = entry.path
        qids: list[m.Qid] = []
        for i, name in enumerate(wnames):
            try:
                step = self._step_now(path, name)
            except FsError:
                if i == 0:
                    raise
                return tuple(qids)
            if step is LATER:
                return LATER
            path = step
            qids.append(path[-1].stat().qid)
        return self._walked(entry, fid, newfid, path, qids)

    def _walked(
        self, entry: _Fid, fid: int, newfid: int, path: tuple[Node, ...], qids: list[m.Qid]
    ) -> tuple[m.Qid, ...]:
        # Re-check: another request may have taken newfid while we awaited a node.
        if newfid == fid:
            entry_now = self._fid(fid)
            if entry_now.is_open or entry_now.opening:
                raise Busy(f"fid {fid} was opened during the walk")
            entry_now.path = path
        else:
            self._new_fid(newfid, _Fid(newfid, path=path, uname=entry.uname))
        return tuple(qids)

    def _walk_check(self, fid: int, newfid: int) -> _Fid:
        entry = self._fid(fid)
        if entry.is_open and self.dialect is not Dialect.P9P2000_L:
            raise Busy(f"cannot walk from fid {fid}: it is open (walk(5))")
        if newfid != fid and newfid in self.fids:
            raise BadFid(f"newfid {newfid} is already in use")
        if newfid == NOFID:
            raise BadFid("NOFID cannot name a file")
        return entry

    async def _step(self, path: tuple[Node, ...], name: str) -> tuple[Node, ...]:
        local = self._step_local(path, name)
        if local is not None:
            return local
        child = await path[-1].walk(name)
        if child is None:
            raise NotFound(f"{name}: file does not exist")
        return (*path, child)

    def _step_now(self, path: tuple[Node, ...], name: str) -> tuple[Node, ...] | Later:
        local = self._step_local(path, name)
        if local is not None:
            return local
        child = path[-1].walk_now(name)
        if child is LATER:
            return LATER
        if child is None:
            raise NotFound(f"{name}: file does not exist")
        return (*path, child)

    @staticmethod
    def _step_local(path: tuple[Node, ...], name: str) -> tuple[Node, ...] | None:
        """The checks of a walk step and `.`/`..`; None when the node must be asked."""
        st = path[-1].stat()
        if not st.is_dir:
            raise NotADirectory(f"cannot walk to {name!r}: {st.name} is not a directory")
        if name == "..":
            return path[:-1] if len(path) > 1 else path
        if name == ".":
            return path
        if not name or "/" in name:
            raise NotFound(f"invalid file name {name!r}")
        return None

    # --- open and create ----------------------------------------------------------------------

    async def _open_fid(self, entry: _Fid, mode: OpenMode, rclose: bool = False) -> m.Qid:
        st = self._open_check(entry, mode)
        entry.opening = True
        try:
            handle = None if st.is_dir else await entry.node.open(mode)
        finally:
            entry.opening = False
        if self.fids.get(entry.number) is not entry:
            # Clunked (or reset) while the node was opening: release what we got.
            if handle is not None:
                await handle.abort()
            raise BadFid("the fid was clunked while it was being opened")
        return self._opened(entry, mode, handle, rclose)

    def _open_now(self, entry: _Fid, mode: OpenMode, rclose: bool) -> m.Qid | Later:
        """`_open_fid` without waiting, or LATER (nothing changed) if the node cannot."""
        st = self._open_check(entry, mode)
        handle = None if st.is_dir else entry.node.open_now(mode)
        if handle is LATER:
            return LATER
        return self._opened(entry, mode, handle, rclose)

    @staticmethod
    def _open_check(entry: _Fid, mode: OpenMode) -> NodeStat:
        if entry.is_open or entry.opening:
            raise Busy("the fid is already open; walk a new fid to open again")
        st = entry.node.stat()
        if st.is_dir:
            if mode.write or mode.truncate:
                raise IsADirectory(f"{st.name} is a directory; open it for reading only")
        else:
            if mode.read and not st.mode & 0o444:
                raise AccessDenied(f"{st.name}: permission denied: the file is not readable")
            if (mode.write or mode.truncate) and not st.mode & 0o222:
                raise AccessDenied(f"{st.name}: permission denied: the file is read-only")
        return st

    def _opened(self, entry: _Fid, mode: OpenMode, handle: Handle | None, rclose: bool) -> m.Qid:
        entry.open_mode = mode
        entry.handle = handle
        entry.remove_on_close = rclose
        if handle is not None:
            self.server._open_handles += 1
        return entry.node.stat().qid

    async def _open(self, msg: m.Topen) -> m.Message:
        return m.Ropen(msg.tag, await self._open_qid(self._fid(msg.fid), msg.mode), self._iounit())

    async def _open_qid(self, entry: _Fid, mode_byte: int) -> m.Qid:
        mode = self._omode(entry, mode_byte)
        return await self._open_fid(entry, mode, rclose=bool(mode_byte & ORCLOSE))

    @staticmethod
    def _omode(entry: _Fid, mode_byte: int) -> OpenMode:
        access = mode_byte & 3
        if mode_byte & ~(3 | OTRUNC | OCEXEC | ORCLOSE):
            raise InvalidInput(f"bad open mode {mode_byte:#x} (open(5))")
        mode = _open_mode(
            access in (OREAD, ORDWR, OEXEC), access in (OWRITE, ORDWR), bool(mode_byte & OTRUNC)
        )
        if access == OEXEC and not entry.node.stat().mode & 0o111:
            raise AccessDenied(f"{entry.node.stat().name}: permission denied: not executable")
        return mode

    @staticmethod
    def _lmode(flags: int) -> OpenMode:
        access = flags & L_O_ACCMODE
        if access not in (L_O_RDONLY, L_O_WRONLY, L_O_RDWR):
            raise InvalidInput(f"bad open flags {flags:#o}")
        return _open_mode(
            access in (L_O_RDONLY, L_O_RDWR),
            access in (L_O_WRONLY, L_O_RDWR),
            bool(flags & L_O_TRUNC),
            bool(flags & L_O_APPEND),
        )

    async def _lopen(self, msg: m.Tlopen) -> m.Message:
        qid = await self._lopen_qid(self._fid(msg.fid), msg.flags)
        return m.Rlopen(msg.tag, qid, self._iounit())

    async def _lopen_qid(self, entry: _Fid, flags: int) -> m.Qid:
        return await self._open_fid(entry, self._lopen_mode(entry, flags))

    def _lopen_mode(self, entry: _Fid, flags: int) -> OpenMode:
        if flags & L_O_DIRECTORY and not entry.node.stat().is_dir:
            raise NotADirectory(f"{entry.node.stat().name} is not a directory")
        return self._lmode(flags)

    async def _create_child(self, entry: _Fid, name: str, perm: int) -> Node:
        _check_name(name)
        st = entry.node.stat()
        if not st.is_dir:
            raise NotADirectory(f"cannot create {name!r}: {st.name} is not a directory")
        if await entry.node.walk(name) is not None:
            raise AlreadyExists(f"{name}: file already exists")
        return await entry.node.create(name, perm)

    async def _create(self, msg: m.Tcreate) -> m.Message:
        entry = self._fid(msg.fid)
        if entry.is_open:
            raise Busy("cannot create from an open fid (open(5))")
        if msg.mode & ~(3 | OTRUNC | OCEXEC | ORCLOSE):
            raise InvalidInput(f"bad open mode {msg.mode:#x} (open(5))")
        child = await self._create_child(entry, msg.name, msg.perm)
        # open(5): the fid now represents the new file, opened with mode.
        entry.path = (*entry.path, child)
        access = msg.mode & 3
        mode = OpenMode(
            read=access in (OREAD, ORDWR, OEXEC),
            write=access in (OWRITE, ORDWR),
            truncate=bool(msg.mode & OTRUNC),
        )
        qid = await self._open_fid(entry, mode, rclose=bool(msg.mode & ORCLOSE))
        return m.Rcreate(msg.tag, qid, self._iounit())

    async def _lcreate(self, msg: m.Tlcreate) -> m.Message:
        entry = self._fid(msg.fid)
        if entry.is_open:
            raise Busy("cannot create from an open fid")
        mode = self._lmode(msg.flags)
        child = await self._create_child(entry, msg.name, msg.mode & 0o777)
        entry.path = (*entry.path, child)
        qid = await self._open_fid(entry, mode)
        return m.Rlcreate(msg.tag, qid, self._iounit())

    async def _mkdir(self, msg: m.Tmkdir) -> m.Message:
        entry = self._fid(msg.dfid)
        child = await self._create_child(entry, msg.name, DMDIR | (msg.mode & 0o777))
        return m.Rmkdir(msg.tag, child.stat().qid)

    # --- read and write -----------------------------------------------------------------------

    async def _read(self, msg: m.Tread) -> m.Message:
        entry = self._fid(msg.fid)
        if entry.open_mode is None or not entry.open_mode.read:
            raise BadFid(f"fid {msg.fid} is not open for reading")
        count = min(msg.count, self._iounit())  # read(5) allows fewer bytes; lib9p clamps too
        if entry.handle is None:
            if self.dialect is Dialect.P9P2000_L:
                raise IsADirectory("use Treaddir to read a directory in 9P2000.L")
            return m.Rread(msg.tag, await self._read_dir(entry, msg.offset, count))
        data = await entry.handle.read(msg.offset, count)
        if len(data) > count:
            log.error(
                "9p %s: %r returned %d bytes for a read of %d",
                self.peer,
                entry.handle,
                len(data),
                count,
            )
            raise _internal_error()
        return m.Rread(msg.tag, bytes(data))

    async def _snapshot(self, node: Node) -> Sequence[Node]:
        return await node.list()

    async def _read_dir(self, entry: _Fid, offset: int, count: int) -> bytes:
        # read(5): a directory read returns whole stat entries; the offset must be 0 (restart,
        # with a fresh listing) or the offset where the previous read ended.
        assert self.dialect is not None
        if offset == 0:
            children = await self._snapshot(entry.node)
            entry.dir_entries = [
                m.encode_stat(self._to_stat(c.stat()), self.dialect) for c in children
            ]
            entry.dir_index = 0
            entry.dir_offset = 0
        elif entry.dir_entries is None or offset != entry.dir_offset:
            raise InvalidInput(
                f"bad offset {offset} in a directory read: read from 0, or continue at the "
                f"end of the previous read ({entry.dir_offset})"
            )
        entries = entry.dir_entries
        assert entries is not None
        out = bytearray()
        i = entry.dir_index
        while i < len(entries) and len(out) + len(entries[i]) <= count:
            out += entries[i]
            i += 1
        if not out and i < len(entries):
            raise InvalidInput(
                f"read count {count} is too small for the next directory entry "
                f"({len(entries[i])} bytes)"
            )
        entry.dir_index = i
        entry.dir_offset += len(out)
        return bytes(out)

    async def _readdir(self, msg: m.Treaddir) -> m.Message:
        entry = self._fid(msg.fid)
        st = entry.node.stat()
        if not st.is_dir:
            raise NotADirectory(f"{st.name} is not a directory")
        if entry.open_mode is None:
            raise BadFid(f"fid {msg.fid} is not open; Tlopen it first")
        count = min(msg.count, self._iounit())
        # The offset of an entry is its index + 1 in the listing taken at offset 0, so a
        # reader resumes exactly where it stopped (9P2000.L readdir).
        if msg.offset == 0 or entry.readdir_entries is None:
            parent = entry.path[-2] if len(entry.path) > 1 else entry.node
            listing = [(st.qid, DT_DIR, "."), (parent.stat().qid, DT_DIR, "..")]
            for child in await self._snapshot(entry.node):
                cst = child.stat()
                listing.append((cst.qid, DT_DIR if cst.is_dir else DT_REG, cst.name))
            entry.readdir_entries = listing
        entries = entry.readdir_entries
        out = bytearray()
        i = msg.offset
        while i < len(entries):
            qid, dtype, name = entries[i]
            encoded = m.encode_dirent(m.Dirent(qid, i + 1, dtype, name))
            if len(out) + len(encoded) > count:
                if not out:
                    raise InvalidInput(f"readdir count {count} is too small for the next entry")
                break
            out += encoded
            i += 1
        return m.Rreaddir(msg.tag, bytes(out))

    async def _write(self, msg: m.Twrite) -> m.Message:
        entry = self._fid(msg.fid)
        if entry.open_mode is None or not entry.open_mode.write or entry.handle is None:
            raise BadFid(f"fid {msg.fid} is not open for writing")
        n = await entry.handle.write(msg.offset, msg.data)
        if msg.data and n == 0:
            # plan9port's `9p` resends forever after Rwrite count=0; never answer that.
            raise FsError(f"{entry.node.stat().name}: the write was not accepted")
        if not 0 <= n <= len(msg.data):
            log.error("9p %s: %r took %d of %d bytes", self.peer, entry.handle, n, len(msg.data))
            raise _internal_error()
        return m.Rwrite(msg.tag, n)

    # --- clunk and remove ---------------------------------------------------------------------

    async def _release(self, fid: int) -> _Fid:
        entry = self._fid(fid)
        self._forget_fid(fid)
        if entry.handle is not None and not entry.handle.clunk_blocks:
            await entry.handle.clunk()  # answered inline: nothing can cancel it
        elif entry.handle is not None:
            # Shielded: a clunk that commits a body must finish even if the Tclunk is flushed.
            with trio.CancelScope(shield=True):
                with trio.move_on_after(self.server.clunk_timeout) as scope:
                    await entry.handle.clunk()
                if scope.cancelled_caught:
                    raise TimedOut("the file did not finish closing in time")
        return entry

    async def _clunk(self, msg: m.Tclunk) -> m.Message:
        entry = await self._release(msg.fid)
        if entry.remove_on_close:
            await entry.node.remove()
        return m.Rclunk(msg.tag)

    async def _remove(self, msg: m.Tremove) -> m.Message:
        # remove(5): the fid is clunked even if the remove fails.
        entry = self._fid(msg.fid)
        try:
            await self._release(msg.fid)
        finally:
            await entry.node.remove()
        return m.Rremove(msg.tag)

    async def _unlinkat(self, msg: m.Tunlinkat) -> m.Message:
        entry = self._fid(msg.dirfd)
        _check_name(msg.name)
        path = await self._step(entry.path, msg.name)
        node = path[-1]
        # unlinkat(2): AT_REMOVEDIR removes a directory and only a directory; without it, a
        # directory is refused (a raw client's unlink never reaches a directory's remove).
        is_dir = node.stat().is_dir
        if msg.flags & AT_REMOVEDIR and not is_dir:
            raise NotADirectory(f"{msg.name} is not a directory (unlinkat with AT_REMOVEDIR)")
        if is_dir and not msg.flags & AT_REMOVEDIR:
            raise IsADirectory(f"{msg.name} is a directory: remove it with AT_REMOVEDIR")
        await node.remove()
        return m.Runlinkat(msg.tag)

    # --- stat, wstat, getattr, setattr, statfs --------------------------------------------------

    async def _stat(self, msg: m.Tstat) -> m.Message:
        entry = self._fid(msg.fid)
        return m.Rstat(msg.tag, self._to_stat(entry.node.stat()))

    async def _apply(self, node: Node, change: StatChange) -> None:
        if change.is_noop():
            return  # stat(5): all "don't touch" is a sync request; nothing to do
        await node.wstat(change)

    async def _wstat(self, msg: m.Twstat) -> m.Message:
        entry = self._fid(msg.fid)
        s = msg.stat
        st = entry.node.stat()
        mode = None if s.mode == 0xFFFFFFFF else s.mode
        if mode is not None and (mode & DMDIR) != (st.mode & DMDIR):
            raise InvalidInput("wstat cannot change whether a file is a directory (stat(5))")
        change = StatChange(
            name=s.name or None if s.name != st.name else None,
            mode=None if mode is None or mode == st.mode else mode,
            length=None if s.length == 0xFFFFFFFFFFFFFFFF else s.length,
            mtime_ns=None if s.mtime == 0xFFFFFFFF else s.mtime * 1_000_000_000,
            atime_ns=None if s.atime == 0xFFFFFFFF else s.atime * 1_000_000_000,
            gid=s.gid or None,
            uid=s.uid or None,
        )
        if change.name is not None:
            _check_name(change.name)
        await self._apply(entry.node, change)
        return m.Rwstat(msg.tag)

    async def _getattr(self, msg: m.Tgetattr) -> m.Message:
        entry = self._fid(msg.fid)
        st = entry.node.stat()
        mtime = st.mtime_ns
        atime = st.atime_ns if st.atime_ns is not None else mtime
        size = 0 if st.is_dir else st.length
        return m.Rgetattr(
            tag=msg.tag,
            valid=GETATTR_BASIC,
            qid=st.qid,
            mode=(S_IFDIR if st.is_dir else S_IFREG) | (st.mode & 0o7777),
            uid=self.server.uid if st.uid is None else st.uid,
            gid=self.server.gid if st.gid is None else st.gid,
            nlink=2 if st.is_dir else 1,
            rdev=0,
            size=size,
            blksize=4096,
            blocks=math.ceil(size / 512),
            atime_sec=atime // 1_000_000_000,
            atime_nsec=atime % 1_000_000_000,
            mtime_sec=mtime // 1_000_000_000,
            mtime_nsec=mtime % 1_000_000_000,
            ctime_sec=mtime // 1_000_000_000,
            ctime_nsec=mtime % 1_000_000_000,
            btime_sec=0,
            btime_nsec=0,
            gen=0,
            data_version=0,
        )

    async def _setattr(self, msg: m.Tsetattr) -> m.Message:
        entry = self._fid(msg.fid)
        v = msg.valid
        # Times set to "now" (ATIME/MTIME without *_SET) are touches: v9fs sends them with every
        # truncating open and with touch(1). Synthetic files keep their own times, so a touch is
        # accepted and ignored; explicit times go to the node.
        change = StatChange(
            mode=msg.mode & 0o7777 if v & SETATTR_MODE else None,
            uid=msg.uid if v & SETATTR_UID else None,
            gid=msg.gid if v & SETATTR_GID else None,
            length=msg.size if v & SETATTR_SIZE else None,
            atime_ns=msg.atime_sec * 1_000_000_000 + msg.atime_nsec
            if v & SETATTR_ATIME and v & SETATTR_ATIME_SET
            else None,
            mtime_ns=msg.mtime_sec * 1_000_000_000 + msg.mtime_nsec
            if v & SETATTR_MTIME and v & SETATTR_MTIME_SET
            else None,
        )
        await self._apply(entry.node, change)
        return m.Rsetattr(msg.tag)

    async def _statfs(self, msg: m.Tstatfs) -> m.Message:
        self._fid(msg.fid)
        return m.Rstatfs(msg.tag, V9FS_MAGIC, 4096, 0, 0, 0, 0, 0, 0, 255)

    # --- the rest of 9P2000.L ------------------------------------------------------------------

    async def _refuse_link(self, msg: m.Message) -> m.Message:
        raise NotPermitted(_EPERM_LINKS)

    async def _readlink(self, msg: m.Treadlink) -> m.Message:
        entry = self._fid(msg.fid)
        raise InvalidInput(f"{entry.node.stat().name} is not a symbolic link")

    async def _xattr(self, msg: m.Txattrwalk | m.Txattrcreate) -> m.Message:
        self._fid(msg.fid)
        raise NotSupported("extended attributes are not supported")

    async def _rename(self, msg: m.Trename) -> m.Message:
        entry = self._fid(msg.fid)
        target = self._fid(msg.dfid)
        if len(entry.path) < 2 or entry.path[-2] is not target.node:
            raise CrossDirectory("files can only be renamed within their directory")
        _check_name(msg.name)
        await self._apply(entry.node, StatChange(name=msg.name))
        return m.Rrename(msg.tag)

    async def _renameat(self, msg: m.Trenameat) -> m.Message:
        old = self._fid(msg.olddirfid)
        new = self._fid(msg.newdirfid)
        if old.node is not new.node:
            raise CrossDirectory("files can only be renamed within their directory")
        _check_name(msg.oldname)
        _check_name(msg.newname)
        path = await self._step(old.path, msg.oldname)
        await self._apply(path[-1], StatChange(name=msg.newname))
        return m.Rrenameat(msg.tag)

    async def _fsync(self, msg: m.Tfsync) -> m.Message:
        self._fid(msg.fid)
        return m.Rfsync(msg.tag)

    async def _lock(self, msg: m.Tlock) -> m.Message:
        # Advisory locks between clients of one synthetic tree are meaningless; grant them.
        self._fid(msg.fid)
        return m.Rlock(msg.tag, LOCK_SUCCESS)

    async def _getlock(self, msg: m.Tgetlock) -> m.Message:
        self._fid(msg.fid)
        return m.Rgetlock(
            msg.tag, LOCK_TYPE_UNLCK, msg.start, msg.length, msg.proc_id, msg.client_id
        )


def _internal_error() -> FsError:
    return FsError("internal error in the file server (see the daemon log)")
