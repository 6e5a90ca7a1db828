"""`always` answers survive a daemon restart (issue 7: approvals; DESIGN section 8).

An `always` answer adds rules and grants to the session's policy "for the rest of the session".
They are recorded (`PermissionsRemembered`, folded by the one reducer) and a restored session's
policy starts with them. The restart here is real as far as the session layer goes: the first
`SessionManager` is cancelled (as at daemon shutdown) and a second one restores the session
from its file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import ScriptedProvider, script
from anvild.session import Session, SessionStatus
from anvild.store import (
    ApprovalAnswered,
    ApprovalRequested,
    PermissionsRemembered,
    Remembered,
    ToolStarted,
    Verdict,
    read_journal,
    replay,
)
from tests.unit.session.support import Models, new, running, target

S = SessionStatus


async def settled(session: Session) -> SessionStatus:
    """Wait until the session waits on a person (approval) or has finished its turn."""
    with trio.fail_after(10):
        while session.status not in (S.AWAIT_APPROVAL, S.AWAIT):
            await session.wait_changed(session.version)
    return session.status


async def prompt(session: Session, text: str) -> SessionStatus:
    """Read `out` (await -> idle), submit `text`, and wait until the turn settles."""
    session.mark_out_read()
    session.submit(text)
    return await settled(session)


async def answer(session: Session, line: str) -> SessionStatus:
    """Answer the pending approval, then wait until the turn settles again."""
    session.answer_approval(line)
    with trio.fail_after(10):
        while session.status is S.AWAIT_APPROVAL:
            await session.wait_changed(session.version)
    return await settled(session)


async def test_always_rules_and_grants_are_restored_after_a_restart(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("far away\n")
    write = {"file_path": "a.txt", "content": "one\n"}
    read = {"file_path": str(outside)}
    first = ScriptedProvider(
        [
            script.tool_call("w1", "write_file", write),
            script.text("written"),
            script.tool_call("r1", "read_file", read),
            script.text("read"),
        ]
    )
    async with running(tmp_path, Models({"fake": target(first)}), mode=Mode.DEFAULT) as manager:
        session = await new(manager)
        assert await prompt(session, "write a.txt") is S.AWAIT_APPROVAL
        assert "always_adds allow write_file(a.txt)" in session.approval_text()
        assert await answer(session, "always") is S.AWAIT
        assert await prompt(session, "read the outside file") is S.AWAIT_APPROVAL
        assert f"always_adds read {outside}" in session.approval_text()
        assert await answer(session, "always") is S.AWAIT
        assert "far away" in first.requests[3].messages[-1].tool_results()[0].content
        sid, path = session.id, session.journal.path
        live = session.record.remembered
    assert live == Remembered(rules=("write_file(a.txt)",), read_roots=(str(outside),))

    records = read_journal(path).records
    # Each `always` is answered, then what it added is recorded before the call runs.
    answers = [r for r in records if isinstance(r, ApprovalAnswered)]
    assert [a.verdict for a in answers] == [Verdict.ALWAYS, Verdict.ALWAYS]
    order = [
        type(r).__name__
        for r in records
        if isinstance(r, ApprovalAnswered | PermissionsRemembered | ToolStarted)
    ]
    assert order == [
        "ApprovalAnswered",
        "PermissionsRemembered",
        "ToolStarted",
        "ApprovalAnswered",
        "PermissionsRemembered",
        "ToolStarted",
    ]
    assert replay(records).remembered == live

    again = {"file_path": "a.txt", "content": "two\n"}
    second = ScriptedProvider(
        [
            script.tool_call("r0", "read_file", {"file_path": "a.txt"}),  # fresh: read first
            script.tool_call("w2", "write_file", again),
            script.text("written again"),
            script.tool_call("r2", "read_file", read),
            script.text("read again"),
            script.tool_call("w3", "write_file", {"file_path": "b.txt", "content": "b\n"}),
        ]
    )
    async with running(tmp_path, Models({"fake": target(second)}), mode=Mode.DEFAULT) as manager:
        session = manager.get(sid)
        assert session.record.remembered == live
        assert await prompt(session, "write a.txt again") is S.AWAIT  # no question this time
        result = second.requests[2].messages[-1].tool_results()[0]
        assert (tmp_path / "work" / "a.txt").read_text() == "two\n", result
        assert await prompt(session, "read it again") is S.AWAIT
        assert "far away" in second.requests[4].messages[-1].tool_results()[0].content
        # What was not answered `always` still asks.
        assert await prompt(session, "write b.txt") is S.AWAIT_APPROVAL
        assert "tool write_file" in session.approval_text()
        assert "b.txt" in session.approval_text()
    asked = [r for r in read_journal(path).records if isinstance(r, ApprovalRequested)]
    assert [r.call_id for r in asked] == ["w1", "r1", "w3"]


async def test_a_file_without_remembered_permissions_loads_and_asks(tmp_path: Path) -> None:
    """Files written before `PermissionsRemembered` existed load with nothing remembered."""
    provider = ScriptedProvider([script.text("hi")])
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager)
        sid = session.id
    records = read_journal(tmp_path / "data" / "sessions" / f"{sid}.jsonl").records
    assert not any(isinstance(r, PermissionsRemembered) for r in records)
    assert replay(records).remembered == Remembered()


@pytest.mark.parametrize(
    "command",
    ["git status", "npm test -- --watch", "echo 'a b'", "python3 -c 'print(1)'", "make"],
)
def test_a_remembered_command_rule_round_trips_through_its_record(command: str) -> None:
    """What `always` on a command remembers is recorded as `str(rule)` and parsed back at
    restore: it must be the same rule, matching the same command."""
    from anvild.agent.permissions import programs, shell
    from anvild.agent.permissions.rules import CommandSubject, parse_rule
    from anvild.store.records import decode, encode

    for segment in shell.analyze(command).segments:
        rule = parse_rule(programs.suggested_rule(segment.words, "bash"))
        line = encode(9, PermissionsRemembered(rules=(str(rule),)))
        _, record = decode(json.loads(line))
        assert isinstance(record, PermissionsRemembered)
        restored = parse_rule(record.rules[0])
        assert restored == rule
        assert restored.matches("bash", CommandSubject(segment.words))
