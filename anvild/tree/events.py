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
import time
from typing import Any, ClassVar

import attrs
import cattrs
from cattrs.strategies import configure_tagged_union

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

_TAGS: dict[type, str] = {
    cls: cls.TAG for cls in (DaemonStarted, DaemonStopping, Pinged, ClientRefused)
}
_converter = cattrs.Converter()
configure_tagged_union(DaemonEvent, _converter, tag_generator=_TAGS.__getitem__, tag_name="type")


def _timestamp(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 1_000_000:03d}Z"


def encode_event(event: DaemonEvent, *, now_ns: int | None = None) -> str:
    """The JSON line (without its newline) for `event`."""
    body: dict[str, Any] = _converter.unstructure(event, DaemonEvent)
    tag = body.pop("type")
    line = {"type": tag, "ts": _timestamp(time.time_ns() if now_ns is None else now_ns), **body}
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False)


def decode_event(line: str | bytes) -> DaemonEvent:
    """The event a line encodes (the `ts` is dropped); for tests and clients of the stream."""
    body = json.loads(line)
    body.pop("ts", None)
    event: DaemonEvent = _converter.structure(body, DaemonEvent)  # type: ignore[arg-type]
    return event
