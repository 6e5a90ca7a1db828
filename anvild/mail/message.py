"""Mail messages: the typed value, the rules a sent message must follow, and its JSON form. Pure.

A sender writes a *draft*: `to`, `type`, at least one of `subject`/`body`, optional `metadata`
(an object) and `in_reply_to`. `parse_draft` reads it strictly (`anvild.mail.strict_json`) and
says precisely what is wrong (line and column, the known types or fields, the cap hit). A
REVIEW_RESPONSE must carry `metadata.verdict` (`lgtm` or `changes`).
`id`, `from` and `timestamp` are the daemon's: a draft's own are ignored, never trusted (`from`
is always the writing mailbox; the claim is kept in `Draft.claimed_from` for the event).
Ids are `msg-` and 16 hex digits, milliseconds in the high bits, so sorting ids sorts messages
by creation time across restarts. Errors: `InvalidMessage`.
"""

from __future__ import annotations

import enum
import json
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from anvild.mail import strict_json
from anvild.mail.errors import InvalidMessage

MAX_SUBJECT_CHARS: Final = 200
MAX_BODY_BYTES: Final = 64 * 1024
MAX_METADATA_BYTES: Final = 16 * 1024
MAX_MESSAGE_BYTES: Final = 128 * 1024
"""The largest outbox write (the JSON text) accepted."""
MAX_NAME_CHARS: Final = 64

DRAFT_FIELDS: Final = ("to", "type", "subject", "body", "metadata", "in_reply_to")
IGNORED_FIELDS: Final = ("id", "from", "timestamp")
"""Fields a draft may carry that the daemon overwrites (see the module docstring)."""


class MessageType(enum.StrEnum):
    REVIEW_REQUEST = "REVIEW_REQUEST"
    REVIEW_RESPONSE = "REVIEW_RESPONSE"
    QUESTION = "QUESTION"
    ANSWER = "ANSWER"
    APPROVAL_REQUEST = "APPROVAL_REQUEST"
    APPROVAL_RESPONSE = "APPROVAL_RESPONSE"
    STATUS_UPDATE = "STATUS_UPDATE"
    ERROR_REPORT = "ERROR_REPORT"


TYPES: Final = tuple(t.value for t in MessageType)
VERDICTS: Final = ("lgtm", "changes")
"""The values of a REVIEW_RESPONSE's `metadata.verdict`."""


def _frozen_json(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict(value)


@attrs.frozen
class Draft:
    """A message as a sender gave it, checked. `claimed_from` is a `from` the body carried
    (ignored for delivery; reported on the event)."""

    to: str
    type: MessageType
    subject: str = ""
    body: str = ""
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_json)
    in_reply_to: str | None = None
    claimed_from: str | None = None


@attrs.frozen
class Message:
    """A message the daemon made: a draft plus its id, sender and time."""

    id: str
    sender: str  # "from" in JSON
    to: str
    type: MessageType
    subject: str
    body: str
    metadata: Mapping[str, Any] = attrs.field(converter=_frozen_json)
    timestamp: int
    in_reply_to: str | None = None

    @classmethod
    def from_draft(cls, draft: Draft, *, id: str, sender: str, to: str, timestamp: int) -> Message:
        """The message for `draft` (`to` is the resolved mailbox: a session id or `user`)."""
        return cls(
            id=id,
            sender=sender,
            to=to,
            type=draft.type,
            subject=draft.subject,
            body=draft.body,
            metadata=draft.metadata,
            timestamp=timestamp,
            in_reply_to=draft.in_reply_to,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "from": self.sender,
            "to": self.to,
            "type": self.type.value,
            "subject": self.subject,
            "body": self.body,
            "metadata": dict(self.metadata),
            "timestamp": self.timestamp,
            "in_reply_to": self.in_reply_to,
        }


# -- JSON --------------------------------------------------------------------------------------


def encode(message: Message) -> bytes:
    """One message as one line of JSON (newline included): the archive files' content."""
    return _dumps(message.to_json()).encode() + b"\n"


def encode_list(messages: list[Message]) -> bytes:
    """A JSON array, one message per line (what `inbox` shows; `[]` when empty)."""
    if not messages:
        return b"[]\n"
    return ("[\n" + ",\n".join(_dumps(m.to_json()) for m in messages) + "\n]\n").encode()


def _dumps(obj: Any) -> str:
    """Strict JSON: never NaN or Infinity (`ValueError`), so every parser reads the archive."""
    return strict_json.dumps(obj, separators=(",", ":"))


def decode(data: bytes) -> Message:
    """A stored message (written by `encode`); `InvalidMessage` if it is not one. A NaN or
    Infinity that a daemon before the strict reader stored is read as its name (a string), so
    the message can still be shown as strict JSON."""
    try:
        obj = json.loads(data, parse_constant=str)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError too
        raise InvalidMessage(f"not a stored message: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidMessage("not a stored message: not a JSON object")
    try:
        return Message(
            id=_str(obj, "id"),
            sender=_str(obj, "from"),
            to=_str(obj, "to"),
            type=MessageType(obj["type"]),
            subject=_str(obj, "subject"),
            body=_str(obj, "body"),
            metadata=_object(obj.get("metadata", {})),
            timestamp=int(obj["timestamp"]),
            in_reply_to=obj.get("in_reply_to"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidMessage(f"not a stored message: {exc!r}") from exc


def _str(obj: Mapping[str, Any], key: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("metadata is not an object")
    return value


# -- checking what a sender wrote --------------------------------------------------------------

EXAMPLE: Final = '{"to": "SESSION-OR-ALIAS", "type": "QUESTION", "subject": "...", "body": "..."}'


def parse_draft(data: bytes) -> Draft:
    """The draft an outbox write holds (one JSON object); `InvalidMessage` says what is wrong."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidMessage(
            f"the message is {len(data)} bytes; the limit is {MAX_MESSAGE_BYTES} bytes (put long "
            "text in a file and send its path)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage(
            f"the message is not valid UTF-8 (bad byte at offset {exc.start}); write UTF-8 JSON"
        ) from exc
    if not text.strip():
        raise InvalidMessage(f"the message is empty: write one JSON object such as {EXAMPLE}")
    try:
        obj = strict_json.loads(text)
    except strict_json.JsonRefused as exc:
        raise InvalidMessage(f"{exc}; write one JSON object such as {EXAMPLE}") from exc
    return check_draft(obj)


def check_draft(obj: Any) -> Draft:
    """The draft a decoded JSON value (or a tool's arguments) describes; `InvalidMessage`."""
    if not isinstance(obj, dict):
        what = "an array" if isinstance(obj, list) else f"a {type(obj).__name__}"
        raise InvalidMessage(f"a message is one JSON object, not {what}: {EXAMPLE}")
    try:
        strict_json.check_value(obj)  # a tool's arguments were decoded by a lenient parser
    except strict_json.JsonRefused as exc:
        raise InvalidMessage(str(exc)) from exc
    unknown = [key for key in obj if key not in DRAFT_FIELDS and key not in IGNORED_FIELDS]
    if unknown:
        raise InvalidMessage(
            f"unknown field {unknown[0]!r}: a message has {', '.join(DRAFT_FIELDS)} "
            "(id, from and timestamp are set by the daemon)"
        )
    to = obj.get("to")
    if to is None:
        raise InvalidMessage(
            'the message has no recipient: add "to" (a session id or alias from agent/list, or '
            '"user" for the human)'
        )
    if not isinstance(to, str) or not to.strip():
        raise InvalidMessage(f'"to" must be a session id or alias, or "user"; got {json.dumps(to)}')
    if len(to) > MAX_NAME_CHARS:
        raise InvalidMessage(f'"to" is longer than {MAX_NAME_CHARS} characters')
    _plain_name("to", to)
    kind = obj.get("type")
    if kind is None:
        raise InvalidMessage(f'the message has no "type": use one of {", ".join(TYPES)}')
    if not isinstance(kind, str) or kind not in TYPES:
        raise InvalidMessage(
            f"unknown message type {json.dumps(kind)}: the types are {', '.join(TYPES)}"
        )
    subject = _text_field(obj, "subject")
    body = _text_field(obj, "body")
    if len(subject) > MAX_SUBJECT_CHARS:
        raise InvalidMessage(
            f'"subject" is {len(subject)} characters; the limit is {MAX_SUBJECT_CHARS} (put the '
            'rest in "body")'
        )
    if len(body.encode()) > MAX_BODY_BYTES:
        raise InvalidMessage(
            f'"body" is {len(body.encode())} bytes; the limit is {MAX_BODY_BYTES} bytes (put long '
            "text in a file and send its path)"
        )
    _plain_name("subject", subject)
    if not subject.strip() and not body.strip():
        raise InvalidMessage('the message says nothing: give a "subject" or a "body"')
    metadata = obj.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InvalidMessage(
            '"metadata" must be a JSON object (e.g. {"bead_id": "b1"}), not ' + json.dumps(metadata)
        )
    size = len(_dumps(metadata).encode())
    if size > MAX_METADATA_BYTES:
        raise InvalidMessage(
            f'"metadata" is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES} bytes'
        )
    message_type = MessageType(kind)
    if message_type is MessageType.REVIEW_RESPONSE:
        verdict = metadata.get("verdict")
        if verdict not in VERDICTS:
            got = "none" if verdict is None else json.dumps(verdict)
            raise InvalidMessage(
                'a REVIEW_RESPONSE must carry "metadata": {"verdict": "lgtm"} or {"verdict": '
                f'"changes"}} (got {got})'
            )
    reply_to = obj.get("in_reply_to")
    if reply_to is not None and (not isinstance(reply_to, str) or len(reply_to) > 64):
        raise InvalidMessage(
            f'"in_reply_to" must be a message id (a string) or null, not {json.dumps(reply_to)}'
        )
    if reply_to:
        _plain_name("in_reply_to", reply_to)
    claimed = obj.get("from")
    return Draft(
        to=to.strip(),
        type=message_type,
        subject=subject,
        body=body,
        metadata=metadata,
        in_reply_to=reply_to or None,
        claimed_from=claimed if isinstance(claimed, str) else None,
    )


def _plain_name(key: str, value: str) -> None:
    if strict_json.has_control(value):
        raise InvalidMessage(
            f'"{key}" holds a control character ({json.dumps(value)[:80]}); names and subjects '
            "may not contain control characters (U+0000-U+001F, U+007F-U+009F): remove it"
        )


def _text_field(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidMessage(f'"{key}" must be a string, not {json.dumps(value)}')
    return value


# -- ids ---------------------------------------------------------------------------------------


class MessageIds:
    """Message ids that sort in creation order: `msg-` + 16 hex digits (44 bits of milliseconds,
    20 bits random, then incremented while the clock stands still)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._last = 0

    def next(self) -> str:
        now = int(self._clock() * 1000) << 20 | secrets.randbits(20)
        self._last = max(now, self._last + 1)
        return f"msg-{self._last:016x}"


ID_PREFIX: Final = "msg-"


def is_message_id(name: str) -> bool:
    return (
        name.startswith(ID_PREFIX)
        and len(name) == len(ID_PREFIX) + 16
        and all(c in "0123456789abcdef" for c in name[len(ID_PREFIX) :])
    )
