"""`BeadGates` (`anvild.coord.bead_gates`): a bead with requires_approval and its session's
result gate, over a real `BeadStore` (git) and a real `SessionManager` (journals on disk).

The daemon's restart is a second manager, store and reconciler over the same directories; a
kill -9 between the session's record and the bead's commit is a decision recorded while no
reconciler runs."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from anvild.beads import BeadConflict, BeadStatus, BeadStore, NewBead
from anvild.beads.events import BeadEvent, BeadGate
from anvild.coord.bead_gates import BeadGates
from anvild.llm.testing import ScriptedProvider
from anvild.session import NewSession, Session, SessionManager, SessionRefused, SessionStatus
from anvild.session.events import SessionEvent
from anvild.store import ResultApprovalAnswered, SessionStore, Verdict
from tests.unit.session.support import (
    Models,
    file_tools,
    loads_on_loop,
    settings,
    target,
    unloaded,
    workspace,
)

B = BeadStatus
S = SessionStatus
TIMEOUT = 20


class World:
    """One daemon's worth: store, manager, reconciler, and every event they published."""

    def __init__(self, store: BeadStore, manager: SessionManager, gates: BeadGates) -> None:
        self.store = store
        self.manager = manager
        self.gates = gates
        self.events: list[object] = []
        self._changed = trio.Event()

    def saw(self, event: object) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (on published events, no polling) until `condition` holds."""
        with trio.fail_after(TIMEOUT):
            while not condition():
                await self._changed.wait()

    def status(self, bead_id: str) -> BeadStatus:
        return self.store.bead(bead_id).status

    def gates_told(self, bead_id: str) -> list[tuple[str, str]]:
        return [
            (e.state, e.detail) for e in self.events if isinstance(e, BeadGate) and e.id == bead_id
        ]


@asynccontextmanager
async def daemon(
    tmp_path: Path,
    *,
    reconcile: bool = True,
    also: Callable[[SessionEvent], None] = lambda event: None,
    made: Callable[[SessionManager], object] = lambda manager: None,
) -> AsyncIterator[World]:
    """A store, a manager and the reconciler, wired as the daemon does. Without `reconcile`
    the reconciler neither runs nor hears anything: what one side writes then is what a
    kill -9 right after that write leaves. `also` hears every session event too; `made` gets
    the manager before it runs."""
    store = BeadStore(tmp_path / "beads")
    await store.open()
    gates = BeadGates(store)
    world: World

    def on_session_event(event: SessionEvent) -> None:
        also(event)
        world.saw(event)
        if reconcile:
            gates.on_session_event(event)

    def on_bead_event(event: BeadEvent) -> None:
        world.saw(event)
        if reconcile:
            gates.on_bead_event(event)

    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        Models({"fake": target(ScriptedProvider([]))}),
        settings=settings(tmp_path),
        tools=file_tools(),
        default_cwd=workspace(tmp_path),
        on_event=on_session_event,
    )
    world = World(store, manager, gates)
    store.on_event = on_bead_event
    gates.publish = world.saw

    gates.bind(manager)
    made(manager)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            if reconcile:
                await nursery.start(gates.run, lambda: list(manager.built_sessions()))
            yield world
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def submitted(
    world: World, session: Session, result: str = "Added OAuth.", *, approver: str = "user"
) -> str:
    """A bead with requires_approval (and `approver`), claimed for `session` and completed
    (by the user)."""
    store = world.store
    bead = await store.create(
        NewBead("Implement OAuth", "developer", requires_approval=True, approver=approver),
        by="user",
    )
    await store.claim(bead.id, session.id, by="user")
    await store.complete(bead.id, result, by="user")
    return bead.id


def subjects(repo: Path) -> list[str]:
    done = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def gate_records(world: World, sid: str) -> list[ResultApprovalAnswered]:
    records = world.manager.store.read(sid).records
    return [r for r in records if isinstance(r, ResultApprovalAnswered)]


async def test_completion_opens_the_gate_and_approve_on_the_session_completes_the_bead(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
        assert s.approval_text() == (
            f"kind result\nasked_by bead {bead}\napprover user\nsummary Added OAuth.\n"
            "answer approve | reject REASON\n"
        )
        assert ("open", f"agent/{s.id}/approval asks") in world.gates_told(bead)
        s.answer_approval("approve")
        await world.until(lambda: world.status(bead) is B.COMPLETED)
        assert world.store.bead(bead).approved_by == "user"
        assert s.status is S.IDLE
    assert f"approve {bead} through session {s.id}'s result gate (by user)" in subjects(
        tmp_path / "beads"
    )


async def test_reject_on_the_bead_ctl_stops_the_session_with_the_reason(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
        done = await world.gates.answer(bead, "reject", "the tests do not cover errors")
        assert (done.status, done.reason) == (B.FAILED, "the tests do not cover errors")
        assert s.status is S.STOPPED
        assert s.status_detail == "result rejected: the tests do not cover errors"
        assert s.approval_text() == ""
        # Offering the same decision again (the queued syncs do) commits nothing more.
        await world.gates.sync(bead)
        await world.gates.sync(bead)
        assert gate_records(world, s.id) == [
            ResultApprovalAnswered(Verdict.REJECT, "the tests do not cover errors", "user")
        ]
    rejects = [line for line in subjects(tmp_path / "beads") if line.startswith("reject")]
    assert rejects == [
        f"reject {bead} through session {s.id}'s result gate: the tests do not cover errors "
        "(by user)"
    ]


async def test_a_session_never_answers_its_own_gate(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession(alias="dev"))
        other = await world.manager.create(NewSession())
        bead = await submitted(world, s, approver=other.id)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
        assert f"approver {other.id}\n" in s.approval_text()
        for me in (s.id, "dev"):
            with pytest.raises(SessionRefused, match=f"session {s.id} cannot answer its own"):
                s.answer_approval("approve", by=me)
        with pytest.raises(BeadConflict, match="cannot answer its own approval"):
            await world.gates.answer(bead, "approve", by=s.id)
        assert world.status(bead) is B.PENDING_APPROVAL
        assert s.status is S.AWAIT_APPROVAL
        third = await world.manager.create(NewSession())
        with pytest.raises(SessionRefused, match=f"only by session {other.id} .* not by session"):
            s.answer_approval("approve", by=third.id)  # not the bead's approver
        s.answer_approval("approve", by=other.id)  # the bead's approver session
        await world.until(lambda: world.status(bead) is B.COMPLETED)
        assert world.store.bead(bead).approved_by == other.id


async def test_a_session_that_cannot_wait_leaves_the_bead_to_its_ctl(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        await s.stop()
        bead = await submitted(world, s)
        await world.until(lambda: bool(world.gates_told(bead)))
        (state, detail), *_ = world.gates_told(bead)
        assert state == "unavailable"
        assert f"session {s.id} cannot wait for approval (session {s.id} is stopped" in detail
        assert f"write approve or reject REASON to agent/beads/{bead}/ctl" in detail
        assert world.status(bead) is B.PENDING_APPROVAL
        done = await world.gates.answer(bead, "approve")
        assert (done.status, done.approved_by) == (B.COMPLETED, "user")
        assert s.status is S.STOPPED


async def test_a_decision_recorded_before_a_crash_lands_once_at_the_next_start(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
    # Restart with the gate open: no reconciler ran the answer yet (as after a kill -9 right
    # after the session's record).
    async with daemon(tmp_path, reconcile=False) as world:
        s = world.manager.get(s.id)
        assert s.status is S.AWAIT_APPROVAL
        s.answer_approval("approve")
        assert world.status(bead) is B.PENDING_APPROVAL
    for _ in range(2):  # two more starts: the second finds nothing left to do
        async with daemon(tmp_path) as world:
            assert world.status(bead) is B.COMPLETED
            assert world.store.bead(bead).approved_by == "user"
            assert world.manager.get(s.id).status is S.IDLE
    approvals = [line for line in subjects(tmp_path / "beads") if line.startswith("approve")]
    assert approvals == [f"approve {bead} through session {s.id}'s result gate (by user)"]


async def test_a_bead_decided_alone_closes_a_gate_left_open_by_a_crash(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
    async with daemon(tmp_path, reconcile=False) as world:
        await world.store.reject(bead, "wrong approach", by="user")  # the bead side alone
        assert world.manager.get(s.id).status is S.AWAIT_APPROVAL
    async with daemon(tmp_path) as world:
        s = world.manager.get(s.id)
        assert s.status is S.STOPPED
        assert s.status_detail == "result rejected: wrong approach"
        assert world.status(bead) is B.FAILED


async def test_an_old_rounds_decision_is_never_applied_to_a_new_round(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
        s.answer_approval("reject not yet")
        await world.until(lambda: world.status(bead) is B.FAILED)
        await s.start()
    async with daemon(tmp_path, reconcile=False) as world:
        # Round 2 is committed, then the daemon dies before the gate opens.
        await world.store.release(bead, by="user")
        await world.store.claim(bead, s.id, by="user")
        await world.store.complete(bead, "Now with tests.", by="user")
        assert world.store.bead(bead).submissions == 2
    async with daemon(tmp_path) as world:
        s = world.manager.get(s.id)
        assert world.status(bead) is B.PENDING_APPROVAL
        assert s.status is S.AWAIT_APPROVAL
        gate = s.pending_result
        assert gate is not None
        assert (gate.asked_by, gate.ref, gate.summary) == (f"bead {bead}", "2", "Now with tests.")
        s.answer_approval("approve")
        await world.until(lambda: world.status(bead) is B.COMPLETED)


async def test_stop_cancels_the_gate_and_the_bead_ctl_answers(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
        await s.stop()
        await world.until(lambda: any(st == "unavailable" for st, _ in world.gates_told(bead)))
        await s.start()  # a cancelled gate is not reopened
        assert s.status is S.IDLE
        done = await world.gates.answer(bead, "approve")
        assert done.status is B.COMPLETED
        assert s.status is S.IDLE


async def test_a_killed_session_leaves_its_waiting_bead_to_the_bead_ctl(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
        await world.manager.kill(s.id)
        await world.until(lambda: any(st == "unavailable" for st, _ in world.gates_told(bead)))
        assert world.status(bead) is B.PENDING_APPROVAL
        done = await world.gates.answer(bead, "approve")
        assert (done.status, done.approved_by) == (B.COMPLETED, "user")
    async with daemon(tmp_path) as world:  # nothing to reconcile for a session that ended
        assert world.status(bead) is B.COMPLETED
    approvals = [line for line in subjects(tmp_path / "beads") if line.startswith("approve")]
    assert approvals == [f"approve {bead} (by user)"]


async def test_an_ephemeral_session_cannot_wait_and_says_so(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession(ephemeral=True))
        bead = await submitted(world, s)
        await world.until(lambda: bool(world.gates_told(bead)))
        state, detail = world.gates_told(bead)[0]
        assert state == "unavailable"
        assert "is ephemeral" in detail
        assert s.status is not S.AWAIT_APPROVAL


async def test_a_bead_completed_for_a_session_at_rest_opens_its_gate_after_a_load_off_the_loop(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        loads = loads_on_loop(world.manager)
        await unloaded(world.manager, s)
        bead = await submitted(world, s)  # the bead's commit calls the reconciler at once
        await world.until(lambda: bool(world.gates_told(bead)))
        assert world.gates_told(bead) == [("open", f"agent/{s.id}/approval asks")]
        assert loads == [False]  # built by the reconciler's task, its records replayed off it
        built = world.manager.peek(s.id)
        assert isinstance(built, Session)
        assert built.status is S.AWAIT_APPROVAL


async def test_the_bead_ctl_answers_a_bead_of_a_session_at_rest_without_building_it(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path, reconcile=False) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)  # nobody opened the session's gate
        loads = loads_on_loop(world.manager)
        await unloaded(world.manager, s)
        done = await world.gates.answer(bead, "approve")
        assert (done.status, done.approved_by) == (B.COMPLETED, "user")
        assert loads == []
        assert isinstance(world.manager.peek(s.id), tuple)  # still at rest


async def test_the_start_loads_a_session_at_rest_holding_a_decision_off_the_loop(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path) as world:
        s = await world.manager.create(NewSession())
        bead = await submitted(world, s)
        await world.until(lambda: s.status is S.AWAIT_APPROVAL)
    async with daemon(tmp_path, reconcile=False) as world:  # the decision, then a kill -9
        (await world.manager.load(s.id)).answer_approval("approve")
    loads: list[list[bool]] = []
    async with daemon(tmp_path, made=lambda manager: loads.append(loads_on_loop(manager))) as world:
        assert world.status(bead) is B.COMPLETED  # the start's reconciliation took it
        assert loads == [[False]]  # the session, at rest, was replayed once, off the loop
