"""Spend budgets with admission: reserve a request's worst case before it is sent, settle after.

`Budgets` holds, for the current UTC day, each configured budget's tally (spent, reserved):
the daemon's (`daemon`), each role's (`role:NAME`) and each convoy's (`convoy:ID`, one limit
for every convoy). `reserve` admits a request only if its worst case (the input estimate plus
the whole output allowance, priced) fits every budget that applies beside what is spent and
already reserved, else raises `BudgetExceeded` naming the budget, the spend and the reset; it
never awaits, so concurrent sessions cannot overshoot together. `settle` replaces the
reservation by the actual charge (the worst case when the provider did not report usage:
unknown is never 0) and appends it to the `Ledger`, from which a restart rebuilds the day.
A USD budget with an unpriced model is refused (`unpriced`, at session creation; `reserve`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Final

import attrs

from anvild.agent.admission import BudgetExceeded
from anvild.budget.ledger import Entry, Ledger, day_of
from anvild.config.load import BudgetLimits, DailyLimit
from anvild.llm.registry import Pricing

EPSILON: Final = 1e-9  # USD sums are floats: a limit met to within this is met
DAEMON: Final = "daemon"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@attrs.frozen
class Scope:
    """Whom a request is charged to: its session, the session's role and its beads' convoys."""

    session: str
    role: str
    convoys: tuple[str, ...] = ()


@attrs.frozen
class Charge:
    """What a request costs or may cost: USD (None: unknown) and tokens."""

    usd: float | None
    tokens: int


def worst_case(input_tokens: int, max_output: int, pricing: Pricing | None) -> Charge:
    """The most a request may cost: every input token at the dearer of the input and cache
    write prices, plus the whole output allowance. USD is None without input and output
    prices."""
    tokens = input_tokens + max_output
    if pricing is None or pricing.input is None or pricing.output is None:
        return Charge(None, tokens)
    per_input = max(pricing.input, pricing.cache_write or 0.0)
    return Charge((input_tokens * per_input + max_output * pricing.output) / 1_000_000, tokens)


@attrs.define
class Tally:
    spent_usd: float = 0.0
    spent_tokens: int = 0
    reserved_usd: float = 0.0
    reserved_tokens: int = 0
    unknown: int = 0  # requests whose USD cost is unknown (charged in tokens only)

    def spend(self, charge: Charge) -> None:
        """Count `charge` as spent (an unknown USD cost counts one more `unknown`)."""
        self.spent_tokens += charge.tokens
        if charge.usd is None:
            self.unknown += 1
        else:
            self.spent_usd += charge.usd


@attrs.define(eq=False)
class Reservation:
    scope: Scope
    keys: tuple[str, ...]
    worst: Charge
    settled: bool = False


class Budgets:
    """The daemon's budgets for the current UTC day (see the module docstring)."""

    def __init__(
        self, limits: BudgetLimits, ledger: Ledger, clock: Callable[[], dt.datetime] = _now
    ) -> None:
        self.limits = limits
        self.ledger = ledger
        self._clock = clock
        self._day = day_of(clock())
        self._tallies: dict[str, Tally] = {}
        for entry in ledger.read(self._day):
            for key in self._keys(Scope(entry.session, entry.role, entry.convoys)):
                self._tally(key).spend(Charge(entry.usd, entry.tokens))

    # -- which budgets apply ---------------------------------------------------------------

    def limit(self, key: str) -> DailyLimit:
        if key == DAEMON:
            return self.limits.daemon
        kind, _, name = key.partition(":")
        if kind == "role":
            return self.limits.roles.get(name, DailyLimit())
        return self.limits.convoy

    def _keys(self, scope: Scope) -> tuple[str, ...]:
        keys = [DAEMON, f"role:{scope.role}", *(f"convoy:{c}" for c in scope.convoys)]
        return tuple(k for k in keys if self.limit(k).limited)

    def _tally(self, key: str) -> Tally:
        return self._tallies.setdefault(key, Tally())

    def unpriced(self, model: str, pricing: Pricing | None, role: str) -> str | None:
        """Why a session of `role` with `model` may not be created, or None: a USD budget
        that may apply to it (the daemon's, its role's, a convoy's) cannot count an unknown
        price."""
        if worst_case(1, 1, pricing).usd is not None:
            return None
        usd = [k for k in (DAEMON, f"role:{role}", "convoy:*") if self.limit(k).usd is not None]
        if not usd:
            return None
        return (
            f"model {model} has no input and output pricing, and the {usd[0]} budget is in USD "
            "(an unknown price is not zero): add [models.NAME.pricing] input and output (USD "
            "per million tokens) to the user config, or budget this in tokens "
            "([budget] daily_tokens) instead of daily_usd"
        )

    # -- admission -------------------------------------------------------------------------

    def reserve(self, scope: Scope, worst: Charge, model: str = "") -> Reservation:
        """Reserve `worst` in every budget of `scope`, or raise `BudgetExceeded`."""
        self._roll()
        keys = self._keys(scope)
        for key in keys:
            limit, tally = self.limit(key), self._tally(key)
            if limit.usd is not None:
                if worst.usd is None:
                    raise BudgetExceeded(
                        f"the {key} budget is in USD and the price of this request is unknown "
                        f"(model {model or '?'} has no input and output pricing): add "
                        "[models.NAME.pricing] to the user config, or use a token budget"
                    )
                if tally.spent_usd + tally.reserved_usd + worst.usd > limit.usd + EPSILON:
                    raise BudgetExceeded(
                        self._over(
                            key,
                            f"${limit.usd:.6f}",
                            f"${tally.spent_usd:.6f}",
                            f"${tally.reserved_usd:.6f}",
                            f"${worst.usd:.6f}",
                        )
                    )
            if limit.tokens is not None and (
                tally.spent_tokens + tally.reserved_tokens + worst.tokens > limit.tokens
            ):
                raise BudgetExceeded(
                    self._over(
                        key,
                        f"{limit.tokens} tokens",
                        f"{tally.spent_tokens} tokens",
                        f"{tally.reserved_tokens}",
                        f"{worst.tokens} tokens",
                    )
                )
        for key in keys:
            tally = self._tally(key)
            tally.reserved_usd += worst.usd or 0.0
            tally.reserved_tokens += worst.tokens
        return Reservation(scope, keys, worst)

    def settle(self, reservation: Reservation, actual: Charge | None) -> None:
        """Release `reservation` and charge `actual` (None: the request was never answered,
        nothing is charged) to the same budgets, and to the ledger. Idempotent."""
        if reservation.settled:
            return
        reservation.settled = True
        self._roll()
        worst = reservation.worst
        for key in reservation.keys:
            tally = self._tally(key)
            tally.reserved_usd = max(0.0, tally.reserved_usd - (worst.usd or 0.0))
            tally.reserved_tokens = max(0, tally.reserved_tokens - worst.tokens)
            if actual is not None:
                tally.spend(actual)
        if actual is not None:
            scope = reservation.scope
            entry = Entry(scope.session, scope.role, scope.convoys, actual.usd, actual.tokens)
            self.ledger.add(self._day, entry)

    def _roll(self) -> None:
        """At a new UTC day: spend starts again; what is in flight stays reserved."""
        today = day_of(self._clock())
        if today == self._day:
            return
        self._day = today
        self._tallies = {
            key: Tally(reserved_usd=t.reserved_usd, reserved_tokens=t.reserved_tokens)
            for key, t in self._tallies.items()
            if t.reserved_tokens
        }

    def resets_at(self) -> dt.datetime:
        return dt.datetime.combine(self._day + dt.timedelta(days=1), dt.time(), dt.UTC)

    def _over(self, key: str, limit: str, spent: str, reserved: str, worst: str) -> str:
        resets = self.resets_at()
        left = resets - self._clock()
        hours, rest = divmod(max(0, int(left.total_seconds())), 3600)
        return (
            f"the {key} budget of {limit} a day would be exceeded: {spent} spent and {reserved} "
            f"reserved today, and this request may take up to {worst}; it resets at "
            f"{resets.isoformat().replace('+00:00', 'Z')} (in {hours}h{rest // 60:02d}m)"
        )

    # -- the agent/budget file ---------------------------------------------------------------

    def text(self) -> str:
        """One line per budget and kind: limit, spent, reserved, reset time."""
        self._roll()
        resets = self.resets_at().isoformat().replace("+00:00", "Z")
        keys = [DAEMON, *(f"role:{r}" for r in sorted(self.limits.roles))]
        convoys = sorted(k for k in self._tallies if k.startswith("convoy:"))
        keys += convoys or ["convoy:*"]
        lines = []
        for key in keys:
            limit, tally = self.limit(key), self._tallies.get(key, Tally())
            if limit.usd is not None:
                unknown = f" unknown={tally.unknown}" if tally.unknown else ""
                lines.append(
                    f"{key} daily_usd limit={limit.usd:.6f} spent={tally.spent_usd:.6f} "
                    f"reserved={tally.reserved_usd:.6f}{unknown} resets={resets}"
                )
            if limit.tokens is not None:
                lines.append(
                    f"{key} daily_tokens limit={limit.tokens} spent={tally.spent_tokens} "
                    f"reserved={tally.reserved_tokens} resets={resets}"
                )
        if not lines:
            return "no budgets: [budget] daily_usd or daily_tokens in the user config sets one\n"
        return "\n".join(lines) + "\n"


__all__ = ["DAEMON", "Budgets", "Charge", "Reservation", "Scope", "Tally", "worst_case"]
