"""`Approvals`: a session's tool-call approvals and its result gates (docs/session.md).

Tool calls: the permission gate (made here, `gate`) asks the session's approver, which records
the request, shows it on `approval` (await_approval) and waits on an `ApprovalBroker`. Only an
explicit `approve`, `always` or `reject REASON` from a person answers it; cancel, stop, kill
and shutdown cancel the wait (recorded as cancelled) and the call never runs. A headless
session refuses at once, saying what would allow the call. An `always` answer records what it
added (`PermissionsRemembered`); a restored session's policy starts with it.
Result gates: `request_result` asks a person or the gate's approver session to approve the
session's result; the session waits in await_approval (its prompts queue) until `approve`
(idle) or `reject REASON` (stopped). Each decision is recorded (`ResultApprovalAnswered`)
before it is published (`ResultDecided`); stop, restart, kill and errors cancel the gate. No
session answers its own approval. Both kinds show `approval_requested` and
`approval_answered` on `events`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

import attrs
import structlog

from anvild.agent import events as ev
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
from anvild.agent.permissions.rules import Rule, RuleKind, RuleSyntaxError, parse_rule
from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.types import ToolCall
from anvild.session.errors import InvalidSessionRequest, RecordWriteFailed, SessionRefused
from anvild.session.events import ResultDecided, SessionEvent
from anvild.session.output import Output, indented
from anvild.session.recorder import Recorder
from anvild.session.settings import MODE_ORDER, wider
from anvild.session.state import BUSY
from anvild.store import (
    ApprovalAnswered,
    ApprovalRequested,
    DecidedResult,
    PendingResult,
    PermissionsRemembered,
    ResultApprovalAnswered,
    ResultApprovalRequested,
    SessionStatus,
    Verdict,
)

if TYPE_CHECKING:
    from anvild.session.session import Session

log = structlog.get_logger(__name__)

S = SessionStatus
MAX_SUMMARY_CHARS: Final = 4000
USER: Final = "user"
"""Who answers through the session's files (a person), and the default approver."""


class Approvals:
    """The approvals of one session, and the `Approver` of its permission gate.

    It reads the session through its public read side (id, alias, status, status_detail,
    headless, approver, ephemeral, record), records through `recorder`, shows through
    `output`, and acts on the session only through the callables it is given: `set_status` (a
    change of state, with its detail), `turn_active` (a turn is running), `publish` (a daemon
    event) and `notify` (the pending approvals changed)."""

    def __init__(
        self,
        session: Session,
        recorder: Recorder,
        output: Output,
        *,
        set_status: Callable[[SessionStatus, str], None],
        turn_active: Callable[[], bool],
        publish: Callable[[SessionEvent], None],
        notify: Callable[[], None],
        max_mode: Mode,
    ) -> None:
        self._session = session
        self._recorder = recorder
        self._output = output
        self._set_status = set_status
        self._turn_active = turn_active
        self._publish = publish
        self._max_mode = max_mode
        self._broker = ApprovalBroker(on_change=notify)
        self._gate: PermissionGate | None = None
        self._result: PendingResult | None = session.record.result_approval  # a result gate
        self._request: PendingResult | None = None  # asked during a turn: at its end

    # -- tool calls --------------------------------------------------------------------------

    def gate(self, policy: Policy, tools: ToolRegistry, context: ToolContext) -> PermissionGate:
        """The permission gate of the session's agent: its calls that need approval ask here,
        and what an `always` answer adds is recorded."""
        gate = self._gate = PermissionGate(
            policy, self, tools, context, on_remember=self._record_remembered
        )
        return gate

    async def request_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        """The gate's `Approver`: record the request, wait on the broker, record the answer."""
        session, recorder, output = self._session, self._recorder, self._output
        arguments = dict(request.arguments)
        asked = ApprovalRequested(request.id, request.tool, arguments, request.reason)
        if not recorder.append(asked):
            return Unavailable(
                f"the session's record could not be written: {session.status_detail}"
            )
        if session.headless:  # nobody watches `approval`: refuse now, saying what would allow it
            why = await self._headless_refusal(request)
            recorder.append(ApprovalAnswered(request.id, Verdict.CANCELLED, why))
            return Unavailable(why)
        self._set_status(S.AWAIT_APPROVAL, "")
        output.show(
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
            answer = await self._broker.request_approval(request)
        except BaseException:
            # cancel, stop, kill, shutdown: nobody answered, and nothing is approved
            why = "the turn ended"
            recorder.append(ApprovalAnswered(request.id, Verdict.CANCELLED, why))
            output.show(ev.ApprovalAnswered("tool", "cancelled", why, request.id))
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
        recorder.append(ApprovalAnswered(request.id, verdict, reason))
        output.show(ev.ApprovalAnswered("tool", verdict.value, reason, request.id))
        if session.status is S.AWAIT_APPROVAL:
            self._set_status(S.RUNNING, "")
        return answer

    def close(self, why: str) -> None:
        """The session ends: every pending and later tool approval is unavailable (`why`)."""
        self._broker.close(why)

    def text(self) -> str:
        """What the `approval` file shows: the open result gate or the oldest pending tool
        call, and how to answer it; "" when nothing is pending."""
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

    def answer(self, line: str, by: str) -> None:
        """`Session.answer_approval`: who may answer what, then the answer."""
        session = self._session
        if by in (session.id, session.alias):
            raise SessionRefused(
                f"session {session.id} cannot answer its own approval: an agent never approves "
                "its own result or tool call; a person or another session must write approve "
                "or reject REASON to its approval file"
            )
        if self._result is not None:
            approver = self._result.approver or USER
            if by != USER and by != approver:
                raise SessionRefused(
                    f"session {session.id}'s result can be approved only by "
                    + (
                        f"user; ask a human to write approve or reject REASON to "
                        f"agent/{session.id}/approval"
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
                f"no approval is pending (session {session.id} is {session.status.value})"
            )
        if by != USER:
            raise SessionRefused(
                f"session {session.id} waits for approval of a tool call ({pending[0].tool}); "
                f"only a human answers those: ask a human to write approve or reject REASON to "
                f"agent/{session.id}/approval"
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

    async def _headless_refusal(self, request: ApprovalRequest) -> str:
        """Why a headless session refuses a call that needs approval, and what would allow it:
        the permission modes whose policy allows this very call (within the daemon's ceiling,
        or saying the ceiling must be raised), and what an "always" answer would have added."""
        gate = self._gate
        assert gate is not None  # it asked
        call = ToolCall(request.id, request.tool, dict(request.arguments))
        resolved = await gate.request_for(call)
        modes = [
            mode
            for mode in MODE_ORDER
            if wider(mode, gate.policy.mode)
            and isinstance(attrs.evolve(gate.policy, mode=mode).decide(resolved), PolicyAllow)
        ]
        ceiling = self._max_mode
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

    # -- result gates ------------------------------------------------------------------------

    @property
    def pending_result(self) -> PendingResult | None:
        """The open result gate (summary, asked_by, ref), or None."""
        return self._result

    @property
    def requested_result(self) -> PendingResult | None:
        """A result gate asked for during the running turn (opened when it ends), or None."""
        return self._request

    def result_decision(self, asked_by: str) -> DecidedResult | None:
        """How the last result gate asked by `asked_by` ended, from the records."""
        return self._session.record.result_decision(asked_by)

    def request_result(self, summary: str, asked_by: str, ref: str, approver: str | None) -> str:
        """`Session.request_result_approval`: open a gate now, or at the running turn's end;
        returns what the asker is told."""
        session = self._session
        status = session.status
        if status is S.EXITED:
            raise SessionRefused(f"session {session.id} has exited")
        if session.ephemeral:
            raise SessionRefused(
                f"session {session.id} is ephemeral: it exits after its prompt and cannot wait "
                "for approval; create a session without ephemeral"
            )
        if self._result is not None or self._request is not None:
            raise SessionRefused(f"session {session.id} already asked for approval of its result")
        if status in (S.STOPPED, S.ERROR):
            raise SessionRefused(
                f"session {session.id} is {status.value}: write start to its ctl first"
            )
        summary = summary.strip()[:MAX_SUMMARY_CHARS]
        named = session.approver if approver is None else approver
        who = "" if named == USER else named
        if self._turn_active() or status in BUSY:
            self._request = PendingResult(summary, asked_by, ref, who)
            return (
                f"Approval requested: when this turn ends, session {session.id} waits in "
                "await_approval until a human or approver writes approve or reject REASON. "
                "End your turn now with a short summary of the result."
            )
        text = summary or self._output.out.strip()[:MAX_SUMMARY_CHARS]
        if not text:
            raise InvalidSessionRequest(
                f"nothing to approve: session {session.id} has no answer in out; give a "
                "summary: request_approval SUMMARY"
            )
        self._open(PendingResult(text, asked_by, ref, who))
        return f"session {session.id} waits for approval of its result"

    def take_request(self) -> PendingResult | None:
        """The gate asked for during the turn that just ended (None: none), now no longer
        asked: the session opens it (`open_requested`) or drops it."""
        request, self._request = self._request, None
        return request

    def open_requested(self, request: PendingResult) -> None:
        """Open the gate asked for during a turn that ended done (its summary: the one given,
        else `out`). A record that cannot be written leaves the session in error, no gate."""
        text = request.summary or self._output.out.strip()[:MAX_SUMMARY_CHARS] or "(no answer)"
        with contextlib.suppress(RecordWriteFailed):
            self._open(attrs.evolve(request, summary=text))

    def withdraw_result(self, asked_by: str, why: str) -> bool:
        """`Session.withdraw_result_approval`."""
        request = self._request
        if request is not None and request.asked_by == asked_by:
            self._request = None
            self._output.log_lines([f"NOTE: approval request dropped: {why}"])
            return True
        if self._result is None or self._result.asked_by != asked_by:
            return False
        self._close_result(Verdict.CANCELLED, why)
        self._set_status(S.IDLE, f"approval withdrawn: {why}")
        return True

    def cancel_result(self, why: str) -> None:
        """End a result gate nobody answered (recorded as cancelled; nothing when none is
        open); if the record cannot be written the gate stays, as the journal says."""
        with contextlib.suppress(RecordWriteFailed):
            self._close_result(Verdict.CANCELLED, why)

    def _open(self, pending: PendingResult) -> None:
        if not self._recorder.append(
            ResultApprovalRequested(
                pending.summary, pending.asked_by, pending.ref, pending.approver
            )
        ):
            raise RecordWriteFailed(
                f"the approval was not requested: {self._session.status_detail}"
            )
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
                self._close_result(Verdict.APPROVE, "", by)
                self._set_status(S.IDLE, "result approved")
            case "reject" if reason:
                self._close_result(Verdict.REJECT, reason, by)
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

    def _close_result(self, verdict: Verdict, reason: str, by: str = "") -> None:
        """Record how the result gate ended (the record is the decision), then publish it."""
        pending = self._result
        if pending is None:
            return
        if not self._recorder.append(ResultApprovalAnswered(verdict, reason, by)):
            raise RecordWriteFailed(f"the answer was not recorded: {self._session.status_detail}")
        self._result = None
        said = f"result {verdict.value}" + (f": {reason}" if reason else "")
        said += f" (by {by})" if by else ""
        self._output.log_lines(indented("APPROVAL:", said))
        self._output.show(ev.ApprovalAnswered("result", verdict.value, reason, by=by))
        self._publish(
            ResultDecided(
                self._session.id, verdict.value, reason, pending.asked_by, pending.ref, by
            )
        )


def parse_remembered(session_id: str, texts: Iterable[str]) -> tuple[Rule, ...]:
    """The recorded `always` rules as allow rules; one that no longer parses is left out (it
    can only ask again, never allow more)."""
    rules = []
    for text in texts:
        try:
            rules.append(parse_rule(text, RuleKind.ALLOW))
        except RuleSyntaxError as exc:
            log.warning("session.remembered_rule_dropped", session=session_id, error=str(exc))
    return tuple(rules)


def _asker(asked_by: str) -> str:
    """What named the approver of a gate asked by `asked_by`: a bead, or the session."""
    return asked_by if asked_by.startswith("bead ") else "session"
