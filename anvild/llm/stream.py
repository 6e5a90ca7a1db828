"""The stream vocabulary: what every provider adapter turns its wire events into.

    StreamEvent = TextDelta | ReasoningDelta | BlockMeta | ToolCallStart | ToolCallDelta
                | UsageReport | Finish

Every content event names its *block*, a small integer for one content block of the response;
blocks appear in the message in order of first occurrence, and late opaque state (a signature)
finds its owner as a `BlockMeta`. Text and reasoning start with their first delta; a tool call
starts with `ToolCallStart` and its arguments arrive as JSON fragments. Exactly one `Finish`
ends a stream. `Usage.input` is *uncached* input; a count the provider did not report is `None`:
never zero, never printed as a number, and it poisons any sum.
"""

from __future__ import annotations

import enum
from typing import TypeAlias

import attrs

from anvild.llm.types import ProviderMeta


class FinishReason(enum.StrEnum):
    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    STOP_SEQUENCE = "stop_sequence"
    MAX_TOKENS = "max_tokens"
    REFUSAL = "refusal"
    # The provider stopped in a way this harness does not continue (Anthropic `pause_turn`, an
    # unknown stop reason). Never treated as a normal end of turn.
    UNSUPPORTED = "unsupported"

    @property
    def is_clean(self) -> bool:
        """Whether the response completed normally, so that its tool calls may run."""
        return self in (FinishReason.END_TURN, FinishReason.TOOL_USE, FinishReason.STOP_SEQUENCE)


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


@attrs.frozen
class Usage:
    """Token counts; `None` means the provider did not say."""

    input: int | None = None
    output: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None

    def absorb(self, other: Usage) -> Usage:
        """Later report wins, field by field, but only for the fields it actually reports.

        Providers report usage piecemeal (Anthropic sends input at message_start and output at
        message_delta), so an unreported field keeps its earlier value. A reported zero is a
        real zero and does overwrite.
        """
        return Usage(
            input=self.input if other.input is None else other.input,
            output=self.output if other.output is None else other.output,
            cache_read=self.cache_read if other.cache_read is None else other.cache_read,
            cache_write=self.cache_write if other.cache_write is None else other.cache_write,
        )

    def plus(self, other: Usage) -> Usage:
        """Sum two reports of separate requests. Unknown plus anything stays unknown."""
        return Usage(
            input=_sum(self.input, other.input),
            output=_sum(self.output, other.output),
            cache_read=_sum(self.cache_read, other.cache_read),
            cache_write=_sum(self.cache_write, other.cache_write),
        )

    @property
    def total(self) -> int | None:
        """Everything the request consumed, or None if any part is unknown."""
        return _sum(_sum(self.input, self.output), _sum(self.cache_read, self.cache_write))

    def __str__(self) -> str:
        parts = [
            f"{name}={value}"
            for name, value in (
                ("input", self.input),
                ("output", self.output),
                ("cache_read", self.cache_read),
                ("cache_write", self.cache_write),
            )
            if value is not None
        ]
        return " ".join(parts) if parts else "usage unknown"


@attrs.frozen
class TextDelta:
    block: int
    text: str


@attrs.frozen
class ReasoningDelta:
    block: int
    text: str


@attrs.frozen
class BlockMeta:
    """Opaque provider state for a reasoning or tool-call block, possibly after its content.

    For a block that does not exist yet it starts a reasoning block with no text (a redacted
    thinking block, or a signature that arrives on its own).
    """

    block: int
    meta: ProviderMeta


@attrs.frozen
class ToolCallStart:
    block: int
    id: str
    name: str
    meta: ProviderMeta | None = None


@attrs.frozen
class ToolCallDelta:
    block: int
    arguments: str  # a fragment of the arguments' JSON text


@attrs.frozen
class UsageReport:
    usage: Usage


@attrs.frozen
class Finish:
    reason: FinishReason
    # What the provider said, when it adds something: the raw stop reason for UNSUPPORTED, the
    # refusal category, and so on.
    detail: str | None = None


StreamEvent: TypeAlias = (
    TextDelta | ReasoningDelta | BlockMeta | ToolCallStart | ToolCallDelta | UsageReport | Finish
)
