"""The refusal of a model request that does not fit a spend budget.

A provider wrapper that admits requests against budgets (`anvild.budget`) raises
`BudgetExceeded` before anything is sent; the agent loop ends the turn `budget_exceeded` with
its message, which names the budget, what was spent and reserved, and when it resets.
"""

from __future__ import annotations


class BudgetExceeded(Exception):
    """A model request was not sent: it did not fit a budget (the message says which)."""


__all__ = ["BudgetExceeded"]
