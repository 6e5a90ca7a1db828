"""CPU of the processes `make test` starts by the hundred: a daemon and anvilctl's session commands.

    .venv/bin/python bench/starts.py [--runs 8] [--baseline DIR]

Rows: `import anvild.__main__`; a test daemon (tests/integration/test_daemon_cli.py's isolated
environment, the fake llama-server as the embedded model) started, left 2 s after `serving`
(its /health wait done), stopped with SIGTERM; `import anvilctl.__main__, anvilctl.sessions,
anvilctl.headless` (what `new`, `send`, `wait`, `out` and `-p` load). Each is the CPU (user+sys)
of the whole process and its children. `--baseline DIR`, an older tree (`git archive COMMIT
anvild anvilctl tests/support tests/__init__.py | tar -x -C DIR`, then `python -m compileall -q
DIR`), runs the same rows from DIR, alternating with this checkout in every round.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTLE = 2.0  # seconds the daemon runs after `serving`: the fake server answers /health by then

FAKE = """#!/bin/sh
exec "{python}" "{tree}/tests/support/fake_llama_server.py" -- "$@"
"""


def _cpu(run: Callable[[], None]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _python(tree: Path, code: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run([sys.executable, "-c", code], cwd=tree, check=True)

    return run


def _daemon(tree: Path) -> Callable[[], None]:
    def run() -> None:
        with tempfile.TemporaryDirectory(prefix="anvil-bench-starts-") as tmp:
            home = Path(tmp)
            fake = home / "fake-llama-server"
            fake.write_text(FAKE.format(python=sys.executable, tree=tree))
            fake.chmod(0o755)
            (home / "model.gguf").write_text("")
            (home / "template.jinja").write_text("")
            env = {k: v for k, v in os.environ.items() if k != "ANVIL_LOG" and "API_KEY" not in k}
            env |= {
                "PYTHONPATH": str(tree),
                "XDG_CONFIG_HOME": str(home / "xdg-config"),
                "XDG_DATA_HOME": str(home / "xdg-data"),
                "ANVIL_LLAMA_SERVER": str(fake),
                "ANVIL_LLAMA_MODEL": str(home / "model.gguf"),
                "ANVIL_LLAMA_TEMPLATE": str(home / "template.jinja"),
            }
            argv = ["-m", "anvild", "--namespace", str(home / "ns"), "--data-dir", str(home / "d")]
            proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=tree,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            assert proc.stderr is not None
            seen = b""
            while b"serving" not in seen:
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    raise SystemExit(f"the daemon from {tree} did not start: {seen.decode()}")
                seen += chunk
            time.sleep(SETTLE)
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)

    return run


def _rows(tree: Path) -> dict[str, Callable[[], None]]:
    return {
        "import anvild.__main__": _python(tree, "import anvild.__main__"),
        "daemon start, 2 s, stop": _daemon(tree),
        "anvilctl session commands' imports": _python(
            tree, "import anvilctl.__main__, anvilctl.sessions, anvilctl.headless"
        ),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--baseline", type=Path, help="an older tree, run alternately with this one")
    args = p.parse_args()
    trees = {"ours": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rows = {
        (name, label): run for name, tree in trees.items() for label, run in _rows(tree).items()
    }
    seconds: dict[tuple[str, str], list[float]] = {key: [] for key in rows}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for _ in range(args.runs):
        for key, run in rows.items():
            seconds[key].append(_cpu(run))
    for (name, label), values in seconds.items():
        print(
            f"{label:38s} {name:8s} CPU s min {min(values):.3f} "
            f"median {statistics.median(values):.3f} (n={len(values)})"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
