"""The store under a real `Agent`: every mutation the loop makes is recorded, and the file replays
to the agent's own transcript after every event (course 14.B: "merged user text survives restart
exactly once"; "clearing ... replay the same active context").

`Recorder` is the shape the session supervisor is expected to take: it turns agent events into
records with `message_records`, records `ToolStarted` (synced) just before a call's side effect
and `ToolFinished` (synced) right after it by wrapping the tool registry's dispatch.
"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from anvild.agent import events as ev
from anvild.agent.loop import CANCELLED_NOTE, Agent, AgentConfig
from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.agent.tools.todo import TodoWriteTool
from anvild.llm import stream
from anvild.llm.integrity import validate_transcript
from anvild.llm.testing import Pause, Script, ScriptedProvider, script
from anvild.llm.types import Text, ToolCall, ToolResult
from anvild.store import (
    ContextReplaced,
    Journal,
    MessageExtended,
    ReplaceReason,
    TodoItem,
    TodosChanged,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UsageReported,
    message_records,
    read_journal,
)
from tests.unit.agent.test_loop import Add, Probe
from tests.unit.store.support import started


class RecordingRegistry(ToolRegistry):
    """Records the start of a call before it runs and its result after."""

    journal: Journal

    async def dispatch(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        self.journal.append(ToolStarted(call.id, call.name))
        result = await super().dispatch(call, ctx)
        self.journal.append(ToolFinished(result))
        return result


class Recorder:
    def __init__(self, path: Path, tmp_path: Path, scripts: list[Script], tools: list[object]):
        self.journal = Journal.create(path, started())
        registry = RecordingRegistry(tools)  # type: ignore[arg-type]
        registry.journal = self.journal
        self.agent = Agent(
            ScriptedProvider(scripts),
            registry,
            AgentConfig(model="test-model"),
            ToolContext(cwd=tmp_path),
            emit=self.on_event,
        )
        self.checks = 0

    def sync_messages(self) -> None:
        for record in message_records(self.journal.state.messages, self.agent.messages):
            self.journal.append(record)

    def on_event(self, event: ev.AgentEvent) -> None:
        self.sync_messages()
        match event:
            case ev.Usage(usage=usage):
                self.journal.append(UsageReported(usage))
            case ev.TodosUpdated(todos=todos):
                items = tuple(TodoItem(t.content, t.status.value) for t in todos)
                self.journal.append(TodosChanged(items))
            case ev.TurnFinished(outcome=outcome, detail=detail):
                self.journal.append(TurnEnded(outcome.value, detail))
        self.check()

    def check(self) -> None:
        """The file replays to exactly the live state and the agent's transcript."""
        loaded = read_journal(self.journal.path)
        assert loaded.state == self.journal.state
        assert loaded.state.messages == self.agent.messages
        self.checks += 1


async def test_a_tool_turn_is_recorded_and_replays_after_every_event(tmp_path: Path) -> None:
    scripts = [
        script.tool_call("c1", "add", {"a": 1, "b": 2}, usage=stream.Usage(100, 20, 0, 0)),
        script.tool_call(
            "c2",
            "todo_write",
            {"todos": [{"content": "check", "status": "in_progress"}]},
            usage=stream.Usage(120, 10, 0, 0),
        ),
        script.text("3", usage=stream.Usage(130, 5, 0, 0)),
    ]
    recorder = Recorder(tmp_path / "s1.jsonl", tmp_path, scripts, [Add(), TodoWriteTool()])
    finished = await recorder.agent.run_turn("add 1 and 2")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert recorder.checks > 10
    state = read_journal(recorder.journal.path).state
    assert state.todos == (TodoItem("check", "in_progress"),)
    assert state.usage == stream.Usage(350, 35, 0, 0)
    assert state.last_turn == TurnEnded("done", "")
    assert state.tools == ()
    tags = [r.TAG for r in read_journal(recorder.journal.path).records]
    assert tags.count("tool_started") == tags.count("tool_finished") == 2
    first = tags.index("tool_started")
    assert tags[first - 1 : first + 2] == ["message_appended", "tool_started", "tool_finished"]


async def test_merged_user_text_survives_a_restart_exactly_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = [stream.TextDelta(0, "thinking"), Pause(10), *script.text(" done")]
    path = tmp_path / "s1.jsonl"
    recorder = Recorder(path, tmp_path, [slow, script.text("ok")], [])
    with trio.move_on_after(1):
        await recorder.agent.run_turn("first")
    recorder.sync_messages()
    assert (await recorder.agent.run_turn("second")).outcome is ev.TurnOutcome.DONE
    recorder.journal.close()
    with Journal.open(path) as reopened:
        messages = reopened.state.messages
    assert messages == recorder.agent.messages
    assert messages[0].content == (Text("first"), Text(CANCELLED_NOTE), Text("second"))
    extended = [r for r in read_journal(path).records if isinstance(r, MessageExtended)]
    assert extended == [
        MessageExtended((Text(CANCELLED_NOTE),)),
        MessageExtended((Text("second"),)),
    ]
    validate_transcript(messages)


async def test_a_cancelled_tool_and_a_clear_replay_the_same_context(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []
    probe = Probe("slow", log, seconds=10, writes=True)
    scripts = [script.tool_call("c1", "slow", {"tag": "x"}), script.text("fine")]
    recorder = Recorder(tmp_path / "s1.jsonl", tmp_path, scripts, [probe])
    with trio.move_on_after(1):
        await recorder.agent.run_turn("go")
    # the interrupted call got its result from the loop: the supervisor records the dispatch's
    # start, and the loop's own "interrupted" result in the next message
    state = read_journal(recorder.journal.path).state
    assert state.tools == ()
    assert "Interrupted" in state.messages[-1].tool_results()[0].content
    recorder.agent.reset()
    recorder.journal.append(ContextReplaced(recorder.agent.messages, ReplaceReason.CLEAR))
    assert (await recorder.agent.run_turn("again")).outcome is ev.TurnOutcome.DONE
    assert read_journal(recorder.journal.path).state.messages == recorder.agent.messages
    recorder.journal.close()
