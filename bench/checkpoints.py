"""Benchmark: what checkpoints add to a turn, in a 20,000-file workspace.

    .venv/bin/python bench/checkpoints.py [--files 20000] [--repeat 9] [--no-baseline]

A workspace of `--files` files of 2 KiB (200 directories, a .gitignore'd build/ of 1,000 more)
is checkpointed once (the shadow index is built, as at a workspace's first turn), then, with
the change watcher and again without it (a second shadow repository of the same workspace):

- turn changing 10 files: `before_change` (the snapshot before the first mutating call), 10 files
  rewritten, `end_turn` (the end snapshot and the turn's `changes`): target under 300 ms;
- turn with a mutating call that changed nothing: `before_change` and `end_turn`: with the
  change watcher (inotify) no scan at all, target under 30 ms; without it (`watch=False`, as
  on a non-local file system) the two scans of the stat cache, nothing hashed;
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
from anvild.checkpoints.watch import Watcher

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


async def turns(
    root: Path, data: Path, repeat: int, *, watch: bool, baseline: bool
) -> dict[str, list[float]]:
    """`repeat` rounds of the three turns (and the baseline's copies), in milliseconds."""
    workspaces = Workspaces(data, watch=watch)
    checkpoints = workspaces.session("bench", root)
    start = time.perf_counter()
    checkpoints.begin_turn(0, "first", 0)
    await checkpoints.before_change()
    await checkpoints.end_turn("done")
    found: dict[str, list[float]] = {
        "first": [(time.perf_counter() - start) * 1000],
        "ten": [],
        "nothing": [],
        "reading": [],
        "copies": [],
    }
    for round_ in range(1, repeat + 1):
        checkpoints.begin_turn(3 * round_, "ten", 0)
        spent = await timed(checkpoints.before_change)
        change_ten(root, round_)
        spent += await timed(lambda: checkpoints.end_turn("done"))
        found["ten"].append(spent)
        checkpoints.begin_turn(3 * round_ + 1, "nothing", 0)
        spent = await timed(checkpoints.before_change)
        spent += await timed(lambda: checkpoints.end_turn("done"))
        found["nothing"].append(spent)
        checkpoints.begin_turn(3 * round_ + 2, "read only", 0)
        found["reading"].append(await timed(lambda: checkpoints.end_turn("done")))
        if baseline:
            start = time.perf_counter()
            full_copy(root, data.parent / "copy-before")
            change_ten(root, round_)
            full_copy(root, data.parent / "copy-after")
            found["copies"].append((time.perf_counter() - start) * 1000)
        else:
            change_ten(root, round_)  # the same edits between turns as with the baseline
    step = checkpoints.turn(3)
    assert step is not None
    assert step.changes.count("\n") == 10, step.changes
    watcher = workspaces.workspace(root).shadow.watcher
    assert watch == (watcher is not None and watcher.watching), watcher and watcher.off
    workspaces.close()
    return found


def watcher_setup(root: Path, repeat: int) -> tuple[int, list[float]]:
    """What starting a change watcher costs (a walk adding a watch per directory): the number
    of directories and milliseconds per start; a rebuild after a directory moved costs the same."""
    times = []
    watched = 0
    for _ in range(repeat):
        watcher = Watcher(root)
        start = time.perf_counter()
        watcher.start()
        times.append((time.perf_counter() - start) * 1000)
        assert watcher.watching, watcher.off
        watched = len(watcher._paths)
        watcher.close()
    return watched, times


async def main(files: int, repeat: int, baseline: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        make_workspace(root, files)
        directories, setup = watcher_setup(root, repeat)
        watched = await turns(root, Path(tmp) / "data", repeat, watch=True, baseline=baseline)
        scanned = await turns(root, Path(tmp) / "data2", repeat, watch=False, baseline=False)
        print(
            f"workspace: {files} files (+1000 ignored), first checkpoint "
            f"{watched['first'][0]:.0f} ms (watched), {scanned['first'][0]:.0f} ms (scanned)"
        )
        print(summary("turn changing 10 files", watched["ten"], 300))
        print(summary("  the same, without the watcher", scanned["ten"], 300))
        print(summary("turn with a mutating call, nothing changed", watched["nothing"], 30))
        print(summary("  the same, without the watcher", scanned["nothing"], 30))
        print(summary("turn without a mutating call", watched["reading"], 30))
        print(summary(f"watcher start ({directories} directories, once)", setup, None))
        if baseline:
            print(summary("baseline: full copies before and after", watched["copies"], None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the full copies (the slow part)"
    )
    args = parser.parse_args()
    trio.run(main, args.files, args.repeat, not args.no_baseline)
