"""Benchmark: what checkpoints add to a turn, in a 20,000-file workspace.

    .venv/bin/python bench/checkpoints.py [--files 20000] [--repeat 9] [--no-baseline]

A workspace of `--files` files of 2 KiB (200 directories, a .gitignore'd build/ of 1,000 more)
is checkpointed once (the shadow index is built, as at a workspace's first turn), then each
turn is timed with the change watcher and without it (a second shadow repository of the same
workspace, its snapshots taken right after the first's):

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
import functools
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


async def turns(root: Path, data: Path, repeat: int, *, baseline: bool) -> dict[str, list[float]]:
    """`repeat` rounds of the three turns (and the baseline's copies), in milliseconds, each
    turn timed with the change watcher and without it (a second shadow repository of the same
    workspace, its snapshot taken right after: both see the same files and the same load)."""
    both = [Workspaces(data / "watched", watch=True), Workspaces(data / "scanned", watch=False)]
    sessions = [w.session("bench", root) for w in both]
    found: dict[str, list[float]] = {"copies": []}
    for name in ("first", "ten", "nothing", "reading"):
        for kind in ("watched", "scanned"):
            found[f"{name} {kind}"] = []

    async def turn(name: str, number: int, between: Callable[[], object] | None) -> None:
        spent = [0.0, 0.0]
        for n, checkpoints in enumerate(sessions):
            checkpoints.begin_turn(number, name, 0)
            if name != "reading":
                spent[n] += await timed(checkpoints.before_change)
        if between is not None:
            between()
        for n, checkpoints in enumerate(sessions):
            spent[n] += await timed(functools.partial(checkpoints.end_turn, "done"))
        found[f"{name} watched"].append(spent[0])
        found[f"{name} scanned"].append(spent[1])

    await turn("first", 0, None)
    for round_ in range(1, repeat + 1):
        await turn("ten", 3 * round_, functools.partial(change_ten, root, round_))
        await turn("nothing", 3 * round_ + 1, None)
        await turn("reading", 3 * round_ + 2, None)
        if baseline:
            start = time.perf_counter()
            full_copy(root, data / "copy-before")
            change_ten(root, round_)
            full_copy(root, data / "copy-after")
            found["copies"].append((time.perf_counter() - start) * 1000)
        else:
            change_ten(root, round_)  # the same edits between turns as with the baseline
    for checkpoints in sessions:
        step = checkpoints.turn(3)
        assert step is not None
        assert step.changes.count("\n") == 10, step.changes
    assert all(s.turn(3 * repeat + 1) is not None for s in sessions)
    watcher = both[0].workspace(root).shadow.watcher
    assert watcher is not None, "no watcher"
    assert watcher.watching, watcher.off
    assert both[1].workspace(root).shadow.watcher is None
    for workspaces in both:
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
        found = await turns(root, Path(tmp) / "data", repeat, baseline=baseline)
        print(
            f"workspace: {files} files (+1000 ignored), first checkpoint "
            f"{found['first watched'][0]:.0f} ms (watched), "
            f"{found['first scanned'][0]:.0f} ms (scanned)"
        )
        print(summary("turn changing 10 files", found["ten watched"], 300))
        print(summary("  the same, without the watcher", found["ten scanned"], 300))
        print(summary("turn with a mutating call, nothing changed", found["nothing watched"], 30))
        print(summary("  the same, without the watcher", found["nothing scanned"], 30))
        print(summary("turn without a mutating call", found["reading watched"], 30))
        print(summary(f"watcher start ({directories} directories, once)", setup, None))
        if baseline:
            print(summary("baseline: full copies before and after", found["copies"], None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the full copies (the slow part)"
    )
    args = parser.parse_args()
    trio.run(main, args.files, args.repeat, not args.no_baseline)
