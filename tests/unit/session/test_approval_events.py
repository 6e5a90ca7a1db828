"""Approvals on a session's `events` stream: `approval_requested` when the session starts
waiting on `approval` (a tool call, or its result), `approval_answered` when the wait ends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import ScriptedProvider, script
from anvild.session.session import Session
from anvild.store import SessionStatus
from tests.unit.session.support import Models, ask, new, running, target

S = SessionStatus
WRITE = {"file_path": "a.txt", "content": "written\n"}


def approval_events(session: Session) -> list[dict[str, Any]]:
    """The approval events in the stream's backlog, as a client reads them."""
    events = [json.loads(line) for line in session.events.backlog()]
    return [e for e in events if str(e["type"]).startswith("approval_")]


async def wait_for(session: Session, status: SessionStatus) -> None:
    while session.status is not status:
        await session.wait_changed(session.version)


@pytest.mark.parametrize(("answer", "verdict"), [("approve", "approve"), ("reject no", "reject")])
async def test_a_tool_approval_is_announced_and_its_answer_too(
    tmp_path: Path, answer: str, verdict: str
) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    async with running(tmp_path, Models({"fake": target(provider)}), mode=Mode.DEFAULT) as manager:
        session = await new(manager)
        seq = session.submit("write a.txt")
        await wait_for(session, S.AWAIT_APPROVAL)
        [asked] = approval_events(session)
        assert asked == {
            "type": "approval_requested",
            "kind": "tool",
            "call_id": "c1",
            "tool": "write_file",
            "arguments": WRITE,
            "reason": asked["reason"],
            "always_adds": asked["always_adds"],
            "asked_by": "",
            "summary": "",
            "approver": "",
        }
        assert asked["reason"]
        assert asked["reason"] in session.approval_text()
        kinds = [json.loads(line)["type"] for line in session.events.backlog()]
        assert kinds.index("approval_requested") > kinds.index("tool_call_started")
        session.answer_approval(answer)
        await session.wait_handled(seq)
        answered = approval_events(session)[1]
        assert (answered["type"], answered["kind"]) == ("approval_answered", "tool")
        assert (answered["verdict"], answered["call_id"]) == (verdict, "c1")
        assert answered["reason"] == ("no" if verdict == "reject" else "")


async def test_a_cancel_answers_the_wait_as_cancelled(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    async with running(tmp_path, Models({"fake": target(provider)}), mode=Mode.DEFAULT) as manager:
        session = await new(manager)
        session.submit("write a.txt")
        await wait_for(session, S.AWAIT_APPROVAL)
        await session.control("cancel")
        kinds = [(e["type"], e.get("verdict")) for e in approval_events(session)]
        assert kinds == [("approval_requested", None), ("approval_answered", "cancelled")]


async def test_a_result_approval_is_announced_with_what_approval_shows(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("Done it.")])
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager)
        assert await ask(session, "do it") == "Done it.\n"
        session.request_result_approval(asked_by="ctl")
        [asked] = approval_events(session)
        assert (asked["kind"], asked["asked_by"], asked["summary"]) == ("result", "ctl", "Done it.")
        assert asked["approver"] == "user"
        await session.control("reject not good enough")
        answered = approval_events(session)[1]
        assert (answered["kind"], answered["verdict"]) == ("result", "reject")
        assert (answered["reason"], answered["by"]) == ("not good enough", "user")


async def test_a_headless_session_never_waits_so_announces_nothing(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    async with running(tmp_path, Models({"fake": target(provider)}), mode=Mode.DEFAULT) as manager:
        session = await new(manager, headless=True)
        assert await ask(session, "write a.txt") == "ok\n"
        assert approval_events(session) == []
