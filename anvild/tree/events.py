"""The daemon's own events and their wire form: one JSON object per line on `agent/events`.

Events are typed values (STYLE.md: typed events, not strings); `encode_event` is the one place
that turns them into the JSON lines readers see. Each line carries a stable `type` tag (never a
class name) and `ts`, the UTC time in RFC 3339 with milliseconds, so a script can `jq` the stream
without knowing Python::

    {"type":"ping","ts":"2026-11-30T16:40:00.123Z"}
    {"type":"client_refused","ts":"...","transport":"tcp","peer":"tcp!127.0.0.1!40112",
     "reason":"attach name is not the token"}

Connections themselves are not events: every `9p read` is a connection, and that churn would push
what matters (sessions, refusals) out of the backlog a new reader starts with. They go to the log.
Later issues add session, bead and mail events to the same union.
"""

from __future__ import annotations

import json
from typing import ClassVar, Final

import attrs

from anvild.lines.jsonl import TaggedJson, timestamp

__all__ = [
    "ClientRefused",
    "DaemonEvent",
    "DaemonStarted",
    "DaemonStopping",
    "Pinged",
    "decode_event",
    "encode_event",
]


@attrs.frozen
class DaemonStarted:
    TAG: ClassVar[str] = "daemon_started"
    version: str
    pid: int


@attrs.frozen
class DaemonStopping:
    TAG: ClassVar[str] = "daemon_stopping"
    reason: str


@attrs.frozen
class Pinged:
    """Someone wrote `ping` to `agent/ctl`: a cheap way for a script to see the stream is live."""

    TAG: ClassVar[str] = "ping"


@attrs.frozen
class ClientRefused:
    TAG: ClassVar[str] = "client_refused"
    transport: str
    peer: str
    reason: str


DaemonEvent = DaemonStarted | DaemonStopping | Pinged | ClientRefused

_json: Final = TaggedJson[DaemonEvent](DaemonEvent)


def encode_event(event: DaemonEvent, *, now_ns: int | None = None) -> str:
    """The JSON line (without its newline) for `event`."""
    return _json.line(event, ts=timestamp(now_ns))


def decode_event(line: str | bytes) -> DaemonEvent:
    """The event a line encodes (the `ts` is dropped); for tests and clients of the stream."""
    body = json.loads(line)
    body.pop("ts", None)
    return _json.structure(body)
