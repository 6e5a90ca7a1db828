"""The one JSON-lines encoding (`anvild.lines.jsonl`): tag first, compact, one `ts` format."""

from __future__ import annotations

import datetime as dt
import json
from typing import ClassVar, TypeAlias

import attrs
import cattrs
import pytest

from anvild.lines.jsonl import TaggedJson, dumps, timestamp


@attrs.frozen
class Opened:
    TAG: ClassVar[str] = "opened"
    path: str
    size: int = 0


@attrs.frozen
class Closed:
    TAG: ClassVar[str] = "closed"


Event: TypeAlias = Opened | Closed
CODEC = TaggedJson[Event](Event)


def test_the_tag_comes_first_then_the_head_then_the_fields() -> None:
    assert CODEC.line(Opened("é/\u2028", 3), ts="T") == (
        '{"type":"opened","ts":"T","path":"é/\u2028","size":3}'
    )
    assert CODEC.line(Closed()) == '{"type":"closed"}'
    assert list(CODEC.fields(Opened("a"))) == ["type", "path", "size"]


@pytest.mark.parametrize("event", [Opened("a\nb", 7), Closed()])
def test_a_line_reads_back_as_its_value(event: Event) -> None:
    line = CODEC.line(event)
    assert "\n" not in line
    assert CODEC.structure(json.loads(line)) == event


def test_an_unknown_tag_is_refused() -> None:
    with pytest.raises((cattrs.BaseValidationError, KeyError, ValueError)):
        CODEC.structure({"type": "renamed", "path": "a"})


def test_the_members_and_their_tags_come_from_the_union() -> None:
    assert CODEC.types == (Opened, Closed)
    assert CODEC.tags == {Opened: "opened", Closed: "closed"}

    @attrs.frozen
    class Untagged:
        path: str

    with pytest.raises(AttributeError, match="TAG"):
        TaggedJson[Opened | Untagged](Opened | Untagged)


def test_dumps_is_compact_and_keeps_non_ascii() -> None:
    assert dumps({"a": [1, None], "b": "→ é"}) == '{"a":[1,null],"b":"→ é"}'


@pytest.mark.parametrize(
    "now",
    [
        dt.datetime(2026, 11, 30, 16, 40, 0, 123999, tzinfo=dt.UTC),
        1_796_056_800_123_999_999,  # the same instant in nanoseconds: cut, not rounded
    ],
)
def test_a_timestamp_is_utc_to_the_millisecond(now: dt.datetime | int) -> None:
    assert timestamp(now) == "2026-11-30T16:40:00.123Z"


def test_a_timestamp_without_a_time_is_now() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = dt.datetime.fromisoformat(timestamp())
    assert before <= stamp <= dt.datetime.now(dt.UTC)
