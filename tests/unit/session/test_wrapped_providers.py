"""The providers in front of a session's provider (retries, budgets, the limiter, the request
log) each answer to the name of the provider they wrap and pass its stream through."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from anvild.budget import Budgets, Ledger, Scope
from anvild.budget.provider import BudgetedProvider
from anvild.config.load import BudgetLimits
from anvild.llm.provider import Provider, WrappedProvider
from anvild.llm.retry import Retry
from anvild.llm.stream import StreamEvent, TextDelta
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ChatRequest, Message
from anvild.session.manager import LimitedProvider
from anvild.session.requests import RequestLog

REQUEST = ChatRequest(model="m", messages=[Message.user_text("hi")])


def _wrappers(inner: Provider, tmp_path: Path) -> list[Provider]:
    budgets = Budgets(BudgetLimits(), Ledger(tmp_path))
    return [
        Retry(inner),
        BudgetedProvider(inner, budgets, lambda: Scope("s", "developer"), None),
        LimitedProvider(inner, trio.CapacityLimiter(1)),
        RequestLog().provider(inner),
    ]


async def test_each_wrapper_keeps_the_inner_name_and_its_events(tmp_path: Path) -> None:
    for index in range(4):
        inner = ScriptedProvider([script.text("hello")], name="p")
        wrapped = _wrappers(inner, tmp_path / str(index))[index]
        assert isinstance(wrapped, WrappedProvider)
        assert wrapped.name == "p"
        events: list[StreamEvent] = []
        async with wrapped.stream(REQUEST) as stream:
            events.extend([event async for event in stream])
        assert [e.text for e in events if isinstance(e, TextDelta)] == ["hello"]
        assert len(inner.requests) == 1


def test_a_wrapper_without_inner_has_no_name() -> None:
    with pytest.raises(AttributeError):
        _ = WrappedProvider().name
