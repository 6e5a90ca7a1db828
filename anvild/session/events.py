"""The supervisor's daemon-wide events: typed values, one JSON line each on `agent/events`.

    SessionEvent = SessionCreated | SessionStateChanged | SessionRenamed | SessionEnded
                 | UsageThreshold | SessionFailed | ResultDecided | ConfigIgnored | ConfigInvalid

Each line carries a stable `type` tag (never a class name) and `ts`, the UTC time in RFC 3339
with milliseconds, like the daemon's own events (`anvild.tree.events`), so one `jq` filter
reads both:

    {"type":"session_created","ts":"...","id":"a1b2c3d4","alias":"r1","role":"reviewer",...}
    {"type":"session_state","ts":"...","id":"a1b2c3d4","state":"running","detail":""}
    {"type":"usage_threshold","ts":"...","id":"a1b2c3d4","percent":80,"used":25700,...}
"""

from __future__ import annotations

import datetime as dt
from typing import ClassVar, Final, TypeAlias

import attrs

from anvild.lines.jsonl import TaggedJson, timestamp


@attrs.frozen
class SessionCreated:
    TAG: ClassVar[str] = "session_created"
    id: str
    alias: str | None
    role: str
    model: str
    cwd: str
    ephemeral: bool
    restored: bool = False  # brought back from its records at daemon start


@attrs.frozen
class SessionStateChanged:
    TAG: ClassVar[str] = "session_state"
    id: str
    state: str
    detail: str = ""


@attrs.frozen
class SessionRenamed:
    """A live session's alias changed (`mv agent/ID agent/NAME`): `alias` is the new one,
    `was` the one before (None: none)."""

    TAG: ClassVar[str] = "session_renamed"
    id: str
    alias: str | None
    was: str | None


@attrs.frozen
class SessionEnded:
    """Killed, or an ephemeral session reaped: gone from `list` (its records stay on disk)."""

    TAG: ClassVar[str] = "session_ended"
    id: str
    reason: str


@attrs.frozen
class UsageThreshold:
    """The session's context use crossed `percent` of the model's window."""

    TAG: ClassVar[str] = "usage_threshold"
    id: str
    percent: int
    used: int
    window: int


@attrs.frozen
class SessionFailed:
    """A session's records could not be written, or a session could not be restored."""

    TAG: ClassVar[str] = "session_failed"
    id: str
    error: str


@attrs.frozen
class ResultDecided:
    """A result gate (`request_approval`) ended: verdict approve, reject or cancelled.
    `asked_by` and `ref` name the request (`bead <id>` and its approval round for a bead),
    `by` who answered (`user`, an approver session's id; "" when cancelled)."""

    TAG: ClassVar[str] = "result_decided"
    id: str
    verdict: str
    reason: str = ""
    asked_by: str = ""
    ref: str = ""
    by: str = ""


@attrs.frozen
class ConfigIgnored:
    """The session's project config sets keys that need a trust grant (`keys`): they are
    ignored until `command` is run. Once per session and version of the file."""

    TAG: ClassVar[str] = "config_ignored"
    id: str
    file: str
    keys: tuple[str, ...]
    command: str


@attrs.frozen
class ConfigInvalid:
    """The session's project config cannot be used as it is now (`error` names the file, the
    key and why); `using` says what applies instead. Once per session and error."""

    TAG: ClassVar[str] = "config_invalid"
    id: str
    error: str
    using: str


SessionEvent: TypeAlias = (
    SessionCreated
    | SessionStateChanged
    | SessionRenamed
    | SessionEnded
    | UsageThreshold
    | SessionFailed
    | ResultDecided
    | ConfigIgnored
    | ConfigInvalid
)


_json: Final = TaggedJson[SessionEvent](SessionEvent)


def encode_event(event: SessionEvent, *, now: dt.datetime | None = None) -> str:
    """One event as one compact JSON line (no newline): the tag and `ts` first."""
    return _json.line(event, ts=timestamp(now))


__all__ = [
    "ConfigIgnored",
    "ConfigInvalid",
    "ResultDecided",
    "SessionCreated",
    "SessionEnded",
    "SessionEvent",
    "SessionFailed",
    "SessionRenamed",
    "SessionStateChanged",
    "UsageThreshold",
    "encode_event",
]
