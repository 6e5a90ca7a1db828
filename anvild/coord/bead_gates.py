"""Bead approvals through the session result gate: `BeadGates`, the daemon's reconciler.

    gates = BeadGates(store, publish=...)    # store.on_event -> gates.on_bead_event
    gates.bind(manager)                      # manager's on_event -> gates.on_session_event
    await nursery.start(gates.run)           # reconciles once, then follows events

A completed bead with requires_approval opens a result gate on its assigned session
(`asked_by="bead <id>"`, `ref=<round>`, the bead's `approver`). One decision has two durable
records, the session's journal and the bead repository; `sync(bead)` makes the one behind
follow the other and is safe to run any time, any number of times (`BeadStore.decide` re-checks
under the store's lock, so a decision commits exactly once). A session that cannot wait leaves
the bead to its own ctl (`bead_gate` `unavailable`); a cancelled gate is not reopened. `sync`
runs for every waiting bead at start and after each bead commit or relevant session event
(one queue task, in order). The bead's ctl answers the session's open gate first, so both hold
one verdict; a crash between the two writes is finished at the next start. An agent never
approves its own work. Only the task builds a session at rest (`SessionManager.load`, off the
loop), for a bead waiting on it. Details: docs/decisions.md, "Module notes" and 2026-12-03.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import structlog
import trio

from anvild.beads import (
    BeadConflict,
    BeadError,
    BeadStore,
    GateDecision,
    InvalidBeadRequest,
)
from anvild.beads.events import BeadChanged, BeadEvent, BeadGate
from anvild.beads.model import GATE_PREFIX, USER, Bead, BeadStatus
from anvild.session import Session, SessionError, SessionManager, SessionStatus
from anvild.session.events import ResultDecided, SessionEvent, SessionStateChanged
from anvild.store import PendingResult

__all__ = ["BeadGates"]

log = structlog.get_logger("anvild.coord.bead_gates")

B = BeadStatus
BEAD_ACTIONS = frozenset({"complete", "approve", "reject"})
QUIET_STATES = frozenset({SessionStatus.RUNNING.value, SessionStatus.STARTING.value})


class BeadGates:
    """Keeps each bead that requires approval and its session's result gate in agreement."""

    def __init__(
        self, store: BeadStore, *, publish: Callable[[BeadEvent], None] = lambda event: None
    ) -> None:
        self.store = store
        self.publish = publish
        self._manager: SessionManager | None = None  # unbound: no session is found
        self._send, self._receive = trio.open_memory_channel[str](math.inf)
        self._queued: set[str] = set()
        self._told: dict[str, tuple[str, str]] = {}

    def bind(self, manager: SessionManager) -> None:
        self._manager = manager

    def _session(self, name: str) -> Session | None:
        """The built session with this id or alias (exited ones included while listed), building
        none: None for one at rest, which has no gate or request, or when there is none."""
        found = None if self._manager is None else self._manager.peek(name)
        return found if isinstance(found, Session) else None

    def _at_rest(self, name: str) -> bool:
        """Whether the live session with this id or alias is at rest (not built)."""
        return self._manager is not None and self._manager.at_rest(name)

    # -- what to look at -----------------------------------------------------------------------

    def on_bead_event(self, event: BeadEvent) -> None:
        """For the store's `on_event` (called right after the commit, in the committing task):
        a completion into pending_approval, or a decision. The session side is brought along
        at once, so a bead completed by the session's own tool during a turn has its gate
        asked for before that turn can end; a decision to commit is left to the task."""
        if isinstance(event, BeadChanged) and event.action in BEAD_ACTIONS:
            try:
                pending = self._sync_now(event.id)
            except Exception:
                log.exception("bead_gates.sync_failed", bead=event.id)
                pending = True
            if pending:
                self._queue(event.id)

    def on_session_event(self, event: SessionEvent) -> None:
        """For the manager's `on_event`: a bead gate's decision, or any state change that may
        let a session open (or need to close) a bead's gate."""
        if isinstance(event, ResultDecided) and event.asked_by.startswith(GATE_PREFIX):
            self._queue(event.asked_by.removeprefix(GATE_PREFIX))
        elif isinstance(event, SessionStateChanged) and event.state not in QUIET_STATES:
            for bead in self._beads_of(event.id):
                self._queue(bead)

    def _beads_of(self, session_id: str) -> list[str]:
        ids = [b.id for b in self.store.assigned(session_id)]
        session = self._session(session_id)
        gate = session.pending_result if session is not None else None
        if gate is not None and gate.asked_by.startswith(GATE_PREFIX):
            ids.append(gate.asked_by.removeprefix(GATE_PREFIX))
        return ids

    def _queue(self, bead_id: str) -> None:
        if bead_id not in self._queued:
            self._queued.add(bead_id)
            self._send.send_nowait(bead_id)

    def to_reconcile(self, sessions: list[Session]) -> list[str]:
        """Every bead whose gate may need work: pending approval, or named by an open gate."""
        ids = [b.id for b in self.store.beads() if b.status is B.PENDING_APPROVAL]
        for session in sessions:
            gate = session.pending_result
            if gate is not None and gate.asked_by.startswith(GATE_PREFIX):
                ids.append(gate.asked_by.removeprefix(GATE_PREFIX))
        return list(dict.fromkeys(ids))

    # -- the task ------------------------------------------------------------------------------

    async def run(
        self,
        sessions: Callable[[], list[Session]] = list,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Reconcile every bead once (the daemon's start), report started, then sync each bead
        that an event names, in order, until cancelled."""
        for bead_id in self.to_reconcile(sessions()):
            await self._sync_logged(bead_id)
        task_status.started()
        async for bead_id in self._receive:
            self._queued.discard(bead_id)
            await self._sync_logged(bead_id)

    async def _sync_logged(self, bead_id: str) -> None:
        try:
            await self.sync(bead_id)
        except Exception:  # one bead's trouble must not stop the others (or the daemon)
            log.exception("bead_gates.sync_failed", bead=bead_id)

    # -- one bead ------------------------------------------------------------------------------

    async def sync(self, bead_id: str) -> None:
        """Make the bead and its session's gate agree (see the module docstring). A waiting
        bead's session at rest is loaded first (its records replayed in a worker thread)."""
        bead = self.store.board.beads.get(bead_id)
        if (
            self._manager is not None
            and bead is not None
            and bead.status is B.PENDING_APPROVAL
            and bead.assigned_to is not None
            and self._at_rest(bead.assigned_to)
        ):
            with contextlib.suppress(SessionError):  # gone meanwhile, or reported unloadable
                await self._manager.load(bead.assigned_to)
        if self._sync_now(bead_id):
            bead = self.store.bead(bead_id)
            session = self._session(bead.assigned_to or "")
            decision = session.result_decision(bead.gate) if session is not None else None
            if session is not None and decision is not None:
                await self._apply(bead, session.id, decision.verdict, decision.reason, decision.by)

    def _sync_now(self, bead_id: str) -> bool:
        """Everything `sync` does but the bead's commit; True when the session's records hold
        a decision for the bead's current round that the bead has yet to take, or when the
        bead waits on a session at rest (`sync` loads it, then looks again)."""
        bead = self.store.board.beads.get(bead_id)
        if bead is None or bead.assigned_to is None or bead.assigned_to == USER:
            return False
        session = self._session(bead.assigned_to)
        waits = bead.status is B.PENDING_APPROVAL
        if session is None and self._at_rest(bead.assigned_to):
            return waits  # else nothing to withdraw: a session at rest has no request
        if session is None:
            if waits:
                self._tell(bead, bead.assigned_to, "unavailable", _ctl_note(bead, "has ended"))
            return False
        gate = session.pending_result
        ref = str(bead.submissions)
        if gate is not None and gate.asked_by == bead.gate:
            if gate.ref == ref and waits:
                return False  # both wait for the same answer
            self._close(bead, session, same_round=gate.ref == ref)
            return False
        request = session.requested_result
        if not waits:
            if request is not None and request.asked_by == bead.gate:
                why = f"bead {bead.id} is {bead.status.value}"
                session.withdraw_result_approval(bead.gate, why)
            return False
        decision = session.result_decision(bead.gate)
        if decision is not None and decision.ref == ref:
            if decision.verdict in ("approve", "reject"):
                return True
            what = f"cancelled its approval gate ({decision.reason or 'cancelled'})"
            self._tell(bead, session.id, "unavailable", _ctl_note(bead, what))
            return False
        if request is not None and request.asked_by == bead.gate:
            return False  # opens when the session's turn ends
        summary = bead.result.strip() or f"bead {bead.id}: {bead.title}"
        try:
            session.request_result_approval(summary, bead.gate, ref, approver=bead.approver)
        except SessionError as exc:
            note = _ctl_note(bead, f"cannot wait for approval ({exc})")
            self._tell(bead, session.id, "unavailable", note)
            return False
        if session.pending_result is not None:
            self._tell(bead, session.id, "open", f"agent/{session.id}/approval asks")
        else:
            self._tell(bead, session.id, "waiting", "the gate opens when the session's turn ends")
        return False

    def _close(self, bead: Bead, session: Session, *, same_round: bool) -> None:
        """The session's gate names a bead that no longer waits in that round."""
        try:
            if same_round and bead.status is B.COMPLETED:
                session.answer_approval("approve", by=bead.approved_by or USER)
                detail = f"approved on the bead's ctl by {bead.approved_by or USER}"
            elif same_round and bead.status is B.FAILED:
                session.answer_approval(f"reject {bead.reason or 'rejected'}", by=USER)
                detail = f"rejected on the bead's ctl: {bead.reason}"
            else:
                why = f"bead {bead.id} is {bead.status.value} (round {bead.submissions})"
                session.withdraw_result_approval(bead.gate, why)
                detail = f"withdrawn: {why}"
        except SessionError as exc:
            log.error("bead_gates.close_failed", bead=bead.id, session=session.id, error=str(exc))
            return
        self._tell(bead, session.id, "closed", detail)

    async def _apply(
        self, bead: Bead, session_id: str, verdict: str, reason: str, answered_by: str
    ) -> Bead | None:
        """Commit the session's decision to the bead; None when it no longer applies."""
        try:
            decision = GateDecision(
                session_id, bead.submissions, verdict, reason, answered_by or USER
            )
            return await self.store.decide(bead.id, decision)
        except BeadConflict as exc:
            log.info("bead_gates.already_decided", bead=bead.id, detail=str(exc))
            return None

    def _tell(self, bead: Bead, session_id: str, state: str, detail: str) -> None:
        """Publish a `bead_gate` event, once per bead for the same state and detail."""
        if self._told.get(bead.id) == (state, detail):
            return
        self._told[bead.id] = (state, detail)
        log.info("bead_gates.gate", bead=bead.id, session=session_id, state=state, detail=detail)
        self.publish(BeadGate(bead.id, session_id, state, detail))

    async def settle(self, session: Session, gate: PendingResult) -> None:
        """For `SessionExtension.answered`: a write answered `gate` on `session`; if it was a
        bead's, apply the decision to the bead now, so the write returns after the bead's
        commit (the queued sync then finds nothing left to do)."""
        if gate.asked_by.startswith(GATE_PREFIX):
            await self._sync_logged(gate.asked_by.removeprefix(GATE_PREFIX))

    # -- the bead's ctl ------------------------------------------------------------------------

    async def answer(self, bead_id: str, verdict: str, reason: str = "", *, by: str = USER) -> Bead:
        """`approve` or `reject REASON` on the bead's ctl. When the assigned session's gate for
        this round is open, the session records the decision first and the bead follows;
        otherwise the bead decides alone (as for a bead whose session cannot wait)."""
        bead = self.store.bead(bead_id)
        reason = reason.strip()
        if verdict == "reject" and not reason:
            raise InvalidBeadRequest("reject needs a reason: reject REASON")
        session = self._session(bead.assigned_to) if bead.assigned_to else None
        gate = session.pending_result if session is not None else None  # none at rest
        if (
            session is None
            or gate is None
            or bead.status is not B.PENDING_APPROVAL
            or gate.asked_by != bead.gate
            or gate.ref != str(bead.submissions)
        ):
            if verdict == "approve":
                return await self.store.approve(bead_id, by=by)
            return await self.store.reject(bead_id, reason, by=by)
        line = "approve" if verdict == "approve" else f"reject {reason}"
        try:
            session.answer_approval(line, by=by)
        except SessionError as exc:
            raise BeadConflict(f"bead {bead_id}: {exc}") from exc
        done = await self._apply(bead, session.id, verdict, reason, by)
        if done is not None:
            return done
        after = self.store.bead(bead_id)  # the queued sync committed it first
        expected = B.COMPLETED if verdict == "approve" else B.FAILED
        if after.status is not expected:
            raise BeadError(
                f"bead {bead_id} is {after.status.value} after its session's gate recorded "
                f"{verdict}; read agent/beads/{bead_id}/status and the daemon's log"
            )
        return after


def _ctl_note(bead: Bead, what: str) -> str:
    return (
        f"session {bead.assigned_to} {what}; bead {bead.id} waits in pending_approval: write "
        f"approve or reject REASON to agent/beads/{bead.id}/ctl"
    )
