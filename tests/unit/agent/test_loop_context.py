"""The loop's context management with a provider that has a window: clearing in the request,
automatic and manual compaction at step boundaries, overflow recovery, and refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from anvild.agent import events as ev
from anvild.agent.context import Compaction, ContextSettings, ContextWindow
from anvild.agent.context.clearing import STUB_PREFIX
from anvild.agent.context.compaction import SUMMARY_MARK, facts, plan, prompt_text
from anvild.agent.loop import NOT_RECORDED, Agent, AgentConfig
from anvild.agent.tools.base import Args, Cancellation, Effects, ToolContext, ToolOutput
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.errors import ContextOverflow
from anvild.llm.integrity import validate_transcript
from anvild.llm.testing import Script, ScriptedProvider, estimate_tokens, script
from anvild.llm.types import ChatRequest, Message, ToolResult


class ReadFile:
    """Returns `size` bytes for any path (a big file)."""

    name = "read_file"
    description = "Read a file."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"file_path": {"type": "string"}},
        "required": ["file_path"],
    }
    cancellation = Cancellation.SAFE_TO_ABANDON

    def __init__(self, size: int) -> None:
        self.size = size

    def effects(self, args: Args) -> Effects:
        return Effects.read(str(args["file_path"]))

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        return ToolOutput(f"{args['file_path']}:" + "x" * self.size)


def _effects(call: object) -> Effects:
    return Effects.none()


def make(
    tmp_path: Path,
    scripts: list[Script],
    *,
    window: int = 6000,
    provider_window: int | None = None,
    recorded: list[Compaction] | None = None,
    accept: bool = True,
    **settings: Any,
) -> tuple[Agent, ScriptedProvider, list[ev.AgentEvent]]:
    provider = ScriptedProvider(scripts, window=provider_window or window)
    seen: list[ev.AgentEvent] = []

    async def on_compaction(compaction: Compaction) -> bool:
        if recorded is not None:
            recorded.append(compaction)
        return accept

    agent = Agent(
        provider,
        ToolRegistry([ReadFile(3000)]),
        AgentConfig(model="m", max_tokens=200, cache_key="s1"),
        ToolContext(cwd=tmp_path),
        emit=seen.append,
        window=ContextWindow(ContextSettings(window=window, **settings)),
        on_compaction=on_compaction,
    )
    return agent, provider, seen


def summaries(provider: ScriptedProvider) -> list[ChatRequest]:
    return [r for r in provider.requests if r.system == prompt_text()]


def work(requests: int) -> list[Script]:
    """A read of a 3000-byte file per step, then an answer."""
    steps: list[Script] = [
        script.tool_call(f"c{i}", "read_file", {"file_path": f"src/f{i}.py"})
        for i in range(requests)
    ]
    return [*steps, script.text("done")]


async def test_old_results_are_cleared_in_the_request_only(tmp_path: Path) -> None:
    agent, provider, _ = make(tmp_path, work(4), auto_compact=0, clear_at=0.5, keep_tool_results=1)
    finished = await agent.run_turn("read four files")
    assert finished.outcome is ev.TurnOutcome.DONE
    last = provider.requests[-1]
    results = [b for m in last.messages for b in m.content if isinstance(b, ToolResult)]
    stubs = [r for r in results if r.content.startswith(STUB_PREFIX)]
    assert stubs, "the last request should have cleared old results"
    assert 'read_file {"file_path": "src/f0.py"}' in stubs[0].content
    assert not results[-1].content.startswith(STUB_PREFIX)  # the current step's result stays
    kept = [b for m in agent.messages for b in m.content if isinstance(b, ToolResult)]
    assert all(not r.content.startswith(STUB_PREFIX) for r in kept)  # the transcript is whole
    assert last.cache_key == "s1"
    assert last.cache is True


async def test_auto_compaction_summarises_keeps_the_step_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    recorded: list[Compaction] = []
    scripts = work(3)
    scripts.insert(3, script.text("SUMMARY: read f0 f1 f2"))  # the summary request
    agent, provider, seen = make(
        tmp_path, scripts, window=4000, clear_at=0, recorded=recorded, auto_compact=0.5
    )
    agent.context.state.todos = (ev.Todo("write tests", ev.TodoStatus.PENDING),)
    finished = await agent.run_turn("read three files")
    assert finished.outcome is ev.TurnOutcome.DONE
    [summary] = summaries(provider)
    text = summary.messages[0].text()
    for needle in ("src/f0.py", "src/f1.py", "pending: write tests"):
        assert needle in text
    [compaction] = recorded
    assert compaction.trigger == "auto"
    # the turn's usage (its budget) includes what the summary cost
    assert finished.usage.input == sum(estimate_tokens(r) for r in provider.requests)
    assert compaction.usage.input == estimate_tokens(summary)
    assert compaction.after < compaction.before
    assert compaction.messages == agent.messages[: len(compaction.messages)]
    head = agent.messages[0].text()
    assert head.startswith(SUMMARY_MARK)
    assert "SUMMARY: read f0 f1 f2" in head
    assert "read three files" in head  # the turn's prompt is kept verbatim
    after = provider.requests[provider.requests.index(summary) + 1]
    assert after.stable_prefix == 1
    started = [e for e in seen if isinstance(e, ev.CompactionStarted)]
    done = [e for e in seen if isinstance(e, ev.CompactionFinished)]
    assert [e.trigger for e in started] == ["auto"]
    assert [(e.ok, e.after) for e in done] == [(True, compaction.after)]
    validate_transcript(agent.messages)


async def test_an_overflow_on_the_first_request_of_a_turn_recovers(tmp_path: Path) -> None:
    # The estimate thinks the history fits (window 8000); the provider's real window is 2000,
    # and there is no tool result to clear: only a compaction makes room.
    recorded: list[Compaction] = []
    agent, provider, seen = make(
        tmp_path,
        [script.text("ok1"), script.text("SUMMARY"), script.text("ok2")],
        window=8000,
        provider_window=2000,
        recorded=recorded,
        clear_at=0,
        auto_compact=0,
    )
    assert (await agent.run_turn("x" * 4000)).outcome is ev.TurnOutcome.DONE
    finished = await agent.run_turn("y" * 4000)
    assert finished.outcome is ev.TurnOutcome.DONE, finished.detail
    assert [e.trigger for e in seen if isinstance(e, ev.CompactionStarted)] == ["overflow"]
    assert agent.messages[-1] == Message.assistant_text("ok2")
    assert "y" * 4000 in agent.messages[0].text()  # the turn's prompt survived verbatim
    assert "x" * 4000 in summaries(provider)[0].messages[0].text()
    assert len(provider.requests) == 4  # ok1, the refused request, the summary, the retry
    assert recorded[0].trigger == "overflow"


async def test_a_summary_that_does_not_fit_is_written_in_chunks(tmp_path: Path) -> None:
    window = ContextWindow(ContextSettings(window=8000, summary_tokens=256))
    provider = ScriptedProvider([script.text(f"part {i}") for i in range(1, 20)], window=1500)
    history = [Message.user_text(f"line {i} " + "z" * 90) for i in range(60)]
    chosen = plan(history, turn_start=None, keep_user_bytes=0)
    summary, _ = await window.summarise(provider, "m", chosen, facts((), (), _effects), "")
    asked = summaries(provider)
    texts = [r.messages[0].text() for r in asked]
    parts = [t for t in texts if "part 1 of" in t]
    assert parts, "the history should have been cut in parts after the overflows"
    total = int(parts[-1].split("part 1 of ")[1].split()[0])
    assert total > 1
    assert summary == f"part {len([t for t in texts if ' of ' + str(total) in t])}"
    assert "The summary of the earlier parts" in texts[-1]


async def test_a_prompt_larger_than_the_window_fails_before_any_request(tmp_path: Path) -> None:
    agent, provider, _ = make(tmp_path, [script.text("never")], window=1000)
    finished = await agent.run_turn("x" * 8000)
    assert finished.outcome is ev.TurnOutcome.ERROR
    assert "more than the model's whole context window of 1000" in finished.detail
    assert "split it" in finished.detail
    assert provider.requests == []
    assert agent.messages == ()


async def test_a_compaction_not_recorded_is_not_adopted(tmp_path: Path) -> None:
    agent, _provider, seen = make(tmp_path, [*work(1), script.text("S")], accept=False, clear_at=0)
    await agent.run_turn("read one")
    before = agent.messages
    why = await agent.compact("the parser")
    assert why == NOT_RECORDED == "the compaction could not be recorded"
    assert agent.messages == before
    assert [e.ok for e in seen if isinstance(e, ev.CompactionFinished)] == [False]


async def test_manual_compaction_sends_the_focus(tmp_path: Path) -> None:
    recorded: list[Compaction] = []
    agent, provider, _ = make(tmp_path, [*work(1), script.text("S")], recorded=recorded)
    await agent.run_turn("read one")
    assert await agent.compact("focus on the parser") == ""
    assert "Focus the summary on: focus on the parser" in summaries(provider)[0].messages[0].text()
    assert recorded[0].focus == "focus on the parser"
    assert recorded[0].trigger == "manual"
    assert await agent.compact() == "the history is already one summary"


async def test_still_too_long_after_recovery_ends_the_turn_saying_what_to_do(
    tmp_path: Path,
) -> None:
    always = ContextOverflow("too long", requested=9000, limit=10)
    agent, _provider, _ = make(tmp_path, [always, always], window=6000, provider_window=6000)
    finished = await agent.run_turn("hi")
    assert finished.outcome is ev.TurnOutcome.ERROR
    assert "write `compact` or `clear`" in finished.detail
