"""Spend per hour and model, summed from real session files: each request at the model the
session had when it was made, in the hour its session started; unknown prices counted apart."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.store import SessionStore
from anvild.store.records import ModelChanged, Record, SessionStarted, UsageReported
from anvild.web.spend import HourlySpend, hour_of

PRICES = {"big": Pricing(input=2.0, output=10.0)}  # USD per million tokens; "small" unpriced


def session(store: SessionStore, session_id: str, at: dt.datetime, *records: Record) -> None:
    journal = store.create(
        SessionStarted(session_id, None, "dev", "big", "/tmp", "none", created_at=at)
    )
    for record in records:
        journal.append(record)
    journal.close()


def test_requests_count_per_start_hour_and_the_model_they_were_made_with(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    now = dt.datetime.now(dt.UTC).replace(minute=30, second=0, microsecond=0)
    earlier = now - dt.timedelta(hours=2)
    session(
        store,
        "a1",
        now,
        UsageReported(Usage(1000, 100, 0, 0)),
        ModelChanged("small"),
        UsageReported(Usage(50, 5, None, None)),
    )
    session(store, "b2", earlier, UsageReported(Usage(3000, 300, 0, 0)))
    session(store, "c3", now - dt.timedelta(hours=30), UsageReported(Usage(9, 9, 0, 0)))
    since = now.replace(minute=0) - dt.timedelta(hours=23)
    spent = HourlySpend(store, PRICES.get)
    rows = spent.rows(since)
    got = {(r["hour"], r["model"]): r for r in rows}
    assert [key for key in got] == [
        (hour_of(earlier), "big"),
        (hour_of(now), "big"),
        (hour_of(now), "small"),
    ]  # c3 started before the window: left out
    big = got[(hour_of(now), "big")]
    assert (big["requests"], big["input"], big["output"], big["tokens"]) == (1, 1000, 100, 1100)
    assert big["usd"] == pytest.approx((1000 * 2.0 + 100 * 10.0) / 1e6)
    assert big["unknown_usd"] == 0
    small = got[(hour_of(now), "small")]
    assert (small["tokens"], small["usd"], small["unknown_usd"]) == (55, 0.0, 1)
    assert got[(hour_of(earlier), "big")]["usd"] == pytest.approx((3000 * 2.0 + 300 * 10.0) / 1e6)
    assert hour_of(now).endswith(":00Z")
    assert spent.rows(since) == rows  # again, from what it read (no file changed)
    session(store, "d4", now, UsageReported(Usage(7, 3, 0, 0)))  # a new file: read
    assert got[(hour_of(now), "big")]["tokens"] + 10 == next(
        r["tokens"] for r in spent.rows(since) if (r["hour"], r["model"]) == (hour_of(now), "big")
    )
