"""Bead and convoy events: typed values, one JSON line each on `agent/events`.

    BeadEvent = BeadCreated | BeadChanged | BeadOrphaned | BeadGate | ConvoyCreated | ConvoyChanged

Each line has a stable `type` tag and `ts` (UTC, RFC 3339, milliseconds), like the session
events, so one `jq` filter reads the whole stream. `action` is the verb that caused a change,
`by` who asked (`user` or `session <id>`; `remote` and action `pull` for a change pulled from
another daemon sharing the board).
    {"type":"bead_changed","ts":"...","id":"research-auth-001","action":"claim",...}
`bead_gate` (published by the coord bead gates, not committed) follows a bead's approval through
its session's result gate: `state` open | waiting | unavailable (`detail` says why) | closed.
"""

from __future__ import annotations

import datetime as dt
from typing import ClassVar, Final, TypeAlias

import attrs

from anvild.lines.jsonl import TaggedJson, timestamp

__all__ = [
    "BeadChanged",
    "BeadCreated",
    "BeadEvent",
    "BeadGate",
    "BeadOrphaned",
    "ConvoyChanged",
    "ConvoyCreated",
    "encode_event",
]


@attrs.frozen
class BeadCreated:
    TAG: ClassVar[str] = "bead_created"
    id: str
    title: str
    role: str
    depends_on: tuple[str, ...]
    by: str


@attrs.frozen
class BeadChanged:
    TAG: ClassVar[str] = "bead_changed"
    id: str
    action: str
    status: str
    assigned_to: str | None
    by: str
    detail: str = ""


@attrs.frozen
class BeadOrphaned:
    """The session a bead is assigned to ended while the bead was in progress."""

    TAG: ClassVar[str] = "bead_orphaned"
    id: str
    session: str
    reason: str


@attrs.frozen
class BeadGate:
    """Where a bead's approval stands on its session's result gate."""

    TAG: ClassVar[str] = "bead_gate"
    id: str
    session: str
    state: str
    detail: str = ""


@attrs.frozen
class ConvoyCreated:
    TAG: ClassVar[str] = "convoy_created"
    id: str
    title: str
    coordinator: str | None
    by: str


@attrs.frozen
class ConvoyChanged:
    TAG: ClassVar[str] = "convoy_changed"
    id: str
    action: str
    status: str
    done: int
    total: int
    by: str
    detail: str = ""


BeadEvent: TypeAlias = (
    BeadCreated | BeadChanged | BeadOrphaned | BeadGate | ConvoyCreated | ConvoyChanged
)


_json: Final = TaggedJson[BeadEvent](BeadEvent)


def encode_event(event: BeadEvent, *, now: dt.datetime | None = None) -> str:
    """One event as one compact JSON line (no newline): the tag and `ts` first."""
    return _json.line(event, ts=timestamp(now))
