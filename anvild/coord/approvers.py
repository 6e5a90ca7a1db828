"""Approver sessions: the daemon's side of the `answer_approval` tool (`SessionApprovals`).

    approvals = SessionApprovals(settle=gates.settle, office=office)
    tools = mail_tools(office, gate, approvals)         # every session gets answer_approval
    approvals.bind(manager)
    manager on_event -> approvals.on_session_event      # a gate naming a session opened
    await nursery.start(approvals.run)                  # tells that session, by mail

Theory of operation: authority
------------------------------
A session's result gate waits until a person or its approver answers it. Who the approver is
is named once, by whoever has the authority, when the thing that asks is created, and never
changes afterwards:

- a session's own gates (ctl `request_approval`, the model's `request_approval` tool): the
  session's `approver`, given to `new approver=ID|ALIAS|user` on agent/ctl (a person), or by a
  conductor's `start_session`, which can name only itself or nobody; default `user`;
- a bead's gate (a bead with requires_approval, on its assigned session): the bead's
  `approver`, given to `new ... approver=` on agent/beads/ctl (a person), or by a conductor's
  `create_bead`, which can name only itself or `user`; default `user`.

The gate carries its approver (`PendingResult.approver`, recorded in the session's journal with
the request, so it holds after a restart), and `Session.answer_approval(line, by=<caller>)`
refuses any session but that one: the check lives with the state it guards, so no other path
(a tool, a script, a later feature) can skip it. The tool adds nothing to it: it names no
approver, only the target, and always answers as the calling session (`ToolSetup.session_id`,
set by the daemon). So a model answers only the gates that name it; never its own (refused by
the session as before); never a tool call's approval (only a person answers those: the
session refuses a tool approval by anyone but `user`); and `always` does not exist for it.
The bead board re-checks the approver when the decision lands on the bead (`Board.approve`,
`reject`, `decide`). `approved_by` is the caller's id. A person can answer any gate at any
time by writing to the session's `approval` (or the bead's ctl), as before.

The target is named by id or alias (or, for a conductor, by the short name it gave a session it
started: `<name>.<its id>`, as its own tools accept); the name gives no authority, the gate's
approver does. After the session recorded the decision, `settle` (the bead gates' `settle`)
brings a bead gate's bead along before the tool returns, so the approver sees the bead
completed (or failed) in its next read.

Telling the approver. When a session goes to await_approval with a result gate that names an
approver session, that session gets an APPROVAL_REQUEST in its inbox from `anvild` (metadata:
`session`, `asked_by`, `ref`; the body has the summary and says to call `answer_approval`), so
an approver with `mail=auto` is prompted when it is idle. The mail is sent by `run`, in order,
after the state change (the event handler cannot wait on the disk); an approver that is no
longer live is not told. It is a notice only: the gate itself is the session's record. A
daemon that dies between the gate and its notice would leave the approver waiting for nothing,
so `run` first catches up: for every open gate that names a live approver session it looks for
the gate's notice in that session's mail (unread or read: metadata `session` and `gate`, a
digest of the gate's asker, ref and summary) and sends the ones missing. A notice is therefore
sent at least once per gate: a daemon that dies after writing a notice and before it could
know sends none again, since the notice is on disk; only a gate with the same asker, ref and
summary as an earlier one of the same session shares its digest (and would not be told again
after such a crash: `approval` still shows who may answer).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Awaitable, Callable

import structlog
import trio

from anvild.mail import DAEMON, Box, MessageType, PostOffice
from anvild.session import (
    Session,
    SessionError,
    SessionManager,
    SessionNotFound,
    SessionStatus,
)
from anvild.session.events import SessionEvent, SessionStateChanged
from anvild.store import PendingResult

__all__ = ["SessionApprovals"]

log = structlog.get_logger("anvild.coord.approvers")


async def _nothing(session: Session, gate: PendingResult) -> None:
    return None


def gate_digest(gate: PendingResult) -> str:
    """What tells one gate's notice from another's in the approver's mail."""
    text = "\0".join((gate.asked_by, gate.ref, gate.summary))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SessionApprovals:
    """`anvild.mail.ApprovalAnswers` over a session manager (the `answer_approval` tool)."""

    def __init__(
        self,
        settle: Callable[[Session, PendingResult], Awaitable[None]] = _nothing,
        office: PostOffice | None = None,
    ) -> None:
        self._manager: SessionManager | None = None
        self.settle = settle
        self.office = office
        self._send, self._receive = trio.open_memory_channel[tuple[str, PendingResult]](math.inf)
        self._queued: set[tuple[str, str]] = set()  # (session, gate digest) told in this run

    def bind(self, manager: SessionManager) -> None:
        self._manager = manager

    # -- telling the approver ------------------------------------------------------------------

    def on_session_event(self, event: SessionEvent) -> None:
        """For the manager's `on_event`: a session now waits on a gate naming an approver."""
        if (
            not isinstance(event, SessionStateChanged)
            or event.state != SessionStatus.AWAIT_APPROVAL.value
            or self._manager is None
            or self.office is None
        ):
            return
        try:
            session = self._manager.get(event.id)
        except SessionNotFound:
            return
        gate = session.pending_result
        if gate is not None and gate.approver:
            self._queue(session.id, gate)

    def _queue(self, session_id: str, gate: PendingResult) -> bool:
        key = (session_id, gate_digest(gate))
        if key in self._queued:
            return False
        self._queued.add(key)
        self._send.send_nowait((session_id, gate))
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Catch up on the notices a stopped daemon did not send, then send each queued notice,
        in order, until cancelled. Start it after the manager restored the sessions: it is
        started once the catch-up's notices are queued, so they go before any new gate's."""
        try:
            await self._catch_up()
        except Exception:  # one mailbox's trouble must not stop the notices of new gates
            log.exception("approvers.catch_up_failed")
        task_status.started()
        async for session_id, gate in self._receive:
            try:
                await self._tell(session_id, gate)
            except Exception:  # one notice's trouble must not stop the others (or the daemon)
                log.exception("approvers.notice_failed", session=session_id)

    async def _catch_up(self) -> None:
        """Queue the notice of every open gate naming a live approver session whose mail
        does not hold it (see the module docstring)."""
        office, manager = self.office, self._manager
        if office is None or manager is None:
            return
        for session in manager.sessions():
            gate = session.pending_result
            if session.status is not SessionStatus.AWAIT_APPROVAL or gate is None:
                continue
            approver = self._live(manager, gate)
            if approver is None:
                continue
            digest = gate_digest(gate)
            mail = [
                *await office.unread(approver.id),
                *await office.archived(approver.id, Box.RECEIVED),
            ]
            told = any(
                m.sender == DAEMON
                and m.type is MessageType.APPROVAL_REQUEST
                and m.metadata.get("session") == session.id
                and m.metadata.get("gate") == digest
                for m in mail
            )
            if not told and self._queue(session.id, gate):
                log.info("approvers.notice_caught_up", session=session.id, approver=approver.id)

    @staticmethod
    def _live(manager: SessionManager, gate: PendingResult) -> Session | None:
        """The approver session `gate` names, if it is live."""
        if not gate.approver:
            return None
        try:
            approver = manager.get(gate.approver)
        except SessionNotFound:
            return None
        return None if approver.status is SessionStatus.EXITED else approver

    async def _tell(self, session_id: str, gate: PendingResult) -> None:
        office, manager = self.office, self._manager
        if office is None or manager is None:
            return
        approver = self._live(manager, gate)
        if approver is None:
            log.info("approvers.not_told", session=session_id, approver=gate.approver)
            return
        await office.report(
            approver.id,
            f"Approval wanted: the result of session {session_id}",
            f"Session {session_id} waits for your approval of its result (asked by "
            f"{gate.asked_by or '-'}):\n\n{gate.summary}\n\nYou are its approver. Check the "
            f"work, then call answer_approval with session {session_id} and verdict approve, "
            "or reject with a reason saying what must change. A person may answer first.",
            metadata={
                "session": session_id,
                "asked_by": gate.asked_by,
                "ref": gate.ref,
                "gate": gate_digest(gate),
            },
            kind=MessageType.APPROVAL_REQUEST,
        )

    # -- answering -----------------------------------------------------------------------------

    @staticmethod
    def _find(manager: SessionManager, name: str, caller: str) -> Session | None:
        """By id or alias; or, for a conductor, by the short name of a session it started
        (alias `<name>.<conductor id>`, as its own tools accept)."""
        for key in (name, f"{name}.{caller}"):
            try:
                return manager.get(key)
            except SessionNotFound:
                continue
        return None

    async def answer_result_approval(
        self, caller: str, target: str, verdict: str, reason: str
    ) -> str:
        if self._manager is None:
            raise ValueError("the daemon's sessions are not ready yet; try again")
        session = self._find(self._manager, target, caller)
        if session is None:
            raise ValueError(
                f"no session {target!r}: name a session from list_sessions (its id or alias)"
            )
        gate = session.pending_result
        line = "approve" if verdict == "approve" else f"reject {reason}"
        try:
            session.answer_approval(line, by=caller)
        except SessionError as exc:
            waits = session.status is SessionStatus.AWAIT_APPROVAL or session.id == caller
            hint = "" if waits else "; answer when it waits in await_approval"
            raise ValueError(f"{exc}{hint}") from exc
        if gate is not None:
            await self.settle(session, gate)
        done = "approved" if verdict == "approve" else f"rejected ({reason})"
        asker = f" for {gate.asked_by}" if gate is not None else ""
        return (
            f"You {done} the result of session {session.id}{asker}; it is now "
            f"{session.status.value}."
        )
