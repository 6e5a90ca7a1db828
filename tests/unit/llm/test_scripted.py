"""ScriptedProvider: plays scripts in order, records requests, fails loudly when exhausted."""

from __future__ import annotations

import pytest
import trio

from anvild.llm.builder import collect
from anvild.llm.errors import ConfigError, HttpError, TransportError
from anvild.llm.provider import Provider
from anvild.llm.stream import FinishReason, TextDelta
from anvild.llm.testing import Pause, ScriptedProvider, script
from anvild.llm.types import ChatRequest, Message, ToolCall


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
