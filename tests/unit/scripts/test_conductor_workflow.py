"""scripts/conductor's workflow format, without a daemon: what a valid file becomes, and each
refusal of a bad one saying what is wrong and where. The verdict contract of the scripts."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def load_script() -> ModuleType:
    path = ROOT / "scripts" / "conductor"
    loader = importlib.machinery.SourceFileLoader("anvil_conductor_script", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


conductor = load_script()


def load(tmp_path: Path, text: str, **overrides: str) -> object:
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    return conductor.load_workflow(path, overrides)


def test_the_shipped_examples_load() -> None:
    for path in sorted((ROOT / "scripts" / "workflows").glob("*.yaml")):
        workflow = conductor.load_workflow(path, {})
        assert workflow.steps, path


def test_a_loop_with_a_fan_out(tmp_path: Path) -> None:
    wf = conductor.load_workflow(ROOT / "scripts" / "workflows" / "review-cycle.yaml", {})
    assert wf.name == "review-cycle"
    assert wf.sessions["reviewers"].count == 3
    cycle = wf.steps[1]
    assert cycle.needs == ["implement"]
    assert cycle.loop.max_rounds == 4
    assert (cycle.loop.until.step, cycle.loop.until.verdict) == ("review", "lgtm")
    assert [s.id for s in cycle.loop.steps] == ["review", "fix"]
    wf = conductor.load_workflow(
        ROOT / "scripts" / "workflows" / "review-cycle.yaml", {"task": "Fix it"}
    )
    assert wf.vars["task"] == "Fix it"


BAD = [
    ("name: x\nsessions: {}\nsteps: []\n", "`steps` must be a non-empty list"),
    (
        "name: x\nsessions: {p: {role: planner}}\nsteps:\n"
        "  - {id: a, session: p, prompt: hi, needs: [b]}\n"
        "  - {id: b, session: p, prompt: hi, needs: [a]}\n",
        "the steps' needs make a cycle: a -> b -> a",
    ),
    (
        "name: x\nsessions: {p: {role: boss}}\nsteps: [{id: a, session: p, prompt: hi}]\n",
        "wf.yaml.sessions.p: role 'boss' is not one of",
    ),
    (
        "name: x\nsessions: {p: {role: planner}}\nsteps: [{id: a, session: q, prompt: hi}]\n",
        "wf.yaml.a: session 'q' is not declared under `sessions` (p)",
    ),
    (
        "name: x\nsessions: {p: {role: planner}}\n"
        "steps: [{id: a, session: p, prompt: '{{out.z}}'}]\n",
        "wf.yaml.a: {{out.z}} names nothing",
    ),
    (
        "name: x\nsessions: {p: {role: planner}}\nsteps: [{id: a, session: p, prompt: hi, x: 1}]\n",
        "unknown key `x`",
    ),
    (
        "name: x\nsessions: {p: {role: planner}}\nsteps:\n"
        "  - {id: a, loop: {until: {step: b, verdict: lgtm}, steps: [{id: c, session: p, "
        "prompt: hi}]}}\n",
        "wf.yaml.a.loop.until: step 'b' is not in the loop",
    ),
    (
        "name: x\nsessions: {p: {role: planner}}\nsteps:\n"
        "  - {id: a, loop: {until: {step: c, verdict: ok}, steps: [{id: c, session: p, "
        "prompt: hi}]}}\n",
        "verdict is lgtm or changes",
    ),
    ("name: 9x\nsessions: {}\nsteps: []\n", "name '9x' must be"),
    (
        "name: x\nsessions: {p: {role: planner, count: 0}}\n"
        "steps: [{id: a, session: p, prompt: hi}]\n",
        "count must be a whole number from 1 to 32",
    ),
    ("name: [\n", "not valid YAML"),
    ("- a\n- b\n", "expected a mapping, got list"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_workflow_is_refused_saying_where(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(conductor.WorkflowError) as refused:
        load(tmp_path, text)
    assert message in str(refused.value)


def test_set_must_name_a_declared_variable(tmp_path: Path) -> None:
    text = "name: x\nvars: {goal: g}\nsessions: {p: {role: planner}}\n"
    text += "steps: [{id: a, session: p, prompt: '{{var.goal}}'}]\n"
    assert load(tmp_path, text, goal="h").vars == {"goal": "h"}
    with pytest.raises(conductor.WorkflowError, match="no variable gaol"):
        load(tmp_path, text, gaol="h")


@pytest.mark.parametrize(
    ("out", "verdict"),
    [
        ("Findings.\nVERDICT: LGTM", "lgtm"),
        ("VERDICT: CHANGES\nmore text", "changes"),
        ("**VERDICT: LGTM**", "lgtm"),
        ("`verdict: changes`", "changes"),
        ("VERDICT: CHANGES\n...\nVERDICT: LGTM\n", "lgtm"),  # the last one counts
        ("Looks fine.", None),
        ("The verdict: maybe", None),
    ],
)
def test_the_verdict_line(out: str, verdict: str | None) -> None:
    assert conductor.verdict_of(out) == verdict


def test_a_turn_that_did_not_finish() -> None:
    """The session's `outcome` file after the wait: anything but done stops the run."""
    assert conductor.turn_failed("done\n") is None
    failed = 'error HttpError: HTTP 401: {"error": "invalid x-api-key"}'
    assert conductor.turn_failed(failed + "\n") == failed
    assert conductor.turn_failed("max_steps stopped after 50 steps\n") == (
        "max_steps stopped after 50 steps"
    )
    assert conductor.turn_failed("cancelled the turn was cancelled\n") == (
        "cancelled the turn was cancelled"
    )
    assert conductor.turn_failed("-\n") == "-"  # no turn ended: not a finished answer either
    assert conductor.turn_failed("") == "-"
