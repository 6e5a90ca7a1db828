"""Benchmark: `SessionManager.create` in one process, without 9P: CPU and time per `new`.

    .venv/bin/python bench/new_create.py [--sessions 500] [--rounds 3]

A started manager over a scripted provider (tests/unit/session/support.py's `running`: the
store in a temporary data dir, the default cwd, no checkpoints, skills or project configs)
creates `--sessions` sessions one after another, `--rounds` times (a fresh manager and data dir
each). Per round: the process's CPU (every thread: `time.process_time`) per `new`, and the
median and 99th percentile of each `create`'s time; beside them what an fsync of a new file and
its directory costs in that directory then. Run it from a tree (`cd TREE && python
bench/new_create.py`) to compare trees: it imports the tree it is run from.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sessions import fsync_cost  # bench/sessions.py: the same measure

import anvild
from tests.unit.session.support import new, running


async def one_round(sessions: int) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        async with running(tmp, []) as manager:
            await new(manager)  # the sessions directory exists from here on
            times = []
            cpu0 = time.process_time()
            for _ in range(sessions):
                t0 = time.perf_counter()
                await new(manager)
                times.append((time.perf_counter() - t0) * 1000)
            cpu = (time.process_time() - cpu0) / sessions * 1000
            times.sort()
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            return cpu, statistics.median(times), p99, fsync_cost(manager.store.directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"anvild from {Path(anvild.__file__).parent}")
    for number in range(args.rounds):
        cpu, p50, p99, fsync = trio.run(one_round, args.sessions)
        print(
            f"round {number + 1}: {args.sessions} creates, CPU {cpu:.3f} ms each, p50 "
            f"{p50:.3f} ms, p99 {p99:.3f} ms (fsync of a file and its directory {fsync:.2f} ms)",
            flush=True,
        )
    print(f"load average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
