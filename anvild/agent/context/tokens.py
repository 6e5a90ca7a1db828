"""Request sizes in tokens, estimated without a tokenizer, calibrated by what providers report.

`request_bytes` counts what a request sends (system, tool definitions, every block of every
message, in UTF-8). `TokenMeter` turns bytes into tokens: one token per four bytes until a
provider reports the input of a request it measured, then the ratio that report gives (the
input, cache reads and writes it counted over the request's bytes), so a model whose tokenizer is
denser than four bytes a token is not underestimated for long. Pure, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from anvild.llm.stream import Usage
from anvild.llm.types import Image, Message, Reasoning, Text, ToolCall, ToolResult, ToolSpec

DEFAULT_TOKENS_PER_BYTE: Final = 0.25


def block_bytes(block: object) -> int:
    """The UTF-8 size of one content block as a provider receives it (roughly)."""
    match block:
        case Text(text=text) | Reasoning(text=text):
            return len(text.encode("utf-8", "surrogatepass"))
        case ToolCall(name=name, arguments=arguments):
            return len(name) + len(json.dumps(arguments, ensure_ascii=False).encode())
        case ToolResult(content=content):
            return len(content.encode("utf-8", "surrogatepass"))
        case Image(data=data):
            return len(data)
    return 0


def message_bytes(message: Message) -> int:
    return sum(block_bytes(block) for block in message.content)


def messages_bytes(messages: Iterable[Message]) -> int:
    return sum(message_bytes(m) for m in messages)


def specs_bytes(specs: Sequence[ToolSpec]) -> int:
    return sum(
        len(spec.name) + len(spec.description.encode()) + len(json.dumps(spec.input_schema))
        for spec in specs
    )


def request_bytes(system: str, specs: Sequence[ToolSpec], messages: Iterable[Message]) -> int:
    return (
        len(system.encode("utf-8", "surrogatepass")) + specs_bytes(specs) + messages_bytes(messages)
    )


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Tokens of `messages` at the default ratio (for display when nothing was measured)."""
    return math.ceil(messages_bytes(messages) * DEFAULT_TOKENS_PER_BYTE)


@attrs.define
class TokenMeter:
    """Bytes to tokens for one model: the default ratio until `measured`, then the model's."""

    per_byte: float = DEFAULT_TOKENS_PER_BYTE

    def tokens(self, size: int) -> int:
        return math.ceil(size * self.per_byte)

    def measured(self, size: int, usage: Usage) -> None:
        """A request of `size` bytes was reported as `usage`: learn the ratio from it (the
        input the provider counted includes its own framing, so the ratio errs high)."""
        if usage.input is None or size <= 0:
            return
        counted = usage.input + (usage.cache_read or 0) + (usage.cache_write or 0)
        if counted > 0:
            self.per_byte = counted / size


__all__ = [
    "DEFAULT_TOKENS_PER_BYTE",
    "TokenMeter",
    "block_bytes",
    "estimate_tokens",
    "message_bytes",
    "messages_bytes",
    "request_bytes",
    "specs_bytes",
]
