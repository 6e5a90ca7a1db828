"""Benchmark: what a hand-over between daemons costs a `scripts/conductor` run.

    .venv/bin/python bench/multi_host.py [--steps 8] [--runs 3]

Two `anvild` processes on this machine (TCP with tokens, one bare bead remote, one fake
provider answering at once) and a workflow that is a chain of `--steps` steps alternating
between sessions `a` and `b`. Each run is timed from the conductor's start to its exit:
`one daemon` places both sessions on d1 (`--place`), `two daemons` puts `b` on d2, so every
step hands its bead's dependency over to the other daemon, which must pull it before it can
claim. Reported: seconds per step for each (the median of `--runs` runs) and the ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.test_daemon_cli import Anvild  # noqa: E402
from tests.integration.test_sessions_e2e import FakeServer  # noqa: E402
from tests.integration.test_workflows_e2e import models_config  # noqa: E402

CONDUCTOR = ROOT / "scripts" / "conductor"


def workflow(steps: int) -> str:
    text = "name: bench\nsessions:\n  a: {role: planner}\n  b: {role: planner}\nsteps:\n"
    for n in range(1, steps + 1):
        text += f'  - id: s{n}\n    session: {"ab"[n % 2]}\n    prompt: "step {n}"\n'
        if n > 1:
            text += f"    needs: [s{n - 1}]\n"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        fake = FakeServer(tmp, [{"text": "done", "repeat": True}])
        remote = tmp / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
        models = models_config(tmp, fake.url).read_text()
        daemons, argv = [], [sys.executable, str(CONDUCTOR)]
        try:
            for host in ("d1", "d2"):
                (tmp / host).mkdir()
                config = tmp / host / "config.toml"
                config.write_text(f'{models}\n[beads]\nremote = "{remote}"\nhost = "{host}"\n')
                daemon = Anvild(tmp / host / "ns", "--config", str(config), "--listen",
                                "tcp!127.0.0.1!0")  # fmt: skip
                daemons.append(daemon)
                found = re.search(r"tcp!127\.0\.0\.1!\d+", daemon.wait_serving())
                assert found is not None
                token = tmp / host / "ns" / "agent.token"
                argv += ["--daemon", f"{host}={found.group(0)}", "--token-file", f"{host}={token}"]
            (tmp / "bench.yaml").write_text(workflow(args.steps))
            env = {k: v for k, v in os.environ.items() if k != "NAMESPACE"}
            env["XDG_CONFIG_HOME"] = str(tmp / "xdg-config")
            modes = {
                "one daemon": ["--place", "a=d1", "--place", "b=d1"],
                "two daemons": ["--place", "a=d1", "--place", "b=d2"],
            }
            times: dict[str, list[float]] = {mode: [] for mode in modes}
            for run in range(args.runs):
                for mode, place in modes.items():
                    run_id = f"r{run}-{mode.split()[0]}"
                    start = time.perf_counter()
                    done = subprocess.run(
                        [*argv, *place, "--run", run_id, str(tmp / "bench.yaml")],
                        capture_output=True, text=True, env=env, cwd=tmp, timeout=600,
                    )  # fmt: skip
                    elapsed = time.perf_counter() - start
                    if done.returncode != 0:
                        raise SystemExit(f"{mode}: the conductor failed: {done.stderr}")
                    times[mode].append(elapsed)
        finally:
            for daemon in daemons:
                daemon.stop()
            fake.stop()
    per_step = {mode: statistics.median(t) / args.steps for mode, t in times.items()}
    for mode, seconds in per_step.items():
        print(f"{mode}: {seconds:.2f} s per step (median of {args.runs} runs of {args.steps})")
    print(f"ratio two/one: {per_step['two daemons'] / per_step['one daemon']:.2f}")
    load = os.getloadavg()[0]
    print(f"(load average {load:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
