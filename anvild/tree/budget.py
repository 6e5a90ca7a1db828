"""`agent/budget`: each spend budget of the daemon, one line per budget and kind.

    daemon daily_usd limit=20.000000 spent=1.250000 reserved=0.040000 resets=2026-12-03T00:00:00Z

A snapshot of `anvild.budget.Budgets.text` at open; without budgets it says how to set one.
"""

from __future__ import annotations

from anvild.budget import Budgets
from anvild.fs import SnapshotFile

NONE = "no budgets: [budget] daily_usd or daily_tokens in the user config sets one\n"


def budget_file(budgets: Budgets | None) -> SnapshotFile:
    if budgets is None:
        return SnapshotFile("budget", NONE.encode)
    return SnapshotFile("budget", lambda: budgets.text().encode())


__all__ = ["budget_file"]
