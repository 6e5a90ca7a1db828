"""AgentEvent JSON (stable tags) and the bounded, coalescing EventChannel (course 08.B)."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from anvild.agent import events as ev
from anvild.agent.channel import EventChannel
from anvild.llm.stream import Usage

USAGE = Usage(input=10, output=5, cache_read=None, cache_write=0)
FINISHED = ev.TurnFinished(ev.TurnOutcome.DONE, 2, USAGE, "")

ALL_EVENTS: list[tuple[ev.AgentEvent, str]] = [
    (ev.StepStarted(1), '{"type":"step_started","step":1}'),
    (ev.TextDelta(1, "héllo"), '{"type":"text_delta","step":1,"text":"héllo"}'),
    (ev.ReasoningDelta(1, "hm"), '{"type":"reasoning_delta","step":1,"text":"hm"}'),
    (
        ev.ToolCallStarted(1, "c1", "bash", {"command": "ls"}),
        '{"type":"tool_call_started","step":1,"id":"c1","name":"bash",'
        '"arguments":{"command":"ls"}}',
    ),
    (
        ev.ToolCallStarted(1, "c2", "bash", "not json"),
        '{"type":"tool_call_started","step":1,"id":"c2","name":"bash","arguments":"not json"}',
    ),
    (
        ev.ToolCallFinished(1, "c1", "bash", False, "Exit code: 0"),
        '{"type":"tool_call_finished","step":1,"id":"c1","name":"bash","is_error":false,'
        '"preview":"Exit code: 0"}',
    ),
    (
        ev.Usage(1, USAGE, USAGE),
        '{"type":"usage","step":1,'
        '"usage":{"input":10,"output":5,"cache_read":null,"cache_write":0},'
        '"turn":{"input":10,"output":5,"cache_read":null,"cache_write":0}}',
    ),
    (
        ev.StepFailed(2, "HttpError", "HTTP 529: overloaded", True),
        '{"type":"step_failed","step":2,"error_type":"HttpError",'
        '"message":"HTTP 529: overloaded","retryable":true}',
    ),
    (
        ev.Retrying(1, 2, 5, 1.5, "HTTP 529: overloaded"),
        '{"type":"retrying","step":1,"attempt":2,"max_attempts":5,"delay":1.5,'
        '"reason":"HTTP 529: overloaded"}',
    ),
    (
        ev.TodosUpdated([ev.Todo("a", "in_progress")]),
        '{"type":"todos_updated","todos":[{"content":"a","status":"in_progress"}]}',
    ),
    (ev.Lagged(3), '{"type":"lagged","dropped":3}'),
    (
        ev.ApprovalRequested(
            "tool", call_id="c1", tool="bash", arguments={"command": "ls"}, always_adds=("x",)
        ),
        '{"type":"approval_requested","kind":"tool","call_id":"c1","tool":"bash",'
        '"arguments":{"command":"ls"},"reason":"","always_adds":["x"],"asked_by":"",'
        '"summary":"","approver":""}',
    ),
    (
        ev.ApprovalAnswered("result", "reject", "not yet", by="user"),
        '{"type":"approval_answered","kind":"result","verdict":"reject","reason":"not yet",'
        '"call_id":"","by":"user"}',
    ),
    (
        ev.CompactionStarted("auto", 5200, "the parser"),
        '{"type":"compaction_started","trigger":"auto","tokens":5200,"focus":"the parser"}',
    ),
    (
        ev.CompactionFinished("overflow", True, 5200, 900, 12),
        '{"type":"compaction_finished","trigger":"overflow","ok":true,"before":5200,'
        '"after":900,"dropped":12,"detail":""}',
    ),
    (
        ev.HookReported("no-rm", "PreToolUse", "blocked", "rm -rf is not allowed"),
        '{"type":"hook","name":"no-rm","event":"PreToolUse","outcome":"blocked",'
        '"detail":"rm -rf is not allowed"}',
    ),
    (
        FINISHED,
        '{"type":"turn_finished","outcome":"done","steps":2,'
        '"usage":{"input":10,"output":5,"cache_read":null,"cache_write":0},"detail":""}',
    ),
]


@pytest.mark.parametrize(("event", "line"), ALL_EVENTS, ids=lambda x: type(x).__name__)
def test_json_is_tagged_stable_and_round_trips(event: ev.AgentEvent, line: str) -> None:
    assert ev.to_json(event) == line
    assert ev.from_json(line) == event


def test_every_event_type_is_covered_and_tags_are_unique() -> None:
    assert {type(event) for event, _ in ALL_EVENTS} == set(ev.EVENT_TYPES)
    tags = [json.loads(line)["type"] for _, line in ALL_EVENTS]
    assert len(set(tags)) == len(ev.EVENT_TYPES)


def test_outcomes_are_the_documented_strings() -> None:
    assert [o.value for o in ev.TurnOutcome] == [
        "done",
        "max_steps",
        "max_tokens",
        "refused",
        "cancelled",
        "protocol_stopped",
        "budget_exceeded",
        "error",
    ]


def test_unknown_tag_is_rejected() -> None:
    for line in ('{"type":"nope"}', '{"type":"step_started"}', "[1]", "not json"):
        with pytest.raises(ValueError, match="not an agent event"):
            ev.from_json(line)


# -- EventChannel ------------------------------------------------------------------------------


def drain(channel: EventChannel) -> list[ev.AgentEvent]:
    out = []
    while True:
        try:
            out.append(channel.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return out


def test_adjacent_deltas_coalesce_while_buffered() -> None:
    channel = EventChannel()
    for piece in ("a", "b", "c"):
        channel.send_nowait(ev.TextDelta(1, piece))
    channel.send_nowait(ev.ReasoningDelta(1, "r1"))
    channel.send_nowait(ev.ReasoningDelta(1, "r2"))
    channel.send_nowait(ev.TextDelta(1, "d"))
    channel.send_nowait(ev.TextDelta(2, "other step"))
    assert drain(channel) == [
        ev.TextDelta(1, "abc"),
        ev.ReasoningDelta(1, "r1r2"),
        ev.TextDelta(1, "d"),
        ev.TextDelta(2, "other step"),
    ]
    assert channel.statistics().coalesced == 3


def test_a_taken_delta_is_not_merged_into() -> None:
    channel = EventChannel()
    channel.send_nowait(ev.TextDelta(1, "a"))
    assert channel.receive_nowait() == ev.TextDelta(1, "a")
    channel.send_nowait(ev.TextDelta(1, "b"))
    assert drain(channel) == [ev.TextDelta(1, "b")]


def test_a_full_channel_folds_the_oldest_events_into_a_marker() -> None:
    channel = EventChannel(capacity=4)
    for step in range(1, 8):
        channel.send_nowait(ev.StepStarted(step))
    assert channel.statistics().buffered == 4
    assert drain(channel) == [
        ev.Lagged(4),
        ev.StepStarted(5),
        ev.StepStarted(6),
        ev.StepStarted(7),
    ]
    assert channel.statistics().dropped == 4


def test_turn_finished_survives_a_full_channel() -> None:
    channel = EventChannel(capacity=4)
    channel.send_nowait(ev.StepStarted(1))
    channel.send_nowait(FINISHED)
    for step in range(2, 10):
        channel.send_nowait(ev.StepStarted(step))
    second = ev.TurnFinished(ev.TurnOutcome.ERROR, 9, USAGE, "x")
    channel.send_nowait(second)
    events = drain(channel)
    assert events == [ev.StepStarted(1), FINISHED, ev.Lagged(8), second]


def test_only_a_consumer_absent_for_many_turns_loses_turn_finished() -> None:
    channel = EventChannel(capacity=2)
    for _ in range(3):
        channel.send_nowait(FINISHED)
    events = drain(channel)
    assert events == [ev.Lagged(2), FINISHED]


def test_closed_receiver_discards_and_closed_producer_ends_iteration() -> None:
    channel = EventChannel()
    channel.send_nowait(ev.StepStarted(1))
    channel.close_receiver()
    channel.send_nowait(ev.StepStarted(2))
    assert channel.statistics().buffered == 0
    assert channel.statistics().dropped == 2
    with pytest.raises(trio.ClosedResourceError):
        channel.receive_nowait()

    producer_closed = EventChannel()
    producer_closed.send_nowait(FINISHED)
    producer_closed.close()
    with pytest.raises(trio.ClosedResourceError):
        producer_closed.send_nowait(ev.StepStarted(1))
    assert producer_closed.receive_nowait() == FINISHED
    with pytest.raises(trio.EndOfChannel):
        producer_closed.receive_nowait()


def test_capacity_must_hold_two_items() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        EventChannel(capacity=1)


async def test_receive_waits_for_events_and_ends_at_close(
    autojump_clock: trio.testing.MockClock,
) -> None:
    channel = EventChannel()
    received: list[ev.AgentEvent] = []

    async def reader() -> None:
        async for event in channel:
            received.append(event)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(1)
        assert received == []
        channel.send_nowait(ev.StepStarted(1))
        await trio.sleep(1)
        assert received == [ev.StepStarted(1)]
        channel.send_nowait(FINISHED)
        channel.close()
    assert received == [ev.StepStarted(1), FINISHED]


async def test_receive_is_a_cancel_point(autojump_clock: trio.testing.MockClock) -> None:
    channel = EventChannel()
    channel.send_nowait(ev.StepStarted(1))
    with trio.CancelScope() as scope:
        scope.cancel()
        await channel.receive()
    assert scope.cancelled_caught
    assert channel.statistics().buffered == 1  # nothing was taken by the cancelled receive
