"""Approver sessions (`anvild.coord.approvers`): the `answer_approval` tool, bound to the
calling session, over a real `SessionManager` (journals on disk), a real `BeadStore` (git) and
the bead gates, wired as the daemon does (`tests.unit.coord.test_bead_gates.daemon`).

Who may answer is named at creation: `new approver=` for a session's own gates, the bead's
`approver` for a bead's gate; anyone else is refused with who may, and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.beads import BeadStatus
from anvild.coord.approvers import SessionApprovals, gate_digest
from anvild.llm.types import ToolCall, ToolResult
from anvild.mail import MailStore, Message, MessageType, PostOffice
from anvild.mail.tools import AnswerApproval
from anvild.session import InvalidSessionRequest, NewSession, Session, SessionStatus
from anvild.store import ResultApprovalAnswered, ResultApprovalRequested, Verdict
from anvild.tree.mail import SessionPeers
from tests.unit.coord.test_bead_gates import World, daemon, gate_records, subjects, submitted
from tests.unit.session.support import loads_on_loop, unloaded

B = BeadStatus
S = SessionStatus


def approvals(world: World) -> SessionApprovals:
    answers = SessionApprovals(settle=world.gates.settle)
    answers.bind(world.manager)
    return answers


async def answer(
    world: World, caller: Session, args: dict[str, object], tmp_path: Path
) -> ToolResult:
    """`answer_approval` called by the model of `caller`, through the tool registry."""
    registry = ToolRegistry([AnswerApproval(approvals(world), caller.id)])
    return await registry.dispatch(
        ToolCall("c1", "answer_approval", args), ToolContext(cwd=tmp_path)
    )


async def waiting(world: World, session: Session, summary: str = "Added OAuth.") -> None:
    session.request_result_approval(summary, "ctl")
    await world.until(lambda: session.status is S.AWAIT_APPROVAL)


async def test_new_names_the_approver_by_id_or_alias_and_refuses_anyone_else(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path) as world:
        manager = world.manager
        boss = await manager.create(NewSession(alias="boss"))
        assert boss.approver == "user"
        by_alias = await manager.create(NewSession.parse(["approver=boss"]))
        by_id = await manager.create(NewSession(approver=boss.id))
        person = await manager.create(NewSession(approver="user"))
        assert (by_alias.approver, by_id.approver, person.approver) == (boss.id, boss.id, "user")
        assert by_alias.record.approver == boss.id  # recorded as the id, never the alias
        with pytest.raises(InvalidSessionRequest, match="approver=nobody is not a live session"):
            await manager.create(NewSession(approver="nobody"))
        with pytest.raises(InvalidSessionRequest, match="approver=me is the new session itself"):
            await manager.create(NewSession(alias="me", approver="me"))
        await manager.kill(person.id)
        with pytest.raises(InvalidSessionRequest, match="is not a live session"):
            await manager.create(NewSession(approver=person.id))
        count = len(manager.sessions())
    assert count == 3  # boss, by_alias, by_id: nothing was created by a refused `new`


async def test_the_approver_session_approves_and_only_it(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        boss = await world.manager.create(NewSession(alias="boss"))
        worker = await world.manager.create(NewSession(alias="dev", approver="boss"))
        third = await world.manager.create(NewSession())
        await waiting(world, worker)
        assert f"approver {boss.id}\n" in worker.approval_text()

        refused = await answer(world, third, {"session": "dev", "verdict": "approve"}, tmp_path)
        assert refused.is_error
        assert refused.content == (
            f"Not answered: session {worker.id}'s result can be approved only by session "
            f"{boss.id} (its approver, named when the session was created) or a human, not by "
            f"session {third.id}"
        )
        own = await answer(world, worker, {"session": worker.id, "verdict": "approve"}, tmp_path)
        assert own.is_error
        assert f"session {worker.id} cannot answer its own approval" in own.content
        no_reason = await answer(world, boss, {"session": "dev", "verdict": "reject"}, tmp_path)
        assert no_reason.is_error
        assert "A reject needs a reason" in no_reason.content
        always = await answer(world, boss, {"session": "dev", "verdict": "always"}, tmp_path)
        assert always.is_error  # not in the schema's enum: `always` never
        assert worker.status is S.AWAIT_APPROVAL

        done = await answer(world, boss, {"session": "dev", "verdict": "approve"}, tmp_path)
        assert not done.is_error, done.content
        assert done.content == (
            f"You approved the result of session {worker.id} for ctl; it is now idle."
        )
        assert worker.status is S.IDLE
        assert gate_records(world, worker.id) == [
            ResultApprovalAnswered(Verdict.APPROVE, "", boss.id)
        ]


async def test_reject_stops_the_worker_with_the_reason(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        boss = await world.manager.create(NewSession())
        worker = await world.manager.create(NewSession(approver=boss.id))
        await waiting(world, worker)
        args = {"session": worker.id, "verdict": "reject", "reason": "no tests\n for errors"}
        done = await answer(world, boss, args, tmp_path)
        assert done.content == (
            f"You rejected (no tests for errors) the result of session {worker.id} for ctl; it "
            "is now stopped."
        )
        assert worker.status_detail == "result rejected: no tests for errors"
        assert gate_records(world, worker.id) == [
            ResultApprovalAnswered(Verdict.REJECT, "no tests for errors", boss.id)
        ]


async def test_no_gate_and_unknown_sessions_are_refused_saying_what_to_do(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path) as world:
        boss = await world.manager.create(NewSession())
        worker = await world.manager.create(NewSession(approver=boss.id))
        idle = await answer(world, boss, {"session": worker.id, "verdict": "approve"}, tmp_path)
        assert idle.content == (
            f"Not answered: no approval is pending (session {worker.id} is idle); answer when it "
            "waits in await_approval"
        )
        gone = await answer(world, boss, {"session": "ghost", "verdict": "approve"}, tmp_path)
        assert gone.content == (
            "Not answered: no session 'ghost': name a session from list_sessions (its id or alias)"
        )
        assert worker.status is S.IDLE


async def test_a_beads_gate_is_answered_by_the_beads_approver_not_the_sessions(
    tmp_path: Path,
) -> None:
    async with daemon(tmp_path) as world:
        boss = await world.manager.create(NewSession())
        worker = await world.manager.create(NewSession(approver=boss.id))
        bead = await submitted(world, worker)  # the bead's approver: user (the default)
        await world.until(lambda: worker.status is S.AWAIT_APPROVAL)
        assert "approver user\n" in worker.approval_text()
        refused = await answer(world, boss, {"session": worker.id, "verdict": "approve"}, tmp_path)
        assert refused.content == (
            f"Not answered: session {worker.id}'s result can be approved only by user; ask a "
            f"human to write approve or reject REASON to agent/{worker.id}/approval"
        )
        assert world.status(bead) is B.PENDING_APPROVAL
        await world.gates.answer(bead, "approve", "")  # a person, on the bead's ctl
        assert world.store.bead(bead).approved_by == "user"


async def test_the_beads_approver_session_completes_it(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        boss = await world.manager.create(NewSession())
        worker = await world.manager.create(NewSession())  # its own approver: user
        bead = await submitted(world, worker, approver=boss.id)
        await world.until(lambda: worker.status is S.AWAIT_APPROVAL)
        done = await answer(world, boss, {"session": worker.id, "verdict": "approve"}, tmp_path)
        assert done.content == (
            f"You approved the result of session {worker.id} for bead {bead}; it is now idle."
        )
        # settled before the tool returned: no waiting on the queued sync
        assert world.store.bead(bead).status is B.COMPLETED
        assert world.store.bead(bead).approved_by == boss.id
    assert (
        f"approve {bead} through session {worker.id}'s result gate (by session {boss.id})"
        in subjects(tmp_path / "beads")
    )


async def test_the_approver_and_an_open_gate_survive_a_restart(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        boss = await world.manager.create(NewSession(alias="boss"))
        worker = await world.manager.create(NewSession(alias="dev", approver="boss"))
        await waiting(world, worker)
        ids = (boss.id, worker.id)
    async with daemon(tmp_path) as world:
        boss, worker = (world.manager.get(i) for i in ids)
        assert worker.approver == boss.id
        assert worker.status is S.AWAIT_APPROVAL
        assert worker.pending_result is not None
        assert worker.pending_result.approver == boss.id
        records = world.manager.store.read(worker.id).records
        [asked] = [r for r in records if isinstance(r, ResultApprovalRequested)]
        assert asked.approver == boss.id
        done = await answer(world, boss, {"session": "dev", "verdict": "approve"}, tmp_path)
        assert not done.is_error, done.content
        assert worker.status is S.IDLE


async def test_a_person_answers_a_gate_that_names_an_approver_session(tmp_path: Path) -> None:
    async with daemon(tmp_path) as world:
        boss = await world.manager.create(NewSession())
        worker = await world.manager.create(NewSession(approver=boss.id))
        await waiting(world, worker)
        worker.answer_approval("approve")  # the approval file: by user
        assert gate_records(world, worker.id) == [
            ResultApprovalAnswered(Verdict.APPROVE, "", "user")
        ]


async def test_the_approver_session_is_told_by_mail_when_a_gate_names_it(
    tmp_path: Path,
) -> None:
    peers = SessionPeers()
    office = PostOffice(MailStore(tmp_path / "mail"), peers)
    answers = SessionApprovals(office=office)
    delivered: list[tuple[str, Message]] = []
    got = trio.Event()

    def seen(mailbox: str, message: Message) -> None:
        delivered.append((mailbox, message))
        got.set()

    office.watch(seen)
    async with daemon(tmp_path, also=answers.on_session_event) as world, trio.open_nursery() as n:
        peers.bind(world.manager)
        answers.bind(world.manager)
        await n.start(answers.run)
        boss = await world.manager.create(NewSession())
        worker = await world.manager.create(NewSession(approver=boss.id))
        plain = await world.manager.create(NewSession())
        await waiting(world, plain)  # names nobody: nobody is told (notices go in order)
        await waiting(world, worker, "Parser fixed; tests pass.")
        with trio.fail_after(10):
            await got.wait()
        assert [mailbox for mailbox, _ in delivered] == [boss.id]
        [notice] = await office.unread(boss.id)
        assert (notice.sender, notice.type) == ("anvild", MessageType.APPROVAL_REQUEST)
        assert notice.subject == f"Approval wanted: the result of session {worker.id}"
        assert "Parser fixed; tests pass." in notice.body
        assert f"call answer_approval with session {worker.id}" in notice.body
        gate = worker.pending_result
        assert gate is not None
        assert dict(notice.metadata) == {
            "session": worker.id,
            "asked_by": "ctl",
            "ref": "",
            "gate": gate_digest(gate),
        }
        assert office.unread_count(plain.id) == 0
        n.cancel_scope.cancel()


async def test_a_gate_opened_just_before_a_crash_is_told_once_after_the_restart(
    tmp_path: Path,
) -> None:
    """The daemon died between the gate (on disk) and its notice (never sent): the restarted
    daemon sends it; restarting again, with the notice unread or read, sends nothing more."""
    async with daemon(tmp_path) as world:  # nobody hears the gate: the notice is lost
        boss = await world.manager.create(NewSession(alias="boss"))
        worker = await world.manager.create(NewSession(approver=boss.id))
        other = await world.manager.create(NewSession(approver=boss.id))
        await waiting(world, worker, "Parser fixed.")
        ids = (boss.id, worker.id, other.id)

    async def restart(read: bool) -> list[Message]:
        """A restart with its own office: the notices it sends, up to the one of a gate
        opened after the restart (the catch-up's are queued before it, so they came first)."""
        peers = SessionPeers()
        office = PostOffice(MailStore(tmp_path / "mail"), peers)
        answers = SessionApprovals(office=office)
        sent: list[Message] = []
        new_gate_told = trio.Event()

        def seen(mailbox: str, message: Message) -> None:
            sent.append(message)
            if message.metadata.get("session") == ids[2]:
                new_gate_told.set()

        office.watch(seen)
        async with (
            daemon(tmp_path, also=answers.on_session_event) as world,
            trio.open_nursery() as n,
        ):
            peers.bind(world.manager)
            answers.bind(world.manager)
            boss, _, other = (world.manager.get(i) for i in ids)
            if read:  # the approver's model read its inbox (the notice moves to received)
                await office.take_unread(boss.id)
            await n.start(answers.run)
            await waiting(world, other, "Docs updated.")
            with trio.fail_after(10):
                await new_gate_told.wait()
            other.answer_approval("approve")
            n.cancel_scope.cancel()
        return sent

    first = await restart(read=False)
    assert [(m.type, m.metadata["session"]) for m in first] == [
        (MessageType.APPROVAL_REQUEST, ids[1]),  # the catch-up
        (MessageType.APPROVAL_REQUEST, ids[2]),
    ]
    assert "Parser fixed." in first[0].body
    for read in (False, True):
        again = await restart(read=read)
        assert [m.metadata["session"] for m in again] == [ids[2]], read  # only the new gate


async def test_an_approver_at_rest_is_told_unbuilt_and_a_target_at_rest_loads_off_the_loop(
    tmp_path: Path,
) -> None:
    peers = SessionPeers()
    office = PostOffice(MailStore(tmp_path / "mail"), peers)
    answers = SessionApprovals(office=office)
    got = trio.Event()
    office.watch(lambda mailbox, message: got.set())
    async with daemon(tmp_path, also=answers.on_session_event) as world, trio.open_nursery() as n:
        peers.bind(world.manager)
        answers.bind(world.manager)
        await n.start(answers.run)
        boss = await world.manager.create(NewSession())
        worker = await world.manager.create(NewSession(approver=boss.id))
        idle = await world.manager.create(NewSession(approver=boss.id))
        loads = loads_on_loop(world.manager)
        await unloaded(world.manager, boss, idle)
        await waiting(world, worker, "Parser fixed.")
        with trio.fail_after(10):
            await got.wait()
        [notice] = await office.unread(boss.id)
        assert notice.metadata["session"] == worker.id
        assert [s.id for s in world.manager.built_sessions()] == [worker.id]  # told unbuilt
        assert loads == []

        refused = await answer(world, boss, {"session": idle.id, "verdict": "approve"}, tmp_path)
        assert f"no approval is pending (session {idle.id} is idle)" in refused.content
        assert loads == [False]
        n.cancel_scope.cancel()
