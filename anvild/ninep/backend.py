"""The interface between the 9P server and a synthetic file tree: `Node`, `Handle`, `NodeStat`.

"Library validates, handler decides": the server owns fids, tags, modes, offsets, msize,
directory reads, `.`/`..` and dialect replies, and checks them before calling a node. A `Node`
gives `stat()`, directories `walk(name)` and `list()`; `open(mode)` returns a `Handle`, the
per-open state. `Handle.read` returns at most `count` bytes (b"" is EOF); one that blocks must be
a trio checkpoint (Tflush cancels it, its reply is never sent). Calls that may wait are declared
(`*_blocks`); the synchronous `walk_now`/`open_now`/`read_now`/`clunk_now` answer at once or
return `LATER` having done nothing, and never await (the server may call them from another task).
A non-empty write answered with 0 becomes an error. `clunk` may raise `FsError` (the fid is
released anyway); `abort` runs instead when a fid vanishes unclunked; blocking handles release
their waiters in both. `wstat` gets one `StatChange` (truncate-only is the shell `>` case).
Every refusal is an `FsError` of a kind from the one errno table (`anvild.ninep.errors`); any
other exception is a bug, answered EIO. No I/O; imports nothing beyond `anvild.ninep`.
"""

from __future__ import annotations

import abc
import enum
import errno
import functools
from collections.abc import Callable, Sequence
from typing import Final, Literal, TypeAlias

import attrs

from anvild.ninep.constants import (
    DMAPPEND,
    DMDIR,
    DMEXCL,
    DMTMP,
    QTAPPEND,
    QTDIR,
    QTEXCL,
    QTFILE,
    QTTMP,
)
from anvild.ninep.errors import AccessDenied, FsError, NotPermitted
from anvild.ninep.messages import Qid

__all__ = [
    "LATER",
    "AttachRequest",
    "Handle",
    "Later",
    "Node",
    "NodeStat",
    "OpenMode",
    "StatChange",
]


class _Later(enum.Enum):
    LATER = "later"


LATER: Final = _Later.LATER
"""Returned by a ``*_now`` call that cannot answer without waiting (it has done nothing)."""

Later: TypeAlias = Literal[_Later.LATER]


def _qid_type(mode: int) -> int:
    qtype = QTFILE
    if mode & DMDIR:
        qtype |= QTDIR
    if mode & DMAPPEND:
        qtype |= QTAPPEND
    if mode & DMEXCL:
        qtype |= QTEXCL
    if mode & DMTMP:
        qtype |= QTTMP
    return qtype


@attrs.frozen
class NodeStat:
    """What a node says about itself; the server derives Rstat, Rgetattr and qids from it.

    ``mode`` is a stat(5) mode: permission bits (``0o644``) plus ``DMDIR`` for a directory (and
    optionally ``DMAPPEND``/``DMEXCL``/``DMTMP``). ``qid_path`` must be stable for the node's
    lifetime and unique in the tree; bump ``version`` when the content changes. ``length`` is 0 for
    generated content (DESIGN §3: reads are correct at any offset anyway). Times are nanoseconds
    since the epoch. ``uid``/``gid`` are numeric ids for 9P2000.u/.L; ``None`` means "the server's
    default" (the daemon's own uid/gid).
    """

    name: str
    mode: int
    qid_path: int
    version: int = 0
    length: int = 0
    mtime_ns: int = 0
    atime_ns: int | None = None
    owner: str = "anvil"
    group: str | None = None
    muid: str = ""
    uid: int | None = None
    gid: int | None = None

    @property
    def is_dir(self) -> bool:
        return bool(self.mode & DMDIR)

    @functools.cached_property
    def qid(self) -> Qid:
        # Cached: a stat is immutable, and walk/open/getattr ask for its qid on every request.
        return Qid(type=_qid_type(self.mode), version=self.version & 0xFFFFFFFF, path=self.qid_path)


@attrs.frozen
class OpenMode:
    """An open request with the dialect removed (Topen mode byte or Tlopen flags).

    The server has already checked ``read``/``write`` against the node's permission bits.
    ``truncate`` is OTRUNC / O_TRUNC: files that take commands or bodies accept and ignore it.
    """

    read: bool
    write: bool
    truncate: bool = False
    append: bool = False


@attrs.frozen
class StatChange:
    """A Twstat or Tsetattr with the dialect removed; ``None`` means "don't touch" (stat(5))."""

    name: str | None = None
    mode: int | None = None
    length: int | None = None
    mtime_ns: int | None = None
    atime_ns: int | None = None
    gid: str | int | None = None
    uid: str | int | None = None

    def is_noop(self) -> bool:
        """True when nothing would change: stat(5) makes this a successful "sync" request."""
        return all(getattr(self, f.name) is None for f in attrs.fields(StatChange))

    def is_truncate_only(self) -> bool:
        """True for a change that only truncates to length 0 (a shell ``>`` via 9pfuse or v9fs)."""
        return self.length == 0 and attrs.evolve(self, length=None).is_noop()


@attrs.frozen
class AttachRequest:
    """Who is attaching (Tattach): the attach check and the root factory receive this.

    ``n_uname`` is the numeric uid of 9P2000.u/.L (``None`` in 9P2000 or when the client sent
    NONUNAME). ``peer`` is the listener's label for the connection (e.g. ``unix`` or
    ``tcp!127.0.0.1!40112``), for logs and checks.
    """

    uname: str
    aname: str
    n_uname: int | None
    dialect: str
    peer: str = ""


class Handle:
    """The state of one open of one node. Subclass and override what the file supports.

    The defaults refuse: the server only calls ``read``/``write`` when the open mode allowed it,
    so a default is reached only when a node's permission bits promise more than its handle does.

    ``read_blocks``, ``write_blocks`` and ``clunk_blocks`` say whether that call may wait for
    something outside the request (new data, a command, a commit). The default is True, which is
    always correct: the server runs the call in a task of its own with a cancel scope, so a Tflush
    can cancel it while the connection serves other requests. A handle whose call completes at
    once (a snapshot read, a body write into a buffer) sets the flag to False: the server then
    answers it inline in the connection's receive loop, which is several times cheaper.
    """

    read_blocks: bool = True
    write_blocks: bool = True
    clunk_blocks: bool = True

    async def read(self, offset: int, count: int) -> bytes:
        """Return at most ``count`` bytes at ``offset``; b"" means end of file.

        May block until data exists (a stream, ``wait``); blocking must be cancellable by trio
        (Tflush cancels the request's scope).
        """
        raise FsError("this file cannot be read", errno.EBADF)

    async def write(self, offset: int, data: bytes) -> int:
        """Take ``data`` written at ``offset``; return how many bytes were taken (>0 if data)."""
        raise FsError("this file cannot be written", errno.EBADF)

    async def clunk(self) -> None:
        """The client is done with this open (Tclunk/Tremove). Raise `FsError` to fail the clunk;
        the fid is released anyway."""

    async def abort(self) -> None:
        """The fid vanished without a clunk (EOF or Tversion reset). Must not raise."""

    def read_now(self, offset: int, count: int) -> bytes | Later:
        """`read` without waiting: the same bytes `read` would return now, or `LATER` (the
        default) if it would wait or cannot tell; then the server awaits `read` instead."""
        return LATER

    def notify_readable(self, wake: Callable[[], None] | None) -> bool:
        """After `read_now` returned `LATER`: have `wake()` called once, synchronously, by
        whatever makes `read_now` answer (new data, the end); True if it will be. The server
        then waits with no task and reads with `read_now` when woken. False (the default):
        the server awaits `read` in a task. `None` forgets a registered `wake`."""
        return False

    def clunk_now(self) -> Later | None:
        """`clunk` without waiting (same effect, same errors), or `LATER` (the default) having
        done nothing; then the server awaits `clunk` instead."""
        return LATER


class Node(abc.ABC):
    """One file or directory of a synthetic tree. Only `stat` is mandatory.

    ``walk`` and ``list`` are lookups: the server awaits them inline in the connection's receive
    loop, so they may await briefly (a lock, a table) but must never wait for an event that
    another request would cause. ``open_blocks`` says whether ``open`` may wait (e.g. generating
    a snapshot with an async call); True (the default) runs each open in a task of its own.
    """

    open_blocks: bool = True

    @abc.abstractmethod
    def stat(self) -> NodeStat:
        """Describe this node now (cheap, synchronous, never blocks)."""

    async def walk(self, name: str) -> Node | None:
        """Directories: the child called ``name`` (never ``.``/``..``), or None if absent."""
        return None

    def walk_now(self, name: str) -> Node | Later | None:
        """`walk` without waiting (the same answer), or `LATER` (the default): then the server
        awaits `walk` instead."""
        return LATER

    async def list(self) -> Sequence[Node]:
        """Directories: the entries a directory read returns, in order."""
        return ()

    async def open(self, mode: OpenMode) -> Handle:
        """Files: a new `Handle` for this open. Directories are read by the server instead."""
        raise AccessDenied(f"{self.stat().name}: cannot be opened")

    def open_now(self, mode: OpenMode) -> Handle | Later:
        """`open` without waiting (a new handle, or the same error), or `LATER` (the default)
        having done nothing: then the server awaits `open` instead."""
        return LATER

    async def create(self, name: str, perm: int) -> Node:
        """Directories: make a child (Tcreate/Tlcreate/Tmkdir; ``perm`` has DMDIR for a dir)."""
        raise NotPermitted(f"{self.stat().name}: files cannot be created in this directory")

    async def remove(self) -> None:
        """Remove this node (Tremove/Tunlinkat)."""
        raise NotPermitted(f"{self.stat().name}: cannot be removed")

    async def wstat(self, change: StatChange) -> None:
        """Apply a Twstat/Tsetattr that changes something (no-ops never get here)."""
        raise NotPermitted(f"{self.stat().name}: attributes cannot be changed")
