"""The file kinds of the synthetic tree, built on `anvild.ninep.backend`'s `Node` and `Handle`.

Theory of operation
-------------------
The 9P server validates fids, modes, offsets and msize; a node only decides (STYLE.md, "library
validates, handler decides"). Every file's `open` returns a fresh handle that holds that open's
state, so two clients reading the same file never share a cursor or a half-written body:

=================  ===========================================================================
`Directory`        static children (added in order) and optional `DynamicChildren` (e.g. the
                   sessions, supplied later by the supervisor); walk tries static names first.
`SnapshotFile`     content generated at open (`list`, `version`, `state`); reads at any offset
                   and count see that one snapshot, so `cat` and a v9fs `cache=none` mount
                   agree even when the content changes between two reads.
`CtlFile`          command lines (`anvild.fs.ctl`): every Twrite holds complete lines, write
                   offsets are ignored (`9p rdwr` writes at offset = bytes read), an invalid
                   command fails that write with the reason (EINVAL); a read on the same fid
                   returns the answer of the last write, and nothing before any write.
`BodyFile`         everything written on one open is collected (`anvild.fs.body`) and handed to
                   the commit callback at clunk; a refusal fails the Tclunk (the server releases
                   the fid anyway) and an aborted open (connection lost) commits nothing. The
                   Twrite that crosses the size limit fails, and so does every later write and
                   the clunk of that open: nothing of it is committed.
`ValueFile`        a `BodyFile` that also reads back the current value.
`StreamFile`       a blocking line stream (`anvild.fs.stream`): each open has its own cursor,
                   starting with the backlog; a read waits for new lines; clunk, abort or flush
                   release the waiter.
=================  ===========================================================================

Every node has a qid path from one process-wide counter (stable for the node's life, never
reused), and a version and mtime that `touch()` bumps when the content changes. Generated files
report length 0 (DESIGN.md section 3). Owner and group are the daemon's user.

The kinds that can answer without waiting also implement the synchronous calls of
`anvild.ninep.backend` (answered by the server's poller, outside the connection's task): a
directory's walk to a static child (`DynamicChildren.lookup_now` for the others; by default the
server asks `lookup`), a snapshot's open when its generate function is a plain one, reads of a
snapshot, of a ctl answer and of a body file's value, a stream read that has lines buffered (or
is at its end), and the clunks that only drop state. Everything else answers `LATER`.

Files that take writes accept OTRUNC at open and a wstat that only truncates to length 0
(9pfuse turns a shell `>` into Topen + Twstat(length=0), v9fs into Tsetattr(size=0)): both are
no-ops, because every open already starts from an empty body.
"""

from __future__ import annotations

import errno
import functools
import grp
import inspect
import itertools
import os
import pwd
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

import attrs
import trio

from anvild.fs.body import DEFAULT_BODY_LIMIT, BodyBuffer, BodyError, BodyTooLarge
from anvild.fs.ctl import CommandError, CommandTable
from anvild.fs.stream import LineStream, StreamReader
from anvild.ninep.backend import LATER, Handle, Later, Node, NodeStat, OpenMode, StatChange
from anvild.ninep.constants import DMDIR
from anvild.ninep.errors import FsError

__all__ = [
    "BodyFile",
    "CommitBody",
    "CtlFile",
    "Directory",
    "DynamicChildren",
    "FsNode",
    "Generate",
    "SnapshotFile",
    "StreamFile",
    "ValueFile",
    "new_qid_path",
    "owner_names",
]

_qid_paths = itertools.count(1)


def new_qid_path() -> int:
    """A qid path no other node of this process has or will have."""
    return next(_qid_paths)


@functools.cache
def owner_names() -> tuple[str, str]:
    """The daemon's user and group names, as stat reports them."""
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = os.environ.get("USER") or str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return user, group


def _check_name(name: str) -> str:
    if name in ("", ".", "..") or "/" in name or "\x00" in name:
        raise ValueError(f"invalid file name {name!r}")
    return name


class FsNode(Node):
    """A node with a fixed name and permission, a stable qid path, a version and an mtime."""

    def __init__(self, name: str, perm: int) -> None:
        self._name = name if name == "/" else _check_name(name)
        self._perm = perm
        self._qid_path = new_qid_path()
        self._version = 0
        self._mtime_ns = time.time_ns()
        self._stat: NodeStat | None = None  # the walk/open/getattr hot path asks several times

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int:
        return self._version

    def touch(self) -> None:
        """Record a change: bump qid.version and set mtime to now."""
        self._version = (self._version + 1) & 0xFFFFFFFF
        self._mtime_ns = time.time_ns()
        self._stat = None

    def length(self) -> int:
        return 0

    def stat(self) -> NodeStat:
        st = self._stat
        if st is None:
            user, group = owner_names()
            st = NodeStat(
                name=self._name,
                mode=self._perm,
                qid_path=self._qid_path,
                version=self._version,
                length=self.length(),
                mtime_ns=self._mtime_ns,
                owner=user,
                group=group,
                muid=user,
            )
            # Kept until the next touch(), unless a subclass computes its length (then fresh).
            if type(self).length is FsNode.length:
                self._stat = st
        return st


# --- directories ----------------------------------------------------------------------------


class DynamicChildren:
    """Children that exist outside the tree (sessions, beads): listed and looked up on demand.

    `entries()` is what a directory read shows; `lookup()` may also find names that are not
    listed (a session reachable by its alias as well as its id).
    """

    async def entries(self) -> Sequence[Node]:
        return ()

    async def lookup(self, name: str) -> Node | None:
        for node in await self.entries():
            if node.stat().name == name:
                return node
        return None

    def lookup_now(self, name: str) -> Node | Later | None:
        """`lookup` without waiting, or `LATER` (the default: the server awaits `lookup`)."""
        return LATER


class Directory(FsNode):
    """A directory: static children in insertion order, then dynamic ones."""

    open_blocks = False  # the server reads directories itself

    def __init__(
        self,
        name: str,
        children: Iterable[Node] = (),
        *,
        dynamic: DynamicChildren | None = None,
        perm: int = 0o555,
    ) -> None:
        super().__init__(name, DMDIR | perm)
        self._children: dict[str, Node] = {}
        self._dynamic = dynamic
        for child in children:
            self.add(child)

    def add(self, node: Node) -> Node:
        """Add a static child; its name must be new in this directory."""
        name = node.stat().name
        if name in self._children:
            raise ValueError(f"{self._name}: a child named {name!r} already exists")
        self._children[name] = node
        self.touch()
        return node

    def discard(self, name: str) -> Node | None:
        """Remove the static child `name`, if any, and return it."""
        node = self._children.pop(name, None)
        if node is not None:
            self.touch()
        return node

    def set_dynamic(self, dynamic: DynamicChildren) -> None:
        """Give a directory built without them its dynamic children (a tree mounted later,
        e.g. the sessions on `agent/`); a directory has at most one source of them."""
        if self._dynamic is not None:
            raise ValueError(f"{self._name}: dynamic children are already set")
        self._dynamic = dynamic
        self.touch()

    def child(self, name: str) -> Node | None:
        """The static child `name` (no dynamic lookup)."""
        return self._children.get(name)

    async def walk(self, name: str) -> Node | None:
        node = self._children.get(name)
        if node is None and self._dynamic is not None:
            node = await self._dynamic.lookup(name)
        return node

    def walk_now(self, name: str) -> Node | Later | None:
        node = self._children.get(name)
        if node is None and self._dynamic is not None:
            return self._dynamic.lookup_now(name)
        return node

    async def list(self) -> Sequence[Node]:
        if self._dynamic is None:
            return list(self._children.values())
        return [*self._children.values(), *await self._dynamic.entries()]


# --- handles shared by several kinds --------------------------------------------------------


class _BytesHandle(Handle):
    """Reads of one fixed byte string at any offset and count."""

    read_blocks = False
    write_blocks = False  # the default write refuses at once
    clunk_blocks = False

    def __init__(self, content: bytes) -> None:
        self._content = content

    async def read(self, offset: int, count: int) -> bytes:
        # No checkpoint: this never blocks, and each scheduler pass costs a measurable share of a
        # small operation (bench/ninep.py); flush(5) allows answering a request that completed.
        return self._content[offset : offset + count]

    def read_now(self, offset: int, count: int) -> bytes:
        return self._content[offset : offset + count]

    def clunk_now(self) -> None:
        return None


# --- snapshot files -------------------------------------------------------------------------

Generate = Callable[[], "str | bytes | Awaitable[str | bytes]"]
"""Produces a snapshot's content (text is UTF-8 encoded); may be sync or async."""


async def _generate(generate: Generate) -> bytes:
    result = generate()
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, str):
        return result.encode()
    return bytes(result)


class SnapshotFile(FsNode):
    """A read-only file whose content is generated at open."""

    def __init__(self, name: str, generate: Generate, *, perm: int = 0o444) -> None:
        super().__init__(name, perm)
        self._generate = generate
        # A plain function makes its snapshot at once; an async one may wait (a task per open).
        self.open_blocks = inspect.iscoroutinefunction(generate)

    async def open(self, mode: OpenMode) -> Handle:
        return _BytesHandle(await _generate(self._generate))

    def open_now(self, mode: OpenMode) -> Handle | Later:
        if self.open_blocks:
            return LATER
        result = self._generate()
        if type(result) is bytes:  # the usual case, checked first: this is the hot path
            return _BytesHandle(result)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError(f"{self.name}: a plain generate function returned an awaitable")
        return _BytesHandle(result.encode() if isinstance(result, str) else bytes(result))


# --- ctl files ------------------------------------------------------------------------------


class _CtlHandle(Handle):
    read_blocks = False
    clunk_blocks = False  # writes run commands, which may wait: they keep a task each

    def __init__(self, node: CtlFile) -> None:
        self._node = node
        self._answer = b""
        self._lock = trio.Lock()  # several tags may write on one fid: run them in order

    async def read(self, offset: int, count: int) -> bytes:
        return self._answer[offset : offset + count]  # never blocks: no checkpoint needed

    def read_now(self, offset: int, count: int) -> bytes:
        return self._answer[offset : offset + count]

    def clunk_now(self) -> None:
        return None

    async def write(self, offset: int, data: bytes) -> int:
        # The offset is ignored on purpose: `9p rdwr` writes at offset = bytes it just read.
        name = self._node.name
        async with self._lock:
            self._answer = b""
            try:
                commands = self._node.table.parse(data)
            except CommandError as exc:
                raise FsError(f"{name}: {exc}", errno.EINVAL) from exc
            answers: list[str] = []
            for number, command in enumerate(commands, 1):
                spec = self._node.table[command.verb]
                try:
                    answer = await spec.handler(command)
                except CommandError as exc:
                    where = f"line {number}: " if len(commands) > 1 else ""
                    self._answer = _join_answers(answers)
                    raise FsError(f"{name}: {where}{exc}", errno.EINVAL) from exc
                answers.append(answer)
            self._answer = _join_answers(answers)
        return len(data)


def _join_answers(answers: list[str]) -> bytes:
    text = "".join(a if a.endswith("\n") else a + "\n" for a in answers if a)
    return text.encode()


class CtlFile(FsNode):
    """A file that runs command lines (see `anvild.fs.ctl`) and answers on the same fid."""

    def __init__(self, name: str, table: CommandTable, *, perm: int = 0o644) -> None:
        super().__init__(name, perm)
        self.table = table
        self.open_blocks = False

    async def open(self, mode: OpenMode) -> Handle:
        return _CtlHandle(self)

    async def wstat(self, change: StatChange) -> None:
        if not change.is_truncate_only():
            await super().wstat(change)


# --- body and value files -------------------------------------------------------------------

CommitBody = Callable[[bytes], Awaitable[None]]
"""Takes the body written on one open; raise `FsError` (or `ValueError`) to refuse it."""


class _BodyHandle(Handle):
    read_blocks = False
    write_blocks = False  # collected in memory; the commit at clunk may wait

    def __init__(self, node: BodyFile, mode: OpenMode, snapshot: bytes) -> None:
        self._node = node
        self._body = BodyBuffer(node.limit, limit_name=node.limit_name) if mode.write else None
        self._truncate = mode.truncate
        self._snapshot = snapshot
        self._too_large = ""  # set by the write that crossed the limit: the open is refused

    async def read(self, offset: int, count: int) -> bytes:
        return self._snapshot[offset : offset + count]  # never blocks: no checkpoint needed

    def read_now(self, offset: int, count: int) -> bytes:
        return self._snapshot[offset : offset + count]

    async def write(self, offset: int, data: bytes) -> int:
        assert self._body is not None, "the server only forwards writes on write opens"
        if self._too_large:
            raise FsError(self._too_large, errno.EFBIG)
        try:
            return self._body.write(offset, data)
        except BodyTooLarge as exc:
            self._too_large = f"{self._node.name}: {exc}; nothing written on this open is kept"
            raise FsError(self._too_large, errno.EFBIG) from exc
        except BodyError as exc:
            raise FsError(f"{self._node.name}: {exc}", errno.EFBIG) from exc

    async def clunk(self) -> None:
        body, self._body = self._body, None
        if self._too_large:
            raise FsError(self._too_large, errno.EFBIG)  # a cut body is never committed
        if body is None or (body.writes == 0 and not self._truncate):
            return  # opened for write but nothing written: nothing to commit
        try:
            try:
                await self._node.commit(body.value())
            except ValueError as exc:
                raise FsError(f"{self._node.name}: {exc}", errno.EINVAL) from exc
        except FsError as exc:
            if self._node.on_reject is not None:
                self._node.on_reject(exc)  # e.g. an event on `events`, mail back to a sender
            raise
        self._node.touch()

    async def abort(self) -> None:
        self._body = None  # a body is committed only by a clunk, never by a lost connection


class BodyFile(FsNode):
    """A write-only file whose body (all writes of one open) is committed at clunk."""

    def __init__(
        self,
        name: str,
        commit: CommitBody,
        *,
        limit: int = DEFAULT_BODY_LIMIT,
        limit_name: str = "",
        perm: int = 0o222,
        on_reject: Callable[[FsError], None] | None = None,
    ) -> None:
        """`on_reject` is told about every body refused at clunk, before the Tclunk fails;
        `limit_name` says where `limit` is set (it is named in the refusal)."""
        super().__init__(name, perm)
        self.commit = commit
        self.limit = limit
        self.limit_name = limit_name
        self.on_reject = on_reject
        self.open_blocks = False  # no snapshot to make

    async def _snapshot(self) -> bytes:
        return b""

    async def open(self, mode: OpenMode) -> Handle:
        snapshot = await self._snapshot() if mode.read else b""
        return _BodyHandle(self, mode, snapshot)

    async def wstat(self, change: StatChange) -> None:
        if not change.is_truncate_only():
            await super().wstat(change)


class ValueFile(BodyFile):
    """A readable value that a write on one open replaces at clunk (`role`, `context`)."""

    def __init__(
        self,
        name: str,
        read: Generate,
        commit: CommitBody,
        *,
        limit: int = DEFAULT_BODY_LIMIT,
        limit_name: str = "",
        perm: int = 0o644,
        on_reject: Callable[[FsError], None] | None = None,
    ) -> None:
        super().__init__(
            name, commit, limit=limit, limit_name=limit_name, perm=perm, on_reject=on_reject
        )
        self._read = read
        self.open_blocks = inspect.iscoroutinefunction(read)

    async def _snapshot(self) -> bytes:
        return await _generate(self._read)


# --- stream files ---------------------------------------------------------------------------


class _StreamHandle(Handle):
    write_blocks = False  # the default write refuses at once
    clunk_blocks = False  # clunk releases the waiting read; reads block (a task each)

    def __init__(self, reader: StreamReader) -> None:
        self._reader = reader

    async def read(self, offset: int, count: int) -> bytes:
        # Offsets are ignored: a stream is read like a pipe, each open from its own cursor.
        return await self._reader.read(count)

    def read_now(self, offset: int, count: int) -> bytes | Later:
        data = self._reader.read_nowait(count)  # lines buffered (or the end): answered at once
        return LATER if data is None else data

    async def clunk(self) -> None:
        self._reader.close()

    def clunk_now(self) -> None:
        self._reader.close()

    async def abort(self) -> None:
        self._reader.close()


class StreamFile(FsNode):
    """A blocking stream of lines (`events`, `log`); qid.version counts published lines."""

    def __init__(self, name: str, stream: LineStream, *, perm: int = 0o444) -> None:
        super().__init__(name, perm)
        self.stream = stream
        self.open_blocks = False

    def stat(self) -> NodeStat:
        st = super().stat()
        return attrs.evolve(
            st,
            version=self.stream.statistics().published & 0xFFFFFFFF,
            mtime_ns=self.stream.last_publish_ns or st.mtime_ns,
        )

    async def open(self, mode: OpenMode) -> Handle:
        return _StreamHandle(self.stream.open_reader())
