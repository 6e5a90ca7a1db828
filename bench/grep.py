"""Our grep tool against ripgrep on the same generated tree.

    .venv/bin/python bench/grep.py [--files 50000] [--repeat 3] [--keep]

Generates a tree of small text files under /tmp (never in the repository): 500 directories of
100 files, about 1.5 KB each, a `.gitignore` excluding one directory in ten, a few credential files
and a rare needle. Then times, best of `--repeat` runs each, cold caches not attempted:

- ours: the `grep` tool through `ToolRegistry.dispatch` (files mode), as the agent would call it;
- rg:   `rg --files-with-matches --hidden --no-require-git --no-messages NEEDLE TREE`, which
        searches hidden files and applies .gitignore outside a git repository, like ours.

It checks that both report the same number of matching files (ours skips credential files, so the
tree's credential files do not contain the needle), and prints the times and the ratio.
"""

from __future__ import annotations

import argparse
import random
import shutil
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


async def run_ours(root: Path) -> tuple[float, int]:
    ctx = ToolContext(cwd=root)
    registry = ToolRegistry([Grep()])
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
        ours = [trio.run(run_ours, root) for _ in range(args.repeat)]
        theirs = [run_rg(rg, root) for _ in range(args.repeat)]
        ours_t = min(t for t, _ in ours)
        rg_t = min(t for t, _ in theirs)
        ours_n, rg_n = ours[0][1], theirs[0][1]
        print(f"matching files: expected {expected}, ours {ours_n}, rg {rg_n}")
        print(f"ours (grep tool, files mode): {ours_t * 1000:.0f} ms (best of {args.repeat})")
        print(f"rg --files-with-matches:      {rg_t * 1000:.0f} ms (best of {args.repeat})")
        print(f"ratio ours/rg: {ours_t / rg_t:.1f}x")
        return 0 if ours_n == rg_n == expected else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
