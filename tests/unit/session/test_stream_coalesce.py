"""Text deltas on a session's `events`: written without the converter (the same line), and
coalesced for a reader that is behind by splicing bytes (equal to a JSON merge, and linear in
how far behind the reader is)."""

from __future__ import annotations

import json

import pytest

from anvild.agent import events as ev
from anvild.llm import stream
from anvild.session.stream import (
    BroadcastLimits,
    LineBroadcast,
    coalesce_text_deltas,
    event_line,
)

TEXTS = [
    "plain",
    'say "hi"',
    "back\\slash",
    "line\nbreak\ttab",
    "ctrl \x01\x1f",
    "wörld 日本 🎉",
    "",
    '"}',
    '","step":2,"text":"',
]


def line(step: int, text: str) -> bytes:
    return ev.to_json(ev.TextDelta(step, text)).encode() + b"\n"


@pytest.mark.parametrize("text", TEXTS)
def test_a_delta_line_is_what_to_json_writes(text: str) -> None:
    for event in (ev.TextDelta(1, text), ev.TextDelta(123, text)):
        assert event_line(event) == ev.to_json(event)


def test_other_events_go_through_to_json() -> None:
    for event in (
        ev.StepStarted(2),
        ev.ReasoningDelta(1, "hm"),
        ev.TurnFinished(ev.TurnOutcome.DONE, 2, stream.Usage()),
    ):
        assert event_line(event) == ev.to_json(event)


def test_the_delta_line_shape_the_splice_relies_on() -> None:
    # The splice needs `to_json` to write exactly these keys, in this order, compactly.
    data = line(7, 'a"b')
    assert data.startswith(b'{"type":"text_delta","step":7,"text":"')
    assert data.endswith(b'"}\n')
    assert list(json.loads(data)) == ["type", "step", "text"]


@pytest.mark.parametrize("first", TEXTS)
@pytest.mark.parametrize("second", TEXTS)
def test_a_splice_is_the_delta_of_both_texts(first: str, second: str) -> None:
    merged = coalesce_text_deltas(line(3, first), line(3, second))
    assert merged == line(3, first + second)
    assert ev.from_json(merged.decode()) == ev.TextDelta(3, first + second)


def test_only_deltas_of_one_step_merge() -> None:
    assert coalesce_text_deltas(line(1, "a"), line(2, "b")) is None
    assert coalesce_text_deltas(line(12, "a"), line(1, "b")) is None
    assert coalesce_text_deltas(line(1, "a"), line(12, "b")) is None
    step = ev.to_json(ev.StepStarted(1)).encode() + b"\n"
    assert coalesce_text_deltas(step, line(1, "b")) is None
    assert coalesce_text_deltas(line(1, "a"), step) is None


def test_a_delta_line_of_another_shape_merges_through_json() -> None:
    other = b'{"type":"text_delta","text":"b","step":1}\n'
    merged = coalesce_text_deltas(line(1, "a"), other)
    assert merged is not None
    assert json.loads(merged) == {"type": "text_delta", "step": 1, "text": "ab"}


def test_a_reader_far_behind_gets_one_line_with_every_delta() -> None:
    lines = LineBroadcast(BroadcastLimits(reader_lines=4), coalesce=coalesce_text_deltas)
    reader = lines.open_reader()
    pieces = [f"{i:05d};" for i in range(20_000)]
    for piece in pieces:
        lines.publish(ev.to_json(ev.TextDelta(1, piece)))
    data = reader.read_nowait(1 << 20)
    assert data is not None
    assert data.count(b"\n") == 1
    assert ev.from_json(data.decode()) == ev.TextDelta(1, "".join(pieces))
    assert reader.dropped == 0
