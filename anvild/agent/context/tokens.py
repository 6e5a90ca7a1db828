"""Request sizes in tokens, estimated without a tokenizer, calibrated by what providers report.

Sizes in bytes come from `anvild.llm.size`. `TokenMeter` turns bytes into tokens: one token
per four bytes until a provider reports the input of a request it measured, then the ratio that
report gives (the input, cache reads and writes it counted over the request's bytes), so a
model whose tokenizer is denser than four bytes a token is not underestimated for long. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import attrs

from anvild.llm.size import message_bytes, request_bytes
from anvild.llm.stream import Usage
from anvild.llm.types import Message

DEFAULT_TOKENS_PER_BYTE: Final = 0.25


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Tokens of `messages` at the default ratio (for display when nothing was measured)."""
    return math.ceil(sum(message_bytes(m) for m in messages) * DEFAULT_TOKENS_PER_BYTE)


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


__all__ = ["DEFAULT_TOKENS_PER_BYTE", "TokenMeter", "estimate_tokens", "request_bytes"]
