"""Benchmark: the provider stream read path, httpx's own transport against `LeanTransport`.

    .venv/bin/python bench/transport.py [--streams 100] [--deltas 300] [--delay 0.02]
                                        [--runs 3] [--adapter]

The fake provider server (`python -m tests.support.fake_provider`, a subprocess on 127.0.0.1)
answers every request with `--deltas` text deltas, `--delay` seconds apart (openai-chat SSE,
one event per HTTP chunk, as the sessions benchmark uses). This process opens `--streams`
streams at once, each with `open_event_stream` (`anvild.llm.http`: the status check, the body
read, the idle deadline, our SSE decoder), or with `--adapter` through the openai-chat adapter
(`OpenAiChatProvider.stream`: JSON parse and stream events too), and reads them to the end.

Reported per transport and run: this process's CPU time (`time.process_time`) per delta, the
wall time, and the fake provider's CPU; the transports alternate run by run so that the load of
a shared machine falls on both alike. `--delay 0` sends as fast as the server can, so the
client is always behind and reads many chunks per `recv`: the other end of the batching range.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from anvild.llm.http import Timeouts, open_event_stream  # noqa: E402
from anvild.llm.providers.openai_chat import OpenAiChatProvider  # noqa: E402
from anvild.llm.transport import LeanTransport  # noqa: E402
from anvild.llm.types import ChatRequest, Message  # noqa: E402


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_fake(work: Path, deltas: int, delay: float) -> tuple[subprocess.Popen[str], str]:
    text = "".join(f"d{i:04d} " for i in range(deltas))
    script = work / "turns.json"
    turn = {"text": text, "piece": 6, "chunk_delay": delay, "repeat": True}
    script.write_text(json.dumps({"turns": [turn]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_provider", "--script", str(script)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


async def one_run(url: str, lean: bool, streams: int, adapter: bool) -> tuple[int, float, float]:
    """(events or stream events read, CPU seconds, wall seconds)."""
    transport = LeanTransport() if lean else None
    counts: list[int] = []
    async with httpx.AsyncClient(transport=transport, timeout=None) as client:
        provider = OpenAiChatProvider(client, f"{url}/v1")
        request = ChatRequest(model="m", messages=[Message.user_text("go")], max_tokens=64)

        async def read_one() -> None:
            n = 0
            if adapter:
                async with provider.stream(request) as events:
                    async for _ in events:
                        n += 1
            else:
                http_request = provider.build_request(request)
                async with open_event_stream(
                    client, http_request, timeouts=Timeouts(idle=30)
                ) as sse:
                    async for _ in sse:
                        n += 1
            counts.append(n)

        cpu0, t0 = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as watching:
            if transport is not None:  # as the daemon runs it (anvild.daemon.wiring)
                await watching.start(transport.watch.run)
            async with trio.open_nursery() as nursery:
                for _ in range(streams):
                    nursery.start_soon(read_one)
            watching.cancel_scope.cancel()
        return sum(counts), time.process_time() - cpu0, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=300)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--adapter", action="store_true", help="read through the adapter")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, list[float]] = {"httpx": [], "lean": []}
    with tempfile.TemporaryDirectory(prefix="anvil-bench-") as tmp:
        proc, url = start_fake(Path(tmp), args.deltas, args.delay)
        try:
            for run in range(args.runs):
                for name in ("httpx", "lean"):
                    fake0 = cpu_seconds(proc.pid)
                    events, cpu, wall = trio.run(
                        one_run, url, name == "lean", args.streams, args.adapter
                    )
                    fake_cpu = cpu_seconds(proc.pid) - fake0
                    deltas = args.streams * args.deltas
                    per = cpu / deltas * 1e6
                    results[name].append(per)
                    print(
                        f"run {run + 1} {name:5}: {events} events, CPU {cpu:.2f} s "
                        f"({per:.1f} us per delta), wall {wall:.1f} s, "
                        f"fake provider {fake_cpu:.1f} s"
                    )
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    for name, values in results.items():
        print(f"{name:5}: median {statistics.median(values):.1f} us CPU per delta")
    ratio = statistics.median(results["lean"]) / statistics.median(results["httpx"])
    print(f"lean / httpx: {ratio:.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
