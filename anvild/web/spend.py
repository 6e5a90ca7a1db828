"""The board's spend: tokens and USD of the live sessions, summed per model and per role, and
the daemon's budgets as `agent/budget` shows them.

    GET /api/spend   {"seq", "models": [...], "roles": [...], "total": {...}, "budget": TEXT}

Each row sums the sessions' recorded usage (`cost`: input, output, cache_read, cache_write)
and USD; a USD of any session unknown makes the sum unknown (null), as `cost` says `n/a`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from anvild.session import Session, SessionManager
from anvild.web.hub import EventHub

__all__ = ["spend_routes", "spend_rows"]

FIELDS = ("input", "output", "cache_read", "cache_write")


def spend_rows(
    sessions: Iterable[Session], key: Callable[[Session], str], usd: Callable[[Session], str]
) -> list[dict[str, Any]]:
    """One row per value of `key`: sessions, token sums and USD (None when any is unknown)."""
    rows: dict[str, dict[str, Any]] = {}
    for s in sessions:
        row = rows.setdefault(
            key(s), {"name": key(s), "sessions": 0, **dict.fromkeys(FIELDS, 0), "usd": 0.0}
        )
        row["sessions"] += 1
        usage = s.record.usage
        for name in FIELDS:
            row[name] += getattr(usage, name) or 0
        try:
            cost: float | None = float(usd(s))
        except ValueError:
            cost = None
        row["usd"] = None if cost is None or row["usd"] is None else row["usd"] + cost
    return sorted(rows.values(), key=lambda r: (-(r["input"] + r["output"]), r["name"]))


def spend_routes(
    manager: SessionManager, hub: EventHub, usd: Callable[[Session], str]
) -> list[Route]:
    """`usd(session)`: its cost in USD as the board shows it (`n/a` when unknown)."""

    async def spend(request: Request) -> Response:
        seq = hub.position()
        sessions = manager.sessions()
        budgets = manager.settings.budgets
        total = spend_rows(sessions, lambda s: "all", usd)
        return JSONResponse(
            {
                "seq": seq,
                "models": spend_rows(sessions, lambda s: s.model, usd),
                "roles": spend_rows(sessions, lambda s: s.role, usd),
                "total": total[0] if total else None,
                "budget": "no budgets: [budget] daily_usd or daily_tokens in the user config "
                "sets one\n"
                if budgets is None
                else budgets.text(),
            }
        )

    return [Route("/api/spend", spend)]
