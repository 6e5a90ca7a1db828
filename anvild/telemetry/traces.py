"""OpenTelemetry traces and metrics of sessions, made from the agent events they emit.

`Telemetry.observer(...)` gives one session a callback for its `AgentEvent`s (the loop is not
touched). Each turn is one trace: an `invoke_agent` span from its first step to
`TurnFinished`, with a `chat MODEL` span per model request (from `StepStarted` to the next
call, step or end; tokens from `Usage`; finish reason `tool_calls` when calls follow, else
from the outcome) and an `execute_tool NAME` span per call, all children of the turn's span,
with the GenAI semantic-convention attributes and `anvild.session.*`, `anvild.bead`,
`anvild.convoy`. Text (the newest user message, the answer, call arguments and results) is
added only with `capture_content`, through `redact`; a turn the sampler drops makes no child
spans. Metrics: tokens per request; cost (unknown counted apart), tool calls and errors by
model and role, summed over a turn and added at its end; turn duration. Callbacks never block:
spans are `LightSpan`s, made into the SDK's on the `BoundedProcessor`'s export thread, and
metrics go to a periodic reader's thread.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, Status, StatusCode

from anvild.agent import events as ev
from anvild.config.load import TelemetrySettings
from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role, Text
from anvild.telemetry.export import BoundedProcessor
from anvild.telemetry.spans import LightSpan, Origin
from anvild.telemetry.who import Who

_FINISH: Final = {
    ev.TurnOutcome.DONE: "stop",
    ev.TurnOutcome.MAX_TOKENS: "length",
    ev.TurnOutcome.REFUSED: "content_filter",
}


def parse_headers(text: str) -> dict[str, str]:
    """`k=v,k2=v2` (OTel's header list) as a mapping; a piece without `=` is refused."""
    headers = {}
    for piece in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = piece.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"telemetry headers: {piece!r} is not key=value")
        headers[key.strip()] = value.strip()
    return headers


class Telemetry:
    """The daemon's tracer and meter (see the module docstring)."""

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        redact: Callable[[str], str] | None = None,
        spans: SpanExporter | None = None,
        metrics: MetricReader | None = None,
        env: Mapping[str, str] = os.environ,
    ) -> None:
        self.settings = settings
        self._redact = redact or (lambda text: text)
        resource = Resource.create({"service.name": settings.service_name})
        headers = parse_headers(env.get(settings.headers_env, ""))
        endpoint = settings.otlp_endpoint or ""
        if spans is None:
            spans = OTLPSpanExporter(f"{endpoint}/v1/traces", headers=headers, timeout=10)
        if metrics is None:
            exporter = OTLPMetricExporter(f"{endpoint}/v1/metrics", headers=headers, timeout=10)
            metrics = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
        self.processor = BoundedProcessor(spans)
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(self.processor)
        self.tracer = self.tracer_provider.get_tracer("anvild")
        self.origin = Origin(
            self.processor, resource, InstrumentationScope("anvild"), self.tracer_provider.sampler
        )
        self.meter_provider = MeterProvider(resource=resource, metric_readers=[metrics])
        meter = self.meter_provider.get_meter("anvild")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="tokens per model request"
        )
        self.cost = meter.create_counter("anvild.cost", unit="USD", description="priced spend")
        self.unknown_cost = meter.create_counter(
            "anvild.cost.unknown", unit="{request}", description="requests of unknown price"
        )
        self.tool_calls = meter.create_counter("anvild.tool.calls", unit="{call}")
        self.tool_errors = meter.create_counter("anvild.tool.errors", unit="{call}")
        self.turn_duration = meter.create_histogram(
            "anvild.turn.duration", unit="s", description="wall time of a turn"
        )

    def text(self, text: str) -> str:
        return self._redact(text)

    def observer(
        self,
        who: Callable[[], Who],
        provider: str,
        model: str,
        pricing: Pricing | None,
        transcript: Callable[[], Sequence[Message]],
    ) -> Callable[[ev.AgentEvent], None]:
        """The callback for one session's agent events."""
        return _Trace(self, who, provider, model, pricing, transcript).on

    def shutdown(self, timeout: float = 5.0) -> None:
        """Flush what is queued for at most `timeout` seconds, then stop (a blocking call)."""
        self.processor.force_flush(int(timeout * 1000))
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown(timeout_millis=timeout * 1000)


@attrs.define
class _Trace:
    """One session's spans in flight. The attribute sets are built once per turn; the counters
    (cost, tool calls and errors) are summed over the turn and added at its end, the token
    histogram gets a point per request. A turn the sampler drops makes no child spans."""

    tel: Telemetry
    who: Callable[[], Who]
    provider: str
    model: str
    pricing: Pricing | None
    transcript: Callable[[], Sequence[Message]]
    turn: LightSpan | None = None
    recording: bool = False  # the turn's span is sampled: its children are made
    started: float = 0.0
    labels: dict[str, str] = attrs.Factory(dict)
    chat_attributes: dict[str, str | int] = attrs.Factory(dict)
    tool_attributes: dict[str, str | int] = attrs.Factory(dict)
    token_points: tuple[dict[str, str], dict[str, str]] = ({}, {})
    chat: LightSpan | None = None
    chat_usage: dict[str, int] = attrs.Factory(dict)  # set on the chat span at its end
    answer: list[str] = attrs.Factory(list)
    tools: dict[str, LightSpan] = attrs.Factory(dict)
    cost: float = 0.0
    priced: int = 0  # requests of known cost this turn
    unpriced: int = 0  # requests of unknown cost this turn
    calls: dict[tuple[str, bool], int] = attrs.Factory(dict)  # (tool, error) -> count

    def on(self, event: ev.AgentEvent) -> None:
        match event:
            case ev.StepStarted(step=step):
                self._end_chat("stop")
                self._start_chat(step)
            case ev.TextDelta(text=text) if self.chat is not None:
                self.answer.append(text)
            case ev.Usage(usage=usage) if self.turn is not None:
                self._usage(usage)
            case ev.Retrying(attempt=attempt, reason=reason) if self.chat is not None:
                self.chat.add_event("retry", {"attempt": attempt, "reason": reason})
            case ev.StepFailed(error_type=error, message=message) if self.chat is not None:
                self.chat.set_attribute("error.type", error)
                self.chat.set_status(Status(StatusCode.ERROR, message))
            case ev.ToolCallStarted():
                self._end_chat("tool_calls")
                self._start_tool(event)
            case ev.ToolCallFinished():
                self._end_tool(event)
            case ev.TurnFinished():
                self._end_turn(event)

    def _attributes(self) -> dict[str, str]:
        who = self.who()
        labels = {
            "anvild.session.id": who.session,
            "anvild.session.role": who.role,
            "anvild.bead": who.bead,
            "anvild.convoy": who.convoy,
        }
        return {k: v for k, v in labels.items() if v}

    def _start_turn(self) -> None:
        self.labels = labels = self._attributes()
        self.started = time.monotonic()
        common = {
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model,
            **labels,
        }
        self.turn = LightSpan(
            self.tel.origin,
            "invoke_agent anvild",
            SpanKind.INTERNAL,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": labels.get("anvild.session.role", ""),
                **common,
            },
        )
        self.recording = self.turn.is_recording()
        self.chat_attributes = {"gen_ai.operation.name": "chat", **common}
        self.tool_attributes = {"gen_ai.operation.name": "execute_tool", **labels}
        metric = {"gen_ai.request.model": self.model, "anvild.session.role": self._role()}
        self.token_points = (
            {**metric, "gen_ai.token.type": "input"},
            {**metric, "gen_ai.token.type": "output"},
        )

    def _start_chat(self, step: int) -> None:
        if self.turn is None:
            self._start_turn()
        if not self.recording:
            return
        self.answer = []
        self.chat = LightSpan(
            self.tel.origin,
            f"chat {self.model}",
            SpanKind.CLIENT,
            {**self.chat_attributes, "anvild.step": step},
            self.turn,
        )
        if self.tel.settings.capture_content:
            self.chat.set_attribute("gen_ai.input.messages", self._newest_user_message())

    def _newest_user_message(self) -> str:
        messages = self.transcript()
        last = next((m for m in reversed(messages) if m.role is Role.USER), None)
        parts = [] if last is None else [b.text for b in last.content if isinstance(b, Text)]
        content = [{"type": "text", "content": self.tel.text(text)} for text in parts]
        return json.dumps([{"role": "user", "parts": content}], ensure_ascii=False)

    def _usage(self, usage: Usage) -> None:
        for count, kind, point in (
            (usage.input, "gen_ai.usage.input_tokens", self.token_points[0]),
            (usage.output, "gen_ai.usage.output_tokens", self.token_points[1]),
        ):
            if count is not None:
                self.chat_usage[kind] = count
                self.tel.tokens.record(count, point)
        cost = None if self.pricing is None else self.pricing.cost(usage)
        if cost is None:
            self.unpriced += 1
        else:
            self.cost += cost
            self.priced += 1

    def _role(self) -> str:
        return self.labels.get("anvild.session.role", "")

    def _end_chat(self, finish: str) -> None:
        chat, self.chat = self.chat, None
        usage, self.chat_usage = self.chat_usage, {}
        if chat is None:
            return
        chat.set_attributes(  # one call: each takes the span's lock and cleans the values
            {
                "gen_ai.response.model": self.model,
                "gen_ai.response.finish_reasons": (finish,),
                **usage,
            }
        )
        if self.tel.settings.capture_content and self.answer:
            parts = [{"type": "text", "content": self.tel.text("".join(self.answer))}]
            output = [{"role": "assistant", "parts": parts, "finish_reason": finish}]
            chat.set_attribute("gen_ai.output.messages", json.dumps(output, ensure_ascii=False))
        chat.end()

    def _start_tool(self, event: ev.ToolCallStarted) -> None:
        if self.turn is None:
            self._start_turn()
        key = (event.name, False)
        self.calls[key] = self.calls.get(key, 0) + 1
        if not self.recording:
            return
        span = LightSpan(
            self.tel.origin,
            f"execute_tool {event.name}",
            SpanKind.INTERNAL,
            {
                **self.tool_attributes,
                "gen_ai.tool.name": event.name,
                "gen_ai.tool.call.id": event.id,
                "anvild.step": event.step,
            },
            self.turn,
        )
        if self.tel.settings.capture_content:
            arguments = json.dumps(event.arguments, ensure_ascii=False)
            span.set_attribute("gen_ai.tool.call.arguments", self.tel.text(arguments))
        self.tools[event.id] = span

    def _tool_metric(self, name: str) -> dict[str, str]:
        return {
            "gen_ai.tool.name": name,
            "gen_ai.request.model": self.model,
            "anvild.session.role": self._role(),
        }

    def _end_tool(self, event: ev.ToolCallFinished) -> None:
        if event.is_error and self.turn is not None:
            key = (event.name, True)
            self.calls[key] = self.calls.get(key, 0) + 1
        span = self.tools.pop(event.id, None)
        if span is None:
            return
        if self.tel.settings.capture_content:
            span.set_attribute("gen_ai.tool.call.result", self.tel.text(event.preview))
        if event.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _end_turn(self, event: ev.TurnFinished) -> None:
        self._end_chat(_FINISH.get(event.outcome, event.outcome.value))
        for span in self.tools.values():
            span.set_status(Status(StatusCode.ERROR, "the turn ended first"))
            span.end()
        self.tools.clear()
        turn, self.turn = self.turn, None
        if turn is None:
            return
        turn.set_attributes(
            {"anvild.turn.outcome": event.outcome.value, "anvild.turn.steps": event.steps}
        )
        if event.outcome not in (ev.TurnOutcome.DONE, ev.TurnOutcome.CANCELLED):
            turn.set_status(Status(StatusCode.ERROR, event.detail or event.outcome.value))
        turn.end()
        self._add_counters()
        self.tel.turn_duration.record(
            time.monotonic() - self.started,
            {
                "gen_ai.request.model": self.model,
                "anvild.session.role": self._role(),
                "anvild.turn.outcome": event.outcome.value,
            },
        )

    def _add_counters(self) -> None:
        """The turn's sums, one point per counter (and tool) instead of one per request."""
        metric = {"gen_ai.request.model": self.model, "anvild.session.role": self._role()}
        if self.priced:
            self.tel.cost.add(self.cost, metric)
        if self.unpriced:
            self.tel.unknown_cost.add(self.unpriced, metric)
        for (name, error), count in self.calls.items():
            counter = self.tel.tool_errors if error else self.tel.tool_calls
            counter.add(count, self._tool_metric(name))
        self.cost, self.priced, self.unpriced = 0.0, 0, 0
        self.calls.clear()


__all__ = ["Telemetry", "Who", "parse_headers"]
