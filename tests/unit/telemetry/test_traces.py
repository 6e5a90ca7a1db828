"""Traces of a scripted two-tool turn reach an OTLP/HTTP receiver (protobuf decoded with
opentelemetry-proto): one trace, the turn's span the parent of three chat spans and two tool
spans, with the GenAI attributes; content only with capture_content, redacted; a full queue
drops spans (counted) without blocking; metrics count tokens, cost and tool calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from anvild.config.load import TelemetrySettings
from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.llm.testing import ScriptedProvider, script
from anvild.sandbox.secrets import Redactor
from anvild.telemetry.export import BoundedProcessor
from anvild.telemetry.traces import Telemetry, parse_headers
from tests.unit.session.support import Models, ask, new, running, target

KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
USAGE = Usage(input=120, output=30, cache_read=0, cache_write=0)


class Receiver:
    """An OTLP/HTTP trace receiver on a free port: each POST to /v1/traces decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    received.requests.append(request)
                    received.headers.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in span.attributes:
        value = item.value
        kind = value.WhichOneof("value")
        out[item.key] = (
            [v.string_value for v in value.array_value.values]
            if kind == "array_value"
            else getattr(value, kind)
        )
    return out


def metric_points(metrics: Any) -> dict[str, Any]:
    """The metrics of an in-memory reader's data, by name."""
    return {
        m.name: m for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }


def two_tools() -> list[Any]:
    return [
        script.tool_call("c1", "read_file", {"file_path": "a.txt"}, usage=USAGE),
        script.tool_call("c2", "read_file", {"file_path": "missing.txt"}, usage=USAGE),
        script.text("all read", usage=USAGE),
    ]


async def run_turn(tmp_path: Path, telemetry: Telemetry, prompt: str) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("hello\n")
    pricing = Pricing(input=1.0, output=2.0, cache_read=0.0, cache_write=0.0)
    models = Models({"fake": target(ScriptedProvider(two_tools()), pricing=pricing)})
    async with running(tmp_path, models, telemetry=telemetry) as manager:
        session = await new(manager, role="tester")
        assert await ask(session, prompt) == "all read\n"


async def test_a_two_tool_turn_is_one_trace_with_genai_attributes(
    tmp_path: Path, receiver: Receiver
) -> None:
    settings = TelemetrySettings(otlp_endpoint=receiver.url, service_name="anvild-test")
    reader = InMemoryMetricReader()
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "x-team=blue"}
    telemetry = Telemetry(settings, metrics=reader, env=env)
    await run_turn(tmp_path, telemetry, f"read a.txt, my key is {KEY}")
    metrics = reader.get_metrics_data()
    telemetry.shutdown()
    spans = receiver.spans()
    assert receiver.headers[0]["x-team"] == "blue"
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == ["chat fake-model", "execute_tool read_file", "invoke_agent anvild"]
    (turn,) = by_name["invoke_agent anvild"]
    chats, tools = by_name["chat fake-model"], by_name["execute_tool read_file"]
    assert (len(chats), len(tools)) == (3, 2)
    assert {s.trace_id for s in spans} == {turn.trace_id}  # one trace per turn
    assert all(s.parent_span_id == turn.span_id for s in [*chats, *tools])
    assert turn.parent_span_id == b""
    turn_attrs = attributes(turn)
    assert turn_attrs["gen_ai.operation.name"] == "invoke_agent"
    assert turn_attrs["anvild.session.role"] == "tester"
    assert turn_attrs["anvild.turn.outcome"] == "done"
    first = attributes(min(chats, key=lambda s: s.start_time_unix_nano))
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "scripted"
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"] == "fake-model"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (120, 30)
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert first["anvild.session.id"] == turn_attrs["anvild.session.id"]
    last = attributes(max(chats, key=lambda s: s.start_time_unix_nano))
    assert last["gen_ai.response.finish_reasons"] == ["stop"]
    calls = sorted((attributes(s) for s in tools), key=lambda a: a["gen_ai.tool.call.id"])
    assert [(a["gen_ai.tool.name"], a["gen_ai.tool.call.id"]) for a in calls] == [
        ("read_file", "c1"),
        ("read_file", "c2"),
    ]
    assert "error.type" not in calls[0]
    assert calls[1]["error.type"] == "tool_error"  # missing.txt
    for span in spans:  # no content without capture_content
        assert not any(k.startswith(("gen_ai.input", "gen_ai.output")) for k in attributes(span))
        assert "gen_ai.tool.call.arguments" not in attributes(span)
    points = metric_points(metrics)
    assert sum(p.value for p in points["anvild.tool.calls"].data.data_points) == 2
    assert sum(p.value for p in points["anvild.tool.errors"].data.data_points) == 1
    usd = sum(p.value for p in points["anvild.cost"].data.data_points)
    assert usd == pytest.approx(3 * (120 * 1.0 + 30 * 2.0) / 1e6)
    assert sum(p.count for p in points["anvild.turn.duration"].data.data_points) == 1


async def test_captured_content_is_redacted(tmp_path: Path, receiver: Receiver) -> None:
    settings = TelemetrySettings(otlp_endpoint=receiver.url, capture_content=True)
    redactor = Redactor({KEY: "ANTHROPIC_API_KEY"})
    telemetry = Telemetry(settings, redact=redactor.redact, metrics=InMemoryMetricReader())
    await run_turn(tmp_path, telemetry, f"read a.txt, my key is {KEY}")
    telemetry.shutdown()
    spans = receiver.spans()
    texts = [str(v) for span in spans for v in attributes(span).values()]
    assert not any(KEY in text for text in texts)
    first = min(
        (s for s in spans if s.name.startswith("chat")), key=lambda s: s.start_time_unix_nano
    )
    sent = attributes(first)["gen_ai.input.messages"]
    assert "my key is [redacted:ANTHROPIC_API_KEY]" in sent
    tool = next(s for s in spans if attributes(s).get("gen_ai.tool.call.id") == "c1")
    assert '"a.txt"' in attributes(tool)["gen_ai.tool.call.arguments"]
    assert "hello" in attributes(tool)["gen_ai.tool.call.result"]
    last = max(
        (s for s in spans if s.name.startswith("chat")), key=lambda s: s.start_time_unix_nano
    )
    assert "all read" in attributes(last)["gen_ai.output.messages"]


class Stuck(SpanExporter):
    """An exporter whose first export hangs until released (a receiver that never answers)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        self.entered.set()
        self.release.wait(10)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_full_queue_drops_and_counts_without_blocking() -> None:
    stuck = Stuck()
    processor = BoundedProcessor(stuck, max_queue=4, batch=1, delay=0.01)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    tracer.start_span("first").end()
    assert stuck.entered.wait(5)  # the export thread is now stuck on it
    for index in range(10):
        tracer.start_span(f"s{index}").end()  # each returns at once
    assert processor.dropped == 6  # 4 queued, 6 dropped
    stuck.release.set()
    assert processor.force_flush(5000)
    assert processor.exported == 5
    provider.shutdown()


async def test_with_the_receiver_down_turns_end_and_shutdown_is_bounded(tmp_path: Path) -> None:
    closed = Receiver()  # bound, then closed: connections to its port are refused
    closed.server.server_close()
    settings = TelemetrySettings(otlp_endpoint=closed.url)
    telemetry = Telemetry(settings, metrics=InMemoryMetricReader())
    await run_turn(tmp_path, telemetry, "read a.txt")  # the turn does not wait for the export
    started = time.monotonic()
    telemetry.shutdown(timeout=0.5)
    assert time.monotonic() - started < 5
    assert telemetry.processor.exported == 0


class Collected(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


async def test_a_turn_the_sampler_drops_makes_no_spans_and_still_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    collected, reader = Collected(), InMemoryMetricReader()
    settings = TelemetrySettings(otlp_endpoint="http://unused", capture_content=True)
    telemetry = Telemetry(settings, spans=collected, metrics=reader)
    await run_turn(tmp_path, telemetry, "read a.txt")
    metrics = reader.get_metrics_data()
    telemetry.shutdown()
    assert collected.spans == []
    points = metric_points(metrics)
    assert sum(p.value for p in points["anvild.tool.calls"].data.data_points) == 2
    assert sum(p.count for p in points["gen_ai.client.token.usage"].data.data_points) == 6


def test_headers_are_key_value_pairs() -> None:
    assert parse_headers("a=1, b = two ,") == {"a": "1", "b": "two"}
    with pytest.raises(ValueError, match="'oops' is not key=value"):
        parse_headers("a=1,oops")
