"""A session's approver (`new approver=`) answers its result gates, never a tool call's."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import ScriptedProvider, script
from anvild.session.errors import SessionRefused
from anvild.store import SessionStatus, read_journal
from tests.unit.session.support import Models, new, running, target

S = SessionStatus
WRITE = {"file_path": "a.txt", "content": "written\n"}


async def test_an_approver_session_never_answers_a_tool_calls_approval(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.DEFAULT) as manager:
        boss = await new(manager)
        worker = await new(manager, approver=boss.id)
        seq = worker.submit("write a.txt")
        while worker.status is not S.AWAIT_APPROVAL:
            await worker.wait_changed(worker.version)
        expected = (
            f"session {worker.id} waits for approval of a tool call (write_file); only a human "
            f"answers those: ask a human to write approve or reject REASON to "
            f"agent/{worker.id}/approval"
        )
        with pytest.raises(SessionRefused) as refused:
            worker.answer_approval("approve", by=boss.id)
        assert str(refused.value) == expected
        assert not (tmp_path / "work" / "a.txt").exists()
        worker.answer_approval("approve")  # a person
        assert await worker.wait_handled(seq) is S.AWAIT
        assert (tmp_path / "work" / "a.txt").read_text() == "written\n"


async def test_the_approver_is_recorded_at_creation(tmp_path: Path) -> None:
    async with running(tmp_path, []) as manager:
        boss = await new(manager, alias="boss")
        worker = await new(manager, approver="boss")
        plain = await new(manager)
    started = read_journal(worker.journal.path).state
    assert (started.approver, worker.approver) == (boss.id, boss.id)
    assert read_journal(plain.journal.path).state.approver is None
    assert plain.approver == "user"
    first = worker.journal.path.read_text().splitlines()[0]
    assert f'"approver": "{boss.id}"' in first or f'"approver":"{boss.id}"' in first
    assert '"approver"' not in plain.journal.path.read_text().splitlines()[0]
