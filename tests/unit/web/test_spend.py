"""Spend per hour and model, summed from real session files: each request at the model the
session had when it was made, in the hour its response finished (its session's start for a
record written before `at`, counted as undated); unknown prices counted apart."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role, Text
from anvild.store import SessionStore
from anvild.store.records import (
    Compacted,
    ModelChanged,
    Record,
    SessionStarted,
    UsageReported,
)
from anvild.web.spend import HourlySpend, hour_of

PRICES = {"big": Pricing(input=2.0, output=10.0)}  # USD per million tokens; "small" unpriced


def session(store: SessionStore, session_id: str, at: dt.datetime, *records: Record) -> None:
    journal = store.create(
        SessionStarted(session_id, None, "dev", "big", "/tmp", "none", created_at=at)
    )
    for record in records:
        journal.append(record)
    journal.close()


def test_undated_requests_count_in_their_sessions_start_hour_and_model(tmp_path: Path) -> None:
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
    rows, undated = spent.rows(since)
    got = {(r["hour"], r["model"]): r for r in rows}
    assert [key for key in got] == [
        (hour_of(earlier), "big"),
        (hour_of(now), "big"),
        (hour_of(now), "small"),
    ]  # c3 started (and so made its undated request) before the window: left out
    assert undated == 3
    big = got[(hour_of(now), "big")]
    assert (big["requests"], big["input"], big["output"], big["tokens"]) == (1, 1000, 100, 1100)
    assert big["usd"] == pytest.approx((1000 * 2.0 + 100 * 10.0) / 1e6)
    assert big["unknown_usd"] == 0
    small = got[(hour_of(now), "small")]
    assert (small["tokens"], small["usd"], small["unknown_usd"]) == (55, 0.0, 1)
    assert got[(hour_of(earlier), "big")]["usd"] == pytest.approx((3000 * 2.0 + 300 * 10.0) / 1e6)
    assert hour_of(now).endswith(":00Z")
    assert spent.rows(since) == (rows, 3)  # again, from what it read (no file changed)
    session(store, "d4", now, UsageReported(Usage(7, 3, 0, 0)))  # a new file: read
    assert got[(hour_of(now), "big")]["tokens"] + 10 == next(
        r["tokens"]
        for r in spent.rows(since)[0]
        if (r["hour"], r["model"]) == (hour_of(now), "big")
    )


def test_each_request_counts_in_the_hour_its_response_finished(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    before = hour - dt.timedelta(hours=1)
    since = hour - dt.timedelta(hours=23)

    def at(start: dt.datetime, minutes: int) -> dt.datetime:
        return start + dt.timedelta(minutes=minutes)

    kept = (Message(Role.USER, (Text("summary"),)), Message(Role.ASSISTANT, (Text("ok"),)))
    session(
        store,
        "a1",
        at(before, 50),  # started in the hour before, went on into this one
        UsageReported(Usage(1000, 100, 0, 0), at=at(before, 55)),
        UsageReported(Usage(2000, 200, 0, 0), at=at(hour, 5)),
        ModelChanged("small"),
        UsageReported(Usage(40, 4, 0, 0), at=at(hour, 6)),
        Compacted(kept, "summary", 2, 900, 90, "big", "auto", at(hour, 7), usage=Usage(8, 2, 0, 0)),
    )
    session(
        store,
        "b2",
        since - dt.timedelta(hours=2),  # started before the window
        UsageReported(Usage(5, 5, 0, 0), at=since - dt.timedelta(minutes=1)),  # left out
        UsageReported(Usage(300, 30, 0, 0), at=at(since, 1)),  # in its first hour
    )
    rows, undated = HourlySpend(store, PRICES.get).rows(since)
    got = {(r["hour"], r["model"]): (r["requests"], r["input"], r["output"]) for r in rows}
    assert got == {
        (hour_of(since), "big"): (1, 300, 30),
        (hour_of(before), "big"): (1, 1000, 100),
        (hour_of(hour), "big"): (1, 2000, 200),
        (hour_of(hour), "small"): (2, 48, 6),  # the compaction, made after the change, at its time
    }
    assert undated == 0  # every request has its time: the page says nothing of it
