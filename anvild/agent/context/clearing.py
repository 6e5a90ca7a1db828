"""Tool-result clearing: the cheap first defence of a filling window.

`clear_tool_results` replaces the oldest tool results of a transcript by a one-line stub that
names the tool, the gist of its arguments, the size dropped and how to get it back (run the tool
again), until the bytes it saved reach what was asked. It changes the request only: the caller
keeps its transcript (and the session its records) whole. Every result in the transcript's last
message (the current step) is kept, and so are the most recent ones: up to `keep_recent` of
them, while together they take at most `keep_bytes` (so a small window is not filled by what it
protects). A result too small for a stub to save anything stays too. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

import attrs

from anvild.llm.types import ContentBlock, Message, Role, ToolCall, ToolResult

STUB_PREFIX: Final = "[Cleared to save context:"
GIST_CHARS: Final = 120
MIN_SAVING: Final = 200  # bytes: a result smaller than its stub plus this stays


@attrs.frozen
class Cleared:
    """A transcript with some tool results stubbed: how many, and the bytes saved."""

    messages: tuple[Message, ...]
    count: int = 0
    saved: int = 0


def gist(call: ToolCall | None) -> str:
    """`name {args}` cut to a line, for a stub or a summary."""
    if call is None:
        return "a tool"
    args = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
    if len(args) > GIST_CHARS:
        args = args[: GIST_CHARS - 1] + "…"
    return f"{call.name} {args}"


def stub(call: ToolCall | None, size: int) -> str:
    return (
        f"{STUB_PREFIX} the result of {gist(call)} ({size} bytes) was dropped from this "
        "request. Run the tool again if you need it.]"
    )


def is_stub(result: ToolResult) -> bool:
    return result.content.startswith(STUB_PREFIX)


def clear_tool_results(
    messages: Sequence[Message], *, save: int, keep_recent: int, keep_bytes: int = 2**62
) -> Cleared:
    """Stub the oldest tool results until at least `save` bytes are saved (or none is left)."""
    calls = {
        block.id: block
        for message in messages
        if message.role is Role.ASSISTANT
        for block in message.content
        if isinstance(block, ToolCall)
    }
    places = [
        (m, b)
        for m, message in enumerate(messages[:-1])  # the last message is the current step
        for b, block in enumerate(message.content)
        if isinstance(block, ToolResult) and not is_stub(block)
    ]
    kept = protected = 0
    for m, b in reversed(places):
        result = messages[m].content[b]
        assert isinstance(result, ToolResult)
        protected += len(result.content.encode("utf-8", "surrogatepass"))
        if kept >= keep_recent or protected > keep_bytes:
            break
        kept += 1
    places = places[: len(places) - kept]
    out = list(messages)
    count = saved = 0
    for m, b in places:
        if saved >= save:
            break
        result = out[m].content[b]
        assert isinstance(result, ToolResult)
        size = len(result.content.encode("utf-8", "surrogatepass"))
        text = stub(calls.get(result.call_id), size)
        if size < len(text) + MIN_SAVING:
            continue
        blocks: list[ContentBlock] = list(out[m].content)
        blocks[b] = ToolResult(result.call_id, text, result.is_error)
        out[m] = Message(out[m].role, blocks)
        count += 1
        saved += size - len(text.encode())
    return Cleared(tuple(out), count, saved)


__all__ = ["Cleared", "clear_tool_results", "gist", "is_stub", "stub"]
