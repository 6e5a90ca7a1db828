"""The file kinds of the synthetic tree, built on `anvild.ninep.backend`'s `Node` and `Handle`.

The server validates fids, modes, offsets and msize; a node only decides. Every `open` returns a
fresh handle holding that open's state (no shared cursor or half-written body):
`Directory` (static children, then `DynamicChildren`); `SnapshotFile` (content made at open, one
snapshot for every read of it); `CtlFile` (command lines, `anvild.fs.ctl`: offsets ignored, an
invalid line fails its write with EINVAL, a read returns the last write's answer); `BodyFile`
(checked at each Twrite by `anvild.fs.body`, committed at clunk or when the line/JSON value ends;
a refused Twrite refuses the whole open; an aborted open commits nothing); `ValueFile` (a body
that reads back its value); `StreamFile` (a per-open cursor on `anvild.fs.stream`).
Qid paths come from one process-wide counter, never reused (nodes made again may take a reserved
block); a file's length and qid.version are 0 (content is per open), so page-cached clients
read through. Kinds that can answer without waiting implement the backend's synchronous calls;
everything else answers `LATER`. A `keep_children=True` directory removes nothing when its
entries are removed (`keep_on_remove`).
Writable files accept OTRUNC and a truncate-to-0 wstat as no-ops (a shell `>` over 9pfuse/v9fs).
"""

from __future__ import annotations

import contextlib
import functools
import grp
import inspect
import itertools
import os
import pwd
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence

import attrs
import trio

from anvild.fs.body import DEFAULT_BODY_LIMIT, BodyBuffer, BodyError, BodyTooLarge, Framing
from anvild.fs.ctl import CommandError, CommandTable
from anvild.fs.stream import LineStream, StreamReader
from anvild.ninep.backend import LATER, Handle, Later, Node, NodeStat, OpenMode, StatChange
from anvild.ninep.constants import DMDIR
from anvild.ninep.errors import FsError, InvalidInput, TooLarge

__all__ = [
    "BodyFile",
    "CommitBody",
    "CtlFile",
    "Directory",
    "DynamicChildren",
    "FsNode",
    "Generate",
    "OnReject",
    "SnapshotFile",
    "StreamFile",
    "ValueFile",
    "keep_on_remove",
    "new_qid_path",
    "owner_names",
    "qid_paths_from",
    "reserve_qid_paths",
]

_qid_paths = itertools.count(1)
_source: Iterator[int] = _qid_paths  # where new nodes take their qid paths from


def new_qid_path() -> int:
    """A qid path no other node of this process has or will have (or, within
    `qid_paths_from`, the next one of that reserved block)."""
    return next(_source)


def reserve_qid_paths(count: int) -> int:
    """The first of `count` consecutive qid paths no node takes unless given them."""
    global _qid_paths, _source
    first = next(_qid_paths)
    _qid_paths = _source = itertools.count(first + count)
    return first


@contextlib.contextmanager
def qid_paths_from(first: int, count: int) -> Iterator[None]:
    """Within: the nodes made take the qid paths `first`, `first + 1`, ... of a block from
    `reserve_qid_paths` (then fresh ones), so nodes made again for the same thing, in the same
    order, get the qids clients cached. Not reentrant; nodes are made on the trio thread."""
    global _source
    _source = itertools.chain(range(first, first + count), _qid_paths)
    try:
        yield
    finally:
        _source = _qid_paths


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

    kept_on_remove = False
    """Removing this node succeeds and removes nothing (`keep_on_remove`)."""

    def __init__(self, name: str, perm: int, *, qid_path: int | None = None) -> None:
        """`qid_path`: one reserved for it (`reserve_qid_paths`), else a new one."""
        self._name = name if name == "/" else _check_name(name)
        self._perm = perm
        self._qid_path = new_qid_path() if qid_path is None else qid_path
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
        """Record a change: set mtime to now and, for a directory, bump qid.version."""
        self._version = (self._version + 1) & 0xFFFFFFFF
        self._mtime_ns = time.time_ns()
        self._stat = None

    def length(self) -> int:
        return 0

    async def remove(self) -> None:
        if not self.kept_on_remove:
            await super().remove()

    def stat(self) -> NodeStat:
        st = self._stat
        if st is None:
            user, group = owner_names()
            st = NodeStat(
                name=self._name,
                mode=self._perm,
                qid_path=self._qid_path,
                # Files keep qid.version 0: Linux's v9fs (6.6+) reads 0 as "do not cache",
                # so every read reaches us whatever the mount's cache mode (README, Mounting).
                version=self._version if self._perm & DMDIR else 0,
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
        keep_children: bool = False,
        qid_path: int | None = None,
    ) -> None:
        """`keep_children`: removing a child, static or dynamic, at any depth succeeds and
        removes nothing (`keep_on_remove`; the directory's own removal is its own)."""
        super().__init__(name, DMDIR | perm, qid_path=qid_path)
        self._children: dict[str, Node] = {}
        self._dynamic = dynamic
        self._keep_children = keep_children
        for child in children:
            self.add(child)

    def add(self, node: Node) -> Node:
        """Add a static child; its name must be new in this directory."""
        name = node.stat().name
        if name in self._children:
            raise ValueError(f"{self._name}: a child named {name!r} already exists")
        if self._keep_children:
            keep_on_remove(node)
        self._children[name] = node
        self.touch()
        return node

    def _kept(self, node: Node) -> None:
        """A dynamic child just found: kept on remove if this directory keeps its children."""
        if self._keep_children and not (isinstance(node, FsNode) and node.kept_on_remove):
            keep_on_remove(node)

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
            if node is not None:
                self._kept(node)
        return node

    def walk_now(self, name: str) -> Node | Later | None:
        node = self._children.get(name)
        if node is None and self._dynamic is not None:
            found = self._dynamic.lookup_now(name)
            if isinstance(found, Node):
                self._kept(found)
            return found
        return node

    async def list(self) -> Sequence[Node]:
        if self._dynamic is None:
            return list(self._children.values())
        dynamic = await self._dynamic.entries()
        for node in dynamic:
            self._kept(node)
        return [*self._children.values(), *dynamic]


def keep_on_remove(node: Node) -> None:
    """Make removing `node` succeed and remove nothing; for a directory, removing anything in
    it too. For the entries of a view whose own removal is a verb (a session's directory), so
    that `rm -r` reaches it. The mark is the node's: it holds wherever the node is reached."""
    if not isinstance(node, FsNode):
        raise TypeError(f"{node.stat().name}: only an FsNode can be kept on remove")
    node.kept_on_remove = True
    if isinstance(node, Directory) and not node._keep_children:
        node._keep_children = True
        for child in node._children.values():
            keep_on_remove(child)


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
        # A handler's `FsError` keeps its kind (its errno); a `CommandError` is bad input.
        name = self._node.name
        async with self._lock:
            self._answer = b""
            try:
                commands = self._node.table.parse(data)
            except CommandError as exc:
                raise InvalidInput(f"{name}: {exc}") from exc
            answers: list[str] = []
            for number, command in enumerate(commands, 1):
                spec = self._node.table[command.verb]
                try:
                    answer = await spec.handler(command)
                except (CommandError, FsError) as exc:
                    where = f"line {number}: " if len(commands) > 1 else ""
                    self._answer = _join_answers(answers)
                    if isinstance(exc, FsError):
                        raise type(exc)(f"{name}: {where}{exc.message}", exc.errno) from exc
                    raise InvalidInput(f"{name}: {where}{exc}") from exc
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
Admit = Callable[[], None]
"""Asked at every Twrite whether this kind of write is accepted now; raises `FsError` if not."""
OnReject = Callable[[FsError, bool], Awaitable[None]]
"""Told once about the refusal of an open, and whether the writer saw it on a Twrite (False:
at clunk, whose reply many clients never show; e.g. mail it back)."""


def _body_refusal(name: str, exc: BodyError) -> FsError:
    if isinstance(exc, BodyTooLarge):
        return TooLarge(f"{name}: {exc}; nothing written on this open is kept")
    return InvalidInput(f"{name}: {exc}")


class _BodyHandle(Handle):
    read_blocks = False

    def __init__(self, node: BodyFile, mode: OpenMode, snapshot: bytes) -> None:
        self._node = node
        self._body = (
            BodyBuffer(
                node.limit,
                limit_name=node.limit_name,
                text=node.text,
                framing=node.framing,
                max_depth=node.max_depth,
            )
            if mode.write
            else None
        )
        self._truncate = mode.truncate
        self._snapshot = snapshot
        self._refused: FsError | None = None  # a refused write: the open commits nothing
        self._committed = False
        # A line or JSON body is committed by the write that completes it, which may wait, and
        # so may telling `on_reject`.
        self.write_blocks = node.framing is not Framing.WHOLE or node.on_reject is not None
        self._lock = trio.Lock() if self.write_blocks else None

    async def read(self, offset: int, count: int) -> bytes:
        return self._snapshot[offset : offset + count]  # never blocks: no checkpoint needed

    def read_now(self, offset: int, count: int) -> bytes:
        return self._snapshot[offset : offset + count]

    async def write(self, offset: int, data: bytes) -> int:
        if self._lock is None:
            return self._write(offset, data)
        async with self._lock:
            refused = self._refused
            try:
                count = self._write(offset, data)
            except FsError as exc:
                if refused is None:
                    await self._rejected(exc, seen=True)
                raise
            body = self._body
            if body is not None and body.message is not None and not self._committed:
                await self._commit(body.message, at_clunk=False)
                self._committed = True
            return count

    def _write(self, offset: int, data: bytes) -> int:
        body = self._body
        assert body is not None, "the server only forwards writes on write opens"
        if self._refused is not None:
            raise self._refused
        try:
            if self._node.admit is not None and body.message is None:
                self._node.admit()
            return body.write(offset, data)
        except BodyError as exc:
            self._refused = _body_refusal(self._node.name, exc)
            raise self._refused from exc
        except FsError as exc:
            self._refused = exc
            raise

    async def _commit(self, data: bytes, *, at_clunk: bool) -> None:
        try:
            try:
                # Shielded: a Tflush must not leave a message half delivered (or delivered
                # without this open knowing it, inviting a second one).
                with trio.CancelScope(shield=True):
                    await self._node.commit(data)
            except ValueError as exc:
                raise InvalidInput(f"{self._node.name}: {exc}") from exc
        except FsError as exc:
            self._refused = exc
            await self._rejected(exc, seen=not at_clunk)
            raise
        self._node.touch()

    async def _rejected(self, exc: FsError, *, seen: bool) -> None:
        if self._node.on_reject is not None:
            with trio.CancelScope(shield=True):
                await self._node.on_reject(exc, seen)

    async def clunk(self) -> None:
        if self._lock is None:
            return await self._clunk()
        async with self._lock:  # after a write still committing: never a second delivery
            return await self._clunk()

    async def _clunk(self) -> None:
        body, self._body = self._body, None
        if body is None or self._committed:
            return  # not opened for writing, or committed by the write that completed it
        if self._refused is not None:
            raise self._refused  # a refused open is never committed
        if body.writes == 0 and (not self._truncate or self._node.framing is not Framing.WHOLE):
            # Nothing written. OTRUNC alone empties a text (`: > context`), but is no line or
            # message: 9pfuse opens OWRITE|OTRUNC and clunks for every shell `>`.
            return
        await self._commit(body.value(), at_clunk=True)

    async def abort(self) -> None:
        self._body = None  # a body is committed only by a clunk, never by a lost connection


class BodyFile(FsNode):
    """A write-only file whose body (the writes of one open) is committed when it is complete:
    at clunk (`Framing.WHOLE`), or at the Twrite that ends its line or JSON value."""

    def __init__(
        self,
        name: str,
        commit: CommitBody,
        *,
        limit: int = DEFAULT_BODY_LIMIT,
        limit_name: str = "",
        perm: int = 0o222,
        on_reject: OnReject | None = None,
        text: bool = True,
        framing: Framing = Framing.WHOLE,
        admit: Admit | None = None,
        max_depth: int | None = None,
    ) -> None:
        """`on_reject` is awaited once for an open that is refused, before the reply;
        `limit_name` says where `limit` is set (it is named in the refusal); `text` checks
        UTF-8 at each Twrite; `admit` is asked at each Twrite (see `Admit`); `max_depth`
        bounds a JSON body's nesting."""
        super().__init__(name, perm)
        self.commit = commit
        self.limit = limit
        self.limit_name = limit_name
        self.on_reject = on_reject
        self.text = text
        self.framing = framing
        self.admit = admit
        self.max_depth = max_depth
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
    """A readable value that a write on one open replaces (`role`, `context`)."""

    def __init__(
        self,
        name: str,
        read: Generate,
        commit: CommitBody,
        *,
        limit: int = DEFAULT_BODY_LIMIT,
        limit_name: str = "",
        perm: int = 0o644,
        on_reject: OnReject | None = None,
        text: bool = True,
        framing: Framing = Framing.WHOLE,
        admit: Admit | None = None,
    ) -> None:
        super().__init__(
            name,
            commit,
            limit=limit,
            limit_name=limit_name,
            perm=perm,
            on_reject=on_reject,
            text=text,
            framing=framing,
            admit=admit,
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

    def notify_readable(self, wake: Callable[[], None] | None) -> bool:
        return self._reader.on_ready(wake)  # the next line or the end calls it

    async def clunk(self) -> None:
        self._reader.close()

    def clunk_now(self) -> None:
        self._reader.close()

    async def abort(self) -> None:
        self._reader.close()


class StreamFile(FsNode):
    """A blocking stream of lines (`events`, `log`); mtime is the last line's time."""

    def __init__(self, name: str, stream: LineStream, *, perm: int = 0o444) -> None:
        super().__init__(name, perm)
        self.stream = stream
        self.open_blocks = False

    def stat(self) -> NodeStat:
        st = super().stat()
        return attrs.evolve(st, mtime_ns=self.stream.last_publish_ns or st.mtime_ns)

    async def open(self, mode: OpenMode) -> Handle:
        return _StreamHandle(self.stream.open_reader())
