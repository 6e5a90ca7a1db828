"""Budgets: reserve the worst case, settle the actual, refuse what does not fit, survive a
restart through the ledger, and start again at a new UTC day."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from anvild.agent.admission import BudgetExceeded
from anvild.budget import DAEMON, Budgets, Charge, Ledger, Scope, actual_charge, worst_case
from anvild.config.load import BudgetLimits, DailyLimit
from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage

NOON = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)
DEV = Scope("s1", "developer")


class Clock:
    def __init__(self, now: dt.datetime = NOON) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


def budgets(tmp_path: Path, limits: BudgetLimits, clock: Clock | None = None) -> Budgets:
    return Budgets(limits, Ledger(tmp_path / "budget"), clock or Clock())


def test_worst_case_prices_input_at_the_dearer_of_input_and_cache_write() -> None:
    pricing = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    worst = worst_case(1000, 2000, pricing)
    assert worst.tokens == 3000
    assert worst.usd == pytest.approx((1000 * 3.75 + 2000 * 15.0) / 1e6)
    assert worst_case(10, 10, Pricing(input=1.0)).usd is None  # no output price: unknown
    assert worst_case(10, 10, None) == Charge(None, 20)


def test_a_request_that_does_not_fit_is_refused_naming_budget_spend_and_reset(
    tmp_path: Path,
) -> None:
    b = budgets(tmp_path, BudgetLimits(daemon=DailyLimit(tokens=1000)))
    first = b.reserve(DEV, Charge(None, 600))
    with pytest.raises(BudgetExceeded) as refused:
        b.reserve(DEV, Charge(None, 600))  # 600 reserved + 600 > 1000
    text = str(refused.value)
    assert "the daemon budget of 1000 tokens a day" in text
    assert "0 tokens spent and 600 reserved" in text
    assert "resets at 2026-12-03T00:00:00Z (in 12h00m)" in text
    b.settle(first, Charge(None, 300))  # the actual was less: room again
    b.reserve(DEV, Charge(None, 600))
    assert "daemon daily_tokens limit=1000 spent=300 reserved=600" in b.text()


def test_usd_limits_are_checked_with_reservations_and_settle_is_idempotent(
    tmp_path: Path,
) -> None:
    b = budgets(tmp_path, BudgetLimits(daemon=DailyLimit(usd=1.0)))
    reservations = [b.reserve(DEV, Charge(0.25, 1)) for _ in range(4)]
    with pytest.raises(BudgetExceeded, match=r"\$1\.000000 a day"):
        b.reserve(DEV, Charge(0.01, 1))
    b.settle(reservations[0], None)  # never answered: nothing charged
    b.settle(reservations[0], Charge(0.25, 1))  # a second settle changes nothing
    b.reserve(DEV, Charge(0.25, 1))
    assert "spent=0.000000 reserved=1.000000" in b.text()


def test_an_unknown_price_under_a_usd_budget_is_refused_never_counted_as_zero(
    tmp_path: Path,
) -> None:
    b = budgets(tmp_path, BudgetLimits(daemon=DailyLimit(usd=5.0)))
    with pytest.raises(BudgetExceeded, match=r"no input and output pricing.*\[models\.NAME"):
        b.reserve(DEV, Charge(None, 10), model="local")
    why = b.unpriced("local", None, "developer")
    assert why is not None
    assert "daily_tokens" in why
    assert "[models.NAME.pricing]" in why
    assert b.unpriced("paid", Pricing(input=1.0, output=2.0), "developer") is None
    tokens_only = budgets(tmp_path, BudgetLimits(daemon=DailyLimit(tokens=100)))
    assert tokens_only.unpriced("local", None, "developer") is None
    tokens_only.reserve(DEV, Charge(None, 10))  # a token budget counts unpriced models


def test_role_and_convoy_budgets_apply_only_to_their_sessions(tmp_path: Path) -> None:
    limits = BudgetLimits(roles={"reviewer": DailyLimit(tokens=100)}, convoy=DailyLimit(tokens=50))
    b = budgets(tmp_path, limits)
    b.settle(b.reserve(Scope("r1", "reviewer"), Charge(None, 90)), Charge(None, 90))
    with pytest.raises(BudgetExceeded, match="the role:reviewer budget"):
        b.reserve(Scope("r2", "reviewer"), Charge(None, 20))
    b.reserve(DEV, Charge(None, 10_000))  # no budget applies to a developer outside convoys
    in_convoy = Scope("d2", "developer", ("c-1",))
    b.settle(b.reserve(in_convoy, Charge(None, 40)), Charge(None, 40))
    with pytest.raises(BudgetExceeded, match="the convoy:c-1 budget"):
        b.reserve(in_convoy, Charge(None, 20))
    b.reserve(Scope("d3", "developer", ("c-2",)), Charge(None, 20))  # each convoy its own
    text = b.text()
    assert "role:reviewer daily_tokens limit=100 spent=90 reserved=0" in text
    assert "convoy:c-1 daily_tokens limit=50 spent=40 reserved=0" in text


def test_the_days_spend_survives_a_restart_through_the_ledger(tmp_path: Path) -> None:
    limits = BudgetLimits(daemon=DailyLimit(usd=1.0, tokens=10_000))
    b = budgets(tmp_path, limits)
    for _ in range(3):
        b.settle(b.reserve(DEV, Charge(0.2, 100)), Charge(0.1, 70))
    pending = b.reserve(DEV, Charge(0.2, 100))  # in flight at the "restart": never settled
    assert pending.keys == (DAEMON,)
    day_file = tmp_path / "budget" / "2026-12-02.jsonl"
    with day_file.open("ab") as torn:
        torn.write(b'{"session":"s1","role":"dev')  # a crash in the middle of a line
    again = budgets(tmp_path, limits)
    text = again.text()
    assert "daemon daily_usd limit=1.000000 spent=0.300000 reserved=0.000000" in text
    assert "daemon daily_tokens limit=10000 spent=210 reserved=0" in text


def test_a_new_utc_day_starts_from_zero_and_keeps_what_is_in_flight(tmp_path: Path) -> None:
    clock = Clock()
    b = budgets(tmp_path, BudgetLimits(daemon=DailyLimit(tokens=100)), clock)
    b.settle(b.reserve(DEV, Charge(None, 60)), Charge(None, 60))
    flying = b.reserve(DEV, Charge(None, 30))
    clock.now = NOON + dt.timedelta(days=1)
    assert "spent=0 reserved=30 resets=2026-12-04T00:00:00Z" in b.text()
    b.settle(flying, Charge(None, 30))
    assert "spent=30 reserved=0" in b.text()
    assert len(Ledger(tmp_path / "budget").read(dt.date(2026, 12, 3))) == 1


def test_the_actual_charge_is_the_worst_case_where_usage_or_price_is_unknown() -> None:
    worst = Charge(0.5, 1000)
    pricing = Pricing(input=1.0, output=1.0)
    assert actual_charge(None, pricing, worst) == worst
    assert actual_charge(Usage(input=10), pricing, worst) == worst  # output unreported
    reported = Usage(input=100, output=100, cache_read=0, cache_write=0)
    assert actual_charge(reported, pricing, worst) == Charge(pytest.approx(0.0002), 200)
    priced_cache = Usage(input=100, output=100, cache_read=50, cache_write=0)
    assert actual_charge(priced_cache, pricing, worst) == Charge(0.5, 250)  # unpriced cache read


def test_without_budgets_the_file_says_how_to_set_one(tmp_path: Path) -> None:
    assert budgets(tmp_path, BudgetLimits()).text().startswith("no budgets: [budget]")
