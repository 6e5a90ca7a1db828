"""What a request sends, in UTF-8 bytes: the one measure every token estimate starts from.

A provider's tokenizer is not at hand, so sizes are bytes of what an adapter puts on the wire for
each part (text, reasoning, a call's name and JSON arguments, a result's content, an image's
base64, the system prompt, the tool definitions' JSON); framing is left out. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Final

from anvild.llm.types import (
    ContentBlock,
    Image,
    Message,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
    converter,
)


def utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def block_bytes(block: ContentBlock) -> int:
    match block:
        case Text(text=text) | Reasoning(text=text):
            return utf8(text)
        case ToolCall(name=name, arguments=arguments):
            return utf8(name) + utf8(json.dumps(arguments, ensure_ascii=False))
        case ToolResult(content=content):
            return utf8(content)
        case Image(data=data):
            return len(data)


def message_bytes(message: Message) -> int:
    return sum(block_bytes(block) for block in message.content)


def spec_bytes(spec: ToolSpec) -> int:
    """One tool definition's JSON, as it counts inside `specs_bytes`."""
    return utf8(json.dumps(converter.unstructure(spec)))


# The last sizes of tool tuples, by identity (the tuple held, so its id is not reused): the agent
# measures one step's tuple several times (before its request, to clear old results, after).
_SPECS_SIZES: dict[int, tuple[Sequence[ToolSpec], int]] = {}
_SPECS_SIZES_KEPT: Final = 64


def specs_bytes(specs: Sequence[ToolSpec]) -> int:
    """The tool definitions' JSON list: each definition, and "[", "]" and ", " between them."""
    if not specs:
        return 0
    known = _SPECS_SIZES.get(id(specs))
    if known is not None and known[0] is specs:
        return known[1]
    size = sum(spec_bytes(spec) for spec in specs) + 2 * len(specs)
    if isinstance(specs, tuple):
        note_specs_bytes(specs, size)
    return size


def note_specs_bytes(specs: tuple[ToolSpec, ...], size: int) -> None:
    """Remember `size` as `specs_bytes(specs)`: for a caller that built `specs` from JSON whose
    sizes it keeps (the tool registry), so the definitions are not encoded again to be measured."""
    if len(_SPECS_SIZES) >= _SPECS_SIZES_KEPT:
        del _SPECS_SIZES[next(iter(_SPECS_SIZES))]
    _SPECS_SIZES[id(specs)] = (specs, size)


def request_bytes(system: str, specs: Sequence[ToolSpec], messages: Iterable[Message]) -> int:
    return utf8(system) + specs_bytes(specs) + sum(message_bytes(m) for m in messages)


__all__ = [
    "block_bytes",
    "message_bytes",
    "note_specs_bytes",
    "request_bytes",
    "spec_bytes",
    "specs_bytes",
    "utf8",
]
