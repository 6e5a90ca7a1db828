"""Spend budgets: daily limits per daemon, role and convoy, admitted before each request.

`admission` holds the tallies and the reserve/settle rule, `ledger` the durable day files,
`provider` the wrapper that puts every model request of a session through admission.
"""

from anvild.budget.admission import DAEMON, Budgets, Charge, Reservation, Scope, worst_case
from anvild.budget.ledger import Entry, Ledger, day_of
from anvild.budget.provider import BudgetedProvider, actual_charge

__all__ = [
    "DAEMON",
    "BudgetedProvider",
    "Budgets",
    "Charge",
    "Entry",
    "Ledger",
    "Reservation",
    "Scope",
    "actual_charge",
    "day_of",
    "worst_case",
]
