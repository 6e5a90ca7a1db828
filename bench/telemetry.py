"""Benchmark: what OpenTelemetry adds to the agent loop, with its receiver down.

    .venv/bin/python bench/telemetry.py [--steps 100] [--repeat 9]

The turn of bench/loop.py (a scripted provider, one no-op tool call per step, events drained
by a concurrent reader), run in rotation: without telemetry; with `anvild.telemetry` exporting
to a receiver that takes everything at once (an exporter that only counts: "up"); and
exporting over OTLP/HTTP to a port that refuses connections ("down": the spans are made,
queued, and fail to export, with the exporter's retries, on the export thread). Reported per
step, best and median of each: wall milliseconds, CPU milliseconds of the turn's thread (what
telemetry takes from the loop, steadier than wall time on a loaded machine) and of the whole
process (the export thread too). The issue's check: with the receiver down, turns are not
slower (down within 10% of up); the cost of making spans at all is "up" - "off".
"""

from __future__ import annotations

import argparse
import logging
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from loop import Noop, make_scripts  # noqa: E402  (bench/loop.py: the same turn)
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402

from anvild.agent.channel import EventChannel  # noqa: E402
from anvild.agent.events import AgentEvent  # noqa: E402
from anvild.agent.loop import Agent, AgentConfig  # noqa: E402
from anvild.agent.tools.base import (  # noqa: E402
    ToolContext,
)
from anvild.agent.tools.registry import ToolRegistry  # noqa: E402
from anvild.config.load import TelemetrySettings  # noqa: E402
from anvild.llm.testing import ScriptedProvider  # noqa: E402
from anvild.telemetry import Who  # noqa: E402
from anvild.telemetry.traces import Telemetry  # noqa: E402


def closed_endpoint() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def turn(steps: int, cwd: str, telemetry: Telemetry | None) -> tuple[float, float, float]:
    channel = EventChannel()
    emit = channel.send_nowait
    built: list[Agent] = []
    if telemetry is not None:
        observe = telemetry.observer(
            lambda: Who("bench", "developer"),
            "scripted",
            "bench",
            None,
            lambda: built[0].messages if built else (),
        )

        def both(event: AgentEvent) -> None:
            channel.send_nowait(event)
            observe(event)

        emit = both
    agent = Agent(
        ScriptedProvider(make_scripts(steps)),
        ToolRegistry([Noop()]),
        AgentConfig(model="bench", max_steps=steps),
        ToolContext(cwd=cwd),
        emit=emit,
    )
    built.append(agent)

    async def reader() -> None:
        async for _ in channel:
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        start, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
        finished = await agent.run_turn("Look at every file.")
        elapsed = time.perf_counter() - start
        thread, process = time.thread_time() - thread, time.process_time() - process
        channel.close()
    assert finished.outcome == "done", finished
    return elapsed, thread, process


class Counting(SpanExporter):
    """A receiver that is always up and answers at once."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)  # the retries' warnings
    up = Telemetry(
        TelemetrySettings(otlp_endpoint="http://up"),
        spans=Counting(),
        metrics=InMemoryMetricReader(),
    )
    telemetry = Telemetry(TelemetrySettings(otlp_endpoint=closed_endpoint()))
    modes: dict[str, Telemetry | None] = {"off": None, "up": up, "down": telemetry}
    measures = ("wall", "thread CPU", "process CPU")
    times = {(name, m): list[float]() for name in modes for m in measures}
    with tempfile.TemporaryDirectory() as cwd:
        for mode in modes.values():  # warm-up
            trio.run(turn, args.steps, cwd, mode)
        for _ in range(args.repeat):
            for name, mode in modes.items():
                got = trio.run(turn, args.steps, cwd, mode)
                for measure, value in zip(measures, got, strict=True):
                    times[name, measure].append(value / args.steps * 1000)
    processor = telemetry.processor
    up.shutdown(timeout=1.0)
    telemetry.shutdown(timeout=1.0)
    median = {key: statistics.median(values) for key, values in times.items()}
    print(f"steps per turn:          {args.steps}")
    for (name, measure), values in times.items():
        best, mid = min(values), median[name, measure]
        print(f"{name:5} {measure:11} per step: best {best:.3f} ms, median {mid:.3f} ms")
    for measure in measures:
        ratio = median["down", measure] / median["up", measure]
        cost = median["up", measure] - median["off", measure]
        print(f"{measure}: down / up (medians) {ratio:.3f}; up - off {cost:.3f} ms per step")
    counts = processor.exported, processor.failed, processor.dropped
    print("spans exported {}, failed {}, dropped {}".format(*counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
