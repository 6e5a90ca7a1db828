"""Benchmark: what checkpoints add to a turn, in a 20,000-file workspace.

    .venv/bin/python bench/checkpoints.py [--files 20000] [--repeat 9]

A workspace of `--files` files of 2 KiB (200 directories, a .gitignore'd build/ of 1,000 more)
is checkpointed once (the shadow index is built, as at a workspace's first turn), then:

- turn changing 10 files: `before_change` (the snapshot before the first mutating call), 10 files
  rewritten, `end_turn` (the end snapshot and the turn's `changes`): target under 300 ms;
- turn with a mutating call that changed nothing: `before_change` and `end_turn`: the two
  scans of the stat cache, nothing hashed: target under 30 ms;
- turn without a mutating call (only reads): `end_turn` alone, no snapshot at all;
- the naive baseline in the same run, `git stash`-style full copies: every file of the
  workspace copied into a snapshot directory before and after the turn (what a checkpoint
  without git's object store and stat cache costs).

Reported: milliseconds, best and median of `--repeat` turns each. What runs is the harness
alone: the file writes of the turn itself are outside the clock.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from anvild.checkpoints import Workspaces

BODY = ("x" * 63 + "\n") * 32  # 2 KiB of text


def make_workspace(root: Path, files: int) -> None:
    per_dir = max(1, files // 200)
    for n in range(files):
        directory = root / f"pkg{n // per_dir:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"mod{n % per_dir:03d}.py").write_text(f"# {n}\n{BODY}")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    for n in range(1000):
        (root / "build" / f"obj{n}.o").write_text(BODY)


def change_ten(root: Path, round_: int) -> None:
    for n in range(10):
        path = root / f"pkg{n:03d}" / "mod000.py"
        path.write_text(f"# round {round_}\n{BODY}")


async def timed(action: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await action()
    return (time.perf_counter() - start) * 1000


def full_copy(root: Path, into: Path) -> None:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(root, into, ignore=shutil.ignore_patterns(".git", "build"))


def summary(name: str, times: list[float], target: float | None) -> str:
    best, median = min(times), statistics.median(times)
    goal = (
        ""
        if target is None
        else f"  (target < {target:g} ms: {'ok' if median < target else 'MISSED'})"
    )
    return f"{name:<44} best {best:8.1f} ms  median {median:8.1f} ms{goal}"


async def main(files: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        make_workspace(root, files)
        checkpoints = Workspaces(Path(tmp) / "data").session("bench", root)
        start = time.perf_counter()
        checkpoints.begin_turn(0, "first", 0)
        await checkpoints.before_change()
        await checkpoints.end_turn("done")
        first = (time.perf_counter() - start) * 1000
        ten: list[float] = []
        nothing: list[float] = []
        reading: list[float] = []
        copies: list[float] = []
        for round_ in range(1, repeat + 1):
            checkpoints.begin_turn(3 * round_, "ten", 0)
            spent = await timed(checkpoints.before_change)
            change_ten(root, round_)
            spent += await timed(lambda: checkpoints.end_turn("done"))
            ten.append(spent)
            checkpoints.begin_turn(3 * round_ + 1, "nothing", 0)
            spent = await timed(checkpoints.before_change)
            spent += await timed(lambda: checkpoints.end_turn("done"))
            nothing.append(spent)
            checkpoints.begin_turn(3 * round_ + 2, "read only", 0)
            reading.append(await timed(lambda: checkpoints.end_turn("done")))
            start = time.perf_counter()
            full_copy(root, Path(tmp) / "copy-before")
            change_ten(root, round_)
            full_copy(root, Path(tmp) / "copy-after")
            copies.append((time.perf_counter() - start) * 1000)
        step = checkpoints.turn(3)
        assert step is not None
        assert step.changes.count("\n") == 10, step.changes
        print(f"workspace: {files} files (+1000 ignored), first checkpoint {first:.0f} ms")
        print(summary("turn changing 10 files", ten, 300))
        print(summary("turn with a mutating call, nothing changed", nothing, 30))
        print(summary("turn without a mutating call", reading, 30))
        print(summary("baseline: full copies before and after", copies, None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    trio.run(main, args.files, args.repeat)
