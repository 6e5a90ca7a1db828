"""The todo list in the prompt: a note at the start of each step where it changed (never in the
system prompt), none on steps without a change; compaction keeps it as a fact, not verbatim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anvild.agent import events as ev
from anvild.agent.context.compaction import TODOS_MARK, facts, plan, user_texts
from anvild.agent.loop import Agent, AgentConfig, todos_note
from anvild.agent.tools.base import Effects, ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.agent.tools.todo import TodoWriteTool
from anvild.llm.integrity import validate_transcript
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ChatRequest, Message, Role, Text
from anvild.store import read_journal
from tests.unit.session.support import ask, new, running

PLAN_A = {"todos": [{"content": "read the parser", "status": "in_progress"}]}
PLAN_B = {
    "todos": [
        {"content": "read the parser", "status": "completed"},
        {"content": "fix the bug", "status": "in_progress"},
    ]
}


def make(tmp_path: Path, steps: list[Any]) -> tuple[Agent, ScriptedProvider]:
    provider = ScriptedProvider(steps)
    agent = Agent(
        provider,
        ToolRegistry([TodoWriteTool()]),
        AgentConfig(model="m", system="SYSTEM"),
        ToolContext(cwd=tmp_path),
    )
    return agent, provider


def notes(request: ChatRequest) -> list[str]:
    return [
        block.text
        for message in request.messages
        for block in message.content
        if isinstance(block, Text) and block.text.startswith(TODOS_MARK)
    ]


async def test_the_list_is_shown_once_at_the_step_after_each_change(tmp_path: Path) -> None:
    agent, provider = make(
        tmp_path,
        [
            script.tool_call("c1", "todo_write", PLAN_A),
            script.tool_call("c2", "todo_write", PLAN_A),  # the same list: no change
            script.tool_call("c3", "todo_write", PLAN_B),
            script.text("done"),
            script.text("still done"),
        ],
    )
    finished = await agent.run_turn("fix the parser")
    assert finished.outcome is ev.TurnOutcome.DONE
    note_a = f"{TODOS_MARK}, as it is now (todo_write changes it):]\n◐ read the parser"
    note_b = (
        f"{TODOS_MARK}, as it is now (todo_write changes it):]\n☑ read the parser\n◐ fix the bug"
    )
    assert [notes(r) for r in provider.requests[:4]] == [
        [],
        [note_a],  # step 2 starts after the change
        [note_a],  # step 3: nothing changed, nothing added
        [note_a, note_b],
    ]
    # The note ends the user message of the results, after them; never in the system prompt.
    second = provider.requests[1].messages[-1]
    assert second.role is Role.USER
    assert second.tool_results()
    assert second.content[-1] == Text(note_a)
    assert all(r.system == "SYSTEM" for r in provider.requests)
    validate_transcript(agent.messages)
    # The next turn, with the list unchanged, adds no note.
    await agent.run_turn("anything else?")
    assert notes(provider.requests[-1]) == [note_a, note_b]


async def test_a_cleared_list_is_said_once(tmp_path: Path) -> None:
    agent, provider = make(
        tmp_path,
        [
            script.tool_call("c1", "todo_write", PLAN_A),
            script.tool_call("c2", "todo_write", {"todos": []}),
            script.text("done"),
        ],
    )
    await agent.run_turn("plan, then drop the plan")
    assert notes(provider.requests[-1])[-1] == f"{TODOS_MARK} is now empty.]"
    assert todos_note(()) == f"{TODOS_MARK} is now empty.]"


async def test_a_list_the_agent_starts_with_is_not_repeated(tmp_path: Path) -> None:
    """A restored or forked session's transcript holds its list already."""
    agent, provider = make(
        tmp_path,
        [script.text("ok"), script.tool_call("c1", "todo_write", PLAN_A), script.text("ok")],
    )
    agent.context.state.todos = (ev.Todo("carried over", ev.TodoStatus.PENDING),)
    await agent.run_turn("go on")
    assert notes(provider.requests[0]) == []
    # After a reset (clear, restart) the new transcript starts without a note as well.
    agent.reset()
    await agent.run_turn("again")
    assert len(notes(provider.requests[-1])) == 1


def test_compaction_keeps_the_todos_as_a_fact_not_the_note_verbatim() -> None:
    note = todos_note((ev.Todo("fix the bug", ev.TodoStatus.IN_PROGRESS),))
    messages = [
        Message(Role.USER, (Text("fix the parser"), Text(note))),
        Message.assistant_text("working on it"),
        Message(Role.USER, (Text("and the tests"),)),
    ]
    assert user_texts(messages[0]) == ["fix the parser"]
    chosen = plan(messages, turn_start=2, keep_user_bytes=10_000)
    assert chosen.kept_users == ("fix the parser",)
    assert all(note not in text for text in chosen.kept_users)
    found = facts(chosen.dropped, [("fix the bug", "in_progress")], lambda call: Effects.none())
    assert found.todos == ("in_progress: fix the bug",)
    # A turn whose first step showed the note: the kept prompt leaves it out too.
    head = plan([Message(Role.USER, (Text("start"), Text(note)))], turn_start=0, keep_user_bytes=0)
    assert head.prompt == (Text("start"),)


async def test_a_session_records_the_note_and_a_restart_does_not_repeat_it(
    tmp_path: Path,
) -> None:
    steps = [
        script.tool_call("c1", "todo_write", PLAN_A),
        script.text("planned"),
        script.text("again"),
    ]
    async with running(tmp_path, steps, ids=["s1"]) as manager:
        session = await new(manager)
        assert await ask(session, "plan it") == "planned\n"
        transcript = session.agent.messages
        assert read_journal(session.journal.path).state.messages == transcript
        assert [t for m in transcript for t in m.content if isinstance(t, Text)][-2] == Text(
            todos_note((ev.Todo("read the parser", ev.TodoStatus.IN_PROGRESS),))
        )
    async with running(tmp_path, steps[2:]) as manager:
        restored = manager.get("s1")
        assert restored.agent.messages == transcript
        assert await ask(restored, "go on") == "again\n"
        notes_now = [
            t for m in restored.agent.messages for t in m.content
            if isinstance(t, Text) and t.text.startswith(TODOS_MARK)
        ]  # fmt: skip
        assert len(notes_now) == 1
