"""The board's spend: tokens and USD per hour and model from the session records, the live
sessions summed per model and per role, and the daemon's budgets as `agent/budget` shows them.

    GET /api/spend[?hours=N]   {"seq", "hours": [...], "undated": N, "slots": [...],
                                "models": [...], "roles": [...], "total": {...}, "budget": TEXT}

`hours` (last N hours, 24 unless given, at most 168): one row per (hour, model) of the requests
made in the window by any session (live or exited), read through the store as `anvilctl stats`
reads them: each request counts for the model the session had when it was made and in the hour
its response finished (its record's `at`, a compaction's own time); `undated` counts those
recorded before `at` existed, counted in the hour their session started. USD is summed over
the requests of known price, `unknown_usd` counts the others (never priced as 0). The live rows
sum each session's recorded usage and USD (None when any is unknown, as `cost` says `n/a`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from anvild.llm.stream import Usage
from anvild.session import SessionManager
from anvild.store import SessionStore, StoreError, read_journal
from anvild.store.records import Compacted, ModelChanged, SessionStarted, UsageReported
from anvild.web.cards import Card, Cards, PricingOf
from anvild.web.hub import EventHub

__all__ = ["HourlySpend", "PricingOf", "charges", "hour_of", "spend_routes", "spend_rows"]

FIELDS: Final = ("input", "output", "cache_read", "cache_write")
HOURS: Final = 24
MAX_HOURS: Final = 7 * 24


def spend_rows(cards: Iterable[Card], key: str | None) -> list[dict[str, Any]]:
    """One row per value of the cards' `key` (None: one row, `all`): sessions, token sums and
    USD (None when any is unknown)."""
    rows: dict[str, dict[str, Any]] = {}
    for card in cards:
        name = "all" if key is None else card.info[key]
        row = rows.setdefault(
            name, {"name": name, "sessions": 0, **dict.fromkeys(FIELDS, 0), "usd": 0.0}
        )
        row["sessions"] += 1
        for field in FIELDS:
            row[field] += getattr(card.usage, field) or 0
        try:
            cost: float | None = float(card.info["usd"])
        except ValueError:
            cost = None
        row["usd"] = None if cost is None or row["usd"] is None else row["usd"] + cost
    return sorted(rows.values(), key=lambda r: (-(r["input"] + r["output"]), r["name"]))


def hour_of(when: dt.datetime) -> str:
    """The UTC hour `when` falls in: `2026-12-02T14:00Z`."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:00Z")


Charge = tuple[dt.datetime, bool, str, Usage, float | None]
"""One request: (when, whether that is its session's start for want of its own time, model,
usage, USD or None)."""
Charges = tuple[Charge, ...]


def charges(path: Path, pricing_of: PricingOf) -> Charges | None:
    """The requests of one session file; None when it cannot be read."""
    try:
        records = read_journal(path).records
    except (OSError, StoreError, ValueError):
        return None
    started: dt.datetime | None = None
    model, pricing = "", None
    made: list[Charge] = []
    for record in records:
        match record:
            case SessionStarted(created_at=started, model=model):
                pricing = pricing_of(model)
            case ModelChanged(model=model):
                pricing = pricing_of(model)
            case UsageReported(usage=usage, at=at) | Compacted(usage=usage, at=at):
                if started is None:
                    return None  # no session_started first: the journal refuses such a file
                cost = None if pricing is None else pricing.cost(usage)
                made.append((at or started, at is None, model, usage, cost))
    return None if started is None else tuple(made)


class HourlySpend:
    """The (hour, model) rows of the store's sessions (module docstring); a file is read again
    only when its size or time changed. `rows` blocks: run it in a thread."""

    def __init__(self, store: SessionStore, pricing_of: PricingOf) -> None:
        self._store, self._pricing_of = store, pricing_of
        self._files: dict[str, tuple[tuple[int, int], Charges | None]] = {}

    def rows(self, since: dt.datetime) -> tuple[list[dict[str, Any]], int]:
        """The rows of the requests made at or after `since`, oldest hour first, and how many
        of those requests were counted at their session's start (older records: no time)."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        undated = 0
        files: dict[str, tuple[tuple[int, int], Charges | None]] = {}
        for session_id in self._store.ids():
            path = self._store.path_for(session_id)
            try:
                stat = path.stat()
            except OSError:
                continue
            if stat.st_mtime < since.timestamp():
                continue  # not written since: it cannot hold a request made since
            version = (stat.st_mtime_ns, stat.st_size)
            known = self._files.get(session_id)
            found = known[1] if known and known[0] == version else charges(path, self._pricing_of)
            files[session_id] = (version, found)
            for when, fallback, model, usage, cost in found or ():
                if when < since:
                    continue
                undated += fallback
                hour = hour_of(when)
                row = rows.setdefault(
                    (hour, model),
                    {"hour": hour, "model": model, "requests": 0, "tokens": 0,
                     **dict.fromkeys(FIELDS, 0), "usd": 0.0, "unknown_usd": 0},
                )  # fmt: skip
                row["requests"] += 1
                for name in FIELDS:
                    row[name] += getattr(usage, name) or 0
                row["tokens"] = row["input"] + row["output"]
                row["unknown_usd"] += cost is None
                row["usd"] += cost or 0.0
        self._files = files
        return [rows[key] for key in sorted(rows)], undated


def spend_routes(
    manager: SessionManager, hub: EventHub, cards: Cards, pricing_of: PricingOf
) -> list[Route]:
    """The live rows from `cards` (building no session), the hours from the store."""
    spent = HourlySpend(manager.store, pricing_of)

    async def spend(request: Request) -> Response:
        text = request.query_params.get("hours", str(HOURS))
        if not text.isdigit() or not 1 <= int(text) <= MAX_HOURS:
            message = f"hours={text}: give a whole number of hours from 1 to {MAX_HOURS}"
            return JSONResponse({"error": message}, status_code=400)
        now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
        since = now - dt.timedelta(hours=int(text) - 1)
        hours, undated = await trio.to_thread.run_sync(spent.rows, since)
        sessions = await cards.all()
        seq = hub.position()
        budgets = manager.settings.budgets
        total = spend_rows(sessions, None)
        return JSONResponse(
            {
                "seq": seq,
                "hours": hours,
                "undated": undated,
                "slots": [hour_of(since + dt.timedelta(hours=n)) for n in range(int(text))],
                "models": spend_rows(sessions, "model"),
                "roles": spend_rows(sessions, "role"),
                "total": total[0] if total else None,
                "budget": "no budgets: [budget] daily_usd or daily_tokens in the user config "
                "sets one\n"
                if budgets is None
                else budgets.text(),
            }
        )

    return [Route("/api/spend", spend)]
