"""The session part of the `agent/` tree (DESIGN.md section 4), served from a `SessionManager`.

    agent/ctl (new, kill)  list  models  roles/  sandbox-roles/  scripts/
    agent/<id>/ (also agent/<alias>/): ctl in out wait queue state usage cost approval role
                context alias model cwd sandbox approver created first_prompt log events todos

The tree observes sessions and owns none of their state: each file calls one `Session` method
when 9P asks (a snapshot at open, a body at clunk, a ctl line when written) and turns a
`SessionError` into the 9P error, prefixed with the file's name. A session's nodes reach it by
id (listed unbuilt; qids kept across idle unloads) and build it, records replayed in a worker
thread, before they touch it (`_Reviving`: a fid held across an unload). Removing it is `kill`
(EBUSY while an approval waits), renaming it sets the alias; removing a file inside removes
nothing. `in`/`context` take at most `[sessions] max_prompt_bytes` per open. `out` is marked
read at clunk only after a read reached its end; `wait` answers once per open.
`SessionExtension`s (`SessionTree.extend`, before `mount`) add files, ctl verbs and `new` keys.
Per-file details: docs/decisions.md, "Module notes" (anvild.tree.sessions).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, cast

import attrs
import trio

from anvild.fs import (
    BodyFile,
    Command,
    CommandError,
    CommandSpec,
    CommandTable,
    CtlFile,
    Directory,
    DynamicChildren,
    Framing,
    FsNode,
    SnapshotFile,
    ValueFile,
    Wait,
    WaitFile,
    qid_paths_from,
    reserve_qid_paths,
)
from anvild.fs.ctl import split_lines
from anvild.fs.nodes import keep_on_remove
from anvild.ninep.backend import LATER, Handle, Later, Node, NodeStat, OpenMode, StatChange
from anvild.ninep.constants import DMDIR
from anvild.ninep.errors import FsError, InvalidInput
from anvild.session import (
    InvalidSessionRequest,
    LineReader,
    NewSession,
    Session,
    SessionError,
    SessionManager,
    SessionNotFound,
)
from anvild.session import roles as session_roles
from anvild.session.events import SessionEvent, encode_event
from anvild.session.manager import NEW_FLAGS, NEW_KEYS
from anvild.store import PendingResult
from anvild.tree import new_args
from anvild.tree import roles as roles_tree
from anvild.tree._text import event_forwarder, value_line, written_text
from anvild.tree.refusals import admit_context, admit_prompt, fs_error, kind_of
from anvild.tree.root import RootTree

__all__ = [
    "SESSION_FILES",
    "ModelLine",
    "NewKey",
    "ReadToEndHandle",
    "SessionExtension",
    "SessionTree",
    "forward_events",
]

SESSION_FILES = (
    "ctl",
    "in",
    "out",
    "wait",
    "queue",
    "state",
    "usage",
    "cost",
    "approval",
    "role",
    "context",
    "alias",
    "model",
    "cwd",
    "sandbox",
    "approver",
    "created",
    "first_prompt",
    "log",
    "events",
    "todos",
)
"""A session directory's files, in listing order."""

SESSION_VERBS = ("stop", "start", "restart", "kill", "cancel", "clear")
MAX_PROMPT_BYTES = 1 << 20
"""The default cap of a write to `in` or `context` (`[sessions] max_prompt_bytes`)."""
PROMPT_LIMIT_NAME = "[sessions] max_prompt_bytes in the daemon's config"
MAX_ROLE_BYTES = 1024  # a role name, with room for blanks around it
MAX_WORDS = 10_000  # a free-text argument (a summary, a reason) is the rest of the line
QID_BLOCK: Final = 64
"""Qid paths reserved per session directory: its nodes, made again after an idle unload, get
the qids they had (clients such as v9fs cache by qid.path)."""


@attrs.frozen
class NewKey:
    """A `key=value` of `new` that an extension handles. `check(value)` runs before the session
    is created and raises `CommandError` for a bad value; `apply(session, value)` runs after."""

    name: str
    check: Callable[[str], None]
    apply: Callable[[Session, str], Awaitable[None]]


def _no_files(session: Session) -> Iterable[Node]:
    return ()


def _no_verbs(session: Session) -> Iterable[CommandSpec]:
    return ()


@attrs.frozen
class SessionExtension:
    """What an extension adds to every session: files after the standard ones, ctl verbs,
    `new` keys (see the module docstring)."""

    files: Callable[[Session], Iterable[Node]] = _no_files
    verbs: Callable[[Session], Iterable[CommandSpec]] = _no_verbs
    new_keys: tuple[NewKey, ...] = ()
    answered: Callable[[Session, PendingResult], Awaitable[None]] | None = None
    """Awaited after a write answered a result gate (`approval`, or ctl approve/reject), with
    the gate it closed, before the write returns (the bead gates settle the bead here)."""


@attrs.frozen
class ModelLine:
    """One line of `agent/models`."""

    alias: str
    provider: str
    model: str
    window: int
    key_present: bool

    def text(self) -> str:
        present = "yes" if self.key_present else "no"
        return f"{self.alias}\t{self.provider}\t{self.model}\t{self.window}\t{present}\n"


def _fs_error(name: str, exc: SessionError) -> FsError:
    return fs_error(name, exc)


# --- file kinds of their own ----------------------------------------------------------------


class ReadToEndHandle(Handle):
    """Reads of a snapshot taken at open; `reached_eof` once a read reached its end, so that
    only what an open showed in full counts as read (`out`, a mailbox's inbox)."""

    def __init__(self, content: bytes) -> None:
        self._content = content
        self._reached_eof = False

    async def read(self, offset: int, count: int) -> bytes:
        data = self._content[offset : offset + count]
        if offset + len(data) >= len(self._content):
            self._reached_eof = True
        return data


class _OutHandle(ReadToEndHandle):
    def __init__(self, session: Session, mode: OpenMode) -> None:
        self._session = session
        self._text = session.out
        self._reads = mode.read
        super().__init__(self._text.encode())

    async def clunk(self) -> None:
        # Only the answer this open showed counts as read: a newer one stays in await.
        if self._reads and self._reached_eof and self._session.out == self._text:
            self._session.mark_out_read()


class _OutFile(FsNode):
    def __init__(self, session: Session) -> None:
        super().__init__("out", 0o444)
        self._session = session

    async def open(self, mode: OpenMode) -> Handle:
        return _OutHandle(self._session, mode)


def _session_wait(current: _Current) -> Wait:
    """`wait`: the prompts accepted before this open; the answer is the state and a newline,
    from the session as it is at the read (built again if it was unloaded since the open)."""
    seq = current.now().accepted_seq()

    async def wait() -> str:
        return f"{(await current.now().wait_handled(seq)).value}\n"

    return wait


LineAction = Callable[[str], Awaitable[None]]


class _LinesHandle(Handle):
    def __init__(self, node: _LinesFile, snapshot: bytes) -> None:
        self._node = node
        self._snapshot = snapshot
        self._lock = trio.Lock()

    async def read(self, offset: int, count: int) -> bytes:
        return self._snapshot[offset : offset + count]

    async def write(self, offset: int, data: bytes) -> int:
        # Offsets are ignored, as on every ctl file: each write holds complete lines.
        name = self._node.name
        async with self._lock:
            try:
                lines = split_lines(data)
            except CommandError as exc:
                raise InvalidInput(f"{name}: {exc}") from exc
            for line in lines:
                try:
                    await self._node.action(line)
                except SessionError as exc:
                    raise _fs_error(name, exc) from exc
            if lines:
                self._node.touch()
        return len(data)


class _LinesFile(FsNode):
    """A snapshot to read (taken at open) and command lines to write, one action per line."""

    def __init__(self, name: str, read: Callable[[], str], action: LineAction) -> None:
        super().__init__(name, 0o644)
        self._read = read
        self.action = action

    async def open(self, mode: OpenMode) -> Handle:
        snapshot = self._read().encode() if mode.read else b""
        return _LinesHandle(self, snapshot)

    async def wstat(self, change: StatChange) -> None:
        if not change.is_truncate_only():
            await super().wstat(change)


class _ReaderHandle(Handle):
    clunk_blocks = False  # clunk closes the reader, which releases a read still waiting

    def __init__(self, reader: LineReader) -> None:
        self._reader = reader

    @property
    def read_blocks(self) -> bool:  # type: ignore[override]  # computed per Tread
        """Asked by the server for each Tread: a reader that is behind has lines buffered, and
        its read returns them at once, so the server answers it inline (no task per read);
        only a read that would wait for the next line gets a task of its own."""
        return not self._reader.ready()

    async def read(self, offset: int, count: int) -> bytes:
        return await self._reader.read(count)  # a pipe: each open reads from its own cursor

    def read_now(self, offset: int, count: int) -> bytes | Later:
        data = self._reader.read_nowait(count)
        return LATER if data is None else data

    def notify_readable(self, wake: Callable[[], None] | None) -> bool:
        return self._reader.on_ready(wake)  # the next line or the end calls it

    async def clunk(self) -> None:
        self._reader.close()

    async def abort(self) -> None:
        self._reader.close()


class _ReaderFile(FsNode):
    """A blocking stream file over a session's `LineBroadcast` (`log`, `events`)."""

    def __init__(self, name: str, open_reader: Callable[[], LineReader]) -> None:
        super().__init__(name, 0o444)
        self._open_reader = open_reader

    async def open(self, mode: OpenMode) -> Handle:
        return _ReaderHandle(self._open_reader())


# --- one session's directory ----------------------------------------------------------------


class _Current:
    """A session as its directory's nodes reach it, by id: each attribute is the manager's
    current `Session`'s (built again after an idle unload), or the last one's once the session
    is gone (an ended session's files still answer). Equal to, and hashed as, that session, so
    what keeps per-session state by `Session` finds it."""

    __slots__ = ("__weakref__", "_id", "_last", "_manager")

    def __init__(self, manager: SessionManager, session: Session) -> None:
        self._manager = manager
        self._id = session.id
        self._last = session

    def now(self) -> Session:
        with contextlib.suppress(SessionNotFound):  # gone: its last state still answers
            self._last = self._manager.get(self._id)
        return self._last

    def ready(self) -> bool:
        """Whether `now` builds nothing: the session is built, or gone. False once an idle
        unload put it back to its summary."""
        return not self._manager.at_rest(self._id)

    async def load(self) -> None:
        """Build the session again if it was unloaded, its records replayed in a worker
        thread (`SessionManager.load`), not on the event loop as `now` would."""
        if not self.ready():
            with contextlib.suppress(SessionNotFound):  # gone meanwhile: `now` answers
                self._last = await self._manager.load(self._id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.now(), name)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.now()

    def __hash__(self) -> int:
        return hash(self.now())


class _Reviving(FsNode):
    """A node of a session's directory (a file, or a directory such as `turns/`) in front of
    the node that serves it, with its name, mode and qid: each call first builds the session
    again if an idle unload put it back to its summary (`_Current.load`), so a fid walked
    before the unload never has its records replayed on the event loop. What cannot wait
    (`*_now`) answers LATER until the session is built; its handles do the same."""

    def __init__(self, inner: Node, current: _Current) -> None:
        st = inner.stat()
        super().__init__(st.name, st.mode, qid_path=st.qid_path)
        self._inner = inner
        self._current = current

    @property
    def open_blocks(self) -> bool:  # type: ignore[override]  # asked per Topen: a build waits
        return self._inner.open_blocks or not self._current.ready()

    def stat(self) -> NodeStat:
        return self._inner.stat()

    async def walk(self, name: str) -> Node | None:
        await self._current.load()
        found = await self._inner.walk(name)
        return None if found is None else _Reviving(found, self._current)

    def walk_now(self, name: str) -> Node | Later | None:
        if not self._current.ready():
            return LATER
        found = self._inner.walk_now(name)
        return _Reviving(found, self._current) if isinstance(found, Node) else found

    async def list(self) -> Sequence[Node]:
        await self._current.load()
        return [_Reviving(node, self._current) for node in await self._inner.list()]

    async def open(self, mode: OpenMode) -> Handle:
        await self._current.load()
        return _RevivingHandle(await self._inner.open(mode), self._current)

    def open_now(self, mode: OpenMode) -> Handle | Later:
        if not self._current.ready():
            return LATER
        handle = self._inner.open_now(mode)
        return LATER if handle is LATER else _RevivingHandle(handle, self._current)

    async def create(self, name: str, perm: int) -> Node:
        await self._current.load()
        return _Reviving(await self._inner.create(name, perm), self._current)

    async def remove(self) -> None:
        await self._current.load()
        await self._inner.remove()

    async def wstat(self, change: StatChange) -> None:
        await self._current.load()
        await self._inner.wstat(change)


class _RevivingHandle(Handle):
    """A handle of a `_Reviving` node: each call first builds the session again if it was
    unloaded since the open (an abort builds nothing: it commits nothing)."""

    def __init__(self, inner: Handle, current: _Current) -> None:
        self._inner = inner
        self._current = current

    @property
    def read_blocks(self) -> bool:  # type: ignore[override]  # asked per Tread: a build waits
        return self._inner.read_blocks or not self._current.ready()

    @property
    def write_blocks(self) -> bool:  # type: ignore[override]
        return self._inner.write_blocks or not self._current.ready()

    @property
    def clunk_blocks(self) -> bool:  # type: ignore[override]
        return self._inner.clunk_blocks or not self._current.ready()

    async def read(self, offset: int, count: int) -> bytes:
        await self._current.load()
        return await self._inner.read(offset, count)

    async def write(self, offset: int, data: bytes) -> int:
        await self._current.load()
        return await self._inner.write(offset, data)

    async def clunk(self) -> None:
        await self._current.load()
        await self._inner.clunk()

    async def abort(self) -> None:
        await self._inner.abort()

    def read_now(self, offset: int, count: int) -> bytes | Later:
        return self._inner.read_now(offset, count) if self._current.ready() else LATER

    def notify_readable(self, wake: Callable[[], None] | None) -> bool:
        if wake is not None and not self._current.ready():
            return False  # read in a task, which builds it first
        return self._inner.notify_readable(wake)

    def clunk_now(self) -> Later | None:
        return self._inner.clunk_now() if self._current.ready() else LATER


class _SessionDirectory(Directory):
    """`agent/<id>/`: its removal kills the session, a rename sets its alias (the module
    docstring, "File verbs"). Removing what is in it removes nothing; renaming it is refused."""

    def __init__(
        self, session_id: str, manager: SessionManager, files: Iterable[Node], qid_path: int
    ) -> None:
        super().__init__(session_id, files, keep_children=True, qid_path=qid_path)
        self._session_id = session_id
        self._manager = manager

    async def remove(self) -> None:
        await _run(_loaded(self._manager, self._session_id), self.name)
        await _run(self._manager.remove_session(self._session_id), self.name)

    async def wstat(self, change: StatChange) -> None:
        if change.name is None or attrs.evolve(change, name=None) != StatChange():
            await super().wstat(change)  # only the name of a session directory changes
            return
        try:
            await _loaded(self._manager, self._session_id)
            self._manager.set_alias(self._session_id, change.name)
        except SessionError as exc:
            raise kind_of(exc)(f"{self.name}: {exc}") from exc


async def _loaded(manager: SessionManager, key: str) -> None:
    """Build the session `key` if it is at rest unbuilt, its records replayed in a worker
    thread, before a manager call that builds it on the calling thread (`kill`,
    `remove_session`, `set_alias`)."""
    await manager.load(key)


def _session_directory(
    session: Session,
    manager: SessionManager,
    extensions: Sequence[SessionExtension] = (),
    max_prompt_bytes: int = MAX_PROMPT_BYTES,
    qid_path: int | None = None,
) -> Directory:
    """`agent/<id>/`, its nodes reaching the session through `_Current`; `qid_path`: the
    first of its reserved block (`QID_BLOCK`), else one is reserved."""
    first = reserve_qid_paths(QID_BLOCK) if qid_path is None else qid_path
    current = _Current(manager, session)
    s = cast(Session, current)
    with qid_paths_from(first + 1, QID_BLOCK - 1):
        files = _session_files(s, current, extensions, max_prompt_bytes)
    for node in files:  # what the directory keeps on remove is the node behind its `_Reviving`
        keep_on_remove(node)
    reviving = [_Reviving(node, current) for node in files]
    return _SessionDirectory(session.id, manager, reviving, first)


def _session_files(
    s: Session,
    current: _Current,
    extensions: Sequence[SessionExtension],
    max_prompt_bytes: int,
) -> list[Node]:

    def verb(name: str) -> CommandSpec:
        async def run(command: Command) -> str:
            await _run(s.control(name))
            return ""

        return CommandSpec(name, run, usage=name)

    async def switch(command: Command) -> str:
        await _run(s.switch_model(command.args[0]))
        return ""

    def rest_of(command: Command) -> str:
        return command.line.strip().partition(" ")[2].strip()

    async def request_approval(command: Command) -> str:
        try:
            s.request_result_approval(rest_of(command), "ctl")
        except SessionError as exc:
            raise kind_of(exc)(str(exc)) from exc
        return ""

    async def answered(gate: PendingResult | None) -> None:
        if gate is not None and s.pending_result is not gate:
            for extension in extensions:
                if extension.answered is not None:
                    await extension.answered(s, gate)

    async def fixed_approver(command: Command) -> str:
        raise CommandError(
            f"the approver of session {s.id} is {s.approver}, fixed when the session was "
            "created: no verb changes it; create a new session with approver=ID|ALIAS|user"
        )

    async def answer_ctl(command: Command) -> str:
        gate = s.pending_result
        try:
            s.answer_approval(command.line)
        except SessionError as exc:
            raise kind_of(exc)(str(exc)) from exc
        await answered(gate)
        return ""

    ctl = CommandTable(
        [
            *(verb(v) for v in SESSION_VERBS),
            CommandSpec("model", switch, usage="model NAME", min_args=1, max_args=1),
            CommandSpec(
                "request_approval",
                request_approval,
                usage="request_approval [SUMMARY]",
                max_args=MAX_WORDS,
            ),
            CommandSpec("approve", answer_ctl, usage="approve"),
            CommandSpec("approver", fixed_approver, usage="approver", max_args=MAX_WORDS),
            CommandSpec(
                "reject", answer_ctl, usage="reject REASON", min_args=1, max_args=MAX_WORDS
            ),
            *(spec for extension in extensions for spec in extension.verbs(s)),
        ]
    )

    async def submit(data: bytes) -> None:
        text = written_text("in", data)
        try:
            s.submit(await s.screen_prompt(text))  # UserPromptSubmit hooks: may refuse
        except SessionError as exc:
            raise _fs_error("in", exc) from exc

    async def set_role(data: bytes) -> None:
        try:
            s.set_role(written_text("role", data))
        except SessionError as exc:
            raise _fs_error("role", exc) from exc

    async def set_context(data: bytes) -> None:
        try:
            s.set_context(written_text("context", data))
        except SessionError as exc:
            raise _fs_error("context", exc) from exc

    async def drop(line: str) -> None:
        if line.strip() != "drop":
            raise InvalidSessionRequest(f"unknown queue command {line.strip()!r}: write drop")
        s.drop_queue()

    async def answer(line: str) -> None:
        gate = s.pending_result
        s.answer_approval(line)
        await answered(gate)

    files: list[Node] = [
        CtlFile("ctl", ctl, perm=0o644),
        BodyFile(
            "in",
            submit,
            limit=max_prompt_bytes,
            limit_name=PROMPT_LIMIT_NAME,
            admit=admit_prompt(s),
        ),
        _OutFile(s),
        WaitFile("wait", lambda: _session_wait(current)),
        _LinesFile("queue", lambda: s.queue_text(), drop),
        SnapshotFile("state", lambda: value_line(s.status.value)),
        SnapshotFile("usage", lambda: value_line(s.usage_line())),
        SnapshotFile("cost", lambda: s.cost_text()),
        _LinesFile("approval", lambda: s.approval_text(), answer),
        ValueFile(
            "role", lambda: value_line(s.role), set_role, limit=MAX_ROLE_BYTES, framing=Framing.LINE
        ),
        ValueFile(
            "context",
            lambda: s.context,
            set_context,
            limit=max_prompt_bytes,
            limit_name=PROMPT_LIMIT_NAME,
            admit=admit_context(s),
        ),
        SnapshotFile("alias", lambda: value_line(s.alias)),
        SnapshotFile("model", lambda: value_line(s.model)),
        SnapshotFile("cwd", lambda: value_line(s.cwd)),
        SnapshotFile("sandbox", lambda: value_line(s.sandbox)),
        SnapshotFile("approver", lambda: value_line(s.approver)),
        SnapshotFile("created", lambda: value_line(s.created)),
        SnapshotFile("first_prompt", lambda: value_line(s.first_prompt)),
        _ReaderFile("log", lambda: s.log.open_reader()),
        _ReaderFile("events", lambda: s.events.open_reader()),
        SnapshotFile("todos", lambda: s.todos_text()),
        *(node for extension in extensions for node in extension.files(s)),
    ]
    return files


async def _run(action: Awaitable[None], name: str = "") -> None:
    """Await a supervisor call from a ctl handler (or a file verb on `name`); its refusal
    becomes the request's error, of the kind (errno) `anvild.tree.refusals` gives it."""
    try:
        await action
    except SessionError as exc:
        raise kind_of(exc)(f"{name}: {exc}" if name else str(exc)) from exc


class _SessionDirectories(DynamicChildren):
    """The live sessions as directories, by id (listed) and by alias (walk only)."""

    def __init__(
        self,
        manager: SessionManager,
        extensions: Sequence[SessionExtension],
        max_prompt_bytes: int = MAX_PROMPT_BYTES,
    ) -> None:
        self._manager = manager
        self._extensions = extensions
        self._max_prompt_bytes = max_prompt_bytes
        self._nodes: dict[str, Directory] = {}  # the built sessions' directories
        self._qids: dict[str, int] = {}  # each session's reserved qid block, while it lives
        manager.unload_listeners.append(self._unloaded)

    def _qid(self, session_id: str) -> int:
        if (first := self._qids.get(session_id)) is None:
            first = self._qids[session_id] = reserve_qid_paths(QID_BLOCK)
        return first

    def _node(self, session: Session) -> Directory:
        known = self._nodes.get(session.id)
        if known is None:
            known = self._nodes[session.id] = _session_directory(
                session,
                self._manager,
                self._extensions,
                self._max_prompt_bytes,
                self._qid(session.id),
            )
        return known

    def _listed(self, session_id: str) -> Node:
        """What a listing shows of a session not built: the directory's name, mode and qid,
        without building it (a walk into it does)."""
        return FsNode(session_id, DMDIR | 0o555, qid_path=self._qid(session_id))

    def _unloaded(self, session_id: str) -> None:
        self._nodes.pop(session_id, None)

    def _prune(self, live: Iterable[str]) -> None:
        ids = set(live)
        for gone in [i for i in self._nodes if i not in ids]:
            del self._nodes[gone]
        for gone in [i for i in self._qids if i not in ids]:
            del self._qids[gone]

    async def entries(self) -> Sequence[Node]:
        ids = self._manager.ids()
        self._prune(ids)
        built = {s.id: s for s in self._manager.built_sessions()}
        return [self._node(session) if (session := built.get(i)) else self._listed(i) for i in ids]

    async def lookup(self, name: str) -> Node | None:
        try:
            session = await self._manager.load(name)
        except SessionNotFound:
            self._prune(self._manager.ids())  # building none: a mistyped name is cheap
            return None
        return self._node(session)


# --- the tree -------------------------------------------------------------------------------


class SessionTree:
    """The session part of `agent/` for one `SessionManager`; `mount` it on a `RootTree`."""

    def __init__(
        self,
        manager: SessionManager,
        *,
        models: Callable[[], Iterable[ModelLine]] = tuple,
        max_prompt_bytes: int = MAX_PROMPT_BYTES,
    ) -> None:
        """`models` lists the usable models each time `agent/models` is opened;
        `max_prompt_bytes` caps a write to `in` or `context` (refused at the Twrite that
        crosses it, naming `[sessions] max_prompt_bytes`)."""
        self.manager = manager
        self._models = models
        self.extensions: list[SessionExtension] = []
        self.children = _SessionDirectories(manager, self.extensions, max_prompt_bytes)
        self.commands = [
            self._new_spec(),
            CommandSpec("kill", self._kill, usage="kill ID", min_args=1, max_args=1),
        ]
        self.files: list[Node] = [
            SnapshotFile("models", self._models_text),
            *roles_tree.nodes(manager.settings),
        ]

    def extend(self, extension: SessionExtension) -> None:
        """Add `extension` to every session directory (call before `mount`)."""
        self.extensions.append(extension)
        self.commands[0] = self._new_spec()

    def _new_keys(self) -> dict[str, NewKey]:
        return {key.name: key for ext in self.extensions for key in ext.new_keys}

    def _new_spec(self) -> CommandSpec:
        extra = self._new_keys()
        usage = (
            "new [MODEL] [/DIR] [ROLE] [model=M] [cwd=D] [role=R] [alias=A] [sandbox=S] "
            "[max_steps=N] [permission=MODE] [budget=TOKENS] [approver=ID|ALIAS|user] "
            "[from=ID|ALIAS|latest] [ephemeral] [headless]"
        )
        usage += "".join(f" [{name}=...]" for name in extra)
        return CommandSpec(
            "new",
            self._new,
            usage=usage,
            options=frozenset({*NEW_KEYS, *NEW_FLAGS, *extra}),
            flags=frozenset(NEW_FLAGS),
            max_args=new_args.MAX_POSITIONAL,
        )

    def mount(self, root: RootTree) -> None:
        """Add the verbs, `models`, `roles/` and the session directories to `root`, and make
        `manager.list_text` its `list`."""
        for spec in self.commands:
            root.commands.add(spec)
        for node in self.files:
            root.root.add(node)
        root.root.set_dynamic(self.children)
        root.list_sessions = self.manager.list_text

    async def _new(self, command: Command) -> str:
        extra = self._new_keys()
        vocab = new_args.Vocabulary.from_lines(self._models(), session_roles.ROLES)
        given = {**new_args.positional_options(command, vocab), **command.options}
        words = [f"{key}={value}" for key, value in given.items() if key not in extra]
        words += sorted(command.flags)
        chosen = [(extra[key], value) for key, value in command.options.items() if key in extra]
        for key, value in chosen:
            key.check(value)
        try:
            session = await self.manager.create(NewSession.parse(words))
        except SessionError as exc:
            raise kind_of(exc)(str(exc)) from exc
        for key, value in chosen:
            try:
                await key.apply(session, value)
            except (CommandError, SessionError) as exc:
                raise CommandError(
                    f"session {session.id} was created, but {key.name}={value} failed: {exc}"
                ) from exc
        return session.id

    async def _kill(self, command: Command) -> str:
        await _run(_loaded(self.manager, command.args[0]))
        await _run(self.manager.kill(command.args[0]))
        return ""

    def _models_text(self) -> str:
        return "".join(line.text() for line in self._models())


def forward_events(root: RootTree) -> Callable[[SessionEvent], None]:
    """An `on_event` for `SessionManager` that puts each session event on `agent/events`."""
    return event_forwarder(root, encode_event)
