"""`ProviderEvents`: the deltas one read brought are joined; nothing is reordered or lost."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
import pytest

from anvild.llm.errors import ApiError
from anvild.llm.http import SseStream
from anvild.llm.providers import openai_chat
from anvild.llm.providers._events import ProviderEvents
from anvild.llm.sse import SseDecoder
from anvild.llm.stream import Finish, FinishReason, StreamEvent, TextDelta, UsageReport


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: Sequence[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _delta(text: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


_STOP = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
_ERROR = b'data: {"error": {"message": "the server is overloaded", "type": "overloaded"}}\n\n'


@asynccontextmanager
async def _events(chunks: Sequence[bytes]) -> AsyncIterator[ProviderEvents]:
    response = httpx.Response(200, stream=_Chunks(chunks))
    sse = SseStream(response, idle=5.0, decoder=SseDecoder())
    try:
        yield ProviderEvents(sse, openai_chat.StreamState())
    finally:
        await sse.aclose()


async def _all(chunks: Sequence[bytes]) -> list[StreamEvent]:
    async with _events(chunks) as events:
        return [event async for event in events if not isinstance(event, UsageReport)]


async def test_the_deltas_of_one_read_are_one_event() -> None:
    assert await _all([_delta("a") + _delta("b") + _delta("c"), _delta("d") + _STOP]) == [
        TextDelta(0, "abc"),
        TextDelta(0, "d"),
        Finish(FinishReason.END_TURN),
    ]


async def test_deltas_of_separate_reads_stay_separate() -> None:
    end = Finish(FinishReason.END_TURN)
    assert await _all([_delta("a"), _delta("b"), _STOP]) == [
        TextDelta(0, "a"),
        TextDelta(0, "b"),
        end,
    ]


async def test_an_error_later_in_a_read_comes_after_the_text_before_it() -> None:
    received: list[StreamEvent] = []
    with pytest.raises(ApiError, match="overloaded"):
        async with _events([_delta("a") + _delta("b") + _ERROR + _delta("lost")]) as events:
            async for event in events:
                received.append(event)
    assert received == [TextDelta(0, "ab")]


async def test_nothing_after_the_finish_is_read() -> None:
    # What follows the terminal event in the same read is never interpreted, as before.
    chunk = _delta("a") + _STOP + b"data: [DONE]\n\ndata: {not json\n\n"
    assert await _all([chunk]) == [TextDelta(0, "a"), Finish(FinishReason.END_TURN)]
