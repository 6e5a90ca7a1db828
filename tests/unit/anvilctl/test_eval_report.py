"""`anvilctl eval report`: per-task aggregation before averaging, pass@k and pass^k against
hand-computed values, infrastructure failures counted apart, per-task cells, a baseline whose
regression is flagged only when the interval says so, the SVG plot, and bad input."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from anvilctl import eval_report


def trials(model: str, task: str, outcomes: str) -> list[dict[str, object]]:
    """`outcomes`: one letter per trial, p pass, f fail, i infrastructure error."""
    value = {"p": True, "f": False, "i": None}
    return [
        {
            "task": task,
            "model": model,
            "trial": n,
            "pass": value[o],
            "steps": 3,
            "cost_usd": 0.01,
            "cost_known": True,
            "duration_s": float(n),
        }
        for n, o in enumerate(outcomes, start=1)
    ]


RUN = [
    *trials("m", "a", "ppp"),  # 3/3
    *trials("m", "b", "pffi"),  # 1/3 graded, one infra error
    *trials("n", "a", "fff"),
    *trials("n", "b", "fff"),
]


def test_rates_are_per_task_then_averaged_with_hand_computed_values() -> None:
    text = eval_report.report(RUN, None)
    # m: pass@1 = mean(1, 1/3) = 0.67; pass@3 = mean(1, 1) = 1; pass^3 = mean(1, 0) = 0.5
    assert "  m: 2 tasks, 6 graded trials, 1 infra errors; k up to 3" in text
    assert "    pass@1 0.67 [" in text
    assert "    pass@3 1.00 [1.00, 1.00]" in text
    assert "    pass^3 0.50 [0.00, 1.00]" in text
    assert "  n: 2 tasks, 6 graded trials, 0 infra errors" in text
    assert "mean steps 3.0, mean cost $0.0100 (0 trials of unknown cost), p50 duration 2.0 s" in (
        text
    )
    assert "  a         3/3         0/3" in text
    assert "  b         1/3         0/3" in text


def test_a_baseline_regression_is_flagged_only_when_the_interval_says_so() -> None:
    old: list[dict[str, object]] = []
    for task in "abcdef":
        old += trials("m", task, "ppp")
    worse: list[dict[str, object]] = []
    for task in "abcdef":
        worse += trials("m", task, "fff")
    text = eval_report.report(worse, old)
    assert "m: -1.00 [-1.00, -1.00] over 6 paired tasks: REGRESSION" in text
    mixed: list[dict[str, object]] = []
    for task, outcomes in zip("abcdef", ["fff", "ppp", "ppp", "ppp", "ppp", "ppp"], strict=True):
        mixed += trials("m", task, outcomes)
    assert "no clear change (the interval includes 0)" in eval_report.report(mixed, old)
    assert "n: no task graded in both runs" in eval_report.report(
        [*mixed, *trials("n", "a", "p")], old
    )


def test_the_plot_is_an_svg_with_a_line_per_model() -> None:
    svg = eval_report.plot_svg(RUN)
    root = ET.fromstring(svg)
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2
    assert len(lines[0].attrib["points"].split()) == 3  # k = 1..3


def test_bad_results_say_which_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(RUN[0]) + "\n{oops\n")
    with pytest.raises(eval_report.ReportError, match=r"r.jsonl:2: not JSON"):
        eval_report.load(path)
    path.write_text('{"task": "a"}\n')
    with pytest.raises(eval_report.ReportError, match="needs task, model, pass"):
        eval_report.load(path)
    path.write_text("")
    with pytest.raises(eval_report.ReportError, match="no trial records"):
        eval_report.load(path)


def test_run_prints_the_report_and_writes_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in RUN))
    plot = tmp_path / "p.svg"
    args = argparse.Namespace(results=results, baseline=None, plot=plot)
    assert eval_report.run(args) == 0
    assert "per task (passed/graded):" in capsys.readouterr().out
    assert plot.read_text().startswith("<svg")
