"""Spans made cheaply on the caller's thread and turned into SDK spans on the export thread.

`LightSpan` holds what a span is (name, kind, ids, times, attributes, events, status) in plain
fields: no lock, no attribute cleaning (every value anvild sets is a str, an int, a float or a
tuple of str), no context machinery. `end` hands it to the `BoundedProcessor`, whose export
thread calls `readable` to make the SDK's `ReadableSpan` that exporters take. A turn's span is
sampled by the tracer provider's sampler; its children follow it (what the default parent-based
sampler does), and a span that is not sampled is never queued.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

import attrs
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags

from anvild.telemetry.export import BoundedProcessor

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status()


@attrs.frozen
class Origin:
    """Where the spans go and what they say they come from."""

    processor: BoundedProcessor
    resource: Resource
    scope: InstrumentationScope
    sampler: Sampler


def _span_id() -> int:
    return random.getrandbits(64) or 1


class LightSpan:
    __slots__ = (
        "attributes",
        "end_time",
        "events",
        "kind",
        "name",
        "origin",
        "parent",
        "sampled",
        "span_id",
        "start_time",
        "status",
        "trace_id",
    )

    def __init__(
        self,
        origin: Origin,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        parent: LightSpan | None = None,
    ) -> None:
        self.origin = origin
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.parent = parent
        self.events: list[Event] = []
        self.status = _UNSET
        self.span_id = _span_id()
        if parent is None:
            self.trace_id = random.getrandbits(128) or 1
            decision = origin.sampler.should_sample(None, self.trace_id, name, kind, attributes)
            self.sampled: bool = decision.decision is Decision.RECORD_AND_SAMPLE
        else:
            self.trace_id, self.sampled = parent.trace_id, parent.sampled
        self.start_time = time.time_ns()
        self.end_time = 0

    def is_recording(self) -> bool:
        return self.sampled and not self.end_time

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.attributes.update(attributes)

    def set_status(self, status: Status) -> None:
        self.status = status

    def add_event(self, name: str, attributes: Mapping[str, Any]) -> None:
        self.events.append(Event(name, dict(attributes), time.time_ns()))

    def end(self) -> None:
        if self.end_time:
            return
        self.end_time = time.time_ns()
        if self.sampled:
            self.origin.processor.put(self)

    def _context(self) -> SpanContext:
        return SpanContext(self.trace_id, self.span_id, is_remote=False, trace_flags=_SAMPLED)

    def readable(self) -> ReadableSpan:
        """The SDK's span, for an exporter (on the export thread)."""
        origin = self.origin
        return ReadableSpan(
            self.name,
            context=self._context(),
            parent=None if self.parent is None else self.parent._context(),
            resource=origin.resource,
            attributes=self.attributes,
            events=tuple(self.events),
            kind=self.kind,
            status=self.status,
            start_time=self.start_time,
            end_time=self.end_time,
            instrumentation_scope=origin.scope,
        )


__all__ = ["LightSpan", "Origin"]
