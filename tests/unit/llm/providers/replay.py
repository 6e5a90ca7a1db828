"""Replay a recorded provider stream through the real pipeline, without HTTP.

    completion = replay(FIXTURES / "anthropic/redacted_thinking.sse", anthropic.StreamState())

The bytes go through the same path a live response takes: `SseDecoder` -> the adapter's
`StreamState` (`on_sse` per event, `on_end` once the body ends) -> `MessageBuilder`. The result
is the `Completion`, or the `LlmError` the adapter or the builder raised (a stream that never
finished raises `UnexpectedEof` from the builder).

Two fixture formats are accepted (fixtures/recorded/MANIFEST.md):

- raw SSE (any other suffix): the response body exactly as it came over the wire;
- `.chunks.jsonl`: one parsed `data:` payload per line. Each line becomes `data: <line>` and a
  blank line; a payload that is a JSON object with a string `type` (Anthropic Messages, OpenAI
  Responses) is preceded by `event: <type>`, as those servers name their events. Chat
  Completions and Gemini chunks carry no `type` field and get no `event:` line.

`chunk_size` feeds the body to the decoder in pieces of that many bytes, so a test can check that
the result does not depend on how the network split the body.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from anvilctl.replay import sse_body as replay_body
from anvild.llm.builder import Completion, MessageBuilder
from anvild.llm.sse import SseDecoder, SseEvent
from anvild.llm.stream import StreamEvent


class StreamStateLike(Protocol):
    """What every adapter's `StreamState` offers."""

    def on_sse(self, event: SseEvent) -> list[StreamEvent]: ...

    def on_end(self) -> list[StreamEvent]: ...


def sse_body(path: Path) -> bytes:
    """The fixture as a `text/event-stream` body (chunk files are wrapped, raw SSE is as is)."""
    return replay_body(path.read_bytes(), str(path))


def replay_events(
    path: Path, state: StreamStateLike, *, chunk_size: int | None = None
) -> list[StreamEvent]:
    """Every StreamEvent the adapter produces for the fixture, `on_end`'s included."""
    body = sse_body(path)
    step = chunk_size or len(body) or 1
    decoder = SseDecoder()
    events: list[StreamEvent] = []
    for start in range(0, len(body), step):
        for sse in decoder.push(body[start : start + step]):
            events.extend(state.on_sse(sse))
    decoder.finish()
    events.extend(state.on_end())
    return events


def replay(path: Path, state: StreamStateLike, *, chunk_size: int | None = None) -> Completion:
    """The Completion the fixture collects to, or the LlmError it ends in."""
    builder = MessageBuilder()
    body = sse_body(path)
    step = chunk_size or len(body) or 1
    decoder = SseDecoder()
    # Push each event as soon as the adapter produces it, as `collect` does on a live stream: an
    # error raised mid-stream surfaces after the events before it were accepted.
    for start in range(0, len(body), step):
        for sse in decoder.push(body[start : start + step]):
            for event in state.on_sse(sse):
                builder.push(event)
    decoder.finish()
    for event in state.on_end():
        builder.push(event)
    return builder.finish()
