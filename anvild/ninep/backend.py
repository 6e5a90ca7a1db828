"""The interface between the 9P server and a synthetic file tree: `Node`, `Handle`, `NodeStat`.

Theory of operation
-------------------
"Library validates, handler decides" (plan9port lib9p `srv.c`; hugelgupf/p9): the server in
`anvild.ninep.server` owns everything the protocol defines — fids, tags, open modes, offsets,
msize, directory reads, `.` and `..`, dialect-specific replies — and checks it *before* it calls a
node. A tree implements only what is specific to each file:

* A `Node` is one file or directory. `stat()` describes it (`NodeStat`: name, mode incl. `DMDIR`,
  length, mtime, owner, a stable qid path and a version). Directories answer `walk(name)` (one
  name, never `.` or `..` — the server resolves those from the fid's path) and `list()` (their
  entries, in the order a directory read should show them).
* `open(mode)` returns a `Handle`: the per-open state (a snapshot, a stream cursor, a body being
  accumulated). The server has already checked `mode` against `stat().mode` (a write to a file
  without a write bit, or a write open of a directory, never reaches the node). Directories are
  never opened through `open`: the server reads them itself from `list()`.
* `Handle.read(offset, count)` returns at most `count` bytes (b"" is end of file). It may block
  until data exists; it must then be a trio checkpoint, because Tflush cancels the request's
  cancel scope (flush(5)): the cancelled read's reply is never sent.
* Blocking is declared, not guessed: `Node.open_blocks` and `Handle.read_blocks`/`write_blocks`/
  `clunk_blocks` default to True (the call runs in a task of its own, which Tflush can cancel).
  A node or handle whose call completes at once sets its flag to False and the server answers
  that request inline in the connection's receive loop, several times cheaper. `walk` and `list`
  are always inline: they are lookups and must never wait for another request.
* `Handle.write(offset, data)` returns how many bytes it took. The server never forwards a
  non-empty write that was answered with 0 (plan9port's `9p` would loop forever on
  `Rwrite count=0`): it turns that into an error. Empty writes are forwarded (the empty-stdin
  case of `9p write`), and the answer 0 is correct for them.
* `Handle.clunk()` runs on Tclunk/Tremove. It may raise `FsError` (a body rejected at commit): the
  client gets the error on the Tclunk and the fid is released anyway (clunk(5)).
  `Handle.abort()` runs instead when the fid disappears without a clunk: the connection closed
  (plan9port's `9p` never clunks its root fid), or a second Tversion reset the session. A body file
  should discard on abort; the default does nothing.
* Clunking a fid does not cancel a request still running on it (a client that wants that sends
  Tflush first, as v9fs does when a process is interrupted): a handle whose reads block should
  release its own waiters in ``clunk``/``abort`` so such a read returns.
* The synchronous calls, for the server's poller: `Node.walk_now`, `Node.open_now`,
  `Handle.read_now` and `Handle.clunk_now` answer the same question as their async twins but
  *without waiting*: they are plain functions, so they cannot reach a trio checkpoint. Each
  returns `LATER` (the default) when it cannot answer at once, having done nothing; the server
  then calls the async method from the connection's own task, exactly as before. A tree opts in
  per kind of file (a static directory, a snapshot file, a buffered stream read); the server
  may call these from a task other than the connection's (the shared poller in
  `anvild.ninep.server`), which is safe only because they never await.
* `Node.wstat(change)` handles Twstat (9P2000/.u) and Tsetattr (9P2000.L) as one `StatChange`.
  The server itself accepts a change that changes nothing (stat(5): "a wstat with all don't-touch
  values is a request to sync"). Everything else goes to the node; the default refuses. A file that
  accepts a shell `>` through 9pfuse (Topen OWRITE + Twstat length=0) or v9fs (Tsetattr size=0)
  overrides `wstat` and accepts `change.is_truncate_only()`.
* Every refusal is an `FsError` of the kind whose errno fits (`anvild.ninep.errors` holds the
  one table from kind to errno; a protocol-level refusal names its errno); the server turns it
  into the dialect's error reply. Any other exception from a node is a bug: the server logs it
  with its traceback and answers EIO "internal error", and the connection keeps working.

The server itself (`anvild.ninep.server.Server`) is constructed with a root factory — a callable
taking the `AttachRequest` and returning the root `Node` — and each `serve(stream, ...)` call takes
an attach check for that connection (the listener decides who may attach; the check raises
`FsError` to refuse).

This module imports nothing from the project beyond `anvild.ninep`; it does no I/O.
"""

from __future__ import annotations

import abc
import enum
import errno
import functools
from collections.abc import Sequence
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
