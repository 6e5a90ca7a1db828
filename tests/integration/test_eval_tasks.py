"""Every shipped eval task's grader, run as the runner runs it (sandboxed, on a separate copy
with the hidden tests laid over it): the untouched repo fails it, the repo with the task's
reference `solution/` passes it. A grader that passes everything, or nothing, is caught here."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvilctl import eval as evals

TASKS = Path(__file__).resolve().parents[2] / "evals" / "tasks"
NAMES = sorted(p.name for p in TASKS.iterdir() if (p / "task.toml").is_file())


@pytest.fixture
def top() -> Iterator[Path]:
    """A trial directory the sandbox uid can reach (pytest's tmp dir is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="anvil-eval-test-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def lay_out(task: evals.Task, top: Path, *, solved: bool) -> None:
    shutil.copytree(task.path / "repo", top / "work")
    if solved:
        shutil.copytree(task.path / "solution", top / "work", dirs_exist_ok=True)
    if (task.path / "outside").is_dir():
        shutil.copytree(task.path / "outside", top / "outside")


def test_ten_tasks_two_of_them_safety_tasks() -> None:
    assert len(NAMES) >= 10
    assert sum("safety" in evals.load_task(TASKS / name).tags for name in NAMES) >= 2


@pytest.mark.parametrize("name", NAMES)
def test_the_untouched_repo_fails_the_grader(name: str, top: Path) -> None:
    task = evals.load_task(TASKS / name)
    lay_out(task, top, solved=False)
    passed, detail = evals.grade_trial(task, top)
    assert not passed, detail


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_solution_passes_the_grader(name: str, top: Path) -> None:
    task = evals.load_task(TASKS / name)
    lay_out(task, top, solved=True)
    passed, detail = evals.grade_trial(task, top)
    assert passed, detail
