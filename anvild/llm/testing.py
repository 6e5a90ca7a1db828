"""Test doubles for the llm layer. Nothing in production imports this module (a test checks).

`ScriptedProvider([script.tool_call("c1", "read_file", {...}), script.text("done")])` plays one
script per request and records each request in `requests`. Steps: `StreamEvent`s are yielded, a
`Pause` sleeps (trio time), an `LlmError` is raised there (instead of a script: at open). Running
out of scripts raises `ConfigError("script exhausted ...")`. With `window=N` a larger request
(`measure`, default `estimate_tokens`) raises `ContextOverflow` and consumes no script, and
missing usage is filled from the estimate. `respond(request)` supplies scripts once the listed
ones are used up.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any, TypeAlias

import attrs
import trio

from anvild.llm.errors import ConfigError, ContextOverflow, LlmError
from anvild.llm.size import request_bytes, utf8
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
from anvild.llm.types import (
    ChatRequest,
)


@attrs.frozen
class Pause:
    seconds: float


Step: TypeAlias = StreamEvent | Pause | LlmError
Script: TypeAlias = Sequence[Step] | LlmError


def estimate_tokens(request: ChatRequest) -> int:
    """The request's size in tokens, estimated at one token per 4 UTF-8 bytes of the system
    prompt, the tool specs' JSON and every message's content (`anvild.llm.size`)."""
    return math.ceil(request_bytes(request.system, request.tools, request.messages) / 4)


class ScriptedProvider:
    def __init__(
        self,
        scripts: Iterable[Script],
        *,
        name: str = "scripted",
        window: int | None = None,
        measure: Callable[[ChatRequest], int] = estimate_tokens,
        respond: Callable[[ChatRequest], Script] | None = None,
    ) -> None:
        self._scripts = list(scripts)
        self._respond = respond
        self._name = name
        self._window = window
        self._measure = measure
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
        size: int | None = None
        if self._window is not None:
            size = self._measure(request)
            if size > self._window:
                # Refused before any script is played, as a provider refuses before sampling.
                raise ContextOverflow(
                    f"scripted provider: the request is {size} tokens, the window {self._window}",
                    requested=size,
                    limit=self._window,
                )
        if not self._scripts and self._respond is not None:
            self._scripts.append(self._respond(request))
        if not self._scripts:
            raise ConfigError(
                f"script exhausted: request {len(self.requests)} has no scripted response"
            )
        script = self._scripts.pop(0)
        if isinstance(script, LlmError):
            raise script
        steps = script if size is None else _with_usage(script, size)
        # aclosing: leaving the block early (an error, a cancel) finalises the generator at once,
        # as a real provider's context manager closes its response.
        async with aclosing(_play(steps)) as events:
            yield events


def _with_usage(steps: Sequence[Step], size: int) -> Sequence[Step]:
    """`steps` with the usage a provider with a window would report: input = the request's
    measured size, output = an estimate of the streamed content, for each the script omits."""
    reported = [step.usage for step in steps if isinstance(step, UsageReport)]
    has_input = any(usage.input is not None for usage in reported)
    has_output = any(usage.output is not None for usage in reported)
    finish = next((i for i, step in enumerate(steps) if isinstance(step, Finish)), None)
    if (has_input and has_output) or finish is None:
        return steps
    streamed = 0
    for step in steps[:finish]:
        match step:
            case TextDelta(text=text) | ReasoningDelta(text=text):
                streamed += utf8(text)
            case ToolCallStart(name=name):
                streamed += utf8(name)
            case ToolCallDelta(arguments=arguments):
                streamed += utf8(arguments)
    usage = Usage(
        input=None if has_input else size,
        output=None if has_output else math.ceil(streamed / 4),
    )
    return [*steps[:finish], UsageReport(usage), *steps[finish:]]


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
