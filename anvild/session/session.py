"""One session: the supervisor of one agent, its records, its queue and its files' contents.

Theory of operation.

- Tasks. `Session.run` is the session's task, started by the manager with `await
  nursery.start(session.run)`; it owns a cancel scope (`kill` and daemon shutdown cancel it) and
  runs the worker loop: wait for a queued prompt while the session is idle or await, take it,
  run one turn, publish the end, repeat. Verbs run in the caller's task (a 9P request): they
  cancel the running turn through the agent (`Agent.cancel`) and wait for the worker to finish
  it, under one `trio.Lock` so two verbs never interleave.
- State. The status is derived here and nowhere else, from the loop: a prompt taken (running),
  an approval asked (await_approval) and answered (running), a turn ended (await), `out` read
  (idle), a verb (stopped, idle, exited), a failed record write (error). Every change goes
  through the table in `anvild.session.state`; an illegal one raises.
- Records. Every mutation is recorded before it is visible (`anvild.store`): the agent's
  transcript is diffed into records on every agent event (`message_records`), a call's
  `ToolStarted` is synced before the tool runs and its `ToolFinished` after (the registry is
  wrapped), and usage, todos, turn ends, prompts, approvals, context and role changes each have
  their record (an `always` answer records what it added to the permissions, and a restored
  session's policy starts with it). So the journal's state equals the live session after every
  event. What the file tools saw (a path and the sha256 of its content) is a `FileSeen` record
  after the call's `ToolFinished`, and a restored session's freshness tracker starts with it:
  after a daemon restart the agent edits a file it had read without reading it again, and a
  file changed meanwhile is still refused as stale. The answer the model is streaming is
  recorded at most a second behind what `events` showed (`anvild.session.checkpoint`), for
  display only: after a crash `out` shows it, marked [interrupted]. A failed write (disk full)
  moves the session to `error` and cancels its turn; nothing else stops. A tool whose start
  could not be recorded is not run.
- Prompts. `submit` records the prompt as queued and returns its sequence number; the worker
  takes prompts in order, one turn each. `drop_queue` discards the waiting ones. `wait_handled`
  blocks until every prompt accepted up to a sequence number has been handled and the session
  is not busy.
- Approvals. The permission gate asks the session's approver, which records the request, shows
  it on `approval` (state await_approval) and waits on an `ApprovalBroker`. Only an explicit
  `approve`, `always` or `reject REASON` answers it; cancel, stop, kill and shutdown cancel the
  wait (recorded as cancelled) and the call never runs.
- Result gates. `request_result_approval` (ctl `request_approval [SUMMARY]`, the model's
  `request_approval` tool, or an API caller such as a bead) asks a human or an approver session
  to approve the session's result. From idle or await it takes effect at once; during a turn it
  takes effect when the turn ends, if the turn ended `done` (otherwise it is dropped, with a
  note in the log). The session records the request and goes to await_approval, `approval`
  shows `kind result` with the summary (the given text, else `out`), and the worker takes no
  prompt (they queue). `approve` -> idle; `reject REASON` -> stopped, the reason in the record,
  the log and the state's detail; `always` is refused. stop, restart and kill cancel the gate
  (recorded as cancelled). Nothing runs while it waits, so a daemon restart brings the session
  back in it. Each decision is recorded (`ResultApprovalAnswered`, with who answered) before it
  is published as a `ResultDecided` event (session, verdict, reason, asked_by, ref, by); an
  asker learns it from that event, or after a restart from `result_decision(asked_by)`, which
  the records keep. There is no in-memory callback. A session never answers its own approval
  (`answer_approval(line, by=<its id>)` is refused). Each gate names its approver session
  (`PendingResult.approver`, recorded with the request: the session's `approver` from `new`,
  or the asker's, e.g. a bead's); a session that answers (`by=<its id>`) must be that one, and
  no session answers a tool call's approval: only a person (`by="user"`) answers any.
  `withdraw_result_approval` lets an asker that no longer needs the answer (a bead decided on
  its own ctl) cancel its gate.
- Streams. `log` (human-readable lines) and `events` (stream-json agent events) are
  `LineBroadcast`s: per-reader cursors, a bounded backlog, lag markers. Besides the loop's
  events, `events` carries the session's own `approval_requested` (when it starts waiting on
  `approval`: what the file shows, tool or result kind) and `approval_answered` (the verdict,
  cancelled included), so a client learns of an approval without polling the file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
from collections.abc import Iterable
from typing import Final

import attrs
import structlog
import trio

from anvild.agent import events as ev
from anvild.agent.loop import Agent
from anvild.agent.permissions.approval import (
    ApprovalAnswer,
    ApprovalBroker,
    ApprovalRequest,
    ApproveAlways,
    ApproveOnce,
    Reject,
    Unavailable,
)
from anvild.agent.permissions.gate import PermissionGate
from anvild.agent.permissions.policy import Allow as PolicyAllow
from anvild.agent.permissions.policy import Mode, Policy, Remember
from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.registry import ResolvedModel
from anvild.llm.stream import Usage
from anvild.llm.types import Message, ToolCall
from anvild.session import accounting, roles
from anvild.session.agent_builder import build_agent, current_layers, load_layers
from anvild.session.errors import (
    InvalidSessionRequest,
    RecordWriteFailed,
    SessionError,
    SessionRefused,
)
from anvild.session.events import (
    ResultDecided,
    SessionFailed,
    SessionStateChanged,
    UsageThreshold,
)
from anvild.session.handoff import handoff_text, replayable
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
from anvild.store import (
    ApprovalAnswered,
    ApprovalRequested,
    ContextFileChanged,
    ContextReplaced,
    DecidedResult,
    Journal,
    ModelChanged,
    Note,
    PendingResult,
    PermissionsRemembered,
    PromptDropped,
    PromptQueued,
    PromptTaken,
    ReplaceReason,
    ResultApprovalAnswered,
    ResultApprovalRequested,
    RoleChanged,
    SessionEnded,
    SessionState,
    SessionStatus,
    StateChanged,
    TodosChanged,
    Verdict,
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
MAX_SUMMARY_CHARS: Final = 4000
USER: Final = "user"
"""Who answers through the session's files (a person), and the default approver."""


PREVIEW_CHARS: Final = 200
INTERRUPTED_MARK: Final = "[interrupted]"
"""In a restored `out`, after what was shown of an answer that a crash cut."""


# -- the recording pieces ----------------------------------------------------------------------


class _Approver:
    """The session's `Approver`: records the request, waits on the broker, records the answer."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def request_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        session = self._session
        arguments = dict(request.arguments)
        asked = ApprovalRequested(request.id, request.tool, arguments, request.reason)
        if not session._recorder.append(asked):
            return Unavailable(
                f"the session's record could not be written: {session.status_detail}"
            )
        if session.headless:  # nobody watches `approval`: refuse now, saying what would allow it
            why = await session._headless_refusal(request)
            session._recorder.append(ApprovalAnswered(request.id, Verdict.CANCELLED, why))
            return Unavailable(why)
        session._set_status(S.AWAIT_APPROVAL)
        session._output.show(
            ev.ApprovalRequested(
                "tool",
                call_id=request.id,
                tool=request.tool,
                arguments=arguments,
                reason=request.reason,
                always_adds=tuple(request.always),
            )
        )
        try:
            answer = await session._broker.request_approval(request)
        except BaseException:
            # cancel, stop, kill, shutdown: nobody answered, and nothing is approved
            why = "the turn ended"
            session._recorder.append(ApprovalAnswered(request.id, Verdict.CANCELLED, why))
            session._output.show(ev.ApprovalAnswered("tool", "cancelled", why, request.id))
            raise
        match answer:
            case ApproveOnce():
                verdict, reason = Verdict.APPROVE, ""
            case ApproveAlways():
                verdict, reason = Verdict.ALWAYS, ""
            case Reject(feedback=feedback):
                verdict, reason = Verdict.REJECT, feedback
            case Unavailable(reason=why):
                verdict, reason = Verdict.CANCELLED, why
        session._recorder.append(ApprovalAnswered(request.id, verdict, reason))
        session._output.show(ev.ApprovalAnswered("tool", verdict.value, reason, request.id))
        if session.status is S.AWAIT_APPROVAL:
            session._set_status(S.RUNNING)
        return answer


def _asker(asked_by: str) -> str:
    """What named the approver of a gate asked by `asked_by`: a bead, or the session."""
    return asked_by if asked_by.startswith("bead ") else "session"


# -- the session -------------------------------------------------------------------------------


class Session:
    """One live session. Build it with `SessionManager` (which owns its task and its journal).

    Read side (what the tree's files show): `id`, `alias`, `role`, `model`, `cwd`, `sandbox`,
    `ephemeral`, `status`, `out`, `queue_text()`, `usage_line()`, `cost_text()`,
    `approval_text()`, `todos_text()`, `context`, `log`, `events`, `record` (the recorded
    state). Write side: `submit`, `drop_queue`, `answer_approval`, `set_role`, `set_context`,
    `mark_out_read`, `control` and one method per verb. Blocking: `wait_handled`,
    `wait_changed`; the verbs that end a turn wait for it to end.
    """

    def __init__(
        self,
        journal: Journal,
        target: ResolvedModel,
        services: Services,
        *,
        usd: float | None = 0.0,
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
            transcript=lambda: self._agent.messages,
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
        self._used_before: int | None = None
        self._usd = usd  # the cost so far (a restored session's is priced from its records)
        self._list_cache: tuple[object, object, object, str] = (None, None, None, "")
        self._broker = ApprovalBroker(on_change=self._notify)
        self._result: PendingResult | None = state.result_approval  # a result gate
        self._result_request: PendingResult | None = None  # asked during a turn: at its end
        self._layers = self._layers_for(state.context)
        self._agent = self._build_agent(state.messages)
        self._agent.context.state.todos = tuple(
            ev.Todo(t.content, ev.TodoStatus(t.status)) for t in state.todos
        )
        self._output.log_transcript(state.messages)  # a restored session's log starts with its past
        for note in state.notes:
            self._output.log_lines(indented("NOTE:", note))

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
        return self._agent

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
        fields = (state.id, state.alias, status.value, state.role, target.name, state.cwd)
        line = "\t".join(f or "-" for f in fields)
        self._list_cache = (state, status, target, line)
        return line

    def queue_text(self) -> str:
        return "".join(
            f"{p.prompt_id}\t{first_line(p.text) or '-'}\n" for p in self._journal.state.queue
        )

    def usage_used(self) -> int | None:
        state = self._journal.state
        return accounting.context_used(state.baseline, self._agent.messages)

    def usage_line(self) -> str:
        return accounting.usage_line(self.usage_used(), self._target.limits.context_window)

    def cost_text(self) -> str:
        return accounting.cost_text(self._journal.state.usage, self._usd)

    def approval_text(self) -> str:
        result = self._result
        if result is not None:
            return (
                "\n".join(
                    [
                        "kind result",
                        f"asked_by {result.asked_by or '-'}",
                        f"approver {result.approver or USER}",
                        *indented("summary", result.summary),
                        "answer approve | reject REASON",
                    ]
                )
                + "\n"
            )
        pending = self._broker.pending()
        if not pending:
            return ""
        request = pending[0]
        lines = [
            "kind tool",
            f"call_id {request.id}",
            f"tool {request.tool}",
            f"arguments {json.dumps(dict(request.arguments), ensure_ascii=False)}",
            f"reason {request.reason}",
        ]
        if request.always:
            lines.append(f"always_adds {'; '.join(request.always)}")
        lines.append("answer approve | always | reject REASON")
        return "\n".join(lines) + "\n"

    def todos_text(self) -> str:
        return "".join(f"{t.status}\t{t.content}\n" for t in self._journal.state.todos)

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
            if status in (S.STOPPED, S.ERROR, S.EXITED) or self._result is not None:
                return status
            if self._handled >= accepted_seq and status not in BUSY and not self._turn_active:
                return status
            await self._changed.wait()

    # -- writes ------------------------------------------------------------------------------

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
        if by in (self.id, self.alias):
            raise SessionRefused(
                f"session {self.id} cannot answer its own approval: an agent never approves "
                "its own result or tool call; a person or another session must write approve "
                "or reject REASON to its approval file"
            )
        if self._result is not None:
            approver = self._result.approver or USER
            if by != USER and by != approver:
                raise SessionRefused(
                    f"session {self.id}'s result can be approved only by "
                    + (
                        f"user; ask a human to write approve or reject REASON to "
                        f"agent/{self.id}/approval"
                        if approver == USER
                        else f"session {approver} (its approver, named when the "
                        f"{_asker(self._result.asked_by)} was created) or a human, not by "
                        f"session {by}"
                    )
                )
            self._answer_result(line, by)
            return
        pending = self._broker.pending()
        if not pending:
            raise SessionRefused(
                f"no approval is pending (session {self.id} is {self._status.value})"
            )
        if by != USER:
            raise SessionRefused(
                f"session {self.id} waits for approval of a tool call ({pending[0].tool}); only "
                f"a human answers those: ask a human to write approve or reject REASON to "
                f"agent/{self.id}/approval"
            )
        verb, _, rest = line.strip().partition(" ")
        answer: ApprovalAnswer
        match verb:
            case "approve" if not rest.strip():
                answer = ApproveOnce()
            case "always" if not rest.strip():
                answer = ApproveAlways()
            case "reject":
                answer = Reject(rest.strip())
            case _:
                raise InvalidSessionRequest(
                    f"cannot answer an approval with {line.strip()!r}: write approve, always or "
                    "reject REASON"
                )
        self._broker.answer(pending[0].id, answer)

    def request_result_approval(
        self, summary: str = "", asked_by: str = "ctl", ref: str = "", approver: str | None = None
    ) -> str:
        """Ask for approval of this session's result (see the module docstring); returns what
        the asker is told. `summary` defaults to `out`. Raises `SessionRefused` when the session
        cannot wait for one (exited, ephemeral, stopped, in error, already waiting).
        `approver` is the session that may answer it besides a person: by default the
        session's own `approver`; a bead's gate passes the bead's (`user`: only a person).

        The API for other gates (a bead with requires_approval): call it with the bead's
        summary, `asked_by="bead <id>"` and the asker's own `ref` for this request (the bead's
        approval round), and learn the decision from the `ResultDecided` event (which carries
        asked_by, ref and who answered) or, after a daemon restart, from
        `result_decision(asked_by)`, which the records keep. Nothing is held in memory only."""
        self._refuse_exited()
        if self.ephemeral:
            raise SessionRefused(
                f"session {self.id} is ephemeral: it exits after its prompt and cannot wait for "
                "approval; create a session without ephemeral"
            )
        if self._result is not None or self._result_request is not None:
            raise SessionRefused(f"session {self.id} already asked for approval of its result")
        if self._status in (S.STOPPED, S.ERROR):
            raise SessionRefused(
                f"session {self.id} is {self._status.value}: write start to its ctl first"
            )
        summary = summary.strip()[:MAX_SUMMARY_CHARS]
        named = self.approver if approver is None else approver
        who = "" if named == USER else named
        if self._turn_active or self._status in BUSY:
            self._result_request = PendingResult(summary, asked_by, ref, who)
            return (
                f"Approval requested: when this turn ends, session {self.id} waits in "
                "await_approval until a human or approver writes approve or reject REASON. "
                "End your turn now with a short summary of the result."
            )
        text = summary or self._output.out.strip()[:MAX_SUMMARY_CHARS]
        if not text:
            raise InvalidSessionRequest(
                f"nothing to approve: session {self.id} has no answer in out; give a summary: "
                "request_approval SUMMARY"
            )
        self._open_result_gate(PendingResult(text, asked_by, ref, who))
        return f"session {self.id} waits for approval of its result"

    @property
    def pending_result(self) -> PendingResult | None:
        """The open result gate (summary, asked_by, ref), or None."""
        return self._result

    @property
    def requested_result(self) -> PendingResult | None:
        """A result gate asked for during the running turn (opened when it ends), or None."""
        return self._result_request

    def result_decision(self, asked_by: str) -> DecidedResult | None:
        """How the last result gate asked by `asked_by` ended, from the records (so it holds
        after a daemon restart): None when none has ended since that asker's last request."""
        return self._journal.state.result_decision(asked_by)

    def withdraw_result_approval(self, asked_by: str, why: str) -> bool:
        """The asker no longer needs an answer (a bead decided elsewhere): a gate it asked for
        is cancelled (recorded; the session goes idle), a request waiting for the turn's end is
        dropped. False when the session has neither for `asked_by`."""
        request = self._result_request
        if request is not None and request.asked_by == asked_by:
            self._result_request = None
            self._output.log_lines([f"NOTE: approval request dropped: {why}"])
            return True
        if self._result is None or self._result.asked_by != asked_by:
            return False
        self._close_result_gate(Verdict.CANCELLED, why)
        self._set_status(S.IDLE, f"approval withdrawn: {why}")
        return True

    def _open_result_gate(self, pending: PendingResult) -> None:
        if not self._recorder.append(
            ResultApprovalRequested(
                pending.summary, pending.asked_by, pending.ref, pending.approver
            )
        ):
            raise RecordWriteFailed(f"the approval was not requested: {self._detail}")
        self._result = pending
        asked_by = pending.asked_by
        self._output.log_lines(indented("APPROVAL:", f"result approval requested by {asked_by}"))
        self._set_status(S.AWAIT_APPROVAL, "waiting for approval of the result")
        self._output.show(
            ev.ApprovalRequested(
                "result",
                asked_by=asked_by,
                summary=pending.summary,
                approver=pending.approver or USER,
            )
        )

    def _answer_result(self, line: str, by: str) -> None:
        verb, _, rest = line.strip().partition(" ")
        reason = rest.strip()
        match verb:
            case "approve" if not reason:
                self._close_result_gate(Verdict.APPROVE, "", by)
                self._set_status(S.IDLE, "result approved")
            case "reject" if reason:
                self._close_result_gate(Verdict.REJECT, reason, by)
                self._set_status(S.STOPPED, f"result rejected: {reason}")
            case "reject":
                raise InvalidSessionRequest(
                    "reject needs a reason for a result approval: reject REASON (it is recorded "
                    "and shown in the state's detail)"
                )
            case "always":
                raise InvalidSessionRequest(
                    "always does not apply to a result approval (it approves a tool for the rest "
                    "of the session); write approve or reject REASON"
                )
            case _:
                raise InvalidSessionRequest(
                    f"cannot answer a result approval with {line.strip()!r}: write approve or "
                    "reject REASON"
                )

    def _close_result_gate(self, verdict: Verdict, reason: str, by: str = "") -> None:
        """Record how the result gate ended (the record is the decision), then publish it."""
        pending = self._result
        if pending is None:
            return
        if not self._recorder.append(ResultApprovalAnswered(verdict, reason, by)):
            raise RecordWriteFailed(f"the answer was not recorded: {self._detail}")
        self._result = None
        said = f"result {verdict.value}" + (f": {reason}" if reason else "")
        said += f" (by {by})" if by else ""
        self._output.log_lines(indented("APPROVAL:", said))
        self._output.show(ev.ApprovalAnswered("result", verdict.value, reason, by=by))
        self._services.publish(
            ResultDecided(self.id, verdict.value, reason, pending.asked_by, pending.ref, by)
        )

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
        self._layers = self._layers_for(self.context)
        self._agent = self._build_agent(())
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
        if not self._agent.cancel():
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
            self._layers = self._layers_for(self.context)
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
            messages = self._agent.messages
            why = replayable(messages, target.kind, target.capabilities) if messages else None
            if why is not None:
                text = handoff_text(messages, old.name, target.name)
                handed = (Message.user_text(text),)
                if not self._recorder.append(ContextReplaced(handed, ReplaceReason.HANDOFF)):
                    raise RecordWriteFailed(f"the model was not changed: {self._detail}")
                self._agent.reset(handed)
                self._recorder.append(
                    Note(f"model {old.name} -> {target.name}: {why}; text handoff")
                )
                self._output.log_lines(
                    [f"NOTE: model {old.name} -> {target.name}: handoff ({why})"]
                )
            if not self._recorder.append(ModelChanged(target.name)):
                raise RecordWriteFailed(f"the model was not changed: {self._detail}")
            self._target = target
            self._agent.provider = self._services.provider_for(target)
            self._agent.config = attrs.evolve(
                self._agent.config,
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
                self._broker.close("the session ended before the approval was answered")
                self._output.close()

    async def _work(self) -> None:
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
            if queue and not self._hold and self._status in (S.IDLE, S.AWAIT):
                head = queue[0]
                if self._recorder.append(PromptTaken(head.prompt_id)):
                    return head.text
            await self._changed.wait()

    async def _run_turn(self, text: str) -> None:
        self._turn_active = True
        self._services.before_turn(self)
        self._layers = self._current_layers()
        self._agent.config = attrs.evolve(self._agent.config, system=self._layers.render())
        self._set_status(S.RUNNING)
        deadline = self._services.settings.turn_deadline
        scope = trio.CancelScope(
            deadline=math.inf if deadline is None else trio.current_time() + deadline
        )
        self._output.start_turn(text, scope.deadline)
        try:
            with scope:
                await self._agent.run_turn(text)
        finally:
            self._turn_active = False
            self._handled += 1
            self._finish_turn()

    def _finish_turn(self) -> None:
        """Set `out` from how the turn ended, and leave running (synchronously: this also runs
        while the daemon shuts down)."""
        finished = self._output.end_turn(self._agent.messages)
        request, self._result_request = self._result_request, None
        # An ephemeral session goes from running straight to exited (the worker ends it next).
        if self._status in (S.RUNNING, S.AWAIT_APPROVAL) and not self.ephemeral:
            done = finished is not None and finished.outcome is ev.TurnOutcome.DONE
            if request is not None and done and self._status is S.RUNNING:
                text = (
                    request.summary or self._output.out.strip()[:MAX_SUMMARY_CHARS] or "(no answer)"
                )
                with contextlib.suppress(RecordWriteFailed):  # then it is in error: no gate
                    self._open_result_gate(attrs.evolve(request, summary=text))
            else:
                if request is not None:
                    outcome = finished.outcome.value if finished else "error"
                    self._output.log_lines(
                        [f"NOTE: approval request dropped: the turn ended {outcome}"]
                    )
                self._set_status(S.AWAIT)
        self._notify()

    # -- agent events ------------------------------------------------------------------------

    def _on_event(self, event: ev.AgentEvent) -> None:
        """The agent's events: shown (`Output`), then the session's own accounting."""
        shown = self._output.on_event(event)
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
        self._agent.cancel()

    def _build_agent(self, messages: Iterable[Message]) -> Agent:
        return build_agent(
            self,
            messages,
            services=self._services,
            recorder=self._recorder,
            gate=self._make_gate,
            system=self._layers.render(),
            emit=self._on_event,
        )

    def _make_gate(
        self, policy: Policy, tools: ToolRegistry, context: ToolContext
    ) -> PermissionGate:
        gate = self._gate = PermissionGate(
            policy, _Approver(self), tools, context, on_remember=self._record_remembered
        )
        return gate

    def _layers_for(self, context: str) -> PromptLayers:
        return load_layers(self.cwd, self.role, context, self._services.settings)

    def _current_layers(self) -> PromptLayers:
        return current_layers(self._layers, self.id, self._services.settings)

    # -- helpers -----------------------------------------------------------------------------

    def _set_status(self, new: SessionStatus, detail: str = "") -> None:
        old = self._status
        if new is old and new is S.ERROR:
            return
        check(old, new)
        if self._result is not None and new is not S.AWAIT_APPROVAL:
            self._cancel_result_gate(detail or new.value)  # stop, restart, error: nobody decided
        self._status, self._detail = new, detail
        if new is not S.EXITED:  # SessionEnded is the record of the end
            self._recorder.append(StateChanged(new, detail))
        self._services.publish(SessionStateChanged(self.id, new.value, detail))
        self._output.log_lines([f"STATE: {new.value}" + (f" ({detail})" if detail else "")])
        self._notify()

    def _cancel_result_gate(self, why: str) -> None:
        """End a result gate nobody answered (recorded as cancelled); if the record cannot be
        written the gate stays, as the journal says."""
        with contextlib.suppress(RecordWriteFailed):
            self._close_result_gate(Verdict.CANCELLED, why)

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
        if self._result is not None and not self._turn_active:
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
        self._agent.cancel()
        await self._wait_turn_end()

    def _replace_context(self, reason: ReplaceReason) -> None:
        # Recorded first, then done: a refused write (disk full) leaves the transcript and the
        # todos as the records have them, so `start` has nothing to catch up but appends.
        if not self._recorder.append(ContextReplaced((), reason)):
            raise RecordWriteFailed(f"the context was not replaced: {self._detail}")
        self._agent.reset()
        if not self._journal.state.todos or self._recorder.append(TodosChanged(())):
            self._agent.context.state.todos = ()
        self._used_before = None
        self._output.log_lines([f"CONTEXT: {reason.value}"])
        self._notify()

    async def _exit(self, reason: str) -> None:
        if self._result is not None:
            self._cancel_result_gate(reason)
        if not await self._recorder.append_synced(SessionEnded(reason)):
            raise RecordWriteFailed(f"session {self.id} could not record its end: {self._detail}")
        self._set_status(S.EXITED, reason)
        self._broker.close("the session ended before the approval was answered")
        self._services.on_exit(self, reason, self.ephemeral and reason.startswith("ephemeral"))
        self._scope.cancel()

    def _record_remembered(self, remember: Remember) -> None:
        """An `always` answer: record what it added, so a daemon restart restores it."""
        grants = remember.grants
        self._recorder.append(
            PermissionsRemembered(
                rules=tuple(str(rule) for rule in remember.rules),
                read_roots=tuple(str(path) for path in grants.read_roots),
                write_roots=tuple(str(path) for path in grants.write_roots),
                network=grants.network,
                full_access=grants.full_access,
            )
        )

    async def _headless_refusal(self, request: ApprovalRequest) -> str:
        """Why a headless session refuses a call that needs approval, and what would allow it:
        the permission modes whose policy allows this very call (within the daemon's ceiling,
        or saying the ceiling must be raised), and what an "always" answer would have added."""
        gate = self._gate
        call = ToolCall(request.id, request.tool, dict(request.arguments))
        resolved = await gate.request_for(call)
        modes = [
            mode
            for mode in MODE_ORDER
            if wider(mode, gate.policy.mode)
            and isinstance(attrs.evolve(gate.policy, mode=mode).decide(resolved), PolicyAllow)
        ]
        ceiling = self._services.settings.max_mode
        ways = [
            f"--permission-mode {m.value}"
            + (
                ""
                if not wider(m, ceiling)
                else f' (after setting permissions.max_mode = "{m.value}" in the user config)'
            )
            for m in modes[:1]
        ]
        rules = [
            item.removeprefix("allow ") for item in request.always if item.startswith("allow ")
        ]
        if rules:
            ways.append(
                "an allow rule in the user config's [permissions] allow: "
                + ", ".join(f'"{rule}"' for rule in rules)
            )
        grants = [item for item in request.always if not item.startswith("allow ")]
        if grants:
            ways.append("a grant for " + ", ".join(grants) + " (no permission mode gives it)")
        what = "; or ".join(ways) if ways else "nothing but an interactive approval"
        return (
            f"This call needs approval ({request.reason.rstrip('.')}), and nobody can approve it "
            "in a "
            f"headless session. It would be allowed by {what}."
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
    "sandbox_name",
    "sandbox_policy",
    "wider",
]
