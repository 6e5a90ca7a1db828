"""A provider whose every request is admitted against the daemon's budgets first.

`BudgetedProvider.stream` estimates the request's input (its bytes at the default tokens per
byte), reserves the worst case (`worst_case`) for the session's scope before anything is sent
(`BudgetExceeded` if it does not fit), watches the stream's usage reports, and settles when the
stream ends: at the reported usage priced, at the worst case when usage or its price is
unknown, at nothing when the request failed before it was answered.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs

from anvild.agent.context.tokens import DEFAULT_TOKENS_PER_BYTE
from anvild.budget.admission import Budgets, Charge, Scope, worst_case
from anvild.llm.provider import Provider, WrappedProvider
from anvild.llm.registry import Pricing
from anvild.llm.size import request_bytes
from anvild.llm.stream import StreamEvent, Usage, UsageReport
from anvild.llm.types import ChatRequest


class _Watched:
    """The events of one request, passed through; their usage reports absorbed."""

    def __init__(self, events: AsyncIterator[StreamEvent]) -> None:
        self._events = events
        self.usage: Usage | None = None

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> StreamEvent:
        event = await self._events.__anext__()
        if isinstance(event, UsageReport):
            self.usage = event.usage if self.usage is None else self.usage.absorb(event.usage)
        return event


def actual_charge(usage: Usage | None, pricing: Pricing | None, worst: Charge) -> Charge:
    """What an answered request is charged: its reported usage, the worst case in place of
    each part that is unknown (unknown is never 0)."""
    if usage is None or usage.total is None:
        return worst
    usd = None if pricing is None else pricing.cost(usage)
    return Charge(worst.usd if usd is None else usd, usage.total)


@attrs.frozen
class BudgetedProvider(WrappedProvider):
    """`inner` with each request admitted against `budgets` for the scope `scope()` names,
    priced at `pricing` (None: unknown)."""

    inner: Provider
    _budgets: Budgets
    _scope: Callable[[], Scope]
    _pricing: Pricing | None

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        size = request_bytes(request.system, request.tools, request.messages)
        estimate = math.ceil(size * DEFAULT_TOKENS_PER_BYTE)
        worst = worst_case(estimate, request.max_tokens, self._pricing)
        reservation = self._budgets.reserve(self._scope(), worst, request.model)
        watched: _Watched | None = None
        try:
            async with self.inner.stream(request) as events:
                watched = _Watched(events)
                yield watched
        finally:
            charge = None if watched is None else actual_charge(watched.usage, self._pricing, worst)
            self._budgets.settle(reservation, charge)


__all__ = ["BudgetedProvider", "actual_charge"]
