"""The trio 9P server: `Server.serve(stream)` serves one 9P2000/.u/.L connection until it ends.

A connection owns a fid table, a tag table (the requests running in tasks, and parked reads) and
a queue of reply frames, sent in order by one task at a time. Every request goes through one
table, `_OPS` (message class -> `_Op`), and one decision (`_Connection._try_now`): the op's `now`
answers at once, or returns INLINE (`later` is awaited in the receive loop), TASK (`later` runs in
a task whose cancel scope Tflush cancels) or PARKED (a Tread waiting on a handle that calls back
when readable: no task; the run's one `_Answerer` task replies). A `now` that defers has changed
nothing, so the shared poller (`anvild.ninep.transport.Poller`) calls it from outside the
connection's task and hands deferred frames back in order. Twalk, Topen/Tlopen, Tread and Tclunk
are unpacked from the frame's bytes and answered packed (`_hot_table`); the rest via the codec.
Invariants: a request's tag is freed before its reply is queued; an inline request is answered
before the next frame is decoded; fids, open modes, offsets and counts are checked before a node
is called; a node's non-`FsError` exception is logged and answered EIO, and the connection goes on.
"""

from __future__ import annotations

import contextlib
import enum
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
# Frames of one received batch answered before the receive loop yields to other tasks.
_FAIRNESS_FRAMES = 128
_SIZE = struct.Struct("<I")

# --- frames without the codec (the hot table's requests and their replies) ---------------------

Unpack: TypeAlias = Callable[[bytes], "tuple[Any, ...] | None"]


def _fixed(body: str) -> Unpack:
    """An unpacker of a fixed-layout request: its body fields after size[4] type[1], tag first,
    or None when the frame's length is not the layout's (the codec then says what is wrong)."""
    layout = struct.Struct("<" + body)
    size = 5 + layout.size
    unpack_from = layout.unpack_from

    def unpack(frame: bytes) -> tuple[Any, ...] | None:
        return unpack_from(frame, 5) if len(frame) == size else None

    return unpack


_TWALK = struct.Struct("<IBHIIH")


def _twalk_fields(frame: bytes) -> tuple[int, int, int, list[str]] | None:
    """A Twalk's tag, fid, newfid and names, or None when the frame is not a well-formed walk
    of at most MAXWELEM names (the codec then says what is wrong)."""
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


_RWALK = struct.Struct("<IBHH")
_QID = struct.Struct("<BIQ")
_ROPEN = struct.Struct("<IBHBIQI")  # Ropen and Rlopen: qid[13] iounit[4]
_RREAD = struct.Struct("<IBHI")
_RCLUNK = struct.Struct("<IBH")

Reply: TypeAlias = "m.Message | bytes"  # bytes: a reply frame its handler packed itself


def _rwalk(tag: int, qids: Sequence[m.Qid]) -> Reply:
    try:
        return _RWALK.pack(_RWALK.size + 13 * len(qids), m.Rwalk.TYPE, tag, len(qids)) + b"".join(
            [_QID.pack(q.type, q.version, q.path) for q in qids]
        )
    except struct.error:
        return m.Rwalk(tag, tuple(qids))  # out-of-range qid fields: the codec says what


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


class _ParkedRead:
    """A Tread waiting, with no task, for its handle to call `wake` (`Handle.notify_readable`).
    It holds its tag until the `_Answerer` answers it, or a Tflush, a Tversion or the
    connection's end cancels it (then its reply is never sent)."""

    __slots__ = ("conn", "count", "handle", "tag")

    def __init__(self, conn: _Connection, tag: int, handle: Handle, count: int) -> None:
        self.conn, self.tag, self.handle, self.count = conn, tag, handle, count

    def wake(self) -> None:
        _Answerer.of_run().woken(self)

    def cancel(self) -> None:
        """Forget this read: no reply; the handle forgets its wake-up."""
        if self.conn.tags.get(self.tag) is self:
            self.leave()
            self.handle.notify_readable(None)

    def leave(self) -> None:
        """Give the tag back (answered or cancelled)."""
        conn = self.conn
        del conn.tags[self.tag]
        conn.server._requests -= 1
        _Answerer.of_run().parked -= 1


_ANSWERER: trio.lowlevel.RunVar[_Answerer] = trio.lowlevel.RunVar("anvild.ninep.answerer")


class _Answerer:
    """The run's one task that answers woken `_ParkedRead`s: the wakes of one scheduling batch
    (every stream line published meanwhile, of every session) cost one task switch, and each
    run of one connection's reads in the batch one send, made as soon as the run is answered.
    The task exists only while a connection that parked a read is open, or a read is parked
    or woken."""

    def __init__(self) -> None:
        self.parked = 0  # parked reads of every connection of the run
        self.users = 0  # open connections that have parked a read
        self._woken: list[_ParkedRead] = []
        self._running = False
        self._task: trio.lowlevel.Task | None = None  # set while the task sleeps

    @staticmethod
    def of_run() -> _Answerer:
        try:
            return _ANSWERER.get()
        except LookupError:
            answerer = _Answerer()
            _ANSWERER.set(answerer)
            return answerer

    def detach(self) -> None:
        """A connection that parked reads ended: the task may end with the last one."""
        self.users -= 1
        if not self.users and not self.parked and (task := self._task) is not None:
            self._task = None
            trio.lowlevel.reschedule(task)  # it finds nothing to do and ends

    def woken(self, read: _ParkedRead) -> None:
        self._woken.append(read)
        if (task := self._task) is not None:
            self._task = None
            trio.lowlevel.reschedule(task)
        elif not self._running:
            self._running = True
            trio.lowlevel.spawn_system_task(self._run, name="anvild.ninep.answerer")

    async def _run(self) -> None:
        while True:
            if not self._woken:
                if not self.parked and not self.users:  # end; a wake starts a new one
                    self._running = False
                    return
                self._task = trio.lowlevel.current_task()

                def abort(_: Any) -> trio.lowlevel.Abort:
                    self._task = None
                    return trio.lowlevel.Abort.SUCCEEDED

                await trio.lowlevel.wait_task_rescheduled(abort)
            batch, self._woken = self._woken, []
            last, due = len(batch) - 1, False
            for index, read in enumerate(batch):
                conn = read.conn
                try:
                    due = conn._answer_parked(read) or due
                except Exception:  # a bug: this task must not end, or no parked read is answered
                    log.exception("9p %s: internal error answering a parked read", conn.peer)
                # One send for a run of one connection's reads, made as soon as the run is
                # answered: a reply never waits for the rest of the batch's answers.
                if index == last or batch[index + 1].conn is not conn:
                    if due:
                        try:
                            conn._send_nowait()
                        except Exception:
                            log.exception("9p %s: internal error sending parked replies", conn.peer)
                    due = False


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


class _Defer(enum.Enum):
    """A `now` handler's answer when it cannot reply without waiting; it has changed nothing."""

    INLINE = "await the op's `later` in the receive loop: it never waits for another request"
    TASK = "run the op's `later` in a task of its own, with a cancel scope Tflush can cancel"
    PARKED = "nothing to run: the request waits in the tag table and is answered when woken"


INLINE = _Defer.INLINE
TASK = _Defer.TASK
PARKED = _Defer.PARKED


def _whole(msg: m.Message) -> tuple[Any, ...]:
    return (msg,)


@attrs.frozen
class _Op:
    """How one request type is answered (see the module docstring).

    ``now(conn, *args)`` returns the reply or a `_Defer`; ``later(conn, *args)`` is its async
    form. ``args`` makes the handlers' arguments from a decoded message; ``unpack``, for the
    hot table, makes the same arguments (tag first) from the frame's bytes.
    """

    name: str
    now: Callable[..., Reply | _Defer]
    later: Callable[..., Awaitable[Reply]] | None = None
    args: Callable[[Any], tuple[Any, ...]] = _whole
    unpack: Unpack | None = None


def _in_task(conn: _Connection, msg: m.Message) -> _Defer:
    return TASK


def _inline(conn: _Connection, msg: m.Message) -> _Defer:
    return INLINE


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
        self.tags: dict[int, _Request | _ParkedRead] = {}
        self.nursery: trio.Nursery | None = None
        # Cancels the connection unless the handshake ends in time (see `Server.serve`).
        self._handshake: trio.CancelScope | None = None
        # Reply frames waiting to be sent, in order; one task at a time sends them.
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._sending = False
        self._drained: trio.Event | None = None
        # Type byte -> (op, unpack) of the negotiated dialect's hot requests (set by Tversion).
        self._hot: dict[int, tuple[_Op, Unpack]] = {}
        self._max_outstanding = server.max_outstanding
        self._ended = False  # parked reads are no longer answered
        self._answered = False  # a read of this connection parked: the answerer counts it

    @property
    def parkable(self) -> bool:
        """The shared poller may serve this connection once its dialect is negotiated."""
        return self.dialect is not None

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
            self._ended = True
            self._cancel_parked()
            if self._answered:
                _Answerer.of_run().detach()
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
            try:
                if (
                    type(data) is bytes
                    and not reader.buffered
                    and _HEADER_SIZE <= len(data) == _SIZE.unpack_from(data)[0] <= reader.max_size
                ):
                    # Exactly one whole frame (one request outstanding: the usual case): no
                    # copy through the frame reader.
                    hot = self._hot.get(data[4])
                    if hot is None or (args := hot[1](data)) is None:
                        await self._dispatch(data)
                    elif (defer := self._try_now(args[0], hot[0], args)) is not None:
                        await self._later(args[0], hot[0], args, defer)
                else:
                    reader.feed(data)
                    frames = 0
                    while (frame := reader.next_frame()) is not None:
                        hot = self._hot.get(frame[4])
                        if hot is None or (args := hot[1](frame)) is None:
                            await self._dispatch(frame)
                        elif (defer := self._try_now(args[0], hot[0], args)) is not None:
                            await self._later(args[0], hot[0], args, defer)
                        frames += 1
                        if self._out_bytes >= _SEND_AT:
                            await self._send_queued(wait=True)
                        elif frames % _FAIRNESS_FRAMES == 0:
                            # 64 KiB of tiny inline requests must not stall other connections.
                            await trio.lowlevel.checkpoint()
            except ProtocolError as exc:
                log.warning("9p %s: closing the connection: %s", self.peer, exc)
                await self._send_queued(wait=True)
                return
            # One send for every reply this batch produced, and wait until the peer takes them
            # before reading more (backpressure: a client that never reads cannot make us
            # buffer without bound).
            await self._send_queued(wait=True)

    # --- dispatch: one table, one decision -------------------------------------------------------

    async def _dispatch(self, frame: bytes) -> None:
        """A frame through the codec: every request not in the hot table, and any frame the hot
        table's unpacker declines (the codec then names what is wrong)."""
        try:
            msg = m.decode(frame, self.dialect or Dialect.P9P2000)
        except UnknownMessageError as exc:
            self._fail(exc.tag, str(exc), NotSupported)
            return
        if type(msg) is m.Tversion:
            await self._version(msg)
            return
        tag = msg.tag
        if self.dialect is None:
            self._fail(tag, "the first message must be Tversion", NotInProtocol)
            return
        op = _OPS.get(type(msg))
        if op is None:
            name = type(msg).__name__
            self._fail(tag, f"{name} is a reply; a client sends T-messages", NotInProtocol)
            return
        args = op.args(msg)
        defer = self._try_now(tag, op, args)
        if defer is not None:
            await self._later(tag, op, args, defer)

    def _try_now(self, tag: int, op: _Op, args: tuple[Any, ...]) -> _Defer | None:
        """A request up to where it would wait: its tag is refused, or ``op.now`` answers it
        (the reply is queued: None), or says how ``op.later`` must run (nothing has changed).
        Plain code, no checkpoint: the poller calls it from outside the connection's task."""
        tags = self.tags
        unusual = tag in tags or tag == NOTAG or len(tags) >= self._max_outstanding
        if unusual and self._refused(tag, op):
            return None
        try:
            reply = op.now(self, *args)
        except Exception as exc:
            self._put_error(op.name, tag, exc)
            return None
        if type(reply) is bytes:  # packed by its handler: fits msize by construction
            self._out.append(reply)
            self._out_bytes += len(reply)
            return None
        if isinstance(reply, _Defer):
            return None if reply is PARKED else reply
        self._put_reply(reply)
        return None

    def _refused(self, tag: int, op: _Op) -> bool:
        """Refuse a request whose tag is in use, or one over the outstanding-request limit."""
        tags = self.tags
        if tag in tags or tag == NOTAG:
            self._fail(tag, f"tag {tag} is already in use by an outstanding request", TagInUse)
            return True
        limit = self._max_outstanding
        # A client at the limit must still be able to flush (the refusal tells it to): Tflush
        # has a reserve of its own, so the task count stays bounded.
        if op.name != "Tflush" or len(tags) >= 2 * limit:
            self._fail(
                tag,
                f"too many outstanding requests on this connection (limit {limit}, "
                "max_outstanding); wait for replies or flush some",
                TryAgain,
            )
            return True
        return False

    async def _later(self, tag: int, op: _Op, args: tuple[Any, ...], defer: _Defer) -> None:
        """What `_try_now` deferred: await ``op.later`` in the receive loop, or start its task."""
        later = op.later
        assert later is not None, f"{op.name}: a `now` that defers needs a `later`"
        if defer is INLINE:
            try:
                reply = await later(self, *args)
            except Exception as exc:
                self._put_error(op.name, tag, exc)
                return
            self._put_reply(reply)
            return
        req = _Request(tag)
        self.tags[tag] = req
        self.server._requests += 1
        assert self.nursery is not None
        self.nursery.start_soon(self._run_request, req, op.name, later, args)

    async def _run_request(
        self,
        req: _Request,
        name: str,
        later: Callable[..., Awaitable[Reply]],
        args: tuple[Any, ...],
    ) -> None:
        try:
            reply: Reply | None = None
            with req.scope:
                try:
                    reply = await later(self, *args)
                except Exception as exc:
                    reply = self._error_for(name, req.tag, exc)
            # A flushed request's reply is never sent (flush(5)).
            if reply is not None and not req.scope.cancelled_caught:
                self._put_reply(reply, req)
                await self._send_queued()
        finally:
            if self.tags.get(req.tag) is req:
                del self.tags[req.tag]
            self.server._requests -= 1
            req.done.set()

    def _hot_table(self, dialect: Dialect | None) -> dict[int, tuple[_Op, Unpack]]:
        """The requests of this dialect that are unpacked from the frame without the codec."""
        return {} if dialect is None else _HOT[dialect]

    # --- the poller's part ---------------------------------------------------------------------

    def serve_now(self, data: bytes, sock: socket.socket) -> tuple[bool, bytes | None]:
        """Answer the frames in ``data`` and send the replies without waiting (see
        `anvild.ninep.transport.Poller`). Returns (True, None) when all is done and the
        connection stays with the poller; else (False, what the connection's task must process:
        the first frame not answered and everything after it, or None when only replies are
        left to send)."""
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
        """Answer one hot-table request frame without waiting, or return False having changed
        nothing (its op defers, or the frame needs the codec)."""
        hot = self._hot.get(frame[4])
        if hot is None:
            return False
        args = hot[1](frame)
        return args is not None and self._try_now(args[0], hot[0], args) is None

    # --- sending --------------------------------------------------------------------------------

    def _queue(self, msg: m.Message, req: _Request | None = None) -> None:
        """Encode a reply and queue it; `_send_queued` sends it."""
        assert self.dialect is not None or isinstance(msg, m.Rerror | m.Rversion)
        dialect = self.dialect or Dialect.P9P2000
        # Every error reply, whoever answers the request, is bounded here.
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

    def _put_reply(self, reply: Reply, req: _Request | None = None) -> None:
        if type(reply) is bytes:  # packed by its handler: fits msize by construction
            if req is not None and self.tags.get(req.tag) is req:
                del self.tags[req.tag]
            self._out.append(reply)
            self._out_bytes += len(reply)
        else:
            assert isinstance(reply, m.Message)
            self._queue(reply, req)

    def _error_for(self, name: str, tag: int, exc: Exception) -> m.Message:
        """The reply to a request whose handler raised ``exc`` (call it in the except block)."""
        if isinstance(exc, FsError):
            return self._error_reply(tag, exc)
        log.exception("9p %s: internal error handling %s (tag %d)", self.peer, name, tag)
        return self._error_reply(tag, _internal_error())

    def _put_error(self, name: str, tag: int, exc: Exception) -> None:
        self._queue(self._error_for(name, tag, exc))

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
        self._cancel_parked()
        pending = [req for req in self.tags.values() if isinstance(req, _Request)]
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
        if isinstance(old, _ParkedRead):
            old.cancel()
        elif old is not None and old.tag != msg.tag:
            old.scope.cancel()
            # The flushed request's reply (if it already took effect) goes out before Rflush.
            # Not shielded: two Tflushes naming each other must not wait on each other forever.
            await old.done.wait()
        return m.Rflush(msg.tag)

    def _auth(self, msg: m.Tauth) -> m.Message:
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

    def _walk(self, tag: int, fid: int, newfid: int, names: Sequence[str]) -> Reply | _Defer:
        qids = self._walk_now(fid, newfid, names)
        if qids is LATER:
            return INLINE  # `Node.walk` is a lookup: it never waits for another request
        return _rwalk(tag, qids)

    async def _walk_later(self, tag: int, fid: int, newfid: int, names: Sequence[str]) -> Reply:
        return _rwalk(tag, await self._walk_qids(fid, newfid, names))

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

    def _open(self, tag: int, fid: int, mode_byte: int) -> Reply | _Defer:
        entry = self._fid(fid)
        qid = self._open_now(entry, self._omode(entry, mode_byte), bool(mode_byte & ORCLOSE))
        if qid is LATER:
            return TASK if entry.node.open_blocks else INLINE
        return self._ropen(m.Ropen, tag, qid)

    async def _open_later(self, tag: int, fid: int, mode_byte: int) -> Reply:
        return self._ropen(m.Ropen, tag, await self._open_qid(self._fid(fid), mode_byte))

    def _ropen(self, cls: type[m.Ropen | m.Rlopen], tag: int, qid: m.Qid) -> Reply:
        iounit = self.msize - IOHDRSZ
        try:
            return _ROPEN.pack(_ROPEN.size, cls.TYPE, tag, qid.type, qid.version, qid.path, iounit)
        except struct.error:
            return cls(tag, qid, iounit)  # out-of-range qid fields: the codec says what

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

    def _lopen(self, tag: int, fid: int, flags: int) -> Reply | _Defer:
        entry = self._fid(fid)
        qid = self._open_now(entry, self._lopen_mode(entry, flags), False)
        if qid is LATER:
            return TASK if entry.node.open_blocks else INLINE
        return self._ropen(m.Rlopen, tag, qid)

    async def _lopen_later(self, tag: int, fid: int, flags: int) -> Reply:
        entry = self._fid(fid)
        return self._ropen(
            m.Rlopen, tag, await self._open_fid(entry, self._lopen_mode(entry, flags))
        )

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

    def _read(self, tag: int, fid: int, offset: int, count: int) -> Reply | _Defer:
        entry = self._readable(fid)
        handle = entry.handle
        if handle is None:
            return INLINE  # a directory: read from `Node.list()`, a lookup
        count = min(count, self.msize - IOHDRSZ)
        data = handle.read_now(offset, count)
        if data is LATER:
            if not handle.read_blocks:
                return INLINE
            parked = _ParkedRead(self, tag, handle, count)
            if not handle.notify_readable(parked.wake):
                return TASK
            self.tags[tag] = parked
            self.server._requests += 1
            answerer = _Answerer.of_run()
            answerer.parked += 1
            if not self._answered:
                self._answered = True
                answerer.users += 1
            return PARKED
        return self._rread(tag, handle, data, count)

    def _answer_parked(self, read: _ParkedRead) -> bool:
        """Answer a woken parked read (the `_Answerer`); whether a reply was queued."""
        tag, handle = read.tag, read.handle
        if self._ended or self.tags.get(tag) is not read:
            return False  # flushed, reset, or the connection ended
        try:
            data = handle.read_now(0, read.count)
            if data is LATER:  # woken with nothing to read: wait again, else in a task
                if handle.notify_readable(read.wake):
                    return False
                read.leave()
                self._start_read_task(tag, handle, read.count)
                return False
            reply = self._rread(tag, handle, data, read.count)
        except Exception as exc:
            reply = self._error_for("Tread", tag, exc)
        if self.tags.get(tag) is read:
            read.leave()
        self._put_reply(reply)
        return True

    def _start_read_task(self, tag: int, handle: Handle, count: int) -> None:
        async def read() -> Reply:
            return self._rread(tag, handle, await handle.read(0, count), count)

        req = _Request(tag)
        assert self.nursery is not None
        self.nursery.start_soon(self._run_request, req, "Tread", lambda _conn: read(), ())
        self.tags[tag] = req  # before the task runs: `_run_request` frees it
        self.server._requests += 1

    def _send_nowait(self) -> None:
        """Send the queued replies without waiting when nobody is sending; what the socket
        does not take at once (or a transport that cannot try) goes to a sending task."""
        if self._sending or not self._out or self._ended:
            return
        sock = getattr(self.transport, "sock", None)
        if sock is not None:
            out = self._out[0] if len(self._out) == 1 else b"".join(self._out)
            self._out.clear()
            self._out_bytes = 0
            try:
                sent = sock.send(out)
            except OSError:  # BlockingIOError, or an error the sending task meets again
                sent = 0
            if sent == len(out):
                return
            self._out.append(out[sent:])
            self._out_bytes = len(out) - sent
        if self.nursery is not None:
            # A closed nursery (the connection is ending) refuses; its end drops these.
            with contextlib.suppress(RuntimeError):
                self.nursery.start_soon(self._send_queued)

    def _cancel_parked(self) -> None:
        for req in list(self.tags.values()):
            if isinstance(req, _ParkedRead):
                req.cancel()

    async def _read_later(self, tag: int, fid: int, offset: int, count: int) -> Reply:
        entry = self._readable(fid)
        count = min(count, self._iounit())  # read(5) allows fewer bytes; lib9p clamps too
        handle = entry.handle
        if handle is None:
            return m.Rread(tag, await self._read_dir(entry, offset, count))
        return self._rread(tag, handle, await handle.read(offset, count), count)

    def _readable(self, fid: int) -> _Fid:
        entry = self._fid(fid)
        if entry.open_mode is None or not entry.open_mode.read:
            raise BadFid(f"fid {fid} is not open for reading")
        if entry.handle is None and self.dialect is Dialect.P9P2000_L:
            raise IsADirectory("use Treaddir to read a directory in 9P2000.L")
        return entry

    def _rread(self, tag: int, handle: Handle, data: bytes, count: int) -> Reply:
        n = len(data)
        if n > count:
            log.error("9p %s: %r returned %d bytes for a read of %d", self.peer, handle, n, count)
            raise _internal_error()
        # bytes(): copies nothing when the node returned bytes, and refuses what is not bytes.
        return _RREAD.pack(_RREAD.size + n, m.Rread.TYPE, tag, n) + bytes(data)

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

    # The offset of an entry is its index + 1 in the listing taken at offset 0, so a reader
    # resumes exactly where it stopped (9P2000.L readdir).

    def _readdir(self, msg: m.Treaddir) -> Reply | _Defer:
        entry = self._readdir_fid(msg.fid)
        if msg.offset == 0 or entry.readdir_entries is None:
            return INLINE  # a new listing: `Node.list()`, a lookup
        return self._rreaddir(msg, entry.readdir_entries)

    async def _readdir_later(self, msg: m.Treaddir) -> Reply:
        entry = self._readdir_fid(msg.fid)
        if msg.offset == 0 or entry.readdir_entries is None:
            st = entry.node.stat()
            parent = entry.path[-2] if len(entry.path) > 1 else entry.node
            listing = [(st.qid, DT_DIR, "."), (parent.stat().qid, DT_DIR, "..")]
            for child in await self._snapshot(entry.node):
                cst = child.stat()
                listing.append((cst.qid, DT_DIR if cst.is_dir else DT_REG, cst.name))
            entry.readdir_entries = listing
        return self._rreaddir(msg, entry.readdir_entries)

    def _readdir_fid(self, fid: int) -> _Fid:
        entry = self._fid(fid)
        st = entry.node.stat()
        if not st.is_dir:
            raise NotADirectory(f"{st.name} is not a directory")
        if entry.open_mode is None:
            raise BadFid(f"fid {fid} is not open; Tlopen it first")
        return entry

    def _rreaddir(self, msg: m.Treaddir, entries: list[tuple[m.Qid, int, str]]) -> m.Message:
        count = min(msg.count, self._iounit())
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

    def _write(self, msg: m.Twrite) -> _Defer:
        return TASK if self._writable(msg.fid).write_blocks else INLINE

    async def _write_later(self, msg: m.Twrite) -> m.Message:
        entry = self._fid(msg.fid)
        handle = self._writable(msg.fid)
        n = await handle.write(msg.offset, msg.data)
        if msg.data and n == 0:
            # plan9port's `9p` resends forever after Rwrite count=0; never answer that.
            raise FsError(f"{entry.node.stat().name}: the write was not accepted")
        if not 0 <= n <= len(msg.data):
            log.error("9p %s: %r took %d of %d bytes", self.peer, handle, n, len(msg.data))
            raise _internal_error()
        return m.Rwrite(msg.tag, n)

    def _writable(self, fid: int) -> Handle:
        entry = self._fid(fid)
        if entry.open_mode is None or not entry.open_mode.write or entry.handle is None:
            raise BadFid(f"fid {fid} is not open for writing")
        return entry.handle

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

    def _clunk(self, tag: int, fid: int) -> Reply | _Defer:
        entry = self._fid(fid)
        if entry.remove_on_close:
            return TASK  # the remove may wait
        handle = entry.handle
        if handle is not None:
            try:
                later = handle.clunk_now() is LATER
            except Exception:
                self._forget_fid(fid)  # clunk(5): the fid is released even if the clunk fails
                raise
            if later:
                return TASK if handle.clunk_blocks else INLINE
        self._forget_fid(fid)
        return _RCLUNK.pack(_RCLUNK.size, m.Rclunk.TYPE, tag)

    async def _clunk_later(self, tag: int, fid: int) -> Reply:
        entry = await self._release(fid)
        if entry.remove_on_close:
            await entry.node.remove()
        return _RCLUNK.pack(_RCLUNK.size, m.Rclunk.TYPE, tag)

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

    def _stat(self, msg: m.Tstat) -> m.Message:
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

    def _getattr(self, msg: m.Tgetattr) -> m.Message:
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

    def _statfs(self, msg: m.Tstatfs) -> m.Message:
        self._fid(msg.fid)
        return m.Rstatfs(msg.tag, V9FS_MAGIC, 4096, 0, 0, 0, 0, 0, 0, 255)

    # --- the rest of 9P2000.L ------------------------------------------------------------------

    def _refuse_link(self, msg: m.Message) -> m.Message:
        raise NotPermitted(_EPERM_LINKS)

    def _readlink(self, msg: m.Treadlink) -> m.Message:
        entry = self._fid(msg.fid)
        raise InvalidInput(f"{entry.node.stat().name} is not a symbolic link")

    def _xattr(self, msg: m.Txattrwalk | m.Txattrcreate) -> m.Message:
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

    def _fsync(self, msg: m.Tfsync) -> m.Message:
        self._fid(msg.fid)
        return m.Rfsync(msg.tag)

    def _lock(self, msg: m.Tlock) -> m.Message:
        # Advisory locks between clients of one synthetic tree are meaningless; grant them.
        self._fid(msg.fid)
        return m.Rlock(msg.tag, LOCK_SUCCESS)

    def _getlock(self, msg: m.Tgetlock) -> m.Message:
        self._fid(msg.fid)
        return m.Rgetlock(
            msg.tag, LOCK_TYPE_UNLCK, msg.start, msg.length, msg.proc_id, msg.client_id
        )


def _internal_error() -> FsError:
    return FsError("internal error in the file server (see the daemon log)")


# --- the table -----------------------------------------------------------------------------------

C = _Connection
_OPS: dict[type[m.Message], _Op] = {
    m.Tflush: _Op("Tflush", _in_task, C._flush),
    m.Tauth: _Op("Tauth", C._auth),
    m.Tattach: _Op("Tattach", _inline, C._attach),
    m.Twalk: _Op(
        "Twalk",
        C._walk,
        C._walk_later,
        lambda msg: (msg.tag, msg.fid, msg.newfid, msg.wnames),
        _twalk_fields,
    ),
    m.Topen: _Op(
        "Topen", C._open, C._open_later, lambda msg: (msg.tag, msg.fid, msg.mode), _fixed("HIB")
    ),
    m.Tlopen: _Op(
        "Tlopen", C._lopen, C._lopen_later, lambda msg: (msg.tag, msg.fid, msg.flags), _fixed("HII")
    ),
    m.Tcreate: _Op("Tcreate", _in_task, C._create),
    m.Tlcreate: _Op("Tlcreate", _in_task, C._lcreate),
    m.Tmkdir: _Op("Tmkdir", _in_task, C._mkdir),
    m.Tread: _Op(
        "Tread",
        C._read,
        C._read_later,
        lambda msg: (msg.tag, msg.fid, msg.offset, msg.count),
        _fixed("HIQI"),
    ),
    m.Twrite: _Op("Twrite", C._write, C._write_later),
    m.Treaddir: _Op("Treaddir", C._readdir, C._readdir_later),
    m.Tclunk: _Op("Tclunk", C._clunk, C._clunk_later, lambda msg: (msg.tag, msg.fid), _fixed("HI")),
    m.Tremove: _Op("Tremove", _in_task, C._remove),
    m.Tunlinkat: _Op("Tunlinkat", _in_task, C._unlinkat),
    m.Tstat: _Op("Tstat", C._stat),
    m.Tgetattr: _Op("Tgetattr", C._getattr),
    m.Tstatfs: _Op("Tstatfs", C._statfs),
    m.Twstat: _Op("Twstat", _in_task, C._wstat),
    m.Tsetattr: _Op("Tsetattr", _in_task, C._setattr),
    m.Trename: _Op("Trename", _in_task, C._rename),
    m.Trenameat: _Op("Trenameat", _in_task, C._renameat),
    m.Tsymlink: _Op("Tsymlink", C._refuse_link),
    m.Tmknod: _Op("Tmknod", C._refuse_link),
    m.Tlink: _Op("Tlink", C._refuse_link),
    m.Treadlink: _Op("Treadlink", C._readlink),
    m.Txattrwalk: _Op("Txattrwalk", C._xattr),
    m.Txattrcreate: _Op("Txattrcreate", C._xattr),
    m.Tfsync: _Op("Tfsync", C._fsync),
    m.Tlock: _Op("Tlock", C._lock),
    m.Tgetlock: _Op("Tgetlock", C._getlock),
}
del C


def _hot(*classes: type[m.Message]) -> dict[int, tuple[_Op, Unpack]]:
    table = {}
    for cls in classes:
        op = _OPS[cls]
        assert op.unpack is not None
        table[cls.TYPE] = (op, op.unpack)
    return table


# The requests of a small operation, unpacked from the frame: Topen exists in 9P2000 and .u,
# Tlopen in .L (the codec answers the other one as unknown).
_HOT: dict[Dialect, dict[int, tuple[_Op, Unpack]]] = {
    Dialect.P9P2000: _hot(m.Twalk, m.Topen, m.Tread, m.Tclunk),
    Dialect.P9P2000_U: _hot(m.Twalk, m.Topen, m.Tread, m.Tclunk),
    Dialect.P9P2000_L: _hot(m.Twalk, m.Tlopen, m.Tread, m.Tclunk),
}
