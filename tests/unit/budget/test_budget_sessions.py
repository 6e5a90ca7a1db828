"""Budgets across concurrent sessions: ten sessions share a daily budget that fits 25 requests;
exactly 25 reach the provider, the turns that needed more end `budget_exceeded` saying why, and
a restart (new budgets from the same ledger) still knows the day is spent."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from anvild.budget import Budgets, Ledger
from anvild.config.load import BudgetLimits, DailyLimit
from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.llm.testing import Script, ScriptedProvider, script
from anvild.llm.types import ChatRequest, ToolResult
from anvild.session.errors import InvalidSessionRequest
from anvild.store import UsageReported
from tests.unit.session.support import Models, ask, new, running, target

SESSIONS = 10
STEPS = 5  # requests one turn wants: four tool calls and an answer
OUTPUT = 1024  # the targets' max_output_tokens: each request reports exactly that output
PRICING = Pricing(input=0.0, output=1.0, cache_read=0.0, cache_write=0.0)
PER_REQUEST = OUTPUT * 1.0 / 1_000_000  # worst case == actual: the test counts exactly
LIMITS = BudgetLimits(daemon=DailyLimit(usd=25 * PER_REQUEST))
USAGE = Usage(input=100, output=OUTPUT, cache_read=0, cache_write=0)


def respond(request: ChatRequest) -> Script:
    """Read a file until the turn has four results, then answer."""
    results = sum(
        isinstance(block, ToolResult) for message in request.messages for block in message.content
    )
    if results < STEPS - 1:
        return script.tool_call(f"c{results}", "read_file", {"file_path": "a.txt"}, usage=USAGE)
    return script.text("done", usage=USAGE)


def models(provider: ScriptedProvider, pricing: Pricing | None = PRICING) -> Models:
    return Models({"fake": target(provider, pricing=pricing)})


async def test_concurrent_sessions_cannot_overshoot_a_shared_budget(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("hello\n")
    provider = ScriptedProvider([], respond=respond)
    ledger = Ledger(tmp_path / "data" / "budget")
    async with running(tmp_path, models(provider), budgets=Budgets(LIMITS, ledger)) as manager:
        sessions = [await new(manager) for _ in range(SESSIONS)]
        outs: dict[str, str] = {}

        async def run(index: int) -> None:
            outs[sessions[index].id] = await ask(sessions[index], f"task {index}")

        async with trio.open_nursery() as nursery:
            for index in range(SESSIONS):
                nursery.start_soon(run, index)
        assert len(provider.requests) == 25  # counted where the requests arrive
        ended = [s.record.last_turn for s in sessions]
        assert all(t is not None for t in ended)
        outcomes = [t.outcome for t in ended if t is not None]
        assert set(outcomes) <= {"done", "budget_exceeded"}
        assert outcomes.count("done") * STEPS <= 25
        assert outcomes.count("budget_exceeded") >= SESSIONS - 25 // STEPS
        refused = next(t for t in ended if t is not None and t.outcome == "budget_exceeded")
        assert "the daemon budget of $0.025600 a day would be exceeded" in refused.detail
        assert " spent and $" in refused.detail
        assert " reserved today" in refused.detail
        assert "it resets at " in refused.detail
        assert f"spent={25 * PER_REQUEST:.6f} reserved=0.000000" in manager.settings.budgets.text()

    # The daemon again: budgets rebuilt from the same ledger, the day's spend intact.
    again = ScriptedProvider([], respond=respond)
    async with running(tmp_path, models(again), budgets=Budgets(LIMITS, ledger)) as manager:
        assert f"spent={25 * PER_REQUEST:.6f}" in manager.settings.budgets.text()
        session = await new(manager)
        await ask(session, "one more")
        turn = session.record.last_turn
        assert turn is not None
        assert turn.outcome == "budget_exceeded"
        assert again.requests == []


async def test_an_unpriced_model_under_a_usd_budget_is_refused_at_creation(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([])
    budgets = Budgets(LIMITS, Ledger(tmp_path / "budget"))
    async with running(tmp_path, models(provider, pricing=None), budgets=budgets) as manager:
        with pytest.raises(InvalidSessionRequest, match=r"no input and output pricing.*tokens"):
            await new(manager)
        assert manager.sessions() == ()


async def test_a_model_switch_keeps_the_budget_and_the_request_log(tmp_path: Path) -> None:
    """`model NAME` gives the agent the new target's provider behind the same budgets and
    request log as the one it was built with: the day's limit still holds after the switch, and
    each usage record still names its request."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("hello\n")
    first = ScriptedProvider([], respond=respond)
    second = ScriptedProvider([], respond=respond)
    targets = Models(
        {
            "fake": target(first, pricing=PRICING),
            "other": target(second, name="other", pricing=PRICING),
        }
    )
    limits = BudgetLimits(daemon=DailyLimit(usd=(STEPS + 1) * PER_REQUEST))
    budgets = Budgets(limits, Ledger(tmp_path / "data" / "budget"))
    async with running(tmp_path, targets, budgets=budgets) as manager:
        session = await new(manager)
        await ask(session, "on the first model")
        assert len(first.requests) == STEPS
        await session.switch_model("other")
        await ask(session, "on the second model")  # the results are there: one answer
        assert len(second.requests) == 1
        await ask(session, "over the day's budget")
        assert len(second.requests) == 1  # refused before it reached the provider
        turn = session.record.last_turn
        assert turn is not None
        assert turn.outcome == "budget_exceeded"
        records = manager.store.read(session.id).records
        usages = [r for r in records if isinstance(r, UsageReported)]
        assert len(usages) == STEPS + 1
        assert all(u.request for u in usages)
