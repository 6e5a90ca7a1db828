"""What a request sends, in UTF-8 bytes: the one measure every token estimate starts from.

A provider's tokenizer is not at hand, so sizes are bytes of what an adapter puts on the wire for
each part (text, reasoning, a call's name and JSON arguments, a result's content, an image's
base64, the system prompt, the tool definitions' JSON); framing is left out. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

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


class SizedSpecs(tuple[ToolSpec, ...]):
    """Tool definitions that carry their `specs_bytes`, computed by whoever built them from
    sizes it keeps (the tool registries): a step measures its definitions several times, and
    each step gets new ones (fresh schema copies), so a cache by identity would never hit."""

    json_bytes: int

    def __new__(cls, specs: Iterable[ToolSpec], json_bytes: int) -> SizedSpecs:
        self = super().__new__(cls, specs)
        self.json_bytes = json_bytes
        return self

    def __getnewargs__(self) -> tuple[tuple[ToolSpec, ...], int]:
        return tuple(self), self.json_bytes  # copy and pickle: `__new__` takes the size too


# cattrs dispatches on the exact class: unstructured, these are the tuple they are.
converter.register_unstructure_hook(SizedSpecs, lambda specs: converter.unstructure(tuple(specs)))


def specs_bytes(specs: Sequence[ToolSpec]) -> int:
    """The tool definitions' JSON list: each definition, and "[", "]" and ", " between them."""
    if isinstance(specs, SizedSpecs):
        return specs.json_bytes
    if not specs:
        return 0
    return sum(spec_bytes(spec) for spec in specs) + 2 * len(specs)


def request_bytes(system: str, specs: Sequence[ToolSpec], messages: Iterable[Message]) -> int:
    return utf8(system) + specs_bytes(specs) + sum(message_bytes(m) for m in messages)


__all__ = [
    "SizedSpecs",
    "block_bytes",
    "message_bytes",
    "request_bytes",
    "spec_bytes",
    "specs_bytes",
    "utf8",
]
