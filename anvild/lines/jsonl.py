"""Typed values as JSON lines: one compact object a line, its stable `type` tag first.

Every union written as JSON lines (agent events, session records, the session, bead, mail and
daemon events on `agent/events`) is a union of attrs classes that each carry a `TAG` class
variable, never a class name, and goes through a `TaggedJson`: `fields` puts `type` first, then
what the caller adds (`ts`), then the value's own fields; `structure` reads it back. `dumps` is
the one compact form (no spaces, non-ASCII kept readable); `timestamp` the one `ts` format (UTC,
RFC 3339, milliseconds: `2026-11-30T16:40:00.123Z`). Tags and formats are file formats: records
on disk are read by every later version, so nothing here may change what it writes.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar, get_args

import cattrs
from cattrs.strategies import configure_tagged_union

__all__ = ["TaggedJson", "dumps", "timestamp"]

T = TypeVar("T")


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: object) -> str:
    """`obj` as compact JSON, non-ASCII characters as they are (no newline added); what
    `json.dumps(obj, ensure_ascii=False, separators=(",", ":"))` writes, without making an
    encoder per call."""
    return _ENCODER.encode(obj)


def timestamp(now: dt.datetime | int | None = None) -> str:
    """A `ts`: `now` (a time, or nanoseconds since the epoch; None: the current time) in UTC
    to the millisecond, e.g. `2026-11-30T16:40:00.123Z` (digits past the millisecond are cut)."""
    if now is None:
        now = dt.datetime.now(dt.UTC)
    elif isinstance(now, int):
        seconds, rest = divmod(now, 1_000_000_000)
        now = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=rest // 1000)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TaggedJson(Generic[T]):
    """A union of attrs classes, each with its `TAG`, to and from JSON objects tagged `type`.

    `converter` may come with hooks for the members (register them before: the union takes
    each member's hook as it is when the union is configured)."""

    def __init__(self, union: Any, converter: cattrs.Converter | None = None) -> None:
        self.union = union
        self.converter = converter if converter is not None else cattrs.Converter()
        self.types: tuple[type, ...] = get_args(union)
        """The union's members, in the order the union names them."""
        self.tags: Mapping[type, str] = {cls: cls.TAG for cls in self.types}  # type: ignore[attr-defined]
        configure_tagged_union(
            union, self.converter, tag_generator=self.tags.__getitem__, tag_name="type"
        )

    def fields(self, value: T, **head: Any) -> dict[str, Any]:
        """`value` as a JSON object: `type` first (easier to read and to grep), then `head`,
        then the value's own fields."""
        data: dict[str, Any] = self.converter.unstructure(value, self.union)
        return {"type": data.pop("type"), **head, **data}

    def line(self, value: T, **head: Any) -> str:
        """`fields` as one compact JSON line (no newline)."""
        return _ENCODER.encode(self.fields(value, **head))

    def structure(self, obj: Any) -> T:
        """The value a JSON object (as `fields` writes it, without `head`) stands for. Raises
        what cattrs raises for anything else (`cattrs.BaseValidationError`, KeyError, ...)."""
        value: T = self.converter.structure(obj, self.union)
        return value
