"""`new from=ID|ALIAS|latest`: a new session started from another one's conversation (live or
exited): its transcript, todos, cwd, role, model, sandbox and limits carried; the refusals; the
old file only read; a restart restores the new session."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import Role
from anvild.session.errors import InvalidSessionRequest
from anvild.session.manager import NewSession
from anvild.store import ContextReplaced, ReplaceReason, SessionStatus, TodosChanged, read_journal
from tests.unit.session.support import Models, ask, new, running, target

TODOS = {"todos": [{"content": "check the parser", "status": "in_progress"}]}
WRITE = {"file_path": "a.txt", "content": "written\n"}


def _texts(messages: object) -> list[str]:
    return [m.text() for m in messages]  # type: ignore[attr-defined]


def test_from_is_parsed() -> None:
    assert NewSession.parse(["from=s1", "headless"]) == NewSession(source="s1", headless=True)
    with pytest.raises(InvalidSessionRequest, match="from= is given twice"):
        NewSession.parse(["from=a", "from=b"])


async def test_a_session_starts_from_an_exited_ones_conversation(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    provider = ScriptedProvider(
        [script.tool_call("t1", "todo_write", TODOS), script.text("first answer"), script.text("2")]
    )
    big = target(provider, name="big")
    models = Models({"fake": target(provider), "big": big})
    async with running(tmp_path, models, mode=Mode.DEFAULT, ids=["s1", "s2"]) as manager:
        old = await new(
            manager, model="big", role="reviewer", cwd=str(other), alias="rev", max_steps=7
        )
        assert await ask(old, "first question") == "first answer\n"
        await manager.kill("rev")
        before = old.journal.path.read_bytes()
        forked = await new(manager, source="rev", headless=True)
        assert forked.id == "s2"
        assert (forked.cwd, forked.role, forked.model, forked.sandbox) == (
            str(other),
            "reviewer",
            "big",
            old.sandbox,
        )
        assert forked.max_steps == 7
        assert forked.record.todos == old.record.todos != ()
        assert forked.record.messages == old.record.messages
        assert await ask(forked, "second question") == "2\n"
        sent = provider.requests[-1].messages
        assert "first question" in _texts(sent)
        assert "first answer" in _texts(sent)
        assert sent[-1].role is Role.USER
        assert sent[-1].text() == "second question"
        assert old.journal.path.read_bytes() == before  # only read
        records = read_journal(forked.journal.path).records
        assert ContextReplaced(old.record.messages, ReplaceReason.FORK) in records
        assert TodosChanged(old.record.todos) in records
        transcript = forked.record.messages
    async with running(tmp_path, models, mode=Mode.DEFAULT) as manager:
        restored = manager.get("s2")
        assert restored.record.messages == transcript
        assert restored.record.todos != ()
        assert (restored.cwd, restored.role, restored.model) == (str(other), "reviewer", "big")


async def test_the_line_overrides_what_is_carried(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("one")])
    models = Models({"fake": target(provider), "big": target(provider, name="big")})
    async with running(tmp_path, models, mode=Mode.DEFAULT, ids=["s1", "s2"]) as manager:
        old = await new(manager, permission="plan")
        await ask(old, "q")
        forked = await new(manager, source=old.id, model="big", role="tester", permission="default")
        assert (forked.model, forked.role, forked.mode) == ("big", "tester", Mode.DEFAULT)
        assert forked.record.messages == old.record.messages
        assert old.status is SessionStatus.AWAIT  # the live one is untouched


async def test_from_latest_takes_the_latest_session_of_the_cwd(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    provider = ScriptedProvider([script.text("a"), script.text("b"), script.text("c")])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, ids=["s1", "s2", "s3", "s4"]) as manager:
        first = await new(manager, ephemeral=True)
        await ask(first, "one")
        second = await new(manager, ephemeral=True)
        await ask(second, "two")
        elsewhere = await new(manager, cwd=str(other))
        await ask(elsewhere, "three")
        await manager.kill(second.id)
        forked = await new(manager, source="latest")
        assert _texts(forked.record.messages) == ["two", "b"]
        assert forked.cwd == first.cwd
        with pytest.raises(
            InvalidSessionRequest, match=r"from=latest: no session \(live or exited\) has the cwd"
        ):
            await new(manager, source="latest", cwd=str(tmp_path))


async def test_unknown_and_busy_sources_are_refused(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.DEFAULT, ids=["abc123", "s2"]) as manager:
        session = await new(manager)
        with pytest.raises(InvalidSessionRequest) as info:
            await new(manager, source="abc124")
        assert "from=abc124: no session has that id or alias; did you mean 'abc123'?" in str(
            info.value
        )
        session.submit("write a.txt")
        while session.status is not SessionStatus.AWAIT_APPROVAL:
            await session.wait_changed(session.version)
        with pytest.raises(InvalidSessionRequest, match="waits for an approval; answer it first"):
            await new(manager, source=session.id)
        assert manager.store.ids() == ["abc123"]  # nothing written for a refusal
        session.answer_approval("reject")
