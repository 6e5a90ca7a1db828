"""Agent.run_turn with ScriptedProvider: course 8.2, 8.3 and 08.B acceptance cases.

Time-based cases run on trio's autojump clock (tool and stream pauses take no real time); the
concurrency case at the end uses real time because it is about real time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio
import trio.testing

from anvild.agent import events as ev
from anvild.agent.channel import EventChannel
from anvild.agent.loop import CANCELLED_NOTE, Agent, AgentConfig, Allow, Decision, Deny, _preview
from anvild.agent.tools.base import Args, Cancellation, Effects, ToolContext, ToolOutput
from anvild.agent.tools.registry import ToolRegistry
from anvild.agent.tools.todo import TodoWriteTool
from anvild.llm import stream
from anvild.llm.errors import DecodeError, HttpError
from anvild.llm.integrity import validate_transcript
from anvild.llm.testing import Pause, Script, ScriptedProvider, script
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult


class Add:
    """A calculator-like tool with no effects."""

    name = "add"
    description = "Add two numbers."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    }
    cancellation = Cancellation.SAFE_TO_ABANDON

    def __init__(self) -> None:
        self.calls = 0

    def effects(self, args: Args) -> Effects:
        return Effects.none()

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        self.calls += 1
        return ToolOutput(f"{args['a'] + args['b']:g}")


class Probe:
    """Sleeps `seconds` (trio time) and logs when each call starts and ends."""

    description = "A test tool."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"tag": {"type": "string"}},
    }

    def __init__(
        self,
        name: str,
        log: list[tuple[str, str]],
        *,
        seconds: float = 0.0,
        writes: bool = False,
        cancellation: Cancellation = Cancellation.SAFE_TO_ABANDON,
    ) -> None:
        self.name = name
        self.log = log
        self.seconds = seconds
        self.writes = writes
        self.cancellation = cancellation

    def effects(self, args: Args) -> Effects:
        return Effects.write("f") if self.writes else Effects.read("f")

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        tag = str(args.get("tag", self.name))
        self.log.append(("start", tag))
        await trio.sleep(self.seconds)
        self.log.append(("end", tag))
        return ToolOutput(f"{self.name} done: {tag}")


def make_agent(
    tmp_path: Path,
    scripts: Sequence[Script],
    tools: Sequence[Any] = (),
    *,
    emit: Callable[[ev.AgentEvent], None] | None = None,
    **config: Any,
) -> tuple[Agent, ScriptedProvider, list[ev.AgentEvent]]:
    provider = ScriptedProvider(scripts)
    seen: list[ev.AgentEvent] = []
    agent = Agent(
        provider,
        ToolRegistry(tools),
        AgentConfig(model="test-model", **config),
        ToolContext(cwd=tmp_path),
        emit=emit or seen.append,
    )
    return agent, provider, seen


def finishes(events: Sequence[ev.AgentEvent]) -> list[ev.TurnFinished]:
    return [e for e in events if isinstance(e, ev.TurnFinished)]


def assert_one_finish_last(events: Sequence[ev.AgentEvent], finished: ev.TurnFinished) -> None:
    assert finishes(events) == [finished]
    assert events[-1] == finished


def assert_alternates(messages: Sequence[Message]) -> None:
    roles = [m.role for m in messages]
    assert all(a is not b for a, b in itertools.pairwise(roles)), roles
    validate_transcript(messages)


# -- 8.2 ---------------------------------------------------------------------------------------


async def test_tool_call_then_text_is_done(tmp_path: Path) -> None:
    add = Add()
    agent, provider, seen = make_agent(
        tmp_path, [script.tool_call("c1", "add", {"a": 2, "b": 2}), script.text("4")], [add]
    )
    finished = await agent.run_turn("2+2 with the calculator")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert finished.steps == 2
    assert len(agent.messages) == 4
    validate_transcript(agent.messages)
    assert add.calls == 1
    second = provider.requests[1]
    assert second.messages[-1] == Message(Role.USER, [ToolResult("c1", "4")])
    assert second.model == "test-model"
    assert [s.name for s in second.tools] == ["add"]
    assert_one_finish_last(seen, finished)
    kinds = [type(e).__name__ for e in seen]
    assert kinds == [
        "StepStarted",
        "Usage",
        "ToolCallStarted",
        "ToolCallFinished",
        "StepStarted",
        "TextDelta",
        "Usage",
        "TurnFinished",
    ]
    assert seen[3] == ev.ToolCallFinished(1, "c1", "add", False, "4")
    assert agent.messages[-1].text() == "4"


async def test_unknown_tool_continues_with_an_error_result(tmp_path: Path) -> None:
    agent, provider, _ = make_agent(
        tmp_path, [script.tool_call("c1", "nope", {}), script.text("sorry")], [Add()]
    )
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.DONE
    (result,) = agent.messages[2].tool_results()
    assert result.is_error
    assert "add" in result.content
    assert len(provider.requests) == 2


async def test_max_steps_stops_after_exactly_that_many_requests(tmp_path: Path) -> None:
    scripts = [script.tool_call(f"c{i}", "add", {"a": i, "b": 1}) for i in range(30)]
    agent, provider, seen = make_agent(tmp_path, scripts, [Add()], max_steps=5)
    finished = await agent.run_turn("loop forever")
    assert finished.outcome is ev.TurnOutcome.MAX_STEPS
    assert len(provider.requests) == 5
    assert provider.remaining == 25
    assert len(agent.messages) == 11  # prompt + 5 x (calls, results)
    validate_transcript(agent.messages)
    assert_one_finish_last(seen, finished)


async def test_next_prompt_merges_into_trailing_results(tmp_path: Path) -> None:
    scripts = [script.tool_call("c1", "add", {"a": 1, "b": 1}), script.text("ok")]
    agent, _, _ = make_agent(tmp_path, scripts, [Add()], max_steps=1)
    assert (await agent.run_turn("one")).outcome is ev.TurnOutcome.MAX_STEPS
    assert (await agent.run_turn("continue")).outcome is ev.TurnOutcome.DONE
    assert_alternates(agent.messages)
    merged = agent.messages[2]
    assert merged.content == (ToolResult("c1", "2"), Text("continue"))


async def test_slow_tool_cancelled_after_50ms(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []
    slow = Probe("slow", log, seconds=5, writes=True)
    agent, _, seen = make_agent(tmp_path, [script.tool_call("c1", "slow", {})], [slow])
    result: list[ev.TurnFinished] = []

    async def run() -> None:
        result.append(await agent.run_turn("wait"))

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.sleep(0.05)
        assert agent.cancel()
    assert trio.current_time() - start < 1
    (finished,) = result
    assert finished.outcome is ev.TurnOutcome.CANCELLED
    assert_one_finish_last(seen, finished)
    validate_transcript(agent.messages)
    (interrupted,) = agent.messages[-1].tool_results()
    assert interrupted.is_error
    assert "Interrupted" in interrupted.content
    assert "uncertain" in interrupted.content
    assert log == [("start", "slow")]
    assert not agent.running
    assert not agent.cancel()


async def test_enclosing_cancel_scope_reports_and_propagates(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []
    agent, _, seen = make_agent(
        tmp_path,
        [script.tool_call("c1", "slow", {}), script.text("after")],
        [Probe("slow", log, seconds=5)],
    )
    with trio.move_on_after(0.05) as scope:
        await agent.run_turn("wait")
    assert scope.cancelled_caught
    (finished,) = finishes(seen)
    assert finished.outcome is ev.TurnOutcome.CANCELLED
    assert seen[-1] == finished
    (interrupted,) = agent.messages[-1].tool_results()
    assert "only reads, so nothing was changed" in interrupted.content
    assert (await agent.run_turn("again")).outcome is ev.TurnOutcome.DONE
    assert_alternates(agent.messages)


async def test_cancel_mid_sample_then_next_turn_has_no_consecutive_user_messages(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow_answer = [stream.TextDelta(0, "thinking about"), Pause(10), *script.text(" it")]
    agent, provider, seen = make_agent(tmp_path, [slow_answer, script.text("ok")])
    with trio.move_on_after(1):
        await agent.run_turn("first")
    assert finishes(seen)[0].outcome is ev.TurnOutcome.CANCELLED
    assert agent.messages == (
        Message(Role.USER, [Text("first"), Text(CANCELLED_NOTE)]),
    )  # nothing of the interrupted sample is committed
    finished = await agent.run_turn("second")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert_alternates(agent.messages)
    assert [m.role for m in agent.messages] == [Role.USER, Role.ASSISTANT]
    assert agent.messages[0].content == (Text("first"), Text(CANCELLED_NOTE), Text("second"))
    assert provider.requests[1].messages == agent.messages[:1]


async def test_cancel_in_a_sequential_batch_reports_each_call(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []
    tools = [
        Probe("quick", log, seconds=0.01, writes=True),
        Probe("slow", log, seconds=5, writes=True, cancellation=Cancellation.KILLS_CHILDREN),
        Probe("later", log, seconds=0.01),
    ]
    calls = [("a", "quick", {}), ("b", "slow", {}), ("c", "later", {})]
    agent, _, seen = make_agent(tmp_path, [script.tool_calls(calls)], tools)
    with trio.move_on_after(1):
        await agent.run_turn("go")
    validate_transcript(agent.messages)
    a, b, c = agent.messages[-1].tool_results()
    assert (a.content, a.is_error) == ("quick done: quick", False)
    assert b.is_error
    assert "process group was killed" in b.content
    assert "uncertain" in b.content
    assert c.is_error
    assert c.content.startswith("Not run")
    finished_ids = [e.id for e in seen if isinstance(e, ev.ToolCallFinished)]
    assert finished_ids == ["a", "b", "c"]
    assert seen[-1] == ev.TurnFinished(
        ev.TurnOutcome.CANCELLED, 1, stream.Usage(), "the turn was cancelled"
    )


# -- 8.3: concurrency --------------------------------------------------------------------------


async def test_read_only_batch_runs_concurrently_results_in_call_order(tmp_path: Path) -> None:
    """Three 200 ms read-only calls (real time) all start before any ends: they run at once.
    The order is the proof, not the clock, which a loaded machine stretches."""
    log: list[tuple[str, str]] = []
    tools = [Probe(f"r{i}", log, seconds=0.2) for i in range(3)]
    calls = [(f"c{i}", f"r{i}", {}) for i in range(3)]
    agent, _, _ = make_agent(tmp_path, [script.tool_calls(calls), script.text("done")], tools)
    finished = await agent.run_turn("read three")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert [event for event, _ in log[:3]] == ["start"] * 3  # one at a time: start, end, ...
    results = agent.messages[2].tool_results()
    assert [r.call_id for r in results] == ["c0", "c1", "c2"]
    assert [r.content for r in results] == [f"r{i} done: r{i}" for i in range(3)]


async def test_concurrent_results_keep_call_order_when_finishing_out_of_order(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []
    tools = [Probe("slow", log, seconds=0.3), Probe("fast", log, seconds=0.1)]
    calls = [("c1", "slow", {}), ("c2", "fast", {})]
    agent, _, seen = make_agent(tmp_path, [script.tool_calls(calls), script.text("ok")], tools)
    await agent.run_turn("go")
    assert sorted(log[:2]) == [("start", "fast"), ("start", "slow")]  # both start at once
    assert log[2:] == [("end", "fast"), ("end", "slow")]
    assert [r.call_id for r in agent.messages[2].tool_results()] == ["c1", "c2"]
    assert [e.id for e in seen if isinstance(e, ev.ToolCallFinished)] == ["c2", "c1"]


async def test_batch_with_a_write_runs_in_order(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []
    tools = [Probe("read", log, seconds=0.3), Probe("write", log, seconds=0.1, writes=True)]
    calls = [("c1", "read", {"tag": "r1"}), ("c2", "write", {}), ("c3", "read", {"tag": "r2"})]
    agent, _, _ = make_agent(tmp_path, [script.tool_calls(calls), script.text("ok")], tools)
    await agent.run_turn("go")
    assert log == [
        ("start", "r1"),
        ("end", "r1"),
        ("start", "write"),
        ("end", "write"),
        ("start", "r2"),
        ("end", "r2"),
    ]


# -- outcomes (08.B): every path ends in exactly one TurnFinished -------------------------------


def _abnormal(reason: stream.FinishReason) -> list[Any]:
    return [
        stream.TextDelta(0, "partial answer"),
        stream.ToolCallStart(1, "c1", "add"),
        stream.ToolCallDelta(1, '{"a": 1, "b": 2}'),
        stream.Finish(reason),
    ]


USED = stream.Usage(input=60, output=40, cache_read=0, cache_write=0)

OUTCOME_CASES: list[tuple[str, list[Script], dict[str, Any], ev.TurnOutcome, int]] = [
    ("done", [script.text("hi")], {}, ev.TurnOutcome.DONE, 1),
    (
        "max_steps",
        [script.tool_call("c1", "add", {"a": 1, "b": 1})] * 1,
        {"max_steps": 1},
        ev.TurnOutcome.MAX_STEPS,
        1,
    ),
    ("max_tokens", [_abnormal(stream.FinishReason.MAX_TOKENS)], {}, ev.TurnOutcome.MAX_TOKENS, 1),
    ("refused", [_abnormal(stream.FinishReason.REFUSAL)], {}, ev.TurnOutcome.REFUSED, 1),
    (
        "protocol_stopped",
        [_abnormal(stream.FinishReason.UNSUPPORTED)],
        {},
        ev.TurnOutcome.PROTOCOL_STOPPED,
        1,
    ),
    (
        "budget_exceeded",
        [
            script.tool_call("c1", "add", {"a": 1, "b": 1}, usage=USED),
            script.tool_call("c2", "add", {"a": 1, "b": 1}, usage=USED),
            script.text("never"),
        ],
        {"token_budget": 150},
        ev.TurnOutcome.BUDGET_EXCEEDED,
        2,
    ),
    (
        "budget_unknown_usage",
        [script.tool_call("c1", "add", {"a": 1, "b": 1}), script.text("never")],
        {"token_budget": 10_000},
        ev.TurnOutcome.BUDGET_EXCEEDED,
        1,
    ),
    ("error_at_open", [HttpError(500, "boom")], {}, ev.TurnOutcome.ERROR, 1),
    (
        "error_mid_stream",
        [[stream.TextDelta(0, "half"), DecodeError("bad sequencing")]],
        {},
        ev.TurnOutcome.ERROR,
        1,
    ),
    ("error_no_finish", [[stream.TextDelta(0, "half")]], {}, ev.TurnOutcome.ERROR, 1),
    ("error_exhausted", [], {}, ev.TurnOutcome.ERROR, 1),
]


@pytest.mark.parametrize(
    ("scripts", "config", "outcome", "requests"),
    [case[1:] for case in OUTCOME_CASES],
    ids=[case[0] for case in OUTCOME_CASES],
)
async def test_every_outcome_path_ends_in_one_turn_finished(
    tmp_path: Path,
    scripts: list[Script],
    config: dict[str, Any],
    outcome: ev.TurnOutcome,
    requests: int,
) -> None:
    add = Add()
    agent, provider, seen = make_agent(tmp_path, scripts, [add], **config)
    finished = await agent.run_turn("go")
    assert finished.outcome is outcome
    assert_one_finish_last(seen, finished)
    assert len(provider.requests) == requests
    validate_transcript(agent.messages)
    failed = [e for e in seen if isinstance(e, ev.StepFailed)]
    assert bool(failed) == (outcome is ev.TurnOutcome.ERROR)
    if outcome is ev.TurnOutcome.ERROR:
        assert seen[-2] == failed[0]  # StepFailed, then the terminal event
        assert agent.messages == (Message.user_text("go"),)
        assert finished.detail.startswith(failed[0].error_type)


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        (stream.FinishReason.MAX_TOKENS, ev.TurnOutcome.MAX_TOKENS),
        (stream.FinishReason.REFUSAL, ev.TurnOutcome.REFUSED),
        (stream.FinishReason.UNSUPPORTED, ev.TurnOutcome.PROTOCOL_STOPPED),
    ],
)
async def test_abnormal_finish_runs_nothing_and_commits_only_text(
    tmp_path: Path, reason: stream.FinishReason, outcome: ev.TurnOutcome
) -> None:
    add = Add()
    agent, _, seen = make_agent(tmp_path, [_abnormal(reason), script.text("ok")], [add])
    finished = await agent.run_turn("go")
    assert finished.outcome is outcome
    assert add.calls == 0
    assert not [e for e in seen if isinstance(e, ev.ToolCallStarted)]
    assert agent.messages[-1] == Message.assistant_text("partial answer")
    assert (await agent.run_turn("next")).outcome is ev.TurnOutcome.DONE
    assert_alternates(agent.messages)


async def test_budget_counts_reported_usage(tmp_path: Path) -> None:
    scripts = [
        script.tool_call("c1", "add", {"a": 1, "b": 1}, usage=USED),
        script.tool_call("c2", "add", {"a": 1, "b": 1}, usage=USED),
        script.text("ok", usage=USED),
    ]
    agent, _, seen = make_agent(tmp_path, scripts, [Add()], token_budget=300)
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert finished.usage == stream.Usage(180, 120, 0, 0)
    assert agent.usage == stream.Usage(180, 120, 0, 0)
    usage_events = [e for e in seen if isinstance(e, ev.Usage)]
    assert [e.turn.total for e in usage_events] == [100, 200, 300]


async def test_unknown_usage_stays_unknown(tmp_path: Path) -> None:
    agent, _, _ = make_agent(tmp_path, [script.text("a"), script.text("b", usage=USED)])
    await agent.run_turn("one")
    assert agent.usage.total is None
    finished = await agent.run_turn("two")
    assert finished.usage == USED
    assert agent.usage.input is None


async def test_stream_error_commits_nothing_and_the_next_turn_works(tmp_path: Path) -> None:
    broken = [stream.TextDelta(0, "half"), stream.ToolCallStart(1, "c1", "add"), DecodeError("x")]
    add = Add()
    agent, _, seen = make_agent(tmp_path, [broken, script.text("fine")], [add])
    finished = await agent.run_turn("one")
    assert finished.outcome is ev.TurnOutcome.ERROR
    (failed,) = [e for e in seen if isinstance(e, ev.StepFailed)]
    assert (failed.step, failed.error_type) == (1, "DecodeError")
    assert add.calls == 0
    assert (await agent.run_turn("two")).outcome is ev.TurnOutcome.DONE
    assert_alternates(agent.messages)


async def test_a_retry_of_the_provider_is_an_event_before_its_wait(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from anvild.llm.retry import Retry, RetryPolicy

    agent, _, seen = make_agent(tmp_path, [HttpError(529, "overloaded"), script.text("ok")])
    agent.provider = Retry(agent.provider, RetryPolicy(base=4.0), jitter=lambda: 0.0)
    finished = await agent.run_turn("hi")
    assert finished.outcome is ev.TurnOutcome.DONE
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["StepStarted", "Retrying", "TextDelta", "Usage", "TurnFinished"]
    retrying = seen[1]
    assert isinstance(retrying, ev.Retrying)
    assert (retrying.step, retrying.attempt, retrying.max_attempts, retrying.delay) == (
        1,
        2,
        5,
        2.0,
    )
    assert retrying.reason == "HTTP 529: overloaded"


async def test_a_bug_is_reported_as_error_and_reraised(tmp_path: Path) -> None:
    class Exploding:
        name = "exploding"

        def stream(self, request: Any) -> Any:
            raise RuntimeError("bug in the provider glue")

    seen: list[ev.AgentEvent] = []
    agent = Agent(
        Exploding(),
        ToolRegistry(),
        AgentConfig(model="m"),
        ToolContext(cwd=tmp_path),
        emit=seen.append,
    )
    with pytest.raises(RuntimeError, match="bug in the provider glue"):
        await agent.run_turn("go")
    (finished,) = finishes(seen)
    assert finished.outcome is ev.TurnOutcome.ERROR
    assert "RuntimeError" in finished.detail
    assert not agent.running


async def test_provider_reusing_a_call_id_is_an_error_not_a_broken_transcript(
    tmp_path: Path,
) -> None:
    scripts = [
        script.tool_call("same", "add", {"a": 1, "b": 1}),
        script.tool_call("same", "add", {"a": 2, "b": 2}),
    ]
    agent, _, seen = make_agent(tmp_path, scripts, [Add()])
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.ERROR
    assert [e.error_type for e in seen if isinstance(e, ev.StepFailed)] == ["TranscriptError"]
    validate_transcript(agent.messages)
    assert len(agent.messages) == 3


# -- decide hook, arguments, session state ------------------------------------------------------


async def test_denied_call_is_not_run_and_the_reason_reaches_the_model(tmp_path: Path) -> None:
    add = Add()
    asked: list[ToolCall] = []

    async def decide(call: ToolCall) -> Decision:
        asked.append(call)
        return Deny("not in plan mode") if call.arguments["a"] == 1 else Allow()

    provider = ScriptedProvider(
        [
            script.tool_calls([("c1", "add", {"a": 1, "b": 1}), ("c2", "add", {"a": 2, "b": 2})]),
            script.text("ok"),
        ]
    )
    agent = Agent(
        provider,
        ToolRegistry([add]),
        AgentConfig(model="m"),
        ToolContext(cwd=tmp_path),
        decide=decide,
    )
    await agent.run_turn("go")
    assert [c.id for c in asked] == ["c1", "c2"]
    denied, allowed = agent.messages[2].tool_results()
    assert denied.is_error
    assert denied.content == "Permission denied for add: not in plan mode"
    assert (allowed.content, allowed.is_error) == ("4", False)
    assert add.calls == 1


async def test_a_failing_decide_hook_denies(tmp_path: Path) -> None:
    add = Add()

    async def decide(call: ToolCall) -> Decision:
        raise OSError("approval file vanished")

    provider = ScriptedProvider(
        [script.tool_call("c1", "add", {"a": 1, "b": 1}), script.text("ok")]
    )
    agent = Agent(
        provider,
        ToolRegistry([add]),
        AgentConfig(model="m"),
        ToolContext(cwd=tmp_path),
        decide=decide,
    )
    await agent.run_turn("go")
    (result,) = agent.messages[2].tool_results()
    assert result.is_error
    assert "approval file vanished" in result.content
    assert add.calls == 0


async def test_invalid_json_arguments_get_a_correcting_result(tmp_path: Path) -> None:
    add = Add()
    bad = [
        stream.ToolCallStart(0, "c1", "add"),
        stream.ToolCallDelta(0, '{"a": 1,'),
        stream.Finish(stream.FinishReason.TOOL_USE),
    ]
    agent, _, _ = make_agent(tmp_path, [bad, script.text("ok")], [add])
    assert (await agent.run_turn("go")).outcome is ev.TurnOutcome.DONE
    (result,) = agent.messages[2].tool_results()
    assert result.is_error
    assert "not valid JSON" in result.content
    assert add.calls == 0


async def test_todos_are_session_state_and_announced(tmp_path: Path) -> None:
    todos = [
        {"content": "write tests", "status": "in_progress"},
        {"content": "ship", "status": "pending"},
    ]
    agent, _, seen = make_agent(
        tmp_path,
        [script.tool_call("c1", "todo_write", {"todos": todos}), script.text("ok")],
        [TodoWriteTool()],
    )
    await agent.run_turn("plan")
    expected = (ev.Todo("write tests", "in_progress"), ev.Todo("ship", "pending"))
    assert agent.todos == expected
    assert ev.TodosUpdated(expected) in seen


async def test_reasoning_and_text_deltas_are_forwarded(tmp_path: Path) -> None:
    agent, _, seen = make_agent(tmp_path, [script.reasoning_then_text("hmm", "answer")])
    await agent.run_turn("think")
    assert ev.ReasoningDelta(1, "hmm") in seen
    assert ev.TextDelta(1, "answer") in seen


async def test_one_turn_at_a_time_and_prompts_need_content(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    agent, _, _ = make_agent(tmp_path, [[Pause(5), *script.text("a")]])
    with pytest.raises(ValueError, match="content"):
        await agent.run_turn("  ")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.run_turn, "first")
        await trio.sleep(1)
        assert agent.running
        with pytest.raises(RuntimeError, match="already running"):
            await agent.run_turn("second")
        with pytest.raises(RuntimeError, match="while a turn is running"):
            agent.reset()
    assert not agent.running
    agent.reset()
    assert agent.messages == ()


def test_a_resumed_transcript_must_be_valid(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="first message must be from the user"):
        make_agent(tmp_path, [])[0].reset([Message.assistant_text("hi")])


# -- 08.B: a slow consumer ---------------------------------------------------------------------


async def test_slow_consumer_stays_bounded_and_gets_turn_finished_last(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    channel = EventChannel(capacity=16)
    pieces = [stream.TextDelta(0, f"w{i} ") for i in range(5000)]
    many = [*pieces, stream.Finish(stream.FinishReason.END_TURN)]
    calls = [(f"c{i}", "add", {"a": i, "b": 0}) for i in range(40)]
    agent, _, _ = make_agent(
        tmp_path, [script.tool_calls(calls), many], [Add()], emit=channel.send_nowait
    )
    peak = 0
    received: list[ev.AgentEvent] = []

    async def slow_reader() -> None:
        nonlocal peak
        async for event in channel:
            peak = max(peak, channel.statistics().buffered + 1)
            received.append(event)
            await trio.sleep(1)  # a renderer far slower than the model

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow_reader)
        finished = await agent.run_turn("go")
        assert channel.statistics().buffered <= 16
        channel.close()
    assert peak <= 17
    assert received[-1] == finished
    assert finished.outcome is ev.TurnOutcome.DONE
    text = "".join(e.text for e in received if isinstance(e, ev.TextDelta))
    assert text == agent.messages[-1].text()  # adjacent deltas coalesce: no text is lost
    assert any(isinstance(e, ev.Lagged) for e in received)  # 80 tool events did not all fit


async def test_vanished_consumer_never_blocks_the_turn(tmp_path: Path) -> None:
    channel = EventChannel(capacity=4)
    channel.close_receiver()
    agent, _, _ = make_agent(
        tmp_path,
        [script.tool_call("c1", "add", {"a": 1, "b": 1}), script.text("ok")],
        [Add()],
        emit=channel.send_nowait,
    )
    assert (await agent.run_turn("go")).outcome is ev.TurnOutcome.DONE
    assert channel.statistics().buffered == 0
    assert channel.statistics().dropped > 0


@pytest.mark.parametrize(
    ("content", "preview"),
    [
        ("4", "4"),
        ("a\r\nb\r\n", "a\nb"),
        ("1\n2\n3\n4", "1\n2\n3…"),
        ("x" * 300, "x" * 240 + "…"),
    ],
)
def test_tool_result_preview(content: str, preview: str) -> None:
    assert _preview(content) == preview
