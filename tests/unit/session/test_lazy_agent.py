"""A session's agent is built on first use: `new` answers without it, and every verb, file
and turn behaves as if it had been built at `new` (the records are the truth either way)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import Message
from anvild.session.errors import SessionRefused
from anvild.session.manager import SessionManager
from anvild.session.session import Session
from anvild.store import SessionStatus, SessionStore
from tests.unit.session.support import (
    Models,
    ask,
    file_tools,
    new,
    running,
    settings,
    target,
    workspace,
)

TIMEOUT = 10


def texts(messages: tuple[Message, ...]) -> list[str]:
    return [m.text() for m in messages]


def built(session: Session) -> bool:
    return session.agent_built


async def wait_for(session: Session, status: SessionStatus) -> None:
    with trio.fail_after(TIMEOUT):
        while session.status is not status:
            await session.wait_changed(session.version)


async def test_new_builds_no_agent_and_the_first_prompt_does(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("one")])
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager, role="reviewer")
        await wait_for(session, SessionStatus.IDLE)
        assert not built(session)
        # What the files show before a turn needs no agent.
        assert "# Your role: reviewer" in session.system_prompt
        assert session.usage_used() is None
        assert session.queue_text() == ""
        assert not built(session)
        assert await ask(session, "hi") == "one\n"
        assert built(session)
    assert "# Your role: reviewer" in (provider.requests[0].system or "")


async def test_the_verbs_work_before_the_agent_is_built(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("one")])
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager)
        await wait_for(session, SessionStatus.IDLE)
        session.set_role("tester")
        session.set_context("CONTEXT-MARK")
        await session.control("clear")
        await session.control("restart")
        await session.control("stop")
        await session.control("start")
        assert not built(session)
        with pytest.raises(SessionRefused, match="nothing to cancel"):
            await session.control("cancel")
        assert await ask(session, "hi") == "one\n"
    system = provider.requests[0].system or ""
    assert "# Your role: tester" in system
    assert "CONTEXT-MARK" in system
    assert texts(provider.requests[0].messages) == ["hi"]


async def test_a_restored_session_builds_its_agent_from_the_records(tmp_path: Path) -> None:
    first = ScriptedProvider([script.text("one")])
    async with running(tmp_path, Models({"fake": target(first)})) as manager:
        session = await new(manager, alias="s")
        assert await ask(session, "hi") == "one\n"
    second = ScriptedProvider([script.text("two")])
    async with running(tmp_path, Models({"fake": target(second)})) as manager:
        session = manager.get("s")
        assert not built(session)
        assert texts(session.agent.messages) == ["hi", "one"]  # a file that needs it builds it
        assert await ask(session, "again") == "two\n"
    assert texts(second.requests[0].messages) == ["hi", "one", "again"]


async def test_an_agent_that_cannot_be_built_puts_the_session_in_error(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("one")])
    roles = tmp_path / "config" / "sandbox-roles"
    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        Models({"fake": target(provider)}),
        settings=settings(tmp_path),
        tools=file_tools(),
        default_cwd=workspace(tmp_path),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        session = await new(manager)
        roles.mkdir(parents=True)
        (roles / "developer.yaml").write_text("network: [not, a, bool\n")  # broken after `new`
        session.submit("hi")
        await wait_for(session, SessionStatus.ERROR)
        assert "its agent could not be built" in session.status_detail
        assert session.queue_text().startswith("p")  # the prompt waits, not lost
        (roles / "developer.yaml").unlink()
        await session.control("start")
        with trio.fail_after(TIMEOUT):
            await session.wait_handled(1)
        assert session.out == "one\n"
        nursery.cancel_scope.cancel()
