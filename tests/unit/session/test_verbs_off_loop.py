"""The manager's async verbs on a session at rest (restored, or unloaded for idleness) build
it off the event loop: `kill` and `remove_session` load it (its records replayed in a worker
thread), and `create`'s `approver=` check reads its status without building it."""

from __future__ import annotations

from pathlib import Path

from anvild.session.manager import NewSession
from anvild.store import SessionStatus, read_journal
from tests.unit.session.support import loads_on_loop, new, running, unloaded


async def test_kill_and_remove_load_a_session_at_rest_in_a_worker_thread(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, []) as manager:
        killed, removed = await new(manager, alias="a"), await new(manager, alias="b")
        loads = loads_on_loop(manager)
        await unloaded(manager, killed, removed)
        await manager.kill("a")
        await manager.remove_session("b")
        assert loads == [False, False]  # each replayed once, off the loop
        for session in (killed, removed):
            assert read_journal(session.journal.path).state.ended == "killed"
        assert manager.ids() == []


async def test_an_approver_at_rest_is_checked_without_being_built(tmp_path: Path) -> None:
    async with running(tmp_path, []) as manager:
        boss = await new(manager, alias="boss")
        loads = loads_on_loop(manager)
        await unloaded(manager, boss)
        worker = await manager.create(NewSession(approver="boss"))
        assert worker.approver == boss.id
        assert loads == []
        assert isinstance(manager.peek(boss.id), tuple)  # still at rest, not built
        assert manager.briefs()[0][3] is SessionStatus.IDLE
