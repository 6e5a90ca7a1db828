"""`anvilctl eval report RESULTS.jsonl [--baseline OLD.jsonl] [--plot FILE.svg]`.

Reads the runner's JSONL. Infrastructure failures (`pass: null`) are counted and shown, never
graded. Per model: pass@1, pass@k and pass^k for k up to the fewest graded trials of any task,
each the mean over tasks of the per-task unbiased estimate (tasks weigh the same), with a 95%
bootstrap interval over tasks; mean steps, mean cost over the trials whose cost is known (and
how many are not), p50 duration; then a cell per task and model (`c/n`). Against a baseline:
per model, the paired difference of per-task pass rates over the tasks both runs graded, with
its interval; a regression is flagged only when the whole interval is below zero. `--plot`
writes an SVG of pass^k against k, one line per model.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anvilctl import add_command, eval_stats

Cells = dict[str, dict[str, tuple[int, int]]]  # model -> task -> (passed, graded)


class ReportError(Exception):
    """Unreadable or inconsistent results; the message says which line."""


def load(path: Path) -> list[dict[str, Any]]:
    records = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{path}: {exc.strerror or exc}") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReportError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or not {"task", "model", "pass"} <= set(record):
            raise ReportError(f"{path}:{number}: not a trial record (needs task, model, pass)")
        if record["pass"] not in (True, False, None):
            raise ReportError(f"{path}:{number}: pass must be true, false or null")
        records.append(record)
    if not records:
        raise ReportError(f"{path}: no trial records")
    return records


def cells(records: Sequence[dict[str, Any]]) -> Cells:
    table: Cells = {}
    for r in records:
        if r["pass"] is None:
            continue
        passed, graded = table.setdefault(r["model"], {}).get(r["task"], (0, 0))
        table[r["model"]][r["task"]] = (passed + bool(r["pass"]), graded + 1)
    return table


def curve(tasks: dict[str, tuple[int, int]], k: int, *, every: bool) -> tuple[float, float, float]:
    """(mean, low, high) over tasks of pass^k (`every`) or pass@k."""
    estimate = eval_stats.pass_hat_k if every else eval_stats.pass_at_k
    return eval_stats.task_mean_interval([estimate(n, c, k) for c, n in tasks.values()])


def _fmt(triple: tuple[float, float, float]) -> str:
    mean, low, high = triple
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def report(records: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]] | None) -> str:
    table = cells(records)
    models = sorted({r["model"] for r in records})
    out = ["per model (95% bootstrap intervals over tasks; infra errors excluded):"]
    for model in models:
        mine = [r for r in records if r["model"] == model]
        infra = sum(1 for r in mine if r["pass"] is None)
        tasks = table.get(model, {})
        graded = sum(n for _, n in tasks.values())
        head = f"  {model}: {len(tasks)} tasks, {graded} graded trials, {infra} infra errors"
        if not tasks:
            out.append(head + "; nothing graded")
            continue
        k_max = min(n for _, n in tasks.values())
        out.append(head + f"; k up to {k_max} (the fewest graded trials of a task)")
        out.append(f"    pass@1 {_fmt(curve(tasks, 1, every=False))}")
        if k_max > 1:
            out.append(f"    pass@{k_max} {_fmt(curve(tasks, k_max, every=False))}")
            out.append(f"    pass^{k_max} {_fmt(curve(tasks, k_max, every=True))}")
        steps = [r["steps"] for r in mine if r["pass"] is not None and r.get("steps") is not None]
        costs = [
            r["cost_usd"] for r in mine if r.get("cost_known") and r.get("cost_usd") is not None
        ]
        unknown = len(mine) - len(costs)
        durations = [r["duration_s"] for r in mine if r.get("duration_s") is not None]
        mean_steps = f"{statistics.fmean(steps):.1f}" if steps else "-"
        mean_cost = f"${statistics.fmean(costs):.4f}" if costs else "unknown"
        p50 = f"{statistics.median(durations):.1f} s" if durations else "-"
        out.append(
            f"    mean steps {mean_steps}, mean cost {mean_cost} ({unknown} trials of unknown "
            f"cost), p50 duration {p50}"
        )
    all_tasks = sorted({r["task"] for r in records})
    out.append("per task (passed/graded):")
    width = max(len(t) for t in all_tasks)
    out.append("  " + " " * width + "".join(f"  {m:>10}" for m in models))
    for task in all_tasks:
        row = []
        for model in models:
            c, n = table.get(model, {}).get(task, (0, 0))
            row.append(f"  {f'{c}/{n}':>10}")
        out.append(f"  {task:<{width}}" + "".join(row))
    if baseline is not None:
        out.extend(compare(table, cells(baseline)))
    return "\n".join(out) + "\n"


def compare(new: Cells, old: Cells) -> list[str]:
    out = ["against the baseline (paired per-task pass rates, new - old):"]
    for model in sorted(set(new) | set(old)):
        both = sorted(set(new.get(model, {})) & set(old.get(model, {})))
        if not both:
            out.append(f"  {model}: no task graded in both runs; nothing to compare")
            continue
        diffs = []
        for task in both:
            c1, n1 = new[model][task]
            c0, n0 = old[model][task]
            diffs.append(c1 / n1 - c0 / n0)
        mean, low, high = eval_stats.task_mean_interval(diffs)
        if high < 0:
            verdict = "REGRESSION (the whole interval is below 0)"
        elif low > 0:
            verdict = "improvement (the whole interval is above 0)"
        else:
            verdict = "no clear change (the interval includes 0)"
        out.append(
            f"  {model}: {mean:+.2f} [{low:+.2f}, {high:+.2f}] over {len(both)} paired tasks: "
            + verdict
        )
    return out


COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def plot_svg(records: Sequence[dict[str, Any]]) -> str:
    """pass^k against k, one polyline per model, as a self-contained SVG."""
    table = cells(records)
    width, height, left, top, plot_w, plot_h = 520, 320, 60, 20, 420, 240
    series = {}
    for model, tasks in sorted(table.items()):
        k_max = min(n for _, n in tasks.values())
        series[model] = [curve(tasks, k, every=True)[0] for k in range(1, k_max + 1)]
    k_top = max((len(v) for v in series.values()), default=1)

    def x(k: int) -> float:
        return left + (plot_w * (k - 1) / (k_top - 1) if k_top > 1 else plot_w / 2)

    def y(value: float) -> float:
        return top + plot_h * (1 - value)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#888"/>',
        f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">k</text>',
        f'<text x="14" y="{top + plot_h / 2}" transform="rotate(-90 14 {top + plot_h / 2})" '
        'text-anchor="middle">pass^k</text>',
    ]
    for tick in (0.0, 0.5, 1.0):
        parts.append(
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.1f}</text>'
        )
    for k in range(1, k_top + 1):
        parts.append(
            f'<text x="{x(k):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{k}</text>'
        )
    for index, (model, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        points = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in enumerate(values, start=1))
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        for k, v in enumerate(values, start=1):
            parts.append(f'<circle cx="{x(k):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>')
        label_y = top + 16 + 16 * index
        parts.append(
            f'<text x="{left + plot_w - 8}" y="{label_y}" text-anchor="end" fill="{colour}">'
            f"{_xml(model)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def add_verb(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        verbs,
        "report",
        __doc__,
        1,
        help="pass@k, pass^k with intervals, per-task cells, a baseline comparison, a plot",
    )
    parser.add_argument("results", type=Path, help="the JSONL of `anvilctl eval run`")
    parser.add_argument("--baseline", type=Path, help="an earlier run's JSONL to compare with")
    parser.add_argument("--plot", type=Path, help="write pass^k against k here (SVG)")


def run(args: argparse.Namespace) -> int:
    records = load(args.results)
    baseline = load(args.baseline) if args.baseline else None
    print(report(records, baseline), end="")
    if args.plot:
        args.plot.write_text(plot_svg(records), encoding="utf-8")
    return 0
