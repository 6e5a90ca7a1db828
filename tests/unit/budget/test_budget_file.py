"""`agent/budget`: a snapshot of the budgets' text at each open."""

from __future__ import annotations

from pathlib import Path

from anvild.budget import Budgets, Charge, Ledger, Scope
from anvild.config.load import BudgetLimits, DailyLimit
from anvild.ninep.backend import OpenMode
from anvild.tree.budget import NONE, budget_file


async def _read(budgets: Budgets | None) -> str:
    handle = await budget_file(budgets).open(OpenMode(read=True, write=False))
    return (await handle.read(0, 65536)).decode()


async def test_the_file_shows_each_budget_as_it_is_at_open(tmp_path: Path) -> None:
    budgets = Budgets(BudgetLimits(daemon=DailyLimit(tokens=500)), Ledger(tmp_path))
    assert "daemon daily_tokens limit=500 spent=0 reserved=0 resets=" in await _read(budgets)
    budgets.reserve(Scope("s", "developer"), Charge(None, 120))
    assert "spent=0 reserved=120" in await _read(budgets)


async def test_without_budgets_it_says_how_to_set_one() -> None:
    assert await _read(None) == NONE
