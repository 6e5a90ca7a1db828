"""The issue's unattended run: all 10 shipped eval tasks x 2 scripted models x 3 trials (60
trials) through a real daemon, then the report. `solver` answers each task's prompt by writing
the task's reference solution; `quitter` gives up at once. Every trial must be graded (no
infrastructure error), `solver` pass all 30 and `quitter` none, and the report must give pass^k
up to k = 3. Several minutes on two cores, so it runs with `make test-evals` (ANVIL_EVAL_FULL=1)
and not in `make test`, whose tests/integration/test_eval_e2e.py runs 3 tasks x 2 x 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvilctl import eval as evals
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_eval_e2e import serving_models
from tests.integration.test_headless import TIMEOUT, env_for
from tests.integration.test_sessions_e2e import FakeServer

TASKS = Path(__file__).resolve().parents[2] / "evals" / "tasks"
NAMES = sorted(p.name for p in TASKS.iterdir() if (p / "task.toml").is_file())
TRIALS = 3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("ANVIL_EVAL_FULL") != "1",
        reason="60 trials, several minutes: `make test-evals`",
    ),
]


def solver_turns() -> list[dict[str, Any]]:
    """Per task: its prompt's first line answered, in one step, by reading each file of its
    solution that exists (write_file overwrites only what was read), then writing them all
    (calls that write run one after another, in order)."""
    turns = []
    for name in NAMES:
        task = evals.load_task(TASKS / name)
        solution = TASKS / name / "solution"
        files = [p.relative_to(solution) for p in sorted(solution.rglob("*")) if p.is_file()]
        reads = [
            {"name": "read_file", "arguments": {"file_path": str(f)}}
            for f in files
            if (TASKS / name / "repo" / f).is_file()
        ]
        writes = [
            {
                "name": "write_file",
                "arguments": {"file_path": str(f), "content": (solution / f).read_text()},
            }
            for f in files
        ]
        calls = reads + writes
        first = task.prompt.splitlines()[0][:60]
        turns.append(
            {"model": "solver-model", "contains": first, "tool_calls": calls, "repeat": True}
        )
    # Anything else the solver is asked (its tools' results): it is done.
    turns.append({"model": "solver-model", "text": "Done.", "repeat": True})
    turns.append({"model": "quitter-model", "text": "I could not do it.", "repeat": True})
    return turns


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, solver_turns())
    yield server
    server.stop()


@pytest.fixture
def daemon(namespace: Path, tmp_path: Path, fake: FakeServer) -> Iterator[Anvild]:
    yield from serving_models(namespace, tmp_path, fake.url, ("solver", "quitter"))


def test_ten_tasks_two_models_three_trials_unattended(
    daemon: Anvild, namespace: Path, tmp_path: Path
) -> None:
    assert len(NAMES) == 10
    out = tmp_path / "results.jsonl"
    started = time.monotonic()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "anvilctl", "eval", "run", "--tasks-dir", str(TASKS)),
            *("--models", "solver,quitter", "--trials", str(TRIALS), "--concurrency", "2"),
            *("--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=60 * TIMEOUT,
        env=env_for(namespace),
        cwd=tmp_path,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len({(r["task"], r["model"], r["trial"]) for r in records}) == 60
    assert [r for r in records if r["outcome"] == "infra_error"] == []
    solver = [r for r in records if r["model"] == "solver"]
    failed = [
        (r["task"], r["turn_outcome"], r["steps"], r["grader"]) for r in solver if not r["pass"]
    ]
    assert failed == []
    assert not any(r["pass"] for r in records if r["model"] == "quitter")
    report = subprocess.run(
        [sys.executable, "-m", "anvilctl", "eval", "report", str(out), "--plot", "k.svg"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    assert "  solver: 10 tasks, 30 graded trials, 0 infra errors; k up to 3" in report.stdout
    assert "  quitter: 10 tasks, 30 graded trials, 0 infra errors; k up to 3" in report.stdout
    durations = sorted(r["duration_s"] for r in records)
    print(
        f"\n60 trials in {elapsed:.0f} s (concurrency 2); trial p50 "
        f"{durations[len(durations) // 2]:.1f} s, max {durations[-1]:.1f} s"
    )
    print(done.stderr.splitlines()[-2])
    print(done.stderr.splitlines()[-1])
