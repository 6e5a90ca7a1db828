"""Usage and cost text for a session's `usage` and `cost` files. Pure.

`usage` is "used/window (pct%)": the last response's reported input + cache + output is the
baseline, plus one token per four UTF-8 bytes appended since. A model change, clear, restart or
other context replacement resets the baseline, and the file then reads "-": unknown is never
shown as a guess. Unreported cache counts are taken as no cache use.
`cost` lists tokens by kind, the cache hit rate and the USD cost, or "n/a" when a price or a
needed count is unknown; then, for a parent, its children's (`children_*`, `total_usd`); then
one line per recent turn.
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


def _usd(usd: float | None) -> str:
    return "n/a" if usd is None else f"{usd:.6f}"


def cost_text(
    usage: Usage,
    usd: float | None,
    turns: Sequence[tuple[int, Usage]] = (),
    children: Sequence[tuple[Usage, float | None]] = (),
) -> str:
    """The `cost` file: one `key value` line per item, then, for a session that started
    children (`task`), their summed usage and cost (`children_*`) and the total with them
    (`total_usd`), then one line per recent turn, given as (turn number, that turn's summed
    usage). `children` is each child's (usage, USD cost or None)."""
    lines = [
        f"input {_count(usage.input)}",
        f"output {_count(usage.output)}",
        f"cache_read {_count(usage.cache_read)}",
        f"cache_write {_count(usage.cache_write)}",
        f"cache_hit_rate {_hit_rate(usage)}",
        f"usd {_usd(usd)}",
    ]
    if children:
        theirs = Usage(0, 0, 0, 0)
        their_usd: float | None = 0.0
        for child_usage, child_usd in children:
            theirs = theirs.plus(child_usage)
            their_usd = None if child_usd is None or their_usd is None else their_usd + child_usd
        lines += [
            f"children {len(children)}",
            f"children_input {_count(theirs.input)}",
            f"children_output {_count(theirs.output)}",
            f"children_cache_read {_count(theirs.cache_read)}",
            f"children_cache_write {_count(theirs.cache_write)}",
            f"children_usd {_usd(their_usd)}",
            f"total_usd {_usd(None if usd is None or their_usd is None else usd + their_usd)}",
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
