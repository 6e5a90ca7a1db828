"""Our grep tool against ripgrep on the same generated tree.

    .venv/bin/python bench/grep.py [--files 50000] [--repeat 3] [--keep]

Generates a tree of small text files under /tmp (never in the repository): 500 directories of
100 files, about 1.5 KB each, a `.gitignore` excluding one directory in ten, a few credential files
and a rare needle. Then times, best of `--repeat` runs each, cold caches not attempted:

- ours: the `grep` tool through `ToolRegistry.dispatch` (files mode), as the agent would call it,
        with ripgrep as its prefilter (the default where rg is installed);
- pure: the same tool without ripgrep (`Grep(ripgrep=None)`: the fallback where rg is absent);
- rg:   `rg --files-with-matches --hidden --no-require-git --no-messages NEEDLE TREE`, which
        searches hidden files and applies .gitignore outside a git repository, like ours.

The three run in turn, `--repeat` rounds; best and median of each are printed with the ratios
of the medians (the machine is shared: a round's three runs see about the same load). It checks
that all report the same number of matching files (ours skips credential files, so the tree's
credential files do not contain the needle).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from anvild.agent.tools import ToolContext, ToolRegistry
from anvild.agent.tools.search import Grep
from anvild.llm.types import ToolCall

NEEDLE = "frobnicate_widget"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "return",
    "value",
    "self",
    "import",
    "from",
    "class",
    "def",
    "None",
    "True",
    "False",
    "buffer",
    "stream",
    "parse",
    "token",
    "error",
    "handler",
    "config",
    "module",
    "result",
    "index",
    "count",
]


def generate(root: Path, n_files: int, seed: int = 7) -> int:
    """Write the tree; return how many searchable files contain the needle."""
    rng = random.Random(seed)
    per_dir = 100
    n_dirs = max(1, n_files // per_dir)
    ignored_dirs = {f"d{i:04}" for i in range(0, n_dirs, 10)}
    (root / ".gitignore").write_text("".join(f"{d}/\n" for d in sorted(ignored_dirs)))
    (root / ".env").write_text("TOKEN=abc\n")
    expected = 0
    for d in range(n_dirs):
        directory = root / f"d{d:04}"
        directory.mkdir()
        for f in range(per_dir):
            lines = [" ".join(rng.choices(WORDS, k=8)) for _ in range(30)]
            hit = rng.random() < 0.01
            if hit:
                lines[rng.randrange(len(lines))] += f" {NEEDLE}()"
                if directory.name not in ignored_dirs:
                    expected += 1
            (directory / f"f{f:03}.py").write_text("\n".join(lines) + "\n")
    return expected


def count_ours(content: str) -> int:
    if content.startswith("No matches"):
        return 0
    last = content.rsplit("\n", 1)[-1]
    if last.startswith("[showing"):
        return int(last.split(" of ")[1].split(" ")[0])
    return len(content.split("\n"))


async def run_ours(root: Path, ripgrep: str | None = "rg") -> tuple[float, int]:
    ctx = ToolContext(cwd=root)
    registry = ToolRegistry([Grep(ripgrep=ripgrep)])
    start = time.perf_counter()
    result = await registry.dispatch(ToolCall("b", "grep", {"pattern": NEEDLE}), ctx)
    elapsed = time.perf_counter() - start
    assert not result.is_error, result.content
    return elapsed, count_ours(result.content)


def run_rg(rg: str, root: Path) -> tuple[float, int]:
    cmd = [rg, "--files-with-matches", "--hidden", "--no-require-git", "--no-messages"]
    start = time.perf_counter()
    proc = subprocess.run([*cmd, NEEDLE, str(root)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    return elapsed, len(proc.stdout.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the tree in /tmp")
    args = parser.parse_args()
    rg = shutil.which("rg")
    if rg is None:
        print("ripgrep (rg) is not installed; install it with the Makefile", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="anvil-grep-bench-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        expected = generate(root, args.files)
        print(f"tree: {args.files} files in {root} ({time.perf_counter() - t0:.1f} s to generate)")
        runs: dict[str, list[tuple[float, int]]] = {"ours": [], "pure": [], "rg": []}
        for _ in range(args.repeat):
            runs["ours"].append(trio.run(run_ours, root))
            runs["pure"].append(trio.run(run_ours, root, None))
            runs["rg"].append(run_rg(rg, root))
        counts = {name: found[0][1] for name, found in runs.items()}
        print(
            f"matching files: expected {expected}, "
            + ", ".join(f"{k} {v}" for k, v in counts.items())
        )
        median = {name: statistics.median(t for t, _ in found) for name, found in runs.items()}
        labels = {
            "ours": "ours (grep tool, rg prefilter)",
            "pure": "pure (grep tool, no rg)",
            "rg": "rg --files-with-matches",
        }
        for name, found in runs.items():
            best, middle = min(t for t, _ in found) * 1000, median[name] * 1000
            print(f"{labels[name]:<32}{best:>7.0f} ms best, {middle:>7.0f} ms median")
        print(f"ratio ours/rg: {median['ours'] / median['rg']:.1f}x (medians of {args.repeat})")
        print(f"ratio pure/rg: {median['pure'] / median['rg']:.1f}x")
        ours_n, rg_n = counts["ours"], counts["rg"]
        if counts["pure"] != ours_n:
            return 1
        return 0 if ours_n == rg_n == expected else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
