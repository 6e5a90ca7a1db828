"""`SessionManager`: every session of the daemon, their task tree, creation and restoration.

- `await nursery.start(manager.run)` restores every session, then serves; each session runs in
  the manager's nursery. A session at rest (idle or await, nothing queued or pending) is kept
  as its summary: from the index (`anvild.store.index`) when its file is unchanged, else from a
  replay; it is built on first use (`get`, `load`, `sessions`: one choke point, `_built`) and
  unloaded again after `idle_unload` seconds unused. Cancelling it cancels every turn (approvals
  cancelled, never approved), records how each ended, syncs and closes every journal, writes
  the index (shielded).
- `create` validates everything (model, cwd, role, sandbox, alias) before anything is written.
- Restoration never re-runs a call whose finish is not durable (`Journal.recover`), and ends
  a `task` child still live (the call that waited for it ended with the daemon); a file that
  cannot be loaded is left untouched and reported (`SessionFailed`). Sessions come back in
  creation order, after sandbox litter of a killed daemon is swept.
- Every provider request passes its provider's `trio.CapacityLimiter` (arrival order, parked).
- Session events are typed (`anvild.session.events`), published on `manager.events` and handed
  to `on_event`. Details: docs/decisions.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import errno
import os
import re
import secrets
import stat
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import outcome
import structlog
import trio

from anvild import store
from anvild.agent.permissions.policy import Mode
from anvild.agent.tools.base import Tool
from anvild.agent.tools.bash import BashTool, CommandWrapper, SandboxWrapper, default_wrapper_for
from anvild.agent.tools.files import EditFile, ReadFile, WriteFile
from anvild.agent.tools.search import Glob, Grep
from anvild.agent.tools.todo import TodoWriteTool
from anvild.llm.errors import ConfigError
from anvild.llm.provider import Provider, WrappedProvider
from anvild.llm.registry import Pricing, ResolvedModel
from anvild.llm.stream import StreamEvent, Usage
from anvild.llm.types import ChatRequest
from anvild.sandbox import ReadOnly, SandboxPolicy, WorkspaceWrite, litter
from anvild.sandbox.confine import Sandbox
from anvild.session import accounting, leftovers, roles
from anvild.session.errors import (
    InvalidSessionRequest,
    NameTaken,
    RecordWriteFailed,
    SessionNotFound,
    SessionRefused,
)
from anvild.session.events import (
    SessionCreated,
    SessionEnded,
    SessionEvent,
    SessionFailed,
    SessionRenamed,
)
from anvild.session.events import encode_event as encode_session_event
from anvild.session.kept import Shelved, remove_stale, shelve
from anvild.session.project_config import ProjectConfigs
from anvild.session.session import USER, Session, list_line
from anvild.session.settings import (
    MODE_ORDER,
    Services,
    SessionSettings,
    ToolSetup,
    ToolsFactory,
    check_mode,
    sandbox_name,
    sandbox_policy,
)
from anvild.session.stream import LineBroadcast
from anvild.store import (
    ContextReplaced,
    IndexEntry,
    IndexWriter,
    Journal,
    JournalWriteError,
    ModelChanged,
    Note,
    Pending,
    Recovery,
    ReplaceReason,
    SessionStarted,
    SessionState,
    SessionStatus,
    SessionStore,
    SessionSummary,
    StoreError,
    TodosChanged,
    at_rest,
    read_index,
    read_journal,
    recover,
    trusted,
)

log = structlog.get_logger(__name__)

RESERVED: Final = frozenset(
    {"ctl", "list", "models", "events", "roles", "beads", "convoys", "user", "version", "mail"}
    | {"budget", "anvild"}
)
"""Names an alias may not take: the `agent/` entries, and `anvild`, the sender of the daemon's
own mail (ERROR_REPORTs), so a reply to the daemon can never reach a session."""
ALIAS_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
NEW_KEYS: Final = (
    "model",
    "cwd",
    "role",
    "alias",
    "sandbox",
    "max_steps",
    "permission",
    "budget",
    "approver",
    "from",
)
LATEST: Final = "latest"
"""`from=latest`: the latest created session (live or exited) whose cwd is the new one's."""


MAX_STEPS_LIMIT: Final = 1000
"""The largest `max_steps=` a `new` may ask for."""
BUDGET_LIMIT: Final = 1_000_000_000
"""The largest `budget=` (tokens per turn) a `new` may ask for."""
NEW_FLAGS: Final = ("ephemeral", "headless")
_INT_KEYS: Final = {"max_steps": MAX_STEPS_LIMIT, "budget": BUDGET_LIMIT}
_USAGE: Final = (
    "the arguments are model=M cwd=DIR role=R alias=A sandbox=S max_steps=N permission=MODE "
    "budget=TOKENS approver=ID|ALIAS|user from=ID|ALIAS|latest ephemeral headless"
)


@attrs.frozen
class NewSession:
    """The arguments of `new`: `model=M cwd=D role=R alias=A sandbox=S max_steps=N
    permission=MODE budget=TOKENS approver=ID|ALIAS|user from=ID|ALIAS|latest ephemeral
    headless`.

    `approver` names the session that may answer this session's result gates besides a person
    (a live session's id or alias, recorded as its id), or `user` (the default: only a
    person). Whoever creates the session names it; it never changes afterwards.

    `max_steps` (1..1000) and `budget` (tokens per turn, 1..10^9) replace the daemon's settings
    for this session; `permission` is a permission mode (plan, default, accept-edits, bypass),
    refused by `SessionManager.create` when it is wider than the daemon's ceiling
    (`SessionSettings.max_mode`). `headless`: nobody watches `approval`, so a call that needs
    approval is refused at once with a reason naming what would allow it.

    `source` (`from=`) starts the session from another one's conversation: a session whose
    records exist, live or exited, by id or alias (an exited one's latest alias), or `latest`
    (the latest created session whose cwd is this one's). The new session gets a new id, the
    old one's transcript and todos, and its cwd, role, model, sandbox, max_steps, permission
    and budget unless this line gives them. The old session is only read."""

    model: str | None = None
    cwd: str | None = None
    role: str | None = None
    alias: str | None = None
    sandbox: str | None = None
    ephemeral: bool = False
    max_steps: int | None = None
    permission: str | None = None
    budget: int | None = None
    headless: bool = False
    approver: str | None = None
    source: str | None = None
    parent: str | None = None  # the session whose `task` call starts this one (never from ctl)

    @classmethod
    def parse(cls, words: Sequence[str]) -> NewSession:
        """From the words after `new`; a bad word raises `InvalidSessionRequest`."""
        values: dict[str, str] = {}
        flags = dict.fromkeys(NEW_FLAGS, False)
        for word in words:
            key, eq, value = word.partition("=")
            if not eq and key in flags:
                flags[key] = True
            elif eq and key in flags:
                if value not in ("true", "false", "1", "0", "yes", "no"):
                    raise InvalidSessionRequest(f"{key}={value}: use {key} or {key}=true")
                flags[key] = value in ("true", "1", "yes")
            elif eq and key in NEW_KEYS and value:
                if key in values:
                    raise InvalidSessionRequest(f"{key}= is given twice")
                values[key] = value
            else:
                raise InvalidSessionRequest(f"new: cannot use {word!r}; {_USAGE}")
        permission = values.get("permission")
        if permission is not None and permission not in (modes := [m.value for m in MODE_ORDER]):
            raise InvalidSessionRequest(
                f"permission={permission} is not a permission mode: use one of {', '.join(modes)}"
            )
        steps, budget = values.get("max_steps"), values.get("budget")
        return cls(
            model=values.get("model"),
            cwd=values.get("cwd"),
            role=values.get("role"),
            alias=values.get("alias"),
            sandbox=values.get("sandbox"),
            ephemeral=flags["ephemeral"],
            max_steps=None if steps is None else _bounded("max_steps", steps),
            permission=permission,
            budget=None if budget is None else _bounded("budget", budget),
            headless=flags["headless"],
            approver=values.get("approver"),
            source=values.get("from"),
        )


def _bounded(key: str, text: str) -> int:
    limit = _INT_KEYS[key]
    try:
        number = int(text, 10)
    except ValueError:
        number = 0
    if not 1 <= number <= limit or not text.isdigit():
        raise InvalidSessionRequest(f"{key}={text}: give a whole number from 1 to {limit}")
    return number


# -- providers behind their concurrency cap ----------------------------------------------------


class LimitedProvider(WrappedProvider):
    """A provider whose requests each hold one token of a `trio.CapacityLimiter` while they
    stream. Waiters are served in arrival order (trio's limiter is FIFO)."""

    def __init__(self, inner: Provider, limiter: trio.CapacityLimiter) -> None:
        self.inner = inner
        self.limiter = limiter

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        async with self.limiter, self.inner.stream(request) as events:
            yield events


# -- the default tool set ----------------------------------------------------------------------


def default_tools(setup: ToolSetup) -> list[Tool]:
    """The native tools; bash runs under the role's sandbox file."""

    def wrapper_for(policy: SandboxPolicy | None) -> CommandWrapper:
        if isinstance(policy, ReadOnly | WorkspaceWrite):
            return SandboxWrapper(
                Sandbox(policy, role=setup.sandbox_role, settings=setup.sandbox_settings)
            )
        return default_wrapper_for(policy)

    return [
        ReadFile(),
        WriteFile(),
        EditFile(),
        Glob(),
        Grep(),
        BashTool(wrapper_for=wrapper_for),
        TodoWriteTool(),
    ]


def chain_tools(*factories: ToolsFactory) -> ToolsFactory:
    """One tools factory from several: the daemon adds the coordination tools (mail, beads, the
    conductor's) after `default_tools`. Each factory sees the same `ToolSetup` and may return
    nothing for a session it does not serve (e.g. a role without those tools)."""

    def build(setup: ToolSetup) -> list[Tool]:
        return [tool for factory in factories for tool in factory(setup)]

    return build


def _unconfigured(session: Session) -> None:
    return None  # no project configs: the daemon's config applies as it is


def _new_id() -> str:
    return secrets.token_hex(4)


def _check_source(state: SessionState) -> None:
    """A session a new one may start from: nothing half done (an approval, calls in flight, a
    turn under way), so its transcript is one a provider takes."""
    name = f"session {state.id}"
    if state.ended is None and (state.approval is not None or state.result_approval is not None):
        raise InvalidSessionRequest(
            f"from={state.id}: {name} waits for an approval; answer it first (its approval file)"
        )
    if state.tools or state.pending_calls:
        raise InvalidSessionRequest(
            f"from={state.id}: {name} has tool calls in flight; wait for its turn to end (its "
            "wait file) or cancel it"
        )
    if state.ended is None and state.status.active:
        raise InvalidSessionRequest(
            f"from={state.id}: {name} is running a turn; wait for it to end (its wait file) or "
            "cancel it"
        )


def _readable(store: SessionStore, session_id: str) -> SessionState | None:
    try:
        return store.read(session_id).state
    except StoreError as exc:
        log.warning("session.source_unreadable", session=session_id, error=str(exc))
        return None


def _recorded(store: SessionStore, key: str, live: set[str]) -> SessionState | None:
    """The recorded state of the session with id `key`, else of the latest created session
    (not live) whose alias was last `key`; None when there is none. Only reads."""
    ids = store.ids()
    if key in ids:
        state = _readable(store, key)
        if state is None:
            raise InvalidSessionRequest(f"from={key}: the records of session {key} cannot be read")
        return state
    named = [
        state
        for session_id in ids
        if session_id not in live
        and (state := _readable(store, session_id)) is not None
        and state.alias == key
    ]
    return max(named, key=lambda state: state.created_at, default=None)


def _latest_of(
    store: SessionStore, cwd: Path, live: Sequence[SessionState], live_ids: set[str]
) -> SessionState | None:
    """The latest created session, live (`live`) or exited (read from `store`), of `cwd`."""
    here = os.path.realpath(cwd)
    exited = (
        state
        for session_id in store.ids()
        if session_id not in live_ids and (state := _readable(store, session_id)) is not None
    )
    found = [state for state in (*live, *exited) if os.path.realpath(state.cwd) == here]
    return max(found, key=lambda state: state.created_at, default=None)


def _record_fork(journal: Journal, base: SessionState) -> None:
    """After a forked session's `SessionStarted`: the old transcript, its todos and a note,
    synced, so a restart restores them. On a failure the file is ended (best effort) and
    `RecordWriteFailed` raised."""
    try:
        journal.append(Note(f"started from session {base.id}'s conversation"), sync=False)
        journal.append(ContextReplaced(base.messages, ReplaceReason.FORK), sync=False)
        if base.todos:
            journal.append(TodosChanged(base.todos), sync=False)
        journal.sync()
    except StoreError as exc:
        with contextlib.suppress(StoreError):
            journal.append(store.SessionEnded("the start from another session failed"), sync=True)
        journal.close()
        raise RecordWriteFailed(f"the session could not be created: {exc}") from exc


@attrs.frozen
class Child:
    """One child session (`task`) as its parent's `children` file and `cost` show it: live from
    the session, or as it was when it ended (a reaped one, or one read back after a restart)."""

    id: str
    role: str
    state: str
    outcome: str  # how its last turn ended ("-": none has)
    usage: Usage
    usd: float | None


CHILD_ORPHANED: Final = "interrupted by a daemon restart: the parent's task call is gone"
"""Why a `task` child live at a restart ends then (its `SessionEnded` reason)."""
INDEX_INTERVAL: Final = 1.0
"""Seconds between two writes of the session index (changes in between are written together)."""
_RESTING: Final = frozenset({SessionStatus.IDLE, SessionStatus.AWAIT})
_ABSENT: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})
"""What `Path.exists` calls absent (a cwd that "does not exist"); any other error is shown."""


def _at_rest(state: SessionState) -> bool:
    """Whether a replayed session may wait to be built (`anvild.store.at_rest`): nothing its
    task would do at once, so building it later changes nothing."""
    return at_rest(state)


@attrs.define(eq=False)
class _Unbuilt:
    """A session at rest that is not built: restored and not used yet, or unloaded for
    idleness. It holds its summary only (no journal, no transcript) and its model; building it
    replays its file. `entry` is what the index gets for it; `line` its `agent/list` line;
    `shelved` what an unload kept that the records cannot rebuild (`anvild.session.kept`)."""

    summary: SessionSummary
    target: ResolvedModel
    entry: IndexEntry | Pending
    shelved: Shelved | None = None
    line: str = ""

    def __attrs_post_init__(self) -> None:
        s = self.summary
        header = SessionState(
            s.id, s.alias, s.role, s.model, s.cwd, "", s.created_at, False, ""
        )  # the fields `list_line` shows, so both kinds of entry share one format
        self.line = list_line(header, s.status, self.target.name)

    @property
    def id(self) -> str:
        return self.summary.id

    @property
    def alias(self) -> str | None:
        return self.summary.alias

    @property
    def status(self) -> SessionStatus:
        return self.summary.status

    def list_line(self) -> str:
        return self.line


@attrs.frozen
class _Loaded:
    """One session file at the start: trusted from the index (`entry`, the file unread), or
    replayed (`journal`, open, and its cost), or not loadable (`error`)."""

    id: str
    entry: IndexEntry | None = None
    journal: Journal | None = None
    usd: float | None = None
    error: StoreError | None = None


def _load(
    store: SessionStore, ids: Sequence[str], pricing_of: Callable[[str], Pricing | None]
) -> list[_Loaded]:
    """Every session file: one the index describes as it is now (at rest, or ended without a
    parent) is taken from the index unread; any other is opened and replayed, and a live
    one's cost priced from its records. Blocking, one thread for them all."""
    prices: dict[str, Pricing | None] = {}

    def cached(model: str) -> Pricing | None:
        if model not in prices:
            prices[model] = pricing_of(model)
        return prices[model]

    index = read_index(store.directory)
    found: list[_Loaded] = []
    for session_id in ids:
        entry = trusted(index.get(session_id), store.path_for(session_id))
        if entry is not None:
            summary = entry.summary
            if summary.at_rest or (summary.ended and summary.parent is None):
                found.append(_Loaded(session_id, entry=entry))
                continue
        try:
            journal, contents = store.load(session_id)
        except StoreError as exc:
            found.append(_Loaded(session_id, error=exc))
            continue
        ended = journal.state.ended is not None
        usd = None if ended else accounting.priced(contents.records, cached)
        found.append(_Loaded(session_id, journal=journal, usd=usd))
    return found


def _pending(journal: Journal) -> Pending | None:
    """The index entry of an open session file as it is now (None while an append holds it)."""
    if (snapshot := journal.snapshot()) is None:
        return None
    state, seq, size = snapshot
    return Pending(SessionSummary.of(state), size, seq)


def _child_of(state: SessionState, status: str, usd: float | None) -> Child:
    turn = state.last_turn
    return Child(state.id, state.role, status, turn.outcome if turn else "-", state.usage, usd)


def _summary_child(entry: _Unbuilt) -> Child:
    """A child not built (at rest) as its parent's `children` shows it: as `_live_child`."""
    s, pricing = entry.summary, entry.target.pricing
    usd = None if pricing is None else pricing.cost(s.usage)
    return Child(s.id, s.role, s.status.value, s.outcome, s.usage, usd)


@attrs.frozen
class ManagerStatistics:
    sessions: int
    providers: Mapping[str, tuple[float, int]]  # name -> (tokens borrowed, tasks waiting)


class SessionManager:
    """Every live session, by id and alias, in creation order. See the module docstring."""

    def __init__(
        self,
        store: SessionStore,
        resolve: Callable[[str | None], ResolvedModel],
        *,
        settings: SessionSettings | None = None,
        tools: ToolsFactory = default_tools,
        default_cwd: Path | None = None,
        on_event: Callable[[SessionEvent], None] | None = None,
        new_id: Callable[[], str] = _new_id,
        configs: ProjectConfigs | None = None,
    ) -> None:
        self.store = store
        self.settings = settings or SessionSettings()
        self.events = LineBroadcast(self.settings.stream_limits)
        self._resolve_model = resolve
        self._tools = tools
        self._default_cwd = default_cwd
        self._on_event = on_event
        self._new_id = new_id
        self._sessions: dict[str, Session | _Unbuilt] = {}  # creation order
        self._aliases: dict[str, str] = {}
        self._claimed: set[str] = set()  # ids and aliases of sessions being created
        self._limiters: dict[str, trio.CapacityLimiter] = {}
        self._nursery: trio.Nursery | None = None
        self.on_all_built: Callable[[], None] | None = None  # once the restore is over
        self._configs = configs
        # Subagents: parent id -> child ids in creation order, child -> parent, and the
        # children that ended (reaped, or read back ended after a restart) as they ended.
        self._family: dict[str, list[str]] = {}
        self._parents: dict[str, str] = {}
        self._ended_children: dict[str, Child] = {}
        self._scopes: dict[str, trio.CancelScope] = {}  # each built session's task
        self._used: dict[str, float] = {}  # a built session's last `get` (monotonic seconds)
        # The index: what each built session's entry was last (by the state it was taken
        # from), the entries of ended sessions, and whether something changed since a write.
        self._indexed: dict[str, tuple[SessionState, IndexEntry | Pending]] = {}
        self._index_ended: dict[str, IndexEntry | Pending] = {}
        self._index_changed = trio.Event()
        self._index_writer = IndexWriter(store.directory, store.path_for)
        self._unsynced: dict[str, list[SessionEvent]] = {}  # see `_created`
        self.unload_listeners: list[Callable[[str], None]] = []
        """Called with a session's id when it is unloaded for idleness (the tree drops its
        nodes)."""
        if configs is not None:
            configs.publish = self.publish
        self._services = Services(
            settings=self.settings,
            resolve=self._resolve,
            provider_for=self.provider_for,
            tools=tools,
            publish=self.publish,
            on_exit=self._exited,
            before_turn=_unconfigured if configs is None else configs.before_turn,
            children=self.children_costs,
        )

    # -- the task ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Restore the sessions, report started, and host every session until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                # What killed sandboxes left in workspaces goes before any session runs again.
                litter_dir = self.settings.sandbox_settings.litter_directory()
                await trio.to_thread.run_sync(litter.sweep, litter_dir)
                await self._restore()
                await self._finish_undos()
                task_status.started()
                if self.on_all_built is not None:  # nothing more is built in the background
                    self.on_all_built()
                nursery.start_soon(self._keep_index)
                if self.settings.idle_unload > 0:
                    nursery.start_soon(self._unload_idle, self.settings.idle_unload)
                await trio.sleep_forever()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                for session in list(self._sessions.values()):
                    if isinstance(session, Session):
                        await self._close_journal(session.journal, session.id)
                await self._write_index()
            self.events.close()

    async def _finish_undos(self) -> None:
        """Build the sessions at rest whose undo a crash cut short: their task rolls it forward
        (`Turns.recover`) at once, before anyone uses them, as when every session was built."""
        workspaces = self.settings.checkpoints
        if workspaces is None:
            return
        for session_id in await trio.to_thread.run_sync(workspaces.undo_owners):
            if isinstance(self._sessions.get(session_id), _Unbuilt):
                with contextlib.suppress(SessionNotFound):  # reported by the load
                    await self.load(session_id)

    # -- lookup ------------------------------------------------------------------------------

    def get(self, key: str) -> Session:
        """The session with this id or alias (built, replaying its file, if it was not: see
        `load`); `SessionNotFound` otherwise. A use: it keeps the session from idle unload."""
        session = self._built(self._entry(key))
        self._used[session.id] = time.monotonic()
        return session

    async def load(self, key: str) -> Session:
        """`get`, with the file of a session not built yet replayed in a thread."""
        entry = self._entry(key)
        if isinstance(entry, _Unbuilt):
            try:
                journal, contents = await trio.to_thread.run_sync(self.store.load, entry.id)
            except StoreError:
                return self.get(key)  # which reports it
            if self._sessions.get(entry.id) is entry:
                session = self._build(entry, journal, contents.records)
                self._used[session.id] = time.monotonic()
                return session
            journal.close()  # built (or unloaded again) meanwhile: never two journals
        return self.get(key)

    def _find(self, key: str) -> Session | _Unbuilt | None:
        """The live entry with this id or alias, building none."""
        return self._sessions.get(key) or self._sessions.get(self._aliases.get(key, ""))

    def _entry(self, key: str) -> Session | _Unbuilt:
        session = self._find(key)
        if session is None:
            raise SessionNotFound(f"no session {key!r}: read agent/list for the live sessions")
        return session

    def sessions(self) -> tuple[Session, ...]:
        """Live sessions in creation order (ephemeral ones until they are reaped)."""
        return tuple(self._built(session) for session in list(self._sessions.values()))

    def built_sessions(self) -> tuple[Session, ...]:
        """The live sessions built so far, in creation order, building none: enough for what
        looks for sessions waiting on something (a gate, an approval, a turn), since only a
        session at rest is restored unbuilt."""
        return tuple(s for s in self._sessions.values() if isinstance(s, Session))

    def peek(self, key: str) -> Session | tuple[SessionSummary, ResolvedModel] | None:
        """The live session with this id or alias as it is now, building none and using none
        (idle unload still applies): a built one itself, one not built its summary and model;
        None when there is no such session. For views of every session (the web board) and
        what needs only a session's id, alias, role or status (resolving a mail's `to`)."""
        entry = self._find(key)
        return (entry.summary, entry.target) if isinstance(entry, _Unbuilt) else entry

    def at_rest(self, key: str) -> bool:
        """Whether the live session with this id or alias is at rest and not built (a use
        builds it, replaying its records). Building none, using none; cheap enough to ask on
        every 9P call of a session's files."""
        return type(self._find(key)) is _Unbuilt

    def ids(self) -> list[str]:
        """Every live session's id, in creation order, building none."""
        return list(self._sessions)

    def briefs(self) -> list[tuple[str, str | None, str, SessionStatus]]:
        """Every live session's id, alias, role and status, in creation order, building none."""
        return [
            (s.id, s.alias, s.summary.role if isinstance(s, _Unbuilt) else s.role, s.status)
            for s in self._sessions.values()
        ]

    def statuses(self) -> list[SessionStatus]:
        """Every live session's status, in creation order, building none."""
        return [session.status for session in self._sessions.values()]

    def list_text(self) -> str:
        """`agent/list`: one tab-separated line per session."""
        return "".join(session.list_line() + "\n" for session in self._sessions.values())

    # -- subagents ---------------------------------------------------------------------------

    def parent_of(self, session_id: str) -> str | None:
        """The id of the session whose `task` started this one, or None (a top-level one)."""
        return self._parents.get(session_id)

    def depth(self, session_id: str) -> int:
        """How many `task` parents are above this session (0: a top-level session)."""
        depth, seen = 0, {session_id}
        while (parent := self._parents.get(session_id)) is not None and parent not in seen:
            depth, session_id = depth + 1, parent
            seen.add(parent)
        return depth

    def children(self, parent_id: str) -> tuple[Child, ...]:
        """The children of a session, in creation order: live ones as they are now, ended ones
        as they ended (kept across reaping and restarts, from their records)."""
        found = []
        for child_id in self._family.get(parent_id, ()):
            session = self._sessions.get(child_id)
            if session is None:
                if (ended := self._ended_children.get(child_id)) is not None:
                    found.append(ended)
                continue
            if isinstance(session, _Unbuilt):
                found.append(_summary_child(session))
            else:
                found.append(self._live_child(session))
        return tuple(found)

    def children_costs(self, parent_id: str) -> tuple[tuple[Usage, float | None], ...]:
        """Each child's usage and USD cost (None: unknown), for the parent's `cost` file."""
        return tuple((child.usage, child.usd) for child in self.children(parent_id))

    @staticmethod
    def _live_child(session: Session) -> Child:
        state = session.record
        pricing = session.target.pricing
        usd = None if pricing is None else pricing.cost(state.usage)
        return _child_of(state, session.status.value, usd)

    def statistics(self) -> ManagerStatistics:
        providers = {
            name: (limiter.borrowed_tokens, limiter.statistics().tasks_waiting)
            for name, limiter in self._limiters.items()
        }
        return ManagerStatistics(len(self._sessions), providers)

    # -- creation and ending -----------------------------------------------------------------

    async def create(self, request: NewSession) -> Session:
        """A new session, started. Raises `InvalidSessionRequest` (what to fix) or
        `RecordWriteFailed` (its file could not be created)."""
        nursery = self._require_nursery()
        base = None if request.source is None else await self._source(request.source, request)
        cwd = self._check_cwd(request.cwd if base is None or request.cwd else base.cwd)
        role = roles.check_name(request.role or (base.role if base else roles.DEFAULT_ROLE))
        alias = request.alias
        if alias is not None:
            self._check_alias(alias)
        target = self._resolve(request.model or (base.model if base else None), cwd)
        budgets = self.settings.budgets
        if budgets is not None and (why := budgets.unpriced(target.name, target.pricing, role)):
            raise InvalidSessionRequest(why)
        sandbox_role = roles.sandbox_role(role, user_dir=self.settings.sandbox_role_dir)
        sandbox = request.sandbox or (base.sandbox if base else "")
        policy = sandbox_policy(sandbox, sandbox_role, self.settings)
        roles.role_text(role, user_dir=self.settings.role_text_dir)
        if base is not None:  # what the line leaves out, the old session had
            request = attrs.evolve(
                request,
                max_steps=base.max_steps if request.max_steps is None else request.max_steps,
                permission=base.permission if request.permission is None else request.permission,
                budget=base.token_budget if request.budget is None else request.budget,
            )
        if request.permission is not None:
            check_mode(Mode(request.permission), self.settings)
        approver = self._check_approver(request.approver, alias)
        session_id = self._fresh_id()
        claimed = {session_id} | ({alias} if alias else set())
        self._claimed |= claimed
        try:
            started = SessionStarted(
                id=session_id,
                alias=alias,
                role=role,
                model=target.name,
                cwd=str(cwd),
                sandbox=sandbox_name(policy),
                created_at=dt.datetime.now(dt.UTC),
                ephemeral=request.ephemeral,
                max_steps=request.max_steps,
                permission=request.permission,
                token_budget=request.budget,
                headless=request.headless,
                approver=approver,
                parent=request.parent,
            )
            if base is None:
                session = await self._created(started, target)
            else:  # the old transcript is recorded before the session is built from it
                journal = await self._create_file(started)
                await trio.to_thread.run_sync(_record_fork, journal, base)
                session = Session(journal, target, self._services)
            self._add(session)
            if request.parent is not None:
                self._family.setdefault(request.parent, []).append(session.id)
                self._parents[session.id] = request.parent
        finally:
            self._claimed -= claimed
        await nursery.start(self._host, session)
        self._index_changed.set()
        self.publish(
            SessionCreated(session.id, alias, role, target.name, str(cwd), request.ephemeral)
        )
        self._services.before_turn(session)  # its config reported now, not at its first turn
        return session

    async def _create_file(self, started: SessionStarted) -> Journal:
        try:
            return await trio.to_thread.run_sync(self.store.create, started)
        except StoreError as exc:
            raise RecordWriteFailed(f"the session could not be created: {exc}") from exc

    async def _created(self, started: SessionStarted, target: ResolvedModel) -> Session:
        """A new session's file written in a worker thread, then its `Session` built on this
        thread while that worker fsyncs the file and its directory: the build overlaps the
        disk's wait. Nothing of it is shown (added, published, answered) before the sync
        returned: its events meanwhile (a skipped skill) are held, then published, or dropped
        if the sync failed (the file is then removed)."""
        token, written, synced = trio.lowlevel.current_trio_token(), trio.Event(), trio.Event()
        begun: list[outcome.Outcome[Journal | None]] = []
        ended: list[outcome.Outcome[None]] = []

        def on_written(result: outcome.Outcome[Journal | None]) -> None:
            begun.append(result)
            written.set()

        def work() -> None:  # the worker thread: write, tell the trio thread, then fsync
            result = outcome.capture(self.store.begin, started)
            token.run_sync_soon(on_written, result)
            if (journal := result.unwrap()) is not None:
                journal.sync_created()

        def deliver(result: outcome.Outcome[None]) -> None:  # the worker thread, at its end
            ended.append(result)
            token.run_sync_soon(synced.set)

        held: list[SessionEvent] = []
        session = None
        # The cap `to_thread` keeps on worker threads; from the write to the end of the sync
        # nothing is cancelled (as `to_thread`, which waits for its thread).
        async with trio.to_thread.current_default_thread_limiter():
            trio.lowlevel.start_thread_soon(work, deliver, name="new: session file")
            with trio.CancelScope(shield=True):
                await written.wait()
            journal = begun[0].value if isinstance(begun[0], outcome.Value) else None
            try:
                if journal is not None:
                    self._unsynced[started.id] = held
                    session = Session(journal, target, self._services)
            finally:
                with trio.CancelScope(shield=True):
                    await synced.wait()
                self._unsynced.pop(started.id, None)
        try:
            ended[0].unwrap()
        except StoreError as exc:  # nothing was written, or the file was removed
            raise RecordWriteFailed(f"the session could not be created: {exc}") from exc
        if session is None:  # no sessions directory yet: made with the file, in a thread
            return Session(await self._create_file(started), target, self._services)
        for event in held:
            self.publish(event)
        return session

    async def _source(self, key: str, request: NewSession) -> SessionState:
        """`from=KEY`: the recorded state of the session a new one starts from (a live one's
        journal state; an exited one's file, only read). Raises `InvalidSessionRequest`."""
        live = [
            (s.id, s.journal.state)
            for s in self._sessions.values()
            if isinstance(s, Session) and not s.journal.closed
        ]  # one not built is read from its file, as an exited one is
        live_ids = {session_id for session_id, _ in live}
        if key == LATEST:
            here = self._check_cwd(request.cwd)
            found = await trio.to_thread.run_sync(
                _latest_of, self.store, here, [state for _, state in live], live_ids
            )
            if found is None:
                raise InvalidSessionRequest(
                    f"from=latest: no session (live or exited) has the cwd {here} to continue from"
                )
        else:
            entry = self._sessions.get(key) or self._sessions.get(self._aliases.get(key, ""))
            if isinstance(entry, Session) and not entry.journal.closed:
                found = entry.journal.state
            else:
                named = key if entry is None else entry.id
                found = await trio.to_thread.run_sync(_recorded, self.store, named, live_ids)
            if found is None:
                names = set(self.store.ids()) | set(self._aliases)
                guess = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
                hint = f"; did you mean {guess[0]!r}?" if guess else ""
                raise InvalidSessionRequest(
                    f"from={key}: no session has that id or alias{hint} (a session whose "
                    "records exist, live or exited; or from=latest)"
                )
        _check_source(found)
        return found

    async def kill(self, key: str) -> None:
        """`kill ID` on agent/ctl: end the session (its records stay on disk). An ephemeral
        session that already exited and waits to be reaped is removed at once. One at rest
        is loaded first (its records replayed in a worker thread)."""
        session = await self.load(key)
        if session.status is SessionStatus.EXITED:
            self._remove(session, "killed")
            return
        await session.kill()

    async def remove_session(self, key: str) -> None:
        """The removal of a session's directory (Tremove; `rm -r` or `rmdir` over a mount):
        `kill`, except that it is refused (`SessionRefused`, saying how to answer) while the
        session waits for an approval, of a tool call or of its result. A file verb is easily
        run on many sessions at once (a glob); a decision someone owes is not cancelled by one.
        ctl `kill` still ends such a session (it cancels the approval)."""
        session = await self.load(key)
        if session.pending_result is not None:
            what = "its result"
        elif session.status is SessionStatus.AWAIT_APPROVAL:
            what = "a tool call"
        else:
            await self.kill(session.id)
            return
        raise SessionRefused(
            f"session {session.id} waits for approval of {what}: answer it on its approval file "
            "(approve, or reject REASON), or write kill to its ctl to end it anyway (the "
            "approval is cancelled)"
        )

    def set_alias(self, key: str, alias: str | None) -> None:
        """Give a live session a new alias (None: none), checked as `new alias=` checks it
        (`NameTaken` when it is a session's alias or id) and recorded (`AliasChanged`): the old
        alias stops walking, the new one walks. The tree's rename of a session directory
        (`mv agent/ID agent/NAME`) calls this."""
        session = self.get(key)
        if alias == session.alias:
            return
        if alias is not None:
            self._check_alias(alias)
        old = session.alias
        session.record_alias(alias)
        if old:
            self._aliases.pop(old, None)
        if alias:
            self._aliases[alias] = session.id
        self.publish(SessionRenamed(session.id, alias, old))

    # -- services for sessions ---------------------------------------------------------------

    def provider_for(self, target: ResolvedModel) -> Provider:
        """`target`'s provider behind its provider's concurrency cap."""
        name = target.provider_name
        limiter = self._limiters.get(name)
        if limiter is None:
            cap = self.settings.concurrency.get(name, self.settings.default_concurrency)
            limiter = self._limiters[name] = trio.CapacityLimiter(cap)
        return LimitedProvider(target.provider, limiter)

    def publish(self, event: SessionEvent) -> None:
        if (held := self._unsynced.get(event.id)) is not None:
            held.append(event)  # its session's first record is not durable yet: see `_created`
            return
        self._index_changed.set()  # a state, an alias, a role...: the index is written again
        self.events.publish(encode_session_event(event))
        if self._on_event is not None:
            self._on_event(event)

    # -- internals ---------------------------------------------------------------------------

    def _resolve(self, name: str | None, cwd: Path | None = None) -> ResolvedModel:
        try:
            if self._configs is not None and cwd is not None:
                return self._configs.resolve(cwd, name)
            return self._resolve_model(name)
        except ConfigError as exc:
            raise InvalidSessionRequest(str(exc)) from exc

    def _pricing_of(self, model: str) -> Pricing | None:
        try:
            return self._resolve(model).pricing
        except InvalidSessionRequest:
            return None

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise SessionRefused("the session manager is not running (the daemon is stopping)")
        return self._nursery

    def _check_cwd(self, cwd: str | None) -> Path:
        if cwd is None:
            if self._default_cwd is None:
                raise InvalidSessionRequest("new needs cwd=DIR (the session's working directory)")
            return self._default_cwd
        if not os.path.isabs(cwd):
            raise InvalidSessionRequest(f"cwd={cwd} is not an absolute path")
        try:
            # One stat (`new`'s common case); a trailing slash is dropped as `Path` drops it.
            is_dir = stat.S_ISDIR(os.stat(cwd.rstrip("/") or "/").st_mode)
            what = "is not a directory"
        except OSError as exc:
            if exc.errno not in _ABSENT:  # a name too long, a permission: the client's path
                shown = cwd if len(cwd) <= 200 else cwd[:200] + "..."
                raise InvalidSessionRequest(
                    f"cwd={shown} cannot be used: {exc.strerror or exc}; give another cwd"
                ) from exc
            is_dir, what = False, "does not exist"
        if not is_dir:
            raise InvalidSessionRequest(f"cwd={cwd} {what}: create it or give another cwd")
        return Path(os.path.normpath(cwd))

    def _check_alias(self, alias: str) -> None:
        if not ALIAS_RE.fullmatch(alias):
            raise InvalidSessionRequest(
                f"alias={alias} is not a name: 1-64 letters, digits, '_', '-' or '.', starting "
                "with a letter"
            )
        if alias in RESERVED:
            raise InvalidSessionRequest(
                f"alias={alias} is reserved ({', '.join(sorted(RESERVED))} are agent/ entries "
                "or the daemon's own name); choose another"
            )
        if alias in self._sessions or self._has_file(alias):
            raise NameTaken(f"alias={alias} is the id of a session; choose another")
        if alias in self._aliases or alias in self._claimed:
            raise NameTaken(
                f"alias={alias} is taken by session {self._aliases.get(alias, '(being created)')}"
            )

    def _check_approver(self, name: str | None, alias: str | None) -> str | None:
        """`approver=`: None or `user` -> None (only a person); else a live session, by id or
        alias, recorded as its id (so an alias taken later never inherits the authority). Read
        with `peek`: an approver at rest is not built."""
        if name is None or name == USER:
            return None
        if name == alias:
            raise InvalidSessionRequest(
                f"approver={name} is the new session itself: a session never approves its own "
                f"result; name another session or {USER}"
            )
        found = self.peek(name)
        approver = found[0] if isinstance(found, tuple) else found
        if approver is None or approver.status is SessionStatus.EXITED:
            raise InvalidSessionRequest(
                f"approver={name} is not a live session: name a session from agent/list (its "
                f"id or alias), or {USER} for a person only"
            )
        return approver.id

    def _fresh_id(self) -> str:
        while True:
            session_id = self._new_id()
            if (
                session_id not in self._sessions
                and session_id not in self._aliases
                and session_id not in self._claimed
                and session_id not in RESERVED
                and not self._has_file(session_id)
            ):
                return session_id

    def _has_file(self, name: str) -> bool:
        """Whether a session (live or exited) has the id `name`: one stat, not a listing of
        every session's file (which grew each `new` with the number of sessions)."""
        try:
            return os.path.exists(self.store.path_for(name))
        except ValueError:  # not the shape of an id: no session file has that name
            return False

    def _built(self, entry: Session | _Unbuilt) -> Session:
        """The choke point of lazy restoration: a session at rest that is not built is built
        (its file replayed, on the calling thread; `load` does it in a thread) on first use,
        its task started, in its place in creation order."""
        if isinstance(entry, Session):
            return entry
        try:
            journal, contents = self.store.load(entry.id)
        except StoreError as exc:
            self._forget(entry, f"its records cannot be loaded: {exc}")
            raise SessionNotFound(
                f"session {entry.id} could not be loaded ({exc}); its file was left untouched"
            ) from exc
        return self._build(entry, journal, contents.records)

    def _build(self, entry: _Unbuilt, journal: Journal, records: Sequence[store.Record]) -> Session:
        if recover(journal.state).records:  # the records, not the index, say what it is
            try:
                journal.recover()
            except StoreError as exc:
                journal.close()
                self._forget(entry, f"not restored: {exc}")
                raise SessionNotFound(f"session {entry.id} could not be restored: {exc}") from exc
        usd = accounting.priced(records, self._pricing_of)
        shelved = entry.shelved
        kept = None if shelved is None else shelved.take(journal.seq, journal.size)
        session = Session(journal, entry.target, self._services, usd=usd, kept=kept)
        self._sessions[session.id] = session  # replaced in place: the order is kept
        if self._nursery is not None:  # else the daemon is stopping: only read, never run
            self._nursery.start_soon(self._host, session)
            self._services.before_turn(session)
        return session

    def _forget(self, entry: _Unbuilt, why: str) -> None:
        if entry.shelved is not None:
            entry.shelved.drop()
        if self._sessions.get(entry.id) is entry:
            del self._sessions[entry.id]
            if entry.alias:
                self._aliases.pop(entry.alias, None)
        log.error("session.load_failed", session=entry.id, error=why)
        self.publish(SessionFailed(entry.id, why))

    async def _host(
        self, session: Session, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """A session's task, in a cancel scope of its own: cancelled to unload it."""
        scope = self._scopes[session.id] = trio.CancelScope()
        try:
            with scope:
                await session.run(task_status=task_status)
        finally:
            if self._scopes.get(session.id) is scope:
                del self._scopes[session.id]

    # -- the index and idle unload -----------------------------------------------------------

    def _index_item(self, session: Session) -> IndexEntry | Pending | None:
        journal = session.journal
        known = self._indexed.get(session.id)
        if known is not None and known[0] is journal.state:
            return known[1]
        if (snapshot := journal.snapshot()) is None:
            return None  # an append holds it: left out this time (then replayed)
        state, seq, size = snapshot
        pending = Pending(SessionSummary.of(state), size, seq)
        self._indexed[session.id] = (state, pending)
        return pending

    async def _write_index(self) -> None:
        """Write the index of every session file this daemon knows (in a thread)."""
        items: list[IndexEntry | Pending] = []
        for entry in self._sessions.values():
            item = entry.entry if isinstance(entry, _Unbuilt) else self._index_item(entry)
            if item is not None:
                items.append(item)
        items += self._index_ended.values()
        if not items and not self.store.directory.is_dir():
            return
        given = {item.summary.id: item for item in items if isinstance(item, Pending)}
        try:
            written = await trio.to_thread.run_sync(self._index_writer.write, items)
        except OSError as exc:
            log.warning("session.index_not_written", error=str(exc))
            return
        for session_id, sent in given.items():  # checked once: no stat (nor encoding) next time
            if (done := written.get(session_id)) is None:
                continue
            current = self._sessions.get(session_id)  # replaced if nothing replaced it meanwhile
            if isinstance(current, _Unbuilt):
                if current.entry is sent:
                    current.entry = done
            elif (known := self._indexed.get(session_id)) is not None:
                if known[1] is sent:
                    self._indexed[session_id] = (known[0], done)
            elif self._index_ended.get(session_id) is sent:
                self._index_ended[session_id] = done

    async def _keep_index(self) -> None:
        """Write the index after the restore and whenever sessions changed, at most once per
        `INDEX_INTERVAL` seconds."""
        while True:
            await self._index_changed.wait()
            self._index_changed = trio.Event()
            await self._write_index()
            await trio.sleep(INDEX_INTERVAL)

    def _idle(self, session: Session) -> bool:
        """Whether `session` may be unloaded now: at rest by its records and its status, its
        task hosted, nobody reading its streams, no gate, no live child."""
        return (
            session.status in _RESTING
            and at_rest(session.record)
            and session.pending_result is None
            and session.id in self._scopes
            and session.log.statistics().readers == 0
            and session.events.statistics().readers == 0
            and not any(child in self._sessions for child in self._family.get(session.id, ()))
        )

    async def _unload_idle(self, limit: float) -> None:
        """Unload each session idle (unchanged, unused) for `limit` seconds."""
        seen: dict[str, tuple[int, float]] = {}  # id -> (version, since when)
        while True:
            await trio.sleep(max(limit / 4, 0.05))
            now = time.monotonic()
            due = []
            for session in self.built_sessions():
                if not self._idle(session):
                    seen.pop(session.id, None)
                    continue
                known = seen.get(session.id)
                if known is None or known[0] != session.version:
                    seen[session.id] = (session.version, now)
                elif now - max(known[1], self._used.get(session.id, 0.0)) >= limit:
                    due.append(session)
            for session in due:
                seen.pop(session.id, None)
                await self.unload(session)
            seen = {key: value for key, value in seen.items() if key in self._sessions}

    async def unload(self, session: Session) -> bool:
        """Put a built session back to its summary if it is idle (`_idle`): its journal synced
        and closed, its task stopped (nothing is recorded), its tree nodes dropped. The next
        use builds it again from its records. Whether it was unloaded."""
        version, journal = session.version, session.journal
        kept = session.kept()  # what a rebuild cannot take from the records: shelved

        def shelved() -> Shelved | None:
            journal.sync()
            if (snapshot := journal.snapshot()) is None:
                return None
            _, seq, size = snapshot
            return shelve(kept, self.store.directory, session.id, seq, size)

        try:
            kept_at = await trio.to_thread.run_sync(shelved)
        except StoreError as exc:
            log.warning("session.unload_skipped", session=session.id, error=str(exc))
            return False
        if (
            kept_at is None
            or self._sessions.get(session.id) is not session
            or session.version != version
            or not self._idle(session)
            or (snapshot := journal.snapshot()) is None
            or snapshot[1:] != (kept_at.seq, kept_at.size)
        ):
            if kept_at is not None:
                kept_at.drop()
            return False  # used, changed or ended while it was synced
        state, seq, size = snapshot
        self._scopes.pop(session.id).cancel()
        journal.close()
        pending = Pending(SessionSummary.of(state), size, seq)
        self._sessions[session.id] = _Unbuilt(pending.summary, session.target, pending, kept_at)
        self._indexed.pop(session.id, None)
        self._used.pop(session.id, None)
        for listener in self.unload_listeners:
            listener(session.id)
        self._index_changed.set()
        log.debug("session.unloaded", session=session.id)
        return True

    def _add(self, session: Session) -> None:
        self._sessions[session.id] = session
        if session.alias:
            self._aliases[session.alias] = session.id

    def _exited(self, session: Session, reason: str, reap: bool) -> None:
        if reap and self._nursery is not None:
            self._nursery.start_soon(self._reap, session, reason)
        else:
            self._remove(session, reason)

    async def _reap(self, session: Session, reason: str) -> None:
        await trio.sleep(self.settings.reap_delay)
        self._remove(session, reason)

    def _remove(self, session: Session, reason: str) -> None:
        if self._sessions.get(session.id) is not session:
            return
        del self._sessions[session.id]
        if session.alias:
            self._aliases.pop(session.alias, None)
        if session.id in self._parents:  # its parent's `children` and `cost` keep it
            self._ended_children[session.id] = self._live_child(session)
        session.journal.close()
        self._indexed.pop(session.id, None)
        self._used.pop(session.id, None)
        if (snapshot := session.journal.snapshot()) is not None:
            state, seq, size = snapshot
            self._index_ended[session.id] = Pending(SessionSummary.of(state), size, seq)
        self.publish(SessionEnded(session.id, reason))

    @staticmethod
    async def _close_journal(journal: Journal, session_id: str) -> None:
        if journal.closed:
            return
        try:
            await trio.to_thread.run_sync(journal.sync)
        except StoreError as exc:
            log.error("session.sync_failed", session=session_id, error=str(exc))
        journal.close()

    @staticmethod
    async def _recover(journal: Journal) -> Recovery:
        """Bring a session a crash interrupted back to rest: first remove the temporary files
        of its calls of unknown outcome (so their results can say what was removed), then
        append the recovery's records."""
        state = journal.state
        unknown = recover(state).unknown
        removed: dict[str, tuple[str, ...]] = {}
        if unknown:
            removed = await trio.to_thread.run_sync(leftovers.remove, state.id, state.cwd, unknown)
        return await trio.to_thread.run_sync(journal.recover, removed)

    async def _priced(self, journal: Journal) -> float | None:
        """The cost of a session's records (None when its file cannot be read again)."""
        try:
            contents = await trio.to_thread.run_sync(read_journal, journal.path)
        except StoreError:
            return None
        return accounting.priced(contents.records, self._pricing_of)

    async def _ended_child(self, journal: Journal) -> None:
        usd = await self._priced(journal)
        self._ended_children[journal.state.id] = _child_of(
            journal.state, SessionStatus.EXITED.value, usd
        )

    async def _end_child(self, journal: Journal) -> bool:
        """End a `task` child found live at restore, as an ephemeral session ends (records
        kept, kept for its parent's `children` and `cost`, gone from `list`): the parent's call
        that waited for it was ended by the restart (recovery answered it), so nobody would
        send its prompt or read its answer. Whether it ended (a failed write restores it)."""
        session_id = journal.state.id
        try:
            await trio.to_thread.run_sync(
                lambda: journal.append(store.SessionEnded(CHILD_ORPHANED), sync=True)
            )
        except StoreError as exc:
            log.error("session.child_not_ended", session=session_id, error=str(exc))
            self.publish(SessionFailed(session_id, f"not ended at restore: {exc}"))
            return False
        log.warning("session.child_ended", session=session_id, reason=CHILD_ORPHANED)
        await self._keep_ended(journal)
        self.publish(SessionEnded(session_id, CHILD_ORPHANED))
        return True

    async def _keep_ended(self, journal: Journal) -> None:
        """An ended session's file found at restore: kept for its parent's `children` and
        `cost` when it has one, and for the index; its journal closed."""
        if journal.state.parent is not None:
            await self._ended_child(journal)
        state, seq, size = journal.state, journal.seq, journal.size
        self._index_ended[state.id] = Pending(SessionSummary.of(state), size, seq)
        journal.close()

    async def _restore(self) -> None:
        nursery = self._require_nursery()
        await trio.to_thread.run_sync(remove_stale, self.store.directory)  # a crash's: stale
        ids = await trio.to_thread.run_sync(self.store.ids)
        born: dict[str, dt.datetime] = {}  # children's creation times: their order in `children`
        found: list[tuple[SessionSummary, Journal | None, float | None, IndexEntry | None]] = []
        loaded = await trio.to_thread.run_sync(_load, self.store, ids, self._pricing_of)
        for item in loaded:
            session_id = item.id
            if item.error is not None:
                log.error("session.restore_failed", session=session_id, error=str(item.error))
                self.publish(SessionFailed(session_id, f"not restored: {item.error}"))
                continue
            if item.entry is not None:  # the index describes the file as it is: not read
                summary = item.entry.summary
                if summary.parent is not None:
                    self._family.setdefault(summary.parent, []).append(session_id)
                    self._parents[session_id] = summary.parent
                    born[session_id] = summary.created_at
                if summary.ended:  # (one with a parent is replayed: its cost is priced)
                    self._index_ended[session_id] = item.entry
                else:
                    found.append((summary, None, None, item.entry))
                continue
            journal, usd = item.journal, item.usd
            assert journal is not None
            if (parent := journal.state.parent) is not None:
                self._family.setdefault(parent, []).append(session_id)
                self._parents[session_id] = parent
                born[session_id] = journal.state.created_at
            if journal.state.ended is not None:
                await self._keep_ended(journal)
                continue
            if recover(journal.state).records:
                try:
                    recovered = await self._recover(journal)
                except StoreError as exc:
                    journal.close()
                    log.error("session.recover_failed", session=session_id, error=str(exc))
                    self.publish(SessionFailed(session_id, f"not restored: {exc}"))
                    continue
                log.warning(
                    "session.recovered",
                    session=session_id,
                    records=len(recovered.records),
                    unknown=[call.id for call in recovered.unknown],
                )
                usd = await self._priced(journal)  # priced again with what recovery added
            if parent is not None and journal.state.ephemeral and await self._end_child(journal):
                continue
            found.append((SessionSummary.of(journal.state), journal, usd, None))
        found.sort(key=lambda item: item[0].created_at)
        for family in self._family.values():
            family.sort(key=born.__getitem__)
        targets: dict[tuple[str, str], ResolvedModel] = {}  # one resolution per model and cwd
        for summary, journal, usd, entry in found:
            try:
                key = (summary.model, summary.cwd)
                if (target := targets.get(key)) is None:
                    target = targets[key] = self._resolve(summary.model, Path(summary.cwd))
            except InvalidSessionRequest as exc:
                if journal is None:  # the records are read to record the change of model
                    try:
                        journal, contents = await trio.to_thread.run_sync(
                            self.store.load, summary.id
                        )
                    except StoreError as failed:
                        log.error("session.restore_failed", session=summary.id, error=str(failed))
                        self.publish(SessionFailed(summary.id, f"not restored: {failed}"))
                        continue
                    usd = accounting.priced(contents.records, self._pricing_of)
                assert journal is not None
                try:
                    target = self._resolve(None, Path(summary.cwd))
                    why = f"model {summary.model} is no longer available ({exc}); now {target.name}"
                    journal.append(Note(why), sync=False)
                    journal.append(ModelChanged(target.name), sync=False)
                except (InvalidSessionRequest, JournalWriteError, StoreError) as failed:
                    log.error("session.restore_failed", session=summary.id, error=str(failed))
                    self.publish(SessionFailed(summary.id, f"not restored: {failed}"))
                    journal.close()
                    continue
            ephemeral = journal is not None and journal.state.ephemeral
            if journal is None:
                assert entry is not None
                self._keep_unbuilt(_Unbuilt(summary, target, entry))
            elif _at_rest(journal.state):  # replayed, then closed: only its summary is kept
                state, seq, size = journal.state, journal.seq, journal.size
                pending = Pending(SessionSummary.of(state), size, seq)
                journal.close()
                self._keep_unbuilt(_Unbuilt(pending.summary, target, pending))
            else:
                session = Session(journal, target, self._services, usd=usd)
                self._add(session)
                await nursery.start(self._host, session)
            self.publish(
                SessionCreated(
                    summary.id,
                    summary.alias,
                    summary.role,
                    target.name,
                    summary.cwd,
                    ephemeral,
                    restored=True,
                )
            )
            if isinstance(built := self._sessions[summary.id], Session):
                self._services.before_turn(built)
        self._index_changed.set()  # what was replayed is indexed for the next start

    def _keep_unbuilt(self, entry: _Unbuilt) -> None:
        self._sessions[entry.id] = entry
        if entry.alias:
            self._aliases[entry.alias] = entry.id


__all__ = [
    "ALIAS_RE",
    "BUDGET_LIMIT",
    "LATEST",
    "MAX_STEPS_LIMIT",
    "NEW_FLAGS",
    "NEW_KEYS",
    "RESERVED",
    "LimitedProvider",
    "ManagerStatistics",
    "NewSession",
    "SessionManager",
    "chain_tools",
    "default_tools",
]
