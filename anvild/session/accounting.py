"""Usage and cost text for a session's `usage` and `cost` files (course 13.3, 18.3). Pure.

`usage` is "used/window (pct%)". The last response's reported input + cache_read +
cache_write + output is the baseline: what the context held when the model last answered, its
answer included. Everything appended to the transcript after that answer is estimated at one
token per four bytes (UTF-8) of its content. The baseline is reset (None) by a model change, a
clear, a restart and any other context replacement; then, and before any usage at all, the file
reads "-": unknown is never shown as a guess. Input and output must have been reported; cache
counts a provider does not report are taken as no cache use (such providers have no prompt
cache to report on).

`cost` lists the session's tokens by kind, the cache hit rate (cache reads over all input
tokens) and the USD cost from the model's pricing, or "n/a" when a price or a count it needs is
unknown: input or output not reported, or a price missing for tokens used. A cache count the
provider did not report costs nothing (`Pricing.cost`: such a provider has no prompt cache), so
one openai-chat turn without `cached_tokens` does not make the cost unknown for ever; then,
for the recent turns it is given, one line each with that turn's input, cache reads and writes
and hit rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from anvild.agent.context.tokens import estimate_tokens
from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role
from anvild.store import (
    Compacted,
    ModelChanged,
    Record,
    SessionStarted,
    UsageBaseline,
    UsageReported,
)

THRESHOLDS: Final = (80, 90)
"""Percentages of the window whose upward crossing is announced on the daemon's events."""


def context_used(baseline: UsageBaseline | None, messages: Sequence[Message]) -> int | None:
    """Tokens the context holds now, or None when unknown (see the module docstring)."""
    if baseline is None:
        return None
    usage = baseline.usage
    if usage.input is None or usage.output is None:
        return None
    reported = usage.input + usage.output + (usage.cache_read or 0) + (usage.cache_write or 0)
    since = list(messages[baseline.messages :])
    # The usage of a response is recorded just before the response itself is appended: that
    # message is already counted (as output) and is not estimated again.
    if since and since[0].role is Role.ASSISTANT:
        since = since[1:]
    return reported + estimate_tokens(since)


def usage_line(used: int | None, window: int, compact_at: float | None = None) -> str:
    """`used/window (pct%)`, and where the history is compacted (`compact at 85%`)."""
    if used is None:
        return "-"
    line = f"{used}/{window} ({used * 100 / window:.1f}%)"
    return line if compact_at is None else f"{line} compact at {compact_at:g}%"


def crossed(before: int | None, after: int | None, window: int) -> tuple[int, ...]:
    """The thresholds `after` reached that `before` had not (percentages, ascending)."""
    if after is None:
        return ()
    low = -1.0 if before is None else before * 100 / window
    high = after * 100 / window
    return tuple(t for t in THRESHOLDS if low < t <= high)


def priced(records: Iterable[Record], pricing_of: Callable[[str], Pricing | None]) -> float | None:
    """The USD cost of a session's recorded requests, each at the prices of the model it was
    made with (`SessionStarted` and `ModelChanged` say which); None once any is unknown."""
    pricing: Pricing | None = None
    total: float | None = 0.0
    for record in records:
        match record:
            case SessionStarted(model=model) | ModelChanged(model=model):
                pricing = pricing_of(model)
            case UsageReported(usage=usage) | Compacted(usage=usage):
                cost = None if pricing is None else pricing.cost(usage)
                total = None if cost is None or total is None else total + cost
    return total


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _hit_rate(usage: Usage) -> str:
    """Cache reads over all input tokens (uncached, read, written); "-" when unknown."""
    if usage.input is None or usage.cache_read is None:
        return "-"
    denominator = usage.input + usage.cache_read + (usage.cache_write or 0)
    return f"{usage.cache_read * 100 / denominator:.1f}%" if denominator else "-"


def cost_text(usage: Usage, usd: float | None, turns: Sequence[tuple[int, Usage]] = ()) -> str:
    """The `cost` file: one `key value` line per item, then one line per recent turn, given as
    (turn number, that turn's summed usage)."""
    lines = [
        f"input {_count(usage.input)}",
        f"output {_count(usage.output)}",
        f"cache_read {_count(usage.cache_read)}",
        f"cache_write {_count(usage.cache_write)}",
        f"cache_hit_rate {_hit_rate(usage)}",
        f"usd {'n/a' if usd is None else f'{usd:.6f}'}",
    ]
    lines += [
        f"turn {number} input {_count(turn.input)} cache_read {_count(turn.cache_read)} "
        f"cache_write {_count(turn.cache_write)} cache_hit_rate {_hit_rate(turn)}"
        for number, turn in turns
    ]
    return "\n".join(lines) + "\n"


__all__ = [
    "THRESHOLDS",
    "context_used",
    "cost_text",
    "crossed",
    "priced",
    "usage_line",
]
