"""The log/events broadcaster (backlog, per-reader cursors, lag markers) and the usage/cost
arithmetic."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import trio
import trio.testing

from anvild.llm import stream
from anvild.llm.registry import Pricing
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import Message
from anvild.session import accounting
from anvild.session.stream import BroadcastLimits, LineBroadcast, lag_marker
from anvild.store import ModelChanged, SessionStarted, UsageBaseline, UsageReported
from tests.unit.session.support import Models, ask, new, running, target


def test_a_new_reader_starts_with_the_bounded_backlog() -> None:
    lines = LineBroadcast(BroadcastLimits(backlog_lines=2))
    for text in ("one", "two", "three"):
        lines.publish(text)
    reader = lines.open_reader()
    assert reader.read_nowait(100) == b"two\nthree\n"
    assert reader.read_nowait(100) is None
    lines.publish("four")
    assert reader.read_nowait(3) == b"fou"  # a line longer than the read is split
    assert reader.read_nowait(100) == b"r\n"
    late = lines.open_reader(backlog=False)
    assert late.read_nowait(10) is None


def test_a_slow_reader_gets_a_lag_marker_where_the_gap_is() -> None:
    lines = LineBroadcast(BroadcastLimits(reader_lines=2))
    reader = lines.open_reader()
    for index in range(5):
        lines.publish(f"l{index}")
    assert reader.dropped == 3
    assert reader.read_nowait(100) == b"l0\nl1\n"
    assert reader.read_nowait(100) == lag_marker(3)
    lines.publish("l5")
    assert reader.read_nowait(100) == b"l5\n"
    assert lines.statistics().published == 6


async def test_readers_block_until_a_line_and_see_eof_at_close() -> None:
    lines = LineBroadcast()
    reader = lines.open_reader()
    got: list[bytes] = []

    async def read_two() -> None:
        got.append(await reader.read(100))
        got.append(await reader.read(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_two)
        await trio.testing.wait_all_tasks_blocked()
        lines.publish("hello")
        await trio.testing.wait_all_tasks_blocked()
        lines.close()
    assert got == [b"hello\n", b""]
    assert lines.open_reader().read_nowait(100) == b"hello\n"
    with pytest.raises(ValueError, match="newline"):
        LineBroadcast().publish("two\nlines")


def test_context_use_is_the_last_response_plus_an_estimate_of_what_came_after() -> None:
    baseline = UsageBaseline(stream.Usage(100, 20, 30, 10), messages=1)
    messages = [
        Message.user_text("q"),
        Message.assistant_text("the answer, already counted as output"),
        Message.user_text("x" * 40),
    ]
    assert accounting.context_used(baseline, messages) == 160 + 10
    assert accounting.context_used(None, messages) is None
    unknown = UsageBaseline(stream.Usage(None, 20, 0, 0), messages=1)
    assert accounting.context_used(unknown, messages) is None
    assert accounting.usage_line(None, 1000) == "-"
    assert accounting.usage_line(17426, 200000) == "17426/200000 (8.7%)"
    assert accounting.usage_line(5274, 6000, 85) == "5274/6000 (87.9%) compact at 85%"
    assert accounting.usage_line(5274, 6000, 85.5) == "5274/6000 (87.9%) compact at 85.5%"
    assert accounting.crossed(None, 950, 1000) == (80, 90)
    assert accounting.crossed(850, 870, 1000) == ()
    assert accounting.crossed(850, None, 1000) == ()


def test_cost_prices_each_request_with_the_model_it_used() -> None:
    started = SessionStarted(
        id="s1",
        alias=None,
        role="developer",
        model="cheap",
        cwd="/w",
        sandbox="read-only",
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    prices = {"cheap": Pricing(1.0, 1.0, 1.0, 1.0), "dear": Pricing(10.0, 10.0, 10.0, 10.0)}
    records = [
        started,
        UsageReported(stream.Usage(1_000_000, 0, 0, 0)),
        ModelChanged("dear"),
        UsageReported(stream.Usage(1_000_000, 0, 0, 0)),
    ]
    assert accounting.priced(records, prices.get) == pytest.approx(11.0)
    assert accounting.priced([*records, ModelChanged("free")], prices.get) == pytest.approx(11.0)
    unpriced = [*records, ModelChanged("free"), UsageReported(stream.Usage(1, 0, 0, 0))]
    assert accounting.priced(unpriced, prices.get) is None
    # An openai-chat server that does not report cached tokens: cache counts None. The cost
    # stays known, turn after turn; only an unreported input or output makes it unknown.
    uncached = [started, *[UsageReported(stream.Usage(500_000, 0, None, 0))] * 3]
    assert accounting.priced(uncached, prices.get) == pytest.approx(1.5)
    no_input = [*uncached, UsageReported(stream.Usage(None, 10, None, 0))]
    assert accounting.priced(no_input, prices.get) is None
    assert accounting.cost_text(stream.Usage(), None) == (
        "input -\noutput -\ncache_read -\ncache_write -\ncache_hit_rate -\nusd n/a\n"
    )


def test_cost_lists_each_recent_turn_with_its_cache_hit_rate() -> None:
    session = stream.Usage(input=300, output=40, cache_read=900, cache_write=300)
    head = (
        "input 300\noutput 40\ncache_read 900\ncache_write 300\n"
        "cache_hit_rate 60.0%\nusd 0.001000\n"
    )
    assert accounting.cost_text(session, 0.001) == head
    assert accounting.cost_text(session, 0.001, ()) == head
    turns = [
        (3, stream.Usage(input=200, output=10, cache_read=0, cache_write=300)),
        (4, stream.Usage(input=100, output=30, cache_read=900, cache_write=0)),
        (5, stream.Usage(input=50, output=5)),  # a provider that reports no cache counts
        (6, stream.Usage(input=0, output=0, cache_read=0, cache_write=0)),
        (7, stream.Usage()),
    ]
    assert accounting.cost_text(session, 0.001, turns) == head + (
        "turn 3 input 200 cache_read 0 cache_write 300 cache_hit_rate 0.0%\n"
        "turn 4 input 100 cache_read 900 cache_write 0 cache_hit_rate 90.0%\n"
        "turn 5 input 50 cache_read - cache_write - cache_hit_rate -\n"
        "turn 6 input 0 cache_read 0 cache_write 0 cache_hit_rate -\n"
        "turn 7 input - cache_read - cache_write - cache_hit_rate -\n"
    )


async def test_a_restored_session_keeps_its_usage_and_cost(tmp_path: Path) -> None:
    pricing = Pricing(input=1.0, output=2.0, cache_read=0.0, cache_write=0.0)
    provider = ScriptedProvider([script.text("a", usage=stream.Usage(1000, 500, 0, 0))])
    async with running(tmp_path, Models({"fake": target(provider, pricing=pricing)})) as manager:
        session = await new(manager, alias="kept")
        await ask(session, "hi")
        cost, usage = session.cost_text(), session.usage_line()
    again = Models({"fake": target(ScriptedProvider([]), pricing=pricing)})
    async with running(tmp_path, again) as manager:
        restored = manager.get("kept")
        assert restored.cost_text() == cost
        assert "usd 0.002000\n" in cost
        assert restored.usage_line() == usage == "1500/32000 (4.7%) compact at 85%"
        assert restored.out == "a\n"
        assert restored.status.value == "await"


def test_adjacent_text_deltas_coalesce_for_a_reader_behind() -> None:
    from anvild.agent import events as ev
    from anvild.session.stream import coalesce_text_deltas

    lines = LineBroadcast(BroadcastLimits(reader_lines=3), coalesce=coalesce_text_deltas)
    reader = lines.open_reader()
    lines.publish(ev.to_json(ev.StepStarted(1)))
    for piece in ("Hel", "lo", " wörld"):
        lines.publish(ev.to_json(ev.TextDelta(1, piece)))
    lines.publish(ev.to_json(ev.TextDelta(2, "next step")))
    lines.publish(ev.to_json(ev.TurnFinished(ev.TurnOutcome.DONE, 2, stream.Usage())))
    got = [ev.from_json(line) for line in reader.read_nowait(10_000).decode().splitlines()]
    assert got[:3] == [
        ev.StepStarted(1),
        ev.TextDelta(1, "Hello wörld"),
        ev.TextDelta(2, "next step"),
    ]
    assert reader.dropped == 1  # three lines held; the fourth is counted, then marked
    assert reader.read_nowait(10_000) == lag_marker(1)
    # a reader that keeps up sees every delta as published
    live = lines.open_reader(backlog=False)
    lines.publish(ev.to_json(ev.TextDelta(3, "a")))
    assert live.read_nowait(100) == b'{"type":"text_delta","step":3,"text":"a"}\n'
