"""ScriptedProvider: plays scripts in order, records requests, fails loudly when exhausted, and
with a window refuses requests that do not fit and reports the usage of those that do."""

from __future__ import annotations

import pytest
import trio

from anvild.llm.builder import collect
from anvild.llm.errors import ConfigError, ContextOverflow, HttpError, TransportError
from anvild.llm.provider import Provider
from anvild.llm.stream import FinishReason, TextDelta, Usage
from anvild.llm.testing import Pause, ScriptedProvider, Step, estimate_tokens, script
from anvild.llm.types import ChatRequest, Message, Role, ToolCall, ToolResult, ToolSpec


async def test_plays_scripts_in_order_and_records_requests() -> None:
    provider = ScriptedProvider(
        [script.tool_call("c1", "calc", {"a": 1}, text="let me"), script.text("4")]
    )
    assert isinstance(provider, Provider)
    first = ChatRequest(model="m", messages=[Message.user_text("2+2")])
    async with provider.stream(first) as events:
        done = await collect(events)
    assert done.finish is FinishReason.TOOL_USE
    assert done.message.text() == "let me"
    assert done.tool_calls == [ToolCall("c1", "calc", {"a": 1})]
    async with provider.stream(ChatRequest(model="m")) as events:
        assert (await collect(events)).message.text() == "4"
    assert provider.requests[0] is first
    assert len(provider.requests) == 2


async def test_exhausted_script_fails_loudly() -> None:
    provider = ScriptedProvider([])
    with pytest.raises(ConfigError, match="script exhausted"):
        async with provider.stream(ChatRequest(model="m")):
            pass


async def test_errors_at_open_and_mid_stream() -> None:
    provider = ScriptedProvider(
        [HttpError(529, "overloaded"), [TextDelta(0, "a"), TransportError("reset")]]
    )
    with pytest.raises(HttpError):
        async with provider.stream(ChatRequest(model="m")):
            pass
    with pytest.raises(TransportError):
        async with provider.stream(ChatRequest(model="m")) as events:
            await collect(events)


async def test_pause_uses_trio_time(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider([[Pause(30), *script.text("late")]])
    start = trio.current_time()
    async with provider.stream(ChatRequest(model="m")) as events:
        done = await collect(events)
    assert done.message.text() == "late"
    assert trio.current_time() - start == pytest.approx(30)


# -- a provider with a context window ----------------------------------------------------------

# system 8 bytes + "é" (2) + "yyyyy" (5) = 15 bytes: 4 tokens.
FOUR = ChatRequest(model="m", system="x" * 8, messages=[Message.user_text("éyyyyy")])


def test_estimate_counts_utf8_bytes_of_system_tools_and_content() -> None:
    assert estimate_tokens(ChatRequest(model="m")) == 0
    assert estimate_tokens(FOUR) == 4
    spec = ToolSpec("t", "", {})
    tools = ChatRequest(model="m", tools=[spec])
    # [{"name": "t", "description": "", "input_schema": {}}] is 54 bytes.
    assert estimate_tokens(tools) == 14
    calls = ChatRequest(
        model="m",
        messages=[
            Message(Role.ASSISTANT, [ToolCall("c1", "read", {"a": 1})]),  # 4 + 8 bytes
            Message(Role.USER, [ToolResult("c1", "done")]),  # 4 bytes
        ],
    )
    assert estimate_tokens(calls) == 4


async def test_a_request_over_the_window_overflows_and_consumes_no_script() -> None:
    provider = ScriptedProvider([script.text("fits")], window=3)
    with pytest.raises(ContextOverflow) as info:
        async with provider.stream(FOUR):
            pytest.fail("an overflowing request opens no stream")
    assert (info.value.requested, info.value.limit) == (4, 3)
    assert not info.value.is_retryable
    assert provider.remaining == 1
    assert provider.requests == [FOUR]
    # A request that fits (exactly) is answered by the script that was kept.
    async with provider.stream(ChatRequest(model="m", system="x" * 12)) as events:
        assert (await collect(events)).message.text() == "fits"


async def test_overflow_comes_before_exhaustion() -> None:
    provider = ScriptedProvider([], window=1)
    with pytest.raises(ContextOverflow):
        async with provider.stream(FOUR):
            pass
    with pytest.raises(ConfigError, match="script exhausted"):
        async with provider.stream(ChatRequest(model="m")):
            pass


async def test_a_script_without_usage_reports_the_estimates() -> None:
    provider = ScriptedProvider(
        [script.text("abcdefghi"), script.tool_call("c1", "read", {"path": "a"})], window=4
    )
    async with provider.stream(FOUR) as events:
        done = await collect(events)
    assert done.usage == Usage(input=4, output=3)  # 9 bytes streamed
    async with provider.stream(FOUR) as events:
        done = await collect(events)
    assert done.usage == Usage(input=4, output=5)  # "read" + '{"path": "a"}': 17 bytes
    assert done.finish is FinishReason.TOOL_USE


async def test_usage_the_script_reports_wins() -> None:
    reported = Usage(input=100, output=7, cache_read=50, cache_write=0)
    provider = ScriptedProvider(
        [script.text("hi", usage=reported), script.text("hi", usage=Usage(output=9))], window=10
    )
    async with provider.stream(FOUR) as events:
        assert (await collect(events)).usage == reported
    async with provider.stream(FOUR) as events:
        assert (await collect(events)).usage == Usage(input=4, output=9)


async def test_a_custom_measure_decides() -> None:
    provider = ScriptedProvider([script.text("a")], window=99, measure=lambda request: 100)
    with pytest.raises(ContextOverflow) as info:
        async with provider.stream(ChatRequest(model="m")):
            pass
    assert (info.value.requested, info.value.limit) == (100, 99)


async def test_without_a_window_nothing_is_measured_or_reported() -> None:
    def measure(request: ChatRequest) -> int:
        raise AssertionError("no window: nothing to measure")

    provider = ScriptedProvider([script.text("a")], measure=measure)
    async with provider.stream(FOUR) as events:
        assert (await collect(events)).usage == Usage()


async def test_respond_answers_each_request_once_the_scripts_are_used() -> None:
    def respond(request: ChatRequest) -> list[Step]:
        return script.text(f"echo {request.messages[-1].text()}")

    provider = ScriptedProvider([script.text("first")], respond=respond)
    texts = []
    for prompt in ("a", "b"):
        request = ChatRequest(model="m", messages=(Message.user_text(prompt),))
        async with provider.stream(request) as events:
            texts.append("".join([e.text async for e in events if isinstance(e, TextDelta)]))
    assert texts == ["first", "echo b"]
