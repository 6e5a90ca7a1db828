"""The eval runner's pure parts: the estimators against hand-computed values and their error
cases, the Wilson interval, the bootstrap over tasks, task loading and its errors, the
summary's exclusion of infrastructure failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvilctl import eval as evals
from anvilctl.eval_stats import pass_at_k, pass_hat_k, task_mean_interval, wilson

SHIPPED = Path(__file__).resolve().parents[3] / "evals" / "tasks"


@pytest.mark.parametrize(
    ("n", "c", "k", "at", "hat"),
    [
        (5, 2, 1, 2 / 5, 2 / 5),
        (5, 2, 2, 1 - 3 / 10, 1 / 10),  # C(3,2)/C(5,2) = 3/10; C(2,2)/C(5,2) = 1/10
        (5, 2, 4, 1.0, 0.0),  # fewer failures than k: some pass; fewer passes than k: not all
        (3, 3, 3, 1.0, 1.0),  # k = n, c = n
        (3, 0, 3, 0.0, 0.0),  # k = n, c = 0
        (3, 1, 3, 1.0, 0.0),  # k = n: any passed / all passed
        (10, 7, 3, 1 - 1 / 120, 35 / 120),
    ],
)
def test_estimators_against_hand_computed_values(
    n: int, c: int, k: int, at: float, hat: float
) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(at)
    assert pass_hat_k(n, c, k) == pytest.approx(hat)


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [(3, 1, 0, "0 < k <= n"), (3, 1, 4, "0 < k <= n"), (3, 4, 1, "c <= n"), (3, -1, 1, "c <= n")],
)
def test_estimators_refuse_invalid_inputs(n: int, c: int, k: int, message: str) -> None:
    for estimator in (pass_at_k, pass_hat_k):
        with pytest.raises(ValueError, match=message):
            estimator(n, c, k)


def test_wilson_interval() -> None:
    low, high = wilson(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.49, 0.943)  # the textbook 8/10 case
    assert wilson(0, 10)[0] == 0.0
    assert wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="passes <= trials"):
        wilson(3, 2)


def test_the_bootstrap_averages_tasks_and_is_reproducible() -> None:
    mean, low, high = task_mean_interval([1.0, 0.0, 0.5, 1.0])
    assert mean == 0.625
    assert 0.0 <= low < mean < high <= 1.0
    assert task_mean_interval([1.0, 0.0, 0.5, 1.0]) == (mean, low, high)
    assert task_mean_interval([0.5]) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="no tasks"):
        task_mean_interval([])


def test_the_shipped_tasks_load() -> None:
    tasks = evals.find_tasks(SHIPPED, "*")
    assert {t.name for t in tasks} >= {"fix-failing-test", "add-cli-flag", "safety-outside-write"}
    assert all(t.prompt and t.timeout > 0 and len(t.digest) == 16 for t in tasks)
    assert [t.name for t in evals.find_tasks(SHIPPED, "safety-out*")] == ["safety-outside-write"]
    two = evals.find_tasks(SHIPPED, "safety-out*, add-*")
    assert [t.name for t in two] == ["add-cli-flag", "safety-outside-write"]


def make_task(root: Path, toml: str, *, repo: bool = True, grader: bool = True) -> Path:
    task = root / "t"
    task.mkdir(parents=True)
    (task / "task.toml").write_text(toml)
    if repo:
        (task / "repo").mkdir()
    if grader:
        (task / "check.sh").write_text("exit 0\n")
    return task


@pytest.mark.parametrize(
    ("toml", "kwargs", "message"),
    [
        ("prompt = ''\n", {}, "`prompt` must be a non-empty string"),
        ("prompt = 'x'\ntimeout = -1\n", {}, "`timeout` must be a positive number"),
        ("prompt = 'x'\ntags = 'a'\n", {}, "`tags` must be a list of strings"),
        ("prompt = 'x'\nretries = 2\n", {}, "unknown keys \\['retries'\\]"),
        ("prompt = \n", {}, "not valid TOML"),
        ("prompt = 'x'\n", {"grader": False}, "missing check.sh"),
        ("prompt = 'x'\n", {"repo": False}, "missing repo"),
    ],
)
def test_a_bad_task_is_refused_with_what_to_fix(
    tmp_path: Path, toml: str, kwargs: dict[str, bool], message: str
) -> None:
    with pytest.raises(evals.EvalError, match=message):
        evals.load_task(make_task(tmp_path, toml, **kwargs))


def test_no_matching_task_names_the_tasks(tmp_path: Path) -> None:
    make_task(tmp_path, "prompt = 'x'\n")
    with pytest.raises(evals.EvalError, match=r"no task .* matches 'z\*' \(tasks: t\)"):
        evals.find_tasks(tmp_path, "z*")


def test_the_grader_digest_changes_with_the_hidden_tests(tmp_path: Path) -> None:
    task = make_task(tmp_path, "prompt = 'x'\n")
    before = evals.load_task(task)
    (task / "hidden").mkdir()
    (task / "hidden" / "test_x.py").write_text("assert True\n")
    after = evals.load_task(task)
    assert after.grader_digest != before.grader_digest
    assert after.digest == before.digest


def record(task: str, model: str, passed: bool | None) -> dict[str, object]:
    return {"task": task, "model": model, "pass": passed}


def test_the_summary_averages_tasks_and_counts_infra_apart() -> None:
    records = [
        record("a", "m", True),
        record("a", "m", True),
        record("b", "m", False),
        record("b", "m", True),
        record("b", "m", None),  # an infrastructure failure: not a fail
        record("a", "n", None),
    ]
    text = evals.summary(records).splitlines()
    assert text[0].startswith("m: 3/4 graded trials passed, 1 infra errors; pass@1 0.75 over 2")
    assert "Wilson over trials" in text[0]
    assert text[1] == "n: 0/0 graded trials passed, 1 infra errors (nothing graded: no pass rate)"
