"""Benchmark: `anvilctl stats` over many sessions' records.

    .venv/bin/python bench/stats.py [--sessions 10000] [--turns 3] [--repeat 3] [--dir DIR]

Writes `--sessions` generated journals (tests/support/stats_records.py: up to `--turns` turns
each, with tool calls, usage reports, model and role changes and compactions; about 5 KB a
session) into DIR (a temporary directory unless given; an existing DIR with that many sessions
is reused), then times `anvilctl.stats.summarise` grouped by model (best and median of
`--repeat`, page cache warm: the first run reads the files once more). Target: 10,000
sessions in under 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from anvilctl import stats  # noqa: E402
from anvild.llm.registry import Pricing  # noqa: E402
from tests.support.stats_records import write_sessions  # noqa: E402

PRICES = {"sonnet": Pricing(3.0, 15.0, 0.3, 3.75), "haiku": Pricing(1.0, 5.0, 0.1, 1.25)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = args.dir or Path(scratch)
        sessions = data / "sessions"
        if not sessions.is_dir() or len(list(sessions.glob("*.jsonl"))) != args.sessions:
            started = time.perf_counter()
            write_sessions(data, args.sessions, turns=args.turns)
            print(f"wrote {args.sessions} sessions in {time.perf_counter() - started:.1f} s")
        size = sum(p.stat().st_size for p in sessions.glob("*.jsonl"))
        stats.summarise(data, "model", PRICES.get)  # warm the page cache
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = stats.summarise(data, "model", PRICES.get)
            times.append(time.perf_counter() - started)
        print(
            f"{len(result.total.sessions)} sessions, {size / 1e6:.1f} MB of records, "
            f"{result.total.requests} requests: best {min(times):.3f} s, "
            f"median {statistics.median(times):.3f} s (target < 2 s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
