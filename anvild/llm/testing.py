"""Test doubles for the llm layer. Nothing in production imports this module (a test checks).

`ScriptedProvider` plays back one script per request, in order, and records every request it
was given:

    provider = ScriptedProvider([
        script.tool_call("c1", "read_file", {"file_path": "a.txt"}),
        script.text("done"),
    ])

A script is a list of steps: `StreamEvent`s are yielded, a `Pause` sleeps (trio time, so tests
with `autojump_clock` stay instant), and an `LlmError` is raised at that point of the stream.
An `LlmError` given instead of a script is raised when the stream is opened (like an HTTP error).
Running out of scripts raises `ConfigError("script exhausted ...")`, so a test that makes more
requests than it planned fails loudly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any, TypeAlias

import attrs
import trio

from anvild.llm.errors import ConfigError, LlmError
from anvild.llm.stream import (
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageReport,
)
from anvild.llm.types import ChatRequest


@attrs.frozen
class Pause:
    seconds: float


Step: TypeAlias = StreamEvent | Pause | LlmError
Script: TypeAlias = Sequence[Step] | LlmError


class ScriptedProvider:
    def __init__(self, scripts: Iterable[Script], *, name: str = "scripted") -> None:
        self._scripts = list(scripts)
        self._name = name
        self.requests: list[ChatRequest] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def remaining(self) -> int:
        return len(self._scripts)

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        self.requests.append(request)
        if not self._scripts:
            raise ConfigError(
                f"script exhausted: request {len(self.requests)} has no scripted response"
            )
        script = self._scripts.pop(0)
        if isinstance(script, LlmError):
            raise script
        # aclosing: leaving the block early (an error, a cancel) finalises the generator at once,
        # as a real provider's context manager closes its response.
        async with aclosing(_play(script)) as events:
            yield events


async def _play(steps: Sequence[Step]) -> AsyncGenerator[StreamEvent, None]:
    for step in steps:
        if isinstance(step, Pause):
            await trio.sleep(step.seconds)
        elif isinstance(step, LlmError):
            raise step
        else:
            yield step


class script:
    """Helpers that build complete scripts, each ending with Finish."""

    @staticmethod
    def text(text: str, *, usage: Usage | None = None) -> list[Step]:
        steps: list[Step] = [TextDelta(0, text)]
        if usage is not None:
            steps.append(UsageReport(usage))
        steps.append(Finish(FinishReason.END_TURN))
        return steps

    @staticmethod
    def tool_call(
        call_id: str, name: str, arguments: Any, *, text: str = "", usage: Usage | None = None
    ) -> list[Step]:
        return script.tool_calls([(call_id, name, arguments)], text=text, usage=usage)

    @staticmethod
    def tool_calls(
        calls: Sequence[tuple[str, str, Any]], *, text: str = "", usage: Usage | None = None
    ) -> list[Step]:
        steps: list[Step] = []
        if text:
            steps.append(TextDelta(0, text))
        for offset, (call_id, name, arguments) in enumerate(calls, start=1):
            steps.append(ToolCallStart(offset, call_id, name))
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
            steps.append(ToolCallDelta(offset, raw))
        if usage is not None:
            steps.append(UsageReport(usage))
        steps.append(Finish(FinishReason.TOOL_USE))
        return steps

    @staticmethod
    def reasoning_then_text(reasoning: str, text: str) -> list[Step]:
        return [ReasoningDelta(0, reasoning), TextDelta(1, text), Finish(FinishReason.END_TURN)]
