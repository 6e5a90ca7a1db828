"""Cold start of `anvilctl ls|read|write|rdwr|stat`: each run a new process, medians of many.

    .venv/bin/python bench/anvilctl.py [--runs 40] [--baseline DIR]

Scripts call these commands in loops (a conductor polling its sessions), so what counts is the
wall time of one whole process: interpreter start, imports, connecting, the 9P exchange, exit.
One daemon (`python -m anvild` on a temporary namespace and data directory, an empty
XDG_CONFIG_HOME: no user config)
serves every run over its Unix socket. The commands, as a script would write them:

    anvilctl ls agent                    anvilctl read agent/version
    echo ping | anvilctl write agent/ctl echo ping | anvilctl rdwr agent/ctl
    anvilctl stat agent/version

Each is run through the installed console script (`.venv/bin/anvilctl`, the file `pip`/`uv`
generate) with ``PYTHONPATH`` naming the checkout whose `anvilctl` runs, so both rows below start
the same way: `ours` is this checkout; `baseline` (with ``--baseline DIR``, another checkout, e.g.
``git worktree add /tmp/anvilctl-base COMMIT``) the previous one, with the same venv. The anchor
is `python3 -c pass` from the same venv. A round runs every command once for each row, rows
interleaved, so a burst of load on the machine hits all of them; the figures are medians over the
rounds, and the ratios are taken within this run. Wall time is what a script waits; the CPU time
of each process (user + system, from getrusage of the children) moves less with the machine's
other load. The load average is printed before and after: compare ratios, not milliseconds
across runs. Both checkouts are byte-compiled first
(`python -m compileall anvild anvilctl`, as `make test` does; with PYTHONDONTWRITEBYTECODE set a
stale .pyc would otherwise be compiled anew by every run).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 60.0

# (label, argv after `anvilctl`, stdin)
COMMANDS: list[tuple[str, list[str], bytes]] = [
    ("ls", ["ls", "agent"], b""),
    ("read", ["read", "agent/version"], b""),
    ("write", ["write", "agent/ctl"], b"ping\n"),
    ("rdwr", ["rdwr", "agent/ctl"], b"ping\n"),
    ("stat", ["stat", "agent/version"], b""),
]


class BenchError(Exception):
    pass


@contextmanager
def daemon(work: Path) -> Iterator[Path]:
    """A daemon serving `agent` in a fresh namespace; yields the namespace directory."""
    namespace = work / "ns"
    env = {**os.environ, "XDG_CONFIG_HOME": str(work / "config"), "XDG_DATA_HOME": str(work)}
    argv = [sys.executable, "-m", "anvild", "--namespace", str(namespace)]
    argv += ["--data-dir", str(work / "data")]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        seen = []
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline and (line := proc.stderr.readline()):
            seen.append(line)
            if "serving " in line:
                break
        else:
            raise BenchError(f"anvild did not start: {''.join(seen)}")
        yield namespace
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def console_script() -> Path:
    script = Path(sys.executable).parent / "anvilctl"
    if not script.is_file():
        raise BenchError(f"{script} does not exist: run this with the venv's python (make setup)")
    return script


def timed(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run, in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    result = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise BenchError(f"{argv} exited {result.returncode}: {result.stderr.decode()}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return elapsed, cpu


def table(title: str, labels: list[str], runs: dict[tuple[str, str], list[float]]) -> None:
    """Medians per command and over all commands, and the ratios of the `all` column."""
    print(f"| {title} | " + " | ".join(verb for verb, _, _ in COMMANDS) + " | all |")
    print("|---" * (len(COMMANDS) + 2) + "|")
    medians: dict[str, float] = {}
    for label in labels:
        per_verb = [statistics.median(runs[label, verb]) * 1e3 for verb, _, _ in COMMANDS]
        every = [t for verb, _, _ in COMMANDS for t in runs[label, verb]]
        medians[label] = statistics.median(every) * 1e3
        cells = " | ".join(f"{ms:.1f}" for ms in per_verb)
        print(f"| {label} | {cells} | {medians[label]:.1f} |")
    print()
    for label in labels[1:]:
        print(f"  {label} / {labels[0]}: {medians[label] / medians[labels[0]]:.2f}x")
    if "baseline" in medians:
        print(f"  baseline / ours (speed-up): {medians['baseline'] / medians['ours']:.2f}x")
    print()


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=40, help="rounds (each runs every command once)")
    p.add_argument("--baseline", type=Path, metavar="DIR", help="another checkout to compare")
    args = p.parse_args()
    rows = {"ours": REPO}
    if args.baseline is not None:
        if not (args.baseline / "anvilctl" / "__main__.py").is_file():
            raise BenchError(f"{args.baseline} is not a checkout of anvild")
        rows["baseline"] = args.baseline.resolve()
    script = str(console_script())
    for path in rows.values():  # as `make test` does: runs read .pyc files, as installed ones do
        compileall = [sys.executable, "-m", "compileall", "-q", "anvild", "anvilctl"]
        subprocess.run(compileall, cwd=path, check=True)
    print(
        f"# anvilctl cold start  {time.strftime('%Y-%m-%d %H:%M')}  cores={os.cpu_count()}  "
        f"load={os.getloadavg()[0]:.2f}  python={sys.version.split()[0]}  runs={args.runs}"
    )
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    anchor = "python -c pass"
    with tempfile.TemporaryDirectory(prefix="anvilctl-bench-") as tmp, daemon(Path(tmp)) as ns:
        base_env = {**os.environ, "NAMESPACE": str(ns)}
        envs = {label: {**base_env, "PYTHONPATH": str(path)} for label, path in rows.items()}
        for _ in range(args.runs):
            for verb, argv, stdin in COMMANDS:
                runs = [(anchor, [sys.executable, "-c", "pass"], b"", base_env)]
                runs += [
                    (label, [sys.executable, script, *argv], stdin, envs[label]) for label in rows
                ]
                for label, run, data, env in runs:
                    seconds, cpu_seconds = timed(run, data, env)
                    wall.setdefault((label, verb), []).append(seconds)
                    cpu.setdefault((label, verb), []).append(cpu_seconds)
    print(f"# load after={os.getloadavg()[0]:.2f}\n")
    table("wall ms (median)", [anchor, *rows], wall)
    table("CPU ms (user+sys, median)", [anchor, *rows], cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
