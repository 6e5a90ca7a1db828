"""`Session`: the supervisor of one agent, its queue, its verbs and its state.

A session owns the read side its files show, the prompt queue (`submit` records a prompt as
queued, `drop_queue`, `wait_handled`), the verbs (`control`: stop, start, restart, cancel,
clear, model, kill) and its task: `run`, started by the manager, owns a cancel scope (`kill`
and shutdown cancel it) and loops: wait for a queued prompt while idle or await, take it, run
one turn, repeat. Verbs run in the caller's task (a 9P request): they cancel the running turn
through the agent and wait for the worker to finish it, under one lock so two verbs never
interleave. The status is derived here and nowhere else, from the loop and the verbs; every
change goes through `_set_status` and the table in `anvild.session.state`.

The rest is each collaborator's: the journal writes (`recorder`), the streams and `out`
(`output`), approvals and result gates (`approvals`), the agent (`agent_builder`: built on
first use, from the records as they are then; skills and prompt layers are read at the start),
the manager's settings (`settings`). The theory of operation: docs/session.md.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs
import structlog
import trio

from anvild.agent import events as ev
from anvild.agent.loop import Agent
from anvild.agent.permissions.gate import PermissionGate
from anvild.agent.permissions.policy import Mode, Policy
from anvild.agent.permissions.rules import RuleSet
from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.hooks import PromptBlocked, SessionHooks
from anvild.llm.provider import Provider
from anvild.llm.registry import ResolvedModel
from anvild.llm.stream import Usage
from anvild.llm.types import Message
from anvild.session import accounting, roles
from anvild.session.agent_builder import (
    build_agent,
    current_layers,
    load_layers,
    observed,
    session_hooks,
    session_provider,
    session_skills,
)
from anvild.session.approvals import USER, Approvals
from anvild.session.compaction import Compactions, window_for
from anvild.session.errors import (
    InvalidSessionRequest,
    RecordWriteFailed,
    SessionError,
    SessionRefused,
)
from anvild.session.events import (
    SessionFailed,
    SessionStateChanged,
    UsageThreshold,
)
from anvild.session.handoff import handoff_text, replayable
from anvild.session.kept import Kept
from anvild.session.output import Output, first_line, indented, restored_out
from anvild.session.prompt import PromptLayers
from anvild.session.recorder import Recorder
from anvild.session.settings import (
    MODE_ORDER,
    SANDBOXES,
    Services,
    SessionSettings,
    ToolSetup,
    ToolsFactory,
    check_mode,
    compact_tools,
    sandbox_name,
    sandbox_policy,
    wider,
)
from anvild.session.state import ACCEPTS_PROMPTS, BUSY, check
from anvild.session.turns import Turns
from anvild.skills import SkillSet
from anvild.store import (
    AliasChanged,
    ContextFileChanged,
    ContextReplaced,
    DecidedResult,
    Journal,
    ModelChanged,
    Note,
    PendingResult,
    PromptDropped,
    PromptQueued,
    PromptTaken,
    ReplaceReason,
    RoleChanged,
    SessionEnded,
    SessionState,
    SessionStatus,
    StateChanged,
    TodosChanged,
)

log = structlog.get_logger(__name__)

S = SessionStatus
VERBS: Final = (
    "stop",
    "start",
    "restart",
    "kill",
    "cancel",
    "clear",
    "model NAME",
    "request_approval [SUMMARY]",
    "approve",
    "reject REASON",
)


# -- the session -------------------------------------------------------------------------------


def list_line(state: SessionState, status: SessionStatus, model: str) -> str:
    """A session's line of `agent/list`: id alias state role model cwd, tab-separated."""
    fields = (state.id, state.alias, status.value, state.role, model, state.cwd)
    return "\t".join(f or "-" for f in fields)


class Session:
    """One live session. Build it with `SessionManager` (which owns its task and its journal).

    Read side (what the tree's files show): `id`, `alias`, `role`, `model`, `cwd`, `sandbox`,
    `ephemeral`, `status`, `out`, `queue_text()`, `usage_line()`, `cost_text()`,
    `approval_text()`, `todos_text()`, `context`, `log`, `events`, `record` (the recorded
    state). Write side: `submit`, `drop_queue`, `answer_approval`, `set_role`, `set_context`,
    `record_alias` (the manager checks the name), `mark_out_read`, `control` and one method per
    verb. Blocking: `wait_handled`,
    `wait_changed`; the verbs that end a turn wait for it to end.
    """

    def __init__(
        self,
        journal: Journal,
        target: ResolvedModel,
        services: Services,
        *,
        usd: float | None = 0.0,
        kept: Kept | None = None,
    ) -> None:
        self._journal = journal
        self._target = target
        self._services = services
        settings = services.settings
        state = journal.state
        self._status = state.status
        self._detail = state.status_detail
        self._recorder = Recorder(
            journal,
            transcript=self._messages,
            ended=lambda: self._status is S.EXITED,
            on_failure=self._record_failed,
            redact=settings.redact,
            text_interval=settings.text_interval,
        )
        self._output = Output(
            settings.stream_limits,
            self._recorder,
            notify=self._notify,
            out=restored_out(state),
            turn_deadline=settings.turn_deadline,
        )
        self.log = self._output.log
        self.events = self._output.events
        self._scope = trio.CancelScope()
        self._verbs = trio.Lock()
        self._changed = trio.Event()
        self._version = 0
        self._hold = 0  # verbs in progress: the worker takes no prompt meanwhile
        self._turn_active = False
        self._accepted = len(state.queue)  # restored queued prompts were accepted
        self._handled = 0
        self._start_context = ""  # what SessionStart hooks add to the next prompt
        self._used_before: int | None = None
        self._usd = usd  # the cost so far (a restored session's is priced from its records)
        self._list_cache: tuple[object, object, object, str] = (None, None, None, "")
        self._approvals = Approvals(
            self,
            self._recorder,
            self._output,
            set_status=self._set_status,
            turn_active=lambda: self._turn_active,
            publish=services.publish,
            notify=self._notify,
            max_mode=settings.max_mode,
        )
        self.compaction = Compactions(
            self,
            self._recorder,
            self._output,
            agent=lambda: self.agent,
            held=self._held,
            turn_active=lambda: self._turn_active,
            notify=self._notify,
        )
        workspaces = settings.checkpoints
        self.turns = Turns(
            self,
            self._recorder,
            self._output,
            None if workspaces is None else workspaces.session(state.id, state.cwd),
            agent=lambda: self.agent,
            held=self._held,
            turn_active=lambda: self._turn_active,
            notify=self._notify,
        )
        # What the prompt lists and the file tools may read is what the session found at its
        # start: its skills and prompt layers are read now; the agent is built on first use.
        self._skills = session_skills(self, services)
        self._layers = self._layers_for(state.context, self._skills)
        self._agent: Agent | None = None
        self._gate: PermissionGate | None = None  # the agent's, as made (hooks read its mode)
        self._policy: tuple[RuleSet, Mode] | None = None  # the project's, for the gate
        self._provider: tuple[Provider, ResolvedModel] | None = None  # a project's retarget
        self._emit: Callable[[ev.AgentEvent], None] | None = None
        self._session_hooks: SessionHooks | None = None
        self._hooks_made = False
        self._kept = kept  # rebuilt after an idle unload: what it showed, not a start
        if kept is None:
            self._output.log_transcript(state.messages)  # a restored log starts with its past
            for note in state.notes:
                self._output.log_lines(indented("NOTE:", note))
        else:
            for line in kept.log:
                self.log.publish(line)
            for line in kept.events:
                self.events.publish(line)
            self._start_context = kept.start_context
            self._handled = kept.handled  # a `wait` opened before the unload counts on
            self._accepted += kept.handled

    # -- read side ---------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._journal.state.id

    @property
    def alias(self) -> str | None:
        return self._journal.state.alias

    @property
    def role(self) -> str:
        return self._journal.state.role

    @property
    def model(self) -> str:
        """The model's name as asked for (alias or provider:model)."""
        return self._target.name

    @property
    def target(self) -> ResolvedModel:
        return self._target

    @property
    def cwd(self) -> str:
        return self._journal.state.cwd

    @property
    def records_path(self) -> Path:
        """The session's records file, `<data dir>/sessions/ID.jsonl` (hooks' `transcript_path`)."""
        return self._journal.path

    @property
    def sandbox(self) -> str:
        return self._journal.state.sandbox

    @property
    def created(self) -> str:
        """When the session was created: RFC 3339 in UTC, to the second (`2026-11-30T21:12:33Z`)."""
        return self._journal.state.created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def first_prompt(self) -> str:
        """The first line of the session's first prompt (at most 200 characters), or ""."""
        return first_line(self._journal.state.first_prompt or "")

    @property
    def ephemeral(self) -> bool:
        return self._journal.state.ephemeral

    @property
    def context(self) -> str:
        return self._journal.state.context

    @property
    def headless(self) -> bool:
        """Nobody answers approvals (`new headless`): a call that needs one is refused."""
        return self._journal.state.headless

    @property
    def approver(self) -> str:
        """Who may answer this session's own result gates besides a person: an approver
        session's id (`new approver=ID`, fixed at creation), or `user` (only a person)."""
        return self._journal.state.approver or USER

    @property
    def mode(self) -> Mode:
        """The permission mode the session runs with (recorded, within the daemon's ceiling)."""
        settings = self._services.settings
        recorded = self._journal.state.permission
        if recorded is None:
            return settings.mode
        mode = Mode(recorded)  # a ceiling lowered since `new` applies to the session too
        return settings.max_mode if wider(mode, settings.max_mode) else mode

    @property
    def max_steps(self) -> int:
        recorded = self._journal.state.max_steps
        return self._services.settings.max_steps if recorded is None else recorded

    @property
    def token_budget(self) -> int | None:
        recorded = self._journal.state.token_budget
        return self._services.settings.token_budget if recorded is None else recorded

    @property
    def status(self) -> SessionStatus:
        return self._status

    @property
    def status_detail(self) -> str:
        return self._detail

    @property
    def record(self) -> SessionState:
        """The session as its records build it (equal to what a reload would give)."""
        return self._journal.state

    @property
    def journal(self) -> Journal:
        return self._journal

    @property
    def agent(self) -> Agent:
        """The agent, built on first use (the first turn, or a verb or file that needs it) from
        the records as they are then: its transcript and todos are the recorded ones."""
        agent = self._agent
        if agent is None:
            agent = self._agent = self._build_agent()
        return agent

    @property
    def agent_built(self) -> bool:
        """Whether the agent was built yet (`new` answers without building it)."""
        return self._agent is not None

    @property
    def system_prompt(self) -> str:
        """The system prompt the next turn will use."""
        return self._current_layers().render()

    @property
    def out(self) -> str:
        """The last final answer, or the partial text and the reason after an abnormal end."""
        return self._output.out

    @property
    def version(self) -> int:
        """Bumped on every change a reader may want to see (state, out, queue, approval...)."""
        return self._version

    def list_line(self) -> str:
        """This session's line of `agent/list`: id alias state role model cwd, tab-separated.

        Every field comes from the recorded state (immutable: a record replaces it), the
        status or the target, so the line is kept until one of those three objects is another:
        reading `list` with 1000 sessions then costs identity checks, not 1000 lines rebuilt."""
        state, status, target = self._journal.state, self._status, self._target
        cached = self._list_cache
        if cached[0] is state and cached[1] is status and cached[2] is target:
            return cached[3]
        line = list_line(state, status, target.name)
        self._list_cache = (state, status, target, line)
        return line

    def queue_text(self) -> str:
        return "".join(
            f"{p.prompt_id}\t{first_line(p.text) or '-'}\n" for p in self._journal.state.queue
        )

    def usage_used(self) -> int | None:
        state = self._journal.state
        return accounting.context_used(state.baseline, self._messages())

    def usage_line(self) -> str:
        compact_at = self._services.settings.context.auto_compact or None
        window = self._target.limits.context_window
        return accounting.usage_line(self.usage_used(), window, compact_at)

    def cost_text(self) -> str:
        state = self._journal.state
        turns = [(t.turn, t.usage) for t in state.turns]
        children = self._services.children(self.id)
        return accounting.cost_text(state.usage, self._usd, turns, children)

    def approval_text(self) -> str:
        return self._approvals.text()

    def todos_text(self) -> str:
        return "".join(f"{t.status}\t{t.content}\n" for t in self._journal.state.todos)

    def kept(self) -> Kept:
        """What an idle unload keeps of this session that its records cannot rebuild."""
        return Kept(self.log.backlog(), self.events.backlog(), self._start_context, self._handled)

    def accepted_seq(self) -> int:
        """How many prompts were accepted so far: `wait` takes this when it is opened."""
        return self._accepted

    # -- blocking ----------------------------------------------------------------------------

    async def wait_changed(self, seen: int) -> int:
        """Wait until `version` differs from `seen`; return the new version."""
        while self._version == seen:
            await self._changed.wait()
        return self._version

    async def wait_handled(self, accepted_seq: int) -> SessionStatus:
        """Block until every prompt up to `accepted_seq` is handled (run or dropped) and the
        session is not busy; return the state. A stopped, failed or exited session, and one
        whose result waits for approval, returns at once: its queue will not move until someone
        acts."""
        while True:
            status = self._status
            if status in (S.STOPPED, S.ERROR, S.EXITED) or self.pending_result is not None:
                return status
            if self._handled >= accepted_seq and status not in BUSY and not self._turn_active:
                return status
            await self._changed.wait()

    # -- writes ------------------------------------------------------------------------------

    async def screen_prompt(self, text: str) -> str:
        """The prompt written to `in` as the UserPromptSubmit hooks leave it (with the context
        they add), before `submit`; a hook's rejection is `InvalidSessionRequest` saying why."""
        hooks = self._hooks
        if hooks is None or self._status not in ACCEPTS_PROMPTS or not text.strip():
            return text  # nothing to screen, or `submit` refuses it anyway
        try:
            context = await hooks.prompt_submit(text)
        except PromptBlocked as exc:
            raise InvalidSessionRequest(f"the prompt was not accepted: {exc}") from exc
        return f"{text}\n\n{context}" if context else text

    def submit(self, text: str) -> int:
        """Accept a prompt (`in`): it runs now or waits in the queue. Returns its sequence
        number for `wait_handled`."""
        status = self._status
        if status not in ACCEPTS_PROMPTS:
            what = {
                S.STOPPED: "write `start` to its ctl to resume it",
                S.ERROR: f"{self._detail}; write `start` or `restart` to its ctl",
                S.EXITED: "it has ended; create a new session",
            }[status]
            raise SessionRefused(f"session {self.id} is {status.value}: {what}")
        if not text.strip():
            raise InvalidSessionRequest("the prompt is empty: write some text to `in`")
        if self.ephemeral and self._accepted >= 1:
            raise SessionRefused(
                f"session {self.id} is ephemeral: it runs one prompt; create another session"
            )
        if not self._recorder.append(PromptQueued(f"p{self._journal.seq + 1}", text)):
            raise RecordWriteFailed(f"the prompt was not accepted: {self._detail}")
        self._accepted += 1
        self._notify()
        return self._accepted

    def drop_queue(self) -> int:
        """`drop` on `queue`: discard every waiting prompt; returns how many."""
        ids = tuple(p.prompt_id for p in self._journal.state.queue)
        if not ids:
            return 0
        if not self._recorder.append(PromptDropped(ids)):
            raise RecordWriteFailed(f"the queue was not dropped: {self._detail}")
        self._handled += len(ids)
        self._output.log_lines([f"DROPPED: {len(ids)} queued prompt(s)"])
        self._notify()
        return len(ids)

    def answer_approval(self, line: str, by: str = USER) -> None:
        """`approve`, `always` or `reject REASON` for the pending tool call; `approve` or
        `reject REASON` for a pending result. `by` is who answers: `user` for a write to the
        session's files, a session's id when an approver session answers through a tool.
        Refused (`SessionRefused`): a session answering its own approval; a session answering
        a result gate that does not name it as approver (`PendingResult.approver`), or a tool
        call's approval (only a person answers those)."""
        self._approvals.answer(line, by)

    def request_result_approval(
        self, summary: str = "", asked_by: str = "ctl", ref: str = "", approver: str | None = None
    ) -> str:
        """Ask for approval of this session's result (docs/session.md); returns what
        the asker is told. `summary` defaults to `out`. Raises `SessionRefused` when the session
        cannot wait for one (exited, ephemeral, stopped, in error, already waiting).
        `approver` is the session that may answer it besides a person: by default the
        session's own `approver`; a bead's gate passes the bead's (`user`: only a person).

        The API for other gates (a bead with requires_approval): call it with the bead's
        summary, `asked_by="bead <id>"` and the asker's own `ref` for this request (the bead's
        approval round), and learn the decision from the `ResultDecided` event (which carries
        asked_by, ref and who answered) or, after a daemon restart, from
        `result_decision(asked_by)`, which the records keep. Nothing is held in memory only."""
        return self._approvals.request_result(summary, asked_by, ref, approver)

    @property
    def pending_result(self) -> PendingResult | None:
        """The open result gate (summary, asked_by, ref), or None."""
        return self._approvals.pending_result

    @property
    def requested_result(self) -> PendingResult | None:
        """A result gate asked for during the running turn (opened when it ends), or None."""
        return self._approvals.requested_result

    def result_decision(self, asked_by: str) -> DecidedResult | None:
        """How the last result gate asked by `asked_by` ended, from the records (so it holds
        after a daemon restart): None when none has ended since that asker's last request."""
        return self._approvals.result_decision(asked_by)

    def withdraw_result_approval(self, asked_by: str, why: str) -> bool:
        """The asker no longer needs an answer (a bead decided elsewhere): a gate it asked for
        is cancelled (recorded; the session goes idle), a request waiting for the turn's end is
        dropped. False when the session has neither for `asked_by`."""
        return self._approvals.withdraw_result(asked_by, why)

    def mark_out_read(self) -> None:
        """`out` was read to end of file and clunked: await -> idle (harmless otherwise)."""
        if self._status is S.AWAIT:
            self._set_status(S.IDLE)

    def set_context(self, text: str) -> None:
        """The `context` file: recorded now, in the prompt from the next turn."""
        if self._status is S.EXITED:
            raise SessionRefused(f"session {self.id} has exited")
        if not self._recorder.append(ContextFileChanged(text)):
            raise RecordWriteFailed(f"the context was not changed: {self._detail}")
        self._layers = attrs.evolve(self._layers, context=text)
        self._notify()

    def set_role(self, name: str) -> None:
        """The `role` file: allowed only before the first prompt."""
        name = name.strip()
        if self._accepted or self._journal.state.messages:
            raise SessionRefused(
                f"the role of session {self.id} is fixed once it has had a prompt; create a new "
                f"session with role={name}"
            )
        roles.check_name(name)
        if name == self.role:
            return
        if not self._recorder.append(RoleChanged(name)):
            raise RecordWriteFailed(f"the role was not changed: {self._detail}")
        self._skills = session_skills(self, self._services)
        self._layers = self._layers_for(self.context, self._skills)
        self._agent = self._gate = None  # built again, for the new role, on first use
        self._notify()

    def record_alias(self, alias: str | None) -> None:
        """Record a new alias (None: none). Only `SessionManager.set_alias` calls this: it
        checks the name and keeps its alias map in step."""
        self._refuse_exited()
        if not self._recorder.append(AliasChanged(alias)):
            raise RecordWriteFailed(f"the alias was not changed: {self._detail}")
        self._output.log_lines([f"ALIAS: {alias or '-'}"])
        self._notify()

    # -- verbs -------------------------------------------------------------------------------

    async def control(self, line: str) -> None:
        """One ctl line: stop | start | restart | kill | cancel | clear | model NAME |
        request_approval [SUMMARY] | approve | reject REASON."""
        verb, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if verb == "request_approval":
            self.request_result_approval(rest, "ctl")
            return
        if verb in ("approve", "reject", "always"):
            self.answer_approval(line)
            return
        if verb == "model":
            if not rest:
                raise InvalidSessionRequest("model needs a name: model NAME")
            await self.switch_model(rest)
            return
        actions = {
            "stop": self.stop,
            "start": self.start,
            "restart": self.restart,
            "kill": self.kill,
            "cancel": self.cancel,
            "clear": self.clear,
        }
        if verb not in actions or rest:
            raise InvalidSessionRequest(
                f"unknown session command {line.strip()!r}: the commands are {', '.join(VERBS)}"
            )
        await actions[verb]()

    async def cancel(self) -> None:
        """End the running turn (its out says it was cancelled); the queue goes on."""
        if self._agent is None or not self._agent.cancel():
            raise SessionRefused(
                f"no turn is running (session {self.id} is {self._status.value}): nothing to cancel"
            )
        await self._wait_turn_end()

    async def stop(self) -> None:
        """Cancel the running turn and refuse prompts until `start`."""
        async with self._held():
            if self._status in (S.STOPPED, S.EXITED):
                raise SessionRefused(f"session {self.id} is already {self._status.value}")
            await self._end_turn()
            if self._status is not S.ERROR:
                self._set_status(S.STOPPED, "stopped by request")

    async def start(self) -> None:
        """Resume a stopped session, or retry one in error."""
        async with self._held():
            if self._status not in (S.STOPPED, S.ERROR):
                raise SessionRefused(
                    f"session {self.id} is {self._status.value}: start resumes a stopped session "
                    "or one in error"
                )
            self._recorder.retry()
            self._set_status(S.IDLE)

    async def restart(self) -> None:
        """Same id, alias and role; a fresh context (recorded as a replacement)."""
        async with self._held():
            self._refuse_exited()
            await self._end_turn()
            if self._status is S.ERROR:
                self._recorder.retry()
            self._replace_context(ReplaceReason.RESTART)
            # The prompt lists the skills found now; the agent keeps those it was built with.
            found = session_skills(self, self._services, report=False)
            self._layers = self._layers_for(self.context, found)
            if self._agent is not None:  # else it is built with these layers
                self._agent.config = attrs.evolve(self._agent.config, system=self.system_prompt)
            if self._status is not S.IDLE:
                self._set_status(S.IDLE, "restarted with a fresh context")

    async def clear(self) -> None:
        """Empty the context (not while a turn runs)."""
        async with self._held():
            self._refuse_exited()
            self._refuse_busy("clear")
            self._replace_context(ReplaceReason.CLEAR)

    async def switch_model(self, name: str) -> None:
        """`model NAME`: replay the history to the new model if it can take it as is, else
        record a text handoff. Not while a turn runs."""
        async with self._held():
            self._refuse_exited()
            self._refuse_busy("model")
            target = self._services.resolve(name)
            old = self._target
            agent = self.agent
            messages = agent.messages
            why = replayable(messages, target.kind, target.capabilities) if messages else None
            if why is not None:
                text = handoff_text(messages, old.name, target.name)
                handed = (Message.user_text(text),)
                if not self._recorder.append(ContextReplaced(handed, ReplaceReason.HANDOFF)):
                    raise RecordWriteFailed(f"the model was not changed: {self._detail}")
                agent.reset(handed)
                self._recorder.append(
                    Note(f"model {old.name} -> {target.name}: {why}; text handoff")
                )
                self._output.log_lines(
                    [f"NOTE: model {old.name} -> {target.name}: handoff ({why})"]
                )
            if not self._recorder.append(ModelChanged(target.name)):
                raise RecordWriteFailed(f"the model was not changed: {self._detail}")
            self._target = target
            agent.provider = self._provider_of(target)
            agent.window = window_for(target, self._services.settings.context)
            agent.config = attrs.evolve(
                agent.config,
                model=target.model,
                max_tokens=target.limits.max_output_tokens,
                compact_tools=compact_tools(target),
            )
            self._used_before = None
            self._output.log_lines(
                [f"MODEL: {target.name}" + (" (replayed)" if why is None else "")]
            )
            self._notify()

    async def kill(self) -> None:
        """End the session: its turn, its task; gone from the tree, records kept."""
        async with self._held():
            self._refuse_exited()
            await self._end_turn()
            await self._exit("killed")

    # -- the task ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The session's task: run queued prompts, one turn each, until killed or cancelled."""
        with self._scope:
            try:
                if self._status is S.STARTING:
                    self._set_status(S.IDLE)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._recorder.checkpoint.run)
                    task_status.started()
                    await self._work()
                    nursery.cancel_scope.cancel()
            finally:
                self._approvals.close("the session ended before the approval was answered")
                self._output.close()

    async def _work(self) -> None:
        await self.turns.recover()  # an undo a crash cut is finished before anything else
        await trio.lowlevel.checkpoint()  # `new` answers first: nothing below is needed for it
        if (hooks := self._hooks) is not None and self._kept is None:  # an unload is no stop
            source = "resume" if self._messages() else "startup"
            self._start_context = await hooks.session_start(source)
        while True:
            text = await self._next_prompt()
            await self._run_turn(text)
            if self.ephemeral and self._status is not S.ERROR:
                async with self._held():
                    if self._status is not S.EXITED:
                        await self._exit("ephemeral: its prompt was handled")
                return

    async def _next_prompt(self) -> str:
        while True:
            queue = self._journal.state.queue
            ready = queue and not self._hold and self._status in (S.IDLE, S.AWAIT)
            if ready and self._agent_ready():
                head = queue[0]
                if self._recorder.append(PromptTaken(head.prompt_id)):
                    return head.text
            await self._changed.wait()

    async def _run_turn(self, text: str) -> None:
        self._turn_active = True
        agent = self.agent  # built already, before the prompt was taken
        self._services.before_turn(self)
        self._layers = self._current_layers()
        agent.config = attrs.evolve(agent.config, system=self._layers.render())
        self._set_status(S.RUNNING)
        deadline = self._services.settings.turn_deadline
        scope = trio.CancelScope(
            deadline=math.inf if deadline is None else trio.current_time() + deadline
        )
        self._output.start_turn(text, scope.deadline)
        self.turns.begin(text)
        finished: ev.TurnFinished | None = None
        try:
            with scope:
                context, self._start_context = self._start_context, ""
                finished = await agent.run_turn(f"{context}\n\n{text}" if context else text)
        finally:
            await self.turns.end(finished)  # the end snapshot, before the turn counts as over
            self._turn_active = False
            self._handled += 1
            self._finish_turn()

    def _finish_turn(self) -> None:
        """Set `out` from how the turn ended, leave running, then publish the turn's
        `turn_finished` line (synchronously: this also runs while the daemon shuts down)."""
        finished = self._output.end_turn(self._messages())
        request = self._approvals.take_request()
        # An ephemeral session goes from running straight to exited (the worker ends it next).
        if self._status in (S.RUNNING, S.AWAIT_APPROVAL) and not self.ephemeral:
            done = finished is not None and finished.outcome is ev.TurnOutcome.DONE
            if request is not None and done and self._status is S.RUNNING:
                self._approvals.open_requested(request)
            else:
                if request is not None:
                    outcome = finished.outcome.value if finished else "error"
                    self._output.log_lines(
                        [f"NOTE: approval request dropped: the turn ended {outcome}"]
                    )
                self._set_status(S.AWAIT)
        self._output.publish_end()
        self._notify()

    # -- agent events ------------------------------------------------------------------------

    def _on_event(self, event: ev.AgentEvent) -> None:
        """The agent's events: shown (`Output`), then the session's own accounting."""
        shown = self._output.on_event(event)
        if type(shown) is ev.TextDelta or type(shown) is ev.ReasoningDelta:
            return  # only the streams changed, and they wake their own readers
        if isinstance(shown, ev.Usage):
            self._add_cost(shown.usage)
        if isinstance(shown, ev.Usage | ev.TurnFinished):
            self._check_thresholds()
        self._notify()

    def _check_thresholds(self) -> None:
        used = self.usage_used()
        window = self._target.limits.context_window
        for percent in accounting.crossed(self._used_before, used, window):
            assert used is not None
            self._services.publish(UsageThreshold(self.id, percent, used, window))
            self._output.log_lines([f"NOTE: context {percent}% full ({used}/{window} tokens)"])
        self._used_before = used

    def _add_cost(self, usage: Usage) -> None:
        pricing = self._target.pricing
        cost = None if pricing is None else pricing.cost(usage)
        self._usd = None if cost is None or self._usd is None else self._usd + cost

    # -- records ---------------------------------------------------------------------------

    def _record_failed(self, reason: str) -> None:
        """A record could not be written (`Recorder`): error, and the turn is cancelled."""
        self._services.publish(SessionFailed(self.id, reason))
        self._set_status(S.ERROR, f"the session's record could not be written: {reason}")
        if self._agent is not None:
            self._agent.cancel()

    # -- the agent ---------------------------------------------------------------------------

    def set_policy(self, rules: RuleSet, mode: Mode) -> None:
        """The permission gate's rules and mode as the project config sets them: applied now,
        or to the agent when it is built."""
        self._policy = (rules, mode)
        if self._gate is not None:
            self._gate.policy = attrs.evolve(self._gate.policy, rules=rules, mode=mode)

    def set_provider(self, target: ResolvedModel) -> None:
        """The agent's provider and model as a project config resolves the session's model
        now: set now, or on the agent when it is built."""
        self._provider = (self._provider_of(target), target)
        if self._agent is not None:
            _retarget(self._agent, *self._provider)

    def _provider_of(self, target: ResolvedModel) -> Provider:
        """`target`'s provider behind the budgets and the request log, as the agent's always is."""
        return session_provider(self, self._services, self._recorder, target)

    def _messages(self) -> tuple[Message, ...]:
        """The transcript: the agent's, or before it is built the recorded one (the same)."""
        agent = self._agent
        return self._journal.state.messages if agent is None else agent.messages

    def _agent_ready(self) -> bool:
        """Build the agent before a prompt is taken; one that cannot be built (a role file
        broken since `new`) puts the session in error, saying why, and `start` tries again."""
        if self._agent is not None:
            return True
        try:
            self._agent = self._build_agent()
        except Exception as exc:
            log.exception("session.agent_failed", session=self.id)
            reason = f"its agent could not be built: {exc}; fix that, then write start to its ctl"
            self._services.publish(SessionFailed(self.id, reason))
            self._set_status(S.ERROR, reason)
            return False
        return True

    def _build_agent(self) -> Agent:
        state = self._journal.state
        agent = build_agent(
            self,
            state.messages,
            services=self._services,
            recorder=self._recorder,
            gate=self._make_gate,
            system=self._layers.render(),
            emit=self._observed(),
            hooks=self._hooks,
            skills=self._skills,
            on_compaction=self.compaction.record,
        )
        agent.context.state.todos = tuple(
            ev.Todo(t.content, ev.TodoStatus(t.status)) for t in state.todos
        )
        if self._provider is not None:  # a project config moved the model before
            _retarget(agent, *self._provider)
        return agent

    def _make_gate(
        self, policy: Policy, tools: ToolRegistry, context: ToolContext
    ) -> PermissionGate:
        gate = self._gate = self._approvals.gate(policy, tools, context)
        if self._policy is not None:
            rules, mode = self._policy
            gate.policy = attrs.evolve(gate.policy, rules=rules, mode=mode)
        return gate

    def _observed(self) -> Callable[[ev.AgentEvent], None]:
        """Where the agent's and the hooks' events go (`_on_event`; telemetry too, when on)."""
        if self._emit is None:
            self._emit = observed(self, self._services.settings, self._on_event, self._messages)
        return self._emit

    @property
    def _hooks(self) -> SessionHooks | None:
        """The session's hooks (made on first use: the agent's, `screen_prompt`'s, start's)."""
        if not self._hooks_made:
            self._session_hooks = session_hooks(
                self, self._services.settings, self._observed(), self._permission_mode
            )
            self._hooks_made = True
        return self._session_hooks

    def _permission_mode(self) -> str:
        """The mode a hook is told: the permission gate's (the agent is built for it)."""
        if self._agent is None:
            self._agent = self._build_agent()
        assert self._gate is not None
        return self._gate.policy.mode.value

    def _layers_for(self, context: str, skills: SkillSet) -> PromptLayers:
        return load_layers(self.cwd, self.role, context, self._services.settings, skills)

    def _current_layers(self) -> PromptLayers:
        return current_layers(self._layers, self.id, self._services.settings)

    # -- helpers -----------------------------------------------------------------------------

    def _set_status(self, new: SessionStatus, detail: str = "") -> None:
        old = self._status
        if new is old and new is S.ERROR:
            return
        check(old, new)
        if self.pending_result is not None and new is not S.AWAIT_APPROVAL:
            # stop, restart, error: nobody decided
            self._approvals.cancel_result(detail or new.value)
        self._status, self._detail = new, detail
        if new is not S.EXITED:  # SessionEnded is the record of the end
            self._recorder.append(StateChanged(new, detail))
        self._services.publish(SessionStateChanged(self.id, new.value, detail))
        self._output.log_lines([f"STATE: {new.value}" + (f" ({detail})" if detail else "")])
        self._notify()

    def _notify(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = trio.Event()

    def _held(self) -> _Held:
        return _Held(self)

    def _refuse_exited(self) -> None:
        if self._status is S.EXITED:
            raise SessionRefused(f"session {self.id} has exited")

    def _refuse_busy(self, verb: str) -> None:
        if self.pending_result is not None and not self._turn_active:
            raise SessionRefused(
                f"{verb}: session {self.id} waits for approval of its result; write approve or "
                "reject REASON to its approval file first"
            )
        if self._turn_active or self._status in BUSY:
            raise SessionRefused(
                f"{verb}: a turn is running in session {self.id}; write cancel (or wait) first"
            )

    async def _wait_turn_end(self) -> None:
        while self._turn_active:
            await self._changed.wait()

    async def _end_turn(self) -> None:
        if self._agent is not None:
            self._agent.cancel()
        await self._wait_turn_end()

    def _replace_context(self, reason: ReplaceReason) -> None:
        # Recorded first, then done: a refused write (disk full) leaves the transcript and the
        # todos as the records have them, so `start` has nothing to catch up but appends.
        if not self._recorder.append(ContextReplaced((), reason)):
            raise RecordWriteFailed(f"the context was not replaced: {self._detail}")
        agent = self._agent  # one not built yet starts from the records, replaced already
        if agent is not None:
            agent.reset()
        cleared = not self._journal.state.todos or self._recorder.append(TodosChanged(()))
        if cleared and agent is not None:
            agent.context.state.todos = ()
        self._used_before = None
        self._output.log_lines([f"CONTEXT: {reason.value}"])
        self._notify()

    async def _exit(self, reason: str) -> None:
        self._approvals.cancel_result(reason)
        if not await self._recorder.append_synced(SessionEnded(reason)):
            raise RecordWriteFailed(f"session {self.id} could not record its end: {self._detail}")
        self._set_status(S.EXITED, reason)
        if (hooks := self._hooks) is not None:
            await hooks.session_end(reason)
        self._approvals.close("the session ended before the approval was answered")
        self._services.on_exit(self, reason, self.ephemeral and reason.startswith("ephemeral"))
        self._scope.cancel()


def _retarget(agent: Agent, provider: Provider, target: ResolvedModel) -> None:
    agent.provider = provider
    agent.config = attrs.evolve(
        agent.config, model=target.model, max_tokens=target.limits.max_output_tokens
    )


class _Held:
    """A verb in progress: the verb lock held and the worker told not to take a prompt."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def __aenter__(self) -> None:
        await self._session._verbs.acquire()
        self._session._hold += 1

    async def __aexit__(self, *exc: object) -> None:
        self._session._hold -= 1
        self._session._verbs.release()
        self._session._notify()


__all__ = [
    "MODE_ORDER",
    "SANDBOXES",
    "USER",
    "VERBS",
    "Services",
    "Session",
    "SessionError",
    "SessionSettings",
    "ToolSetup",
    "ToolsFactory",
    "check_mode",
    "list_line",
    "sandbox_name",
    "sandbox_policy",
    "wider",
]
