"""The canonical conversation: the provider-neutral shape every adapter maps to and from.

A transcript is `Message`s with two roles (user, assistant); system text travels on the request,
and tool results are blocks on a user message. `ContentBlock = Text | Image | Reasoning |
ToolCall | ToolResult`. `Reasoning` and `ToolCall` may carry a `ProviderMeta`, opaque state only
its provider can replay: adapters replay their own and drop foreign meta.
Values are frozen `attrs` classes (`attrs.evolve`). JSON goes through this module's `converter`;
block kinds are tagged with stable strings (`"text"`, `"tool_call"`), absent meta is omitted.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.strategies import configure_tagged_union

# JSON values as parsed by the json module. Kept as Any: recursive unions defeat both mypy and
# cattrs, and every producer of these values is a JSON parser.
Json: TypeAlias = Any


class Role(enum.StrEnum):
    """Who wrote a message. There is no system or tool role in the canonical transcript."""

    USER = "user"
    ASSISTANT = "assistant"


@attrs.frozen
class ProviderMeta:
    """Opaque, provider-owned state attached to a block so the same provider can replay it."""

    provider: str
    data: Json


@attrs.frozen
class Text:
    text: str


@attrs.frozen
class Image:
    media_type: str
    data: str  # base64, without a data: URL prefix


@attrs.frozen
class Reasoning:
    text: str
    meta: ProviderMeta | None = None


@attrs.frozen
class ToolCall:
    id: str
    name: str
    # Parsed JSON arguments. When the model produced text that is not valid JSON the builder keeps
    # that text here as a `str`, and the tool registry answers with a correcting tool result.
    arguments: Json
    meta: ProviderMeta | None = None


@attrs.frozen
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


ContentBlock: TypeAlias = Text | Image | Reasoning | ToolCall | ToolResult

BLOCK_TAGS: Final[Mapping[type, str]] = {
    Text: "text",
    Image: "image",
    Reasoning: "reasoning",
    ToolCall: "tool_call",
    ToolResult: "tool_result",
}


def block_kind(block: ContentBlock) -> str:
    """The stable tag of a block kind, as written in JSON and in error messages."""
    return BLOCK_TAGS[type(block)]


def _to_blocks(blocks: Iterable[ContentBlock]) -> tuple[ContentBlock, ...]:
    return tuple(blocks)


@attrs.frozen
class Message:
    role: Role
    content: tuple[ContentBlock, ...] = attrs.field(converter=_to_blocks)

    @classmethod
    def user_text(cls, text: str) -> Message:
        return cls(Role.USER, (Text(text),))

    @classmethod
    def assistant_text(cls, text: str) -> Message:
        return cls(Role.ASSISTANT, (Text(text),))

    def text(self) -> str:
        """All text blocks, concatenated in order."""
        return "".join(block.text for block in self.content if isinstance(block, Text))

    def tool_calls(self) -> list[ToolCall]:
        return [block for block in self.content if isinstance(block, ToolCall)]

    def tool_results(self) -> list[ToolResult]:
        return [block for block in self.content if isinstance(block, ToolResult)]


@attrs.frozen
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Json]


# Typed converters: with a bare `tuple` converter mypy cannot infer the constructor's argument type.
def _to_messages(messages: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(messages)


def _to_specs(specs: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
    return tuple(specs)


@attrs.frozen
class ChatRequest:
    """One sampling request, provider-neutral.

    Prompt-cache hints, each ignored by providers that cannot use it:

    - `cache` asks providers that take explicit cache breakpoints (Anthropic) to mark the stable
      prefix and the conversation so far;
    - `stable_prefix` is how many leading messages stay the same from request to request (a
      compaction summary, say; 0: none), which such a provider also marks;
    - `cache_key` is a stable key for the conversation (the session id), for providers that route
      requests to a cache by key (OpenAI's `prompt_cache_key`); "" sends none.
    """

    model: str
    messages: tuple[Message, ...] = attrs.field(default=(), converter=_to_messages)
    system: str = ""
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_to_specs)
    max_tokens: int = 4096
    temperature: float | None = None
    cache: bool = False
    stable_prefix: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    cache_key: str = ""


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    # Optional provider meta is omitted from JSON when absent (and restored as None).
    for cls in (Reasoning, ToolCall):
        conv.register_unstructure_hook(
            cls,
            make_dict_unstructure_fn(cls, conv, meta=override(omit_if_default=True)),
        )
    configure_tagged_union(
        ContentBlock,
        conv,
        tag_generator=lambda cls: BLOCK_TAGS[cls],
        tag_name="type",
    )
    return conv


converter: Final[cattrs.Converter] = _make_converter()
"""The JSON converter for canonical conversation types (messages, blocks, requests)."""
