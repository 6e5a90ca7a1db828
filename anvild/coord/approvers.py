"""Approver sessions: the daemon's side of the `answer_approval` tool (`SessionApprovals`).

    approvals = SessionApprovals(settle=gates.settle, office=office); approvals.bind(manager)
    await nursery.start(approvals.run)                  # tells approver sessions, by mail

A gate's approver is named once, at creation of what asks (a session's `approver=`, a bead's
`approver=`; a conductor can name only itself or `user`), and never changes. The gate carries
it (`PendingResult.approver`, journaled) and `Session.answer_approval` refuses any other session:
the check lives with the state it guards. The tool names only the target and always answers as
the calling session; never its own gate, never a tool call's. After the decision, `settle`
brings a bead gate's bead along before the tool returns.
An approver session is told by an APPROVAL_REQUEST mail (at least once per gate: `run` first
sends any notice a crash left unsent, found by the gate's digest in the approver's mail).
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
        for session in manager.built_sessions():  # one waiting on a gate is built
            gate = session.pending_result
            if session.status is not SessionStatus.AWAIT_APPROVAL or gate is None:
                continue
            approver = self._live(manager, gate)
            if approver is None:
                continue
            digest = gate_digest(gate)
            mail = [
                *await office.unread(approver),
                *await office.archived(approver, Box.RECEIVED),
            ]
            told = any(
                m.sender == DAEMON
                and m.type is MessageType.APPROVAL_REQUEST
                and m.metadata.get("session") == session.id
                and m.metadata.get("gate") == digest
                for m in mail
            )
            if not told and self._queue(session.id, gate):
                log.info("approvers.notice_caught_up", session=session.id, approver=approver)

    @staticmethod
    def _live(manager: SessionManager, gate: PendingResult) -> str | None:
        """The id of the approver session `gate` names, if it is live. Building none: the
        notice is mail, and an approver at rest may be unbuilt (a build replays its records)."""
        if not gate.approver:
            return None
        found = manager.peek(gate.approver)
        approver = found[0] if isinstance(found, tuple) else found
        return None if approver is None or approver.status is SessionStatus.EXITED else approver.id

    async def _tell(self, session_id: str, gate: PendingResult) -> None:
        office, manager = self.office, self._manager
        if office is None or manager is None:
            return
        approver = self._live(manager, gate)
        if approver is None:
            log.info("approvers.not_told", session=session_id, approver=gate.approver)
            return
        await office.report(
            approver,
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
    async def _find(manager: SessionManager, name: str, caller: str) -> Session | None:
        """By id or alias; or, for a conductor, by the short name of a session it started
        (alias `<name>.<conductor id>`, as its own tools accept). One at rest is built with
        its records replayed in a worker thread (`SessionManager.load`)."""
        for key in (name, f"{name}.{caller}"):
            try:
                return await manager.load(key)
            except SessionNotFound:
                continue
        return None

    async def answer_result_approval(
        self, caller: str, target: str, verdict: str, reason: str
    ) -> str:
        if self._manager is None:
            raise ValueError("the daemon's sessions are not ready yet; try again")
        session = await self._find(self._manager, target, caller)
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
