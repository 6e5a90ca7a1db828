"""`anvilctl stats`: its totals are the sums of the sessions' `cost` files (made from the same
records by `anvild.session.accounting`), unknown prices are counted apart, grouping and
`--since` follow each request's time, and the fast scan agrees with the full read of each
journal."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import pytest

from anvilctl import stats
from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult
from anvild.session import accounting
from anvild.store import SessionStore, read_journal
from anvild.store.records import (
    MessageAppended,
    SessionStarted,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UsageReported,
)
from tests.support.stats_records import write_sessions

PRICES = {
    "sonnet": Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
    "haiku": Pricing(input=1.0, output=5.0, cache_read=0.1, cache_write=1.25),
}


def pricing_of(model: str) -> Pricing | None:
    return PRICES.get(model)


def cost_file(path: Path) -> dict[str, str]:
    """A session's `cost` file, as the daemon makes it from the records, by key."""
    contents = read_journal(path)
    usd = accounting.priced(contents.records, pricing_of)
    text = accounting.cost_text(contents.state.usage, usd)
    return dict(line.split(" ", 1) for line in text.splitlines() if not line.startswith("turn "))


def test_totals_are_the_sums_of_the_sessions_cost_files(tmp_path: Path) -> None:
    write_sessions(tmp_path, 60, seed=7)
    summary = stats.summarise(tmp_path, "session", pricing_of)
    files = {p.stem: cost_file(p) for p in sorted((tmp_path / "sessions").glob("*.jsonl"))}
    assert len(summary.rows) == len(files) == 60
    for kind in ("input", "output", "cache_read", "cache_write"):
        assert getattr(summary.total, kind) == sum(int(f[kind]) for f in files.values())
    known = [f["usd"] for f in files.values() if f["usd"] != "n/a"]
    assert known
    assert len(known) < len(files)  # some sessions used the unpriced model
    for session, cost in files.items():
        row = summary.rows[session]
        if cost["usd"] == "n/a":
            assert row.unknown_usd > 0  # shown apart, never as 0
        else:
            assert row.unknown_usd == 0
            assert f"{row.usd:.6f}" == cost["usd"]
    assert summary.total.usd == pytest.approx(sum(r.usd for r in summary.rows.values()), abs=1e-9)
    assert summary.total.unknown_usd == sum(r.unknown_usd for r in summary.rows.values())


def test_every_grouping_has_the_same_total(tmp_path: Path) -> None:
    write_sessions(tmp_path, 40, seed=3, unreported=0.1)
    totals = [stats.summarise(tmp_path, by, pricing_of).total for by in stats.GROUPS]
    first = totals[0]
    assert first.unreported > 0
    for other in totals[1:]:
        assert (other.input, other.requests, other.turns, other.tool_errors) == (
            first.input,
            first.requests,
            first.turns,
            first.tool_errors,
        )
        assert other.outcomes == first.outcomes
        assert other.usd == pytest.approx(first.usd)
    by_model = stats.summarise(tmp_path, "model", pricing_of)
    assert set(by_model.rows) <= {"sonnet", "haiku", "local"}
    assert by_model.rows["local"].unknown_usd == by_model.rows["local"].requests
    assert by_model.rows["sonnet"].unknown_usd == 0


def test_the_fast_scan_reads_what_the_journal_reads(tmp_path: Path) -> None:
    write_sessions(tmp_path, 30, seed=1, undated=0.3)
    times: dict[str, set[bool]] = {"usage": set(), "compacted": set()}
    for path in (tmp_path / "sessions").glob("*.jsonl"):
        counted = stats._events(read_journal(path).records)
        assert stats._fast_events(path) == counted
        for kind, value in counted:
            if kind in times:
                times[kind].add(value[1] is None)
    assert times == {"usage": {True, False}, "compacted": {False}}  # with and without `at`


def test_the_fast_scan_reads_the_usage_of_records_that_name_their_request(
    tmp_path: Path,
) -> None:
    write_sessions(tmp_path, 1, seed=2)
    (path,) = (tmp_path / "sessions").glob("*.jsonl")
    journal = SessionStore(tmp_path / "sessions").open(path.stem)
    head = {"system": "x", "tools": [{"name": "t", "input_schema": {"type": "object"}}]}
    journal.append(UsageReported(Usage(7, 3, None, 1), "a" * 64, "b" * 64, head), sync=True)
    journal.close()
    counted = stats._events(read_journal(path).records)
    assert counted[-1] == ("usage", (Usage(7, 3, None, 1), None))
    assert stats._fast_events(path) == counted


def test_since_keeps_the_sessions_started_since(tmp_path: Path) -> None:
    write_sessions(tmp_path, 30, seed=5)
    everything = stats.summarise(tmp_path, "day", pricing_of)
    since = dt.datetime(2026, 11, 15, tzinfo=dt.UTC)
    recent = stats.summarise(tmp_path, "day", pricing_of, since)
    assert recent.rows
    assert all(day >= "2026-11-15" for day in recent.rows)
    assert {d: r for d, r in everything.rows.items() if d >= "2026-11-15"} == recent.rows
    spans = sum(len(row.sessions) for row in everything.rows.values())
    assert spans > len(everything.total.sessions)  # some sessions worked on several days
    assert recent.total.requests < everything.total.requests
    now = dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)
    assert stats.parse_since("7d", now) == now - dt.timedelta(days=7)
    assert stats.parse_since("2026-11-15", now) == since
    with pytest.raises(ValueError, match=r"--since 7 days: give an age \(7d"):
        stats.parse_since("7 days", now)


def test_a_session_across_midnight_counts_each_request_on_the_day_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionStore(tmp_path / "sessions")
    start = dt.datetime(2026, 12, 1, 23, 50, tzinfo=dt.UTC)

    def minutes(count: int) -> dt.datetime:
        return start + dt.timedelta(minutes=count)

    def started(session_id: str, at: dt.datetime) -> SessionStarted:
        return SessionStarted(session_id, None, "developer", "sonnet", "/w", "none", created_at=at)

    prompt = MessageAppended(Message(Role.USER, (Text("go"),)))
    journal = store.create(started("x1", start))
    journal.append(prompt)
    journal.append(UsageReported(Usage(1000, 100, 0, 0), at=minutes(5)))
    journal.append(MessageAppended(Message(Role.ASSISTANT, (ToolCall("c1", "bash", {}),))))
    journal.append(ToolStarted("c1", "bash"))
    result = ToolResult("c1", "no", is_error=True)
    journal.append(ToolFinished(result))  # after the first request: on its day
    journal.append(MessageAppended(Message(Role.USER, (result,))))
    journal.append(UsageReported(Usage(2000, 200, 0, 0), at=minutes(20)))  # 00:10 the next day
    journal.append(MessageAppended(Message(Role.ASSISTANT, (Text("done"),))))
    journal.append(TurnEnded("done"))
    journal.close()
    older = store.create(started("x0", minutes(-120)))  # written before `at`: its start's day
    older.append(prompt)
    older.append(UsageReported(Usage(5, 5, 0, 0)))
    older.close()

    for read in ("fast", "whole"):
        if read == "whole":  # the full read of each journal gives the same days
            monkeypatch.setattr(stats, "_fast_events", lambda path: None)
        by_day = stats.summarise(tmp_path, "day", pricing_of)
        first, second = by_day.rows["2026-12-01"], by_day.rows["2026-12-02"]
        assert (first.sessions, first.requests, first.input, first.tool_errors, first.turns) == (
            {"x0", "x1"},
            2,
            1005,
            1,
            0,
        )
        assert (second.sessions, second.requests, second.input, second.tool_calls) == (
            {"x1"},
            1,
            2000,
            0,
        )
        assert second.outcomes == {"done": 1}  # the turn ended after its last request
        assert second.usd == pytest.approx((2000 * 3.0 + 200 * 15.0) / 1e6)
        assert (len(by_day.total.sessions), by_day.total.input) == (2, 3005)
        # --since counts what was done since then: the second request and the turn's end.
        since = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
        assert stats.summarise(tmp_path, "day", pricing_of, since).rows == {"2026-12-02": second}


def test_the_command_prints_a_table_and_reports_unreadable_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_sessions(tmp_path, 5, seed=2)
    (tmp_path / "sessions" / "broken.jsonl").write_text("not json\n")
    monkeypatch.setattr(stats, "config_pricing", lambda: pricing_of)
    args = argparse.Namespace(since=None, by="role", data_dir=tmp_path)
    assert stats.run(args) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split("\t")[:3] == ["role", "sessions", "turns"]
    assert lines[-1].startswith("total\t5\t")
    assert "skipped broken.jsonl" in err
    bad = argparse.Namespace(since="yesterday", by="role", data_dir=tmp_path)
    assert stats.run(bad) == 2
    assert "give an age" in capsys.readouterr().err
