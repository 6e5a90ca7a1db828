"""`SessionManager`: every session of the daemon, their task tree, creation and restoration.

- `await nursery.start(manager.run)` restores every session from its records, then serves; each
  session runs in the manager's nursery. A restored session at rest (idle or await, nothing
  queued or pending) is listed from its records at once and built on first use (`get`,
  `sessions`, `children`: one choke point, `_built`) or by a background task after the start.
  Cancelling it cancels every turn (approvals cancelled, never approved), records how each
  ended, then syncs and closes every journal (shielded).
- `create` validates everything (model, cwd, role, sandbox, alias) before anything is written.
- Restoration never re-runs a call whose finish is not durable (`Journal.recover`); a file that
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
import os
import re
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
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
from anvild.llm.provider import Provider
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
from anvild.session.events import SessionCreated, SessionEnded, SessionEvent, SessionFailed
from anvild.session.events import encode_event as encode_session_event
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
    Journal,
    JournalWriteError,
    ModelChanged,
    Note,
    Recovery,
    ReplaceReason,
    SessionStarted,
    SessionState,
    SessionStatus,
    SessionStore,
    StoreError,
    TodosChanged,
    read_journal,
    recover,
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


class LimitedProvider:
    """A provider whose requests each hold one token of a `trio.CapacityLimiter` while they
    stream. Waiters are served in arrival order (trio's limiter is FIFO)."""

    def __init__(self, inner: Provider, limiter: trio.CapacityLimiter) -> None:
        self._inner = inner
        self.limiter = limiter

    @property
    def name(self) -> str:
        return self._inner.name

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        async with self.limiter, self._inner.stream(request) as events:
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


_LAZY: Final = frozenset({SessionStatus.IDLE, SessionStatus.AWAIT})


def _at_rest(state: SessionState) -> bool:
    """Whether a restored session may wait to be built: nothing its task would do at once (no
    queued prompt, approval or turn; not ephemeral), so building it later changes nothing."""
    return (
        state.ended is None
        and state.status in _LAZY
        and not state.queue
        and state.approval is None
        and state.result_approval is None
        and not state.tools
        and not state.pending_calls
        and not state.ephemeral
    )


@attrs.define(eq=False)
class _Unbuilt:
    """A restored session not built yet: its journal (open), model and cost so far, which are
    what `Session` is built from, and its `agent/list` line (what `Session.list_line` gives)."""

    journal: Journal
    target: ResolvedModel
    usd: float | None

    @property
    def id(self) -> str:
        return self.journal.state.id

    @property
    def alias(self) -> str | None:
        return self.journal.state.alias

    @property
    def status(self) -> SessionStatus:
        return self.journal.state.status

    def list_line(self) -> str:
        return list_line(self.journal.state, self.status, self.target.name)


def _load(
    store: SessionStore, ids: Sequence[str], pricing_of: Callable[[str], Pricing | None]
) -> list[tuple[str, Journal | StoreError, float | None]]:
    """Every session file opened, and a live one's cost priced from the records it loaded:
    blocking, one thread for them all."""
    prices: dict[str, Pricing | None] = {}

    def cached(model: str) -> Pricing | None:
        if model not in prices:
            prices[model] = pricing_of(model)
        return prices[model]

    found: list[tuple[str, Journal | StoreError, float | None]] = []
    for session_id in ids:
        try:
            journal, contents = store.load(session_id)
        except StoreError as exc:
            found.append((session_id, exc, None))
            continue
        ended = journal.state.ended is not None
        usd = None if ended else accounting.priced(contents.records, cached)
        found.append((session_id, journal, usd))
    return found


def _child_of(state: SessionState, status: str, usd: float | None) -> Child:
    turn = state.last_turn
    return Child(state.id, state.role, status, turn.outcome if turn else "-", state.usage, usd)


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
        self.on_all_built: Callable[[], None] | None = None  # once every restored one is built
        self._configs = configs
        # Subagents: parent id -> child ids in creation order, child -> parent, and the
        # children that ended (reaped, or read back ended after a restart) as they ended.
        self._family: dict[str, list[str]] = {}
        self._parents: dict[str, str] = {}
        self._ended_children: dict[str, Child] = {}
        if configs is not None:
            configs.provider_for, configs.publish = self.provider_for, self.publish
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
                task_status.started()
                await self._build_rest()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                for session in list(self._sessions.values()):
                    await self._close_journal(session.journal, session.id)
            self.events.close()

    # -- lookup ------------------------------------------------------------------------------

    def get(self, key: str) -> Session:
        """The session with this id or alias; `SessionNotFound` otherwise."""
        session = self._sessions.get(key) or self._sessions.get(self._aliases.get(key, ""))
        if session is None:
            raise SessionNotFound(f"no session {key!r}: read agent/list for the live sessions")
        return self._built(session)

    def sessions(self) -> tuple[Session, ...]:
        """Live sessions in creation order (ephemeral ones until they are reaped)."""
        return tuple(self._built(session) for session in list(self._sessions.values()))

    def built_sessions(self) -> tuple[Session, ...]:
        """The live sessions built so far, in creation order, building none: enough for what
        looks for sessions waiting on something (a gate, an approval, a turn), since only a
        session at rest is restored unbuilt."""
        return tuple(s for s in self._sessions.values() if isinstance(s, Session))

    def ids(self) -> list[str]:
        """Every live session's id, in creation order, building none."""
        return list(self._sessions)

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
            found.append(self._live_child(self._built(session)))
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
            try:
                journal = await trio.to_thread.run_sync(self.store.create, started)
            except StoreError as exc:
                raise RecordWriteFailed(f"the session could not be created: {exc}") from exc
            if base is not None:
                await trio.to_thread.run_sync(_record_fork, journal, base)
            session = Session(journal, target, self._services)
            self._add(session)
            if request.parent is not None:
                self._family.setdefault(request.parent, []).append(session.id)
                self._parents[session.id] = request.parent
        finally:
            self._claimed -= claimed
        await nursery.start(session.run)
        self.publish(
            SessionCreated(session.id, alias, role, target.name, str(cwd), request.ephemeral)
        )
        self._services.before_turn(session)  # its config reported now, not at its first turn
        return session

    async def _source(self, key: str, request: NewSession) -> SessionState:
        """`from=KEY`: the recorded state of the session a new one starts from (a live one's
        journal state; an exited one's file, only read). Raises `InvalidSessionRequest`."""
        live = [(s.id, s.journal.state) for s in self._sessions.values() if not s.journal.closed]
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
            if entry is not None and not entry.journal.closed:
                found = entry.journal.state
            else:
                found = await trio.to_thread.run_sync(_recorded, self.store, key, live_ids)
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
        session that already exited and waits to be reaped is removed at once."""
        session = self.get(key)
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
        session = self.get(key)
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
        path = Path(cwd)
        if not path.is_absolute():
            raise InvalidSessionRequest(f"cwd={cwd} is not an absolute path")
        try:
            is_dir = path.is_dir()
            what = "is not a directory" if path.exists() else "does not exist"
        except OSError as exc:  # a name too long, a permission: the client's path, not a bug
            shown = cwd if len(cwd) <= 200 else cwd[:200] + "..."
            raise InvalidSessionRequest(
                f"cwd={shown} cannot be used: {exc.strerror or exc}; give another cwd"
            ) from exc
        if not is_dir:
            raise InvalidSessionRequest(f"cwd={cwd} {what}: create it or give another cwd")
        return Path(os.path.normpath(path))

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
        alias, recorded as its id (so an alias taken later never inherits the authority)."""
        if name is None or name == USER:
            return None
        if name == alias:
            raise InvalidSessionRequest(
                f"approver={name} is the new session itself: a session never approves its own "
                f"result; name another session or {USER}"
            )
        try:
            approver = self.get(name)
        except SessionNotFound:
            approver = None
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
            return self.store.path_for(name).exists()
        except ValueError:  # not the shape of an id: no session file has that name
            return False

    def _built(self, entry: Session | _Unbuilt) -> Session:
        """The choke point of lazy restoration: a restored session's `Session`, built (and its
        task started) on first use, in its place in creation order."""
        if isinstance(entry, Session):
            return entry
        session = Session(entry.journal, entry.target, self._services, usd=entry.usd)
        self._sessions[session.id] = session  # replaced in place: the order is kept
        if self._nursery is not None:  # else the daemon is stopping: only read, never run
            self._nursery.start_soon(session.run)
            self._services.before_turn(session)
        return session

    async def _build_rest(self) -> None:
        """After the start: build the sessions nobody used yet, one at a time, letting every
        other task run between two."""
        for entry in list(self._sessions.values()):
            await trio.lowlevel.checkpoint()
            if isinstance(entry, _Unbuilt) and self._sessions.get(entry.id) is entry:
                self._built(entry)
        if self.on_all_built is not None:
            self.on_all_built()

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

    async def _restore(self) -> None:
        nursery = self._require_nursery()
        ids = await trio.to_thread.run_sync(self.store.ids)
        journals = []
        born: dict[str, dt.datetime] = {}  # children's creation times: their order in `children`
        loaded = await trio.to_thread.run_sync(_load, self.store, ids, self._pricing_of)
        for session_id, opened, usd in loaded:
            if isinstance(opened, StoreError):
                log.error("session.restore_failed", session=session_id, error=str(opened))
                self.publish(SessionFailed(session_id, f"not restored: {opened}"))
                continue
            journal = opened
            if (parent := journal.state.parent) is not None:
                self._family.setdefault(parent, []).append(session_id)
                self._parents[session_id] = parent
                born[session_id] = journal.state.created_at
            if journal.state.ended is not None:
                if parent is not None:  # its parent's `children` and `cost` keep it
                    await self._ended_child(journal)
                journal.close()
                continue
            if recover(journal.state).records:
                try:
                    found = await self._recover(journal)
                except StoreError as exc:
                    journal.close()
                    log.error("session.recover_failed", session=session_id, error=str(exc))
                    self.publish(SessionFailed(session_id, f"not restored: {exc}"))
                    continue
                log.warning(
                    "session.recovered",
                    session=session_id,
                    records=len(found.records),
                    unknown=[call.id for call in found.unknown],
                )
                usd = await self._priced(journal)  # priced again with what recovery added
            journals.append((journal, usd))
        journals.sort(key=lambda item: item[0].state.created_at)
        for family in self._family.values():
            family.sort(key=born.__getitem__)
        targets: dict[tuple[str, str], ResolvedModel] = {}  # one resolution per model and cwd
        for journal, usd in journals:
            state = journal.state
            try:
                key = (state.model, state.cwd)
                if (target := targets.get(key)) is None:
                    target = targets[key] = self._resolve(state.model, Path(state.cwd))
            except InvalidSessionRequest as exc:
                try:
                    target = self._resolve(None, Path(state.cwd))
                    why = f"model {state.model} is no longer available ({exc}); now {target.name}"
                    journal.append(Note(why), sync=False)
                    journal.append(ModelChanged(target.name), sync=False)
                except (InvalidSessionRequest, JournalWriteError, StoreError) as failed:
                    log.error("session.restore_failed", session=state.id, error=str(failed))
                    self.publish(SessionFailed(state.id, f"not restored: {failed}"))
                    journal.close()
                    continue
            if _at_rest(journal.state):
                self._sessions[state.id] = _Unbuilt(journal, target, usd)
                if state.alias:
                    self._aliases[state.alias] = state.id
            else:
                session = Session(journal, target, self._services, usd=usd)
                self._add(session)
                await nursery.start(session.run)
            self.publish(
                SessionCreated(
                    state.id,
                    state.alias,
                    state.role,
                    target.name,
                    state.cwd,
                    state.ephemeral,
                    restored=True,
                )
            )
            if isinstance(entry := self._sessions[state.id], Session):
                self._services.before_turn(entry)


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
