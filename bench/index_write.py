"""Benchmark: one write of the session index during a burst of `new`s, whole against incremental.

    .venv/bin/python bench/index_write.py [--sessions 1000 10000] [--writes 10]

N session files (300 bytes each) in a temporary directory and their index entries, written
once; then `--writes` writes where one entry is new (a `Pending`, as a just-created session's)
and the rest are the entries of the last write: with the one-shot `write_index` (every entry
encoded each time) and with one `IndexWriter` (only the new one). Prints the process's CPU and
the wall time per write (each includes the fsyncs of the file and its directory).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anvild.llm.stream import Usage
from anvild.store import IndexEntry, IndexWriter, Pending, SessionStatus, SessionSummary
from anvild.store.index import write_index


def measure(
    writes: int,
    write: Callable[[Sequence[IndexEntry | Pending]], object],
    items: list[IndexEntry | Pending],
) -> tuple[float, float]:
    write(items)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(writes):
        write(items)
    return (time.process_time() - cpu0) / writes * 1000, (
        time.perf_counter() - wall0
    ) / writes * 1000


def one(count: int, writes: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        pending: list[IndexEntry | Pending] = []
        for i in range(count):
            session_id = f"{i:08x}"
            (directory / f"{session_id}.jsonl").write_bytes(b"x" * 300)
            summary = SessionSummary(
                session_id, None, "developer", "m0", "/src/app", dt.datetime.now(dt.UTC),
                SessionStatus.IDLE, None, False, True, Usage(0, 0, 0, 0), "-",
            )  # fmt: skip
            pending.append(Pending(summary, 300, 2))

        def path_for(session_id: str) -> Path:
            return directory / f"{session_id}.jsonl"

        def whole(items: Sequence[IndexEntry | Pending]) -> object:
            return write_index(directory, items, path_for)

        writer = IndexWriter(directory, path_for)
        done: list[IndexEntry | Pending] = list(writer.write(pending).values())
        burst = [*done[:-1], pending[-1]]  # the last one just created: a Pending
        once = measure(writes, whole, burst)
        kept = measure(writes, writer.write, burst)
        print(
            f"{count} sessions, one new: write_index CPU {once[0]:.2f} ms, wall "
            f"{once[1]:.2f} ms; IndexWriter CPU {kept[0]:.2f} ms, wall {kept[1]:.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--writes", type=int, default=10)
    args = parser.parse_args()
    print(f"load average before: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    for count in args.sessions:
        one(count, args.writes)
    print(f"load average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
