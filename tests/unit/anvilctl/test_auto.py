"""`anvilctl auto`'s checks without a daemon: what features.json may hold, the JSON diff that
allows only `passes` to change, and the commit a restart makes for a feature that passed before
a kill -9 left it uncommitted."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from anvilctl.auto import AutoError, Loop, load_features, only_passes_changed

ADD = {"id": "add", "description": "add a todo", "passes": False}
LIST = {"id": "list", "description": "list todos", "passes": False}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "non-empty JSON list"),
        ("[]", "non-empty JSON list"),
        ('[{"description": "x", "passes": false}]', 'string "id"'),
        ('[{"id": "a", "passes": "no"}]', '"passes" must be true or false'),
        ('[{"id": "a", "passes": false}, {"id": "a", "passes": true}]', "appears twice"),
    ],
)
def test_bad_features_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_features(text)


def test_only_passes_may_change() -> None:
    assert only_passes_changed([ADD, LIST], [{**ADD, "passes": True}, LIST]) is None
    assert only_passes_changed([ADD, LIST], [LIST, ADD]) == (
        "the list of features (ids or order) changed"
    )
    assert only_passes_changed([ADD, LIST], [ADD]) == "the list of features (ids or order) changed"
    edited = {**ADD, "description": "anything", "passes": True}
    assert only_passes_changed([ADD, LIST], [edited, LIST]) == "feature 'add': description changed"
    added = {**LIST, "steps": ["x"]}
    assert only_passes_changed([ADD, LIST], [ADD, added]) == "feature 'list': steps changed"


def loop(spec: Path) -> Loop:
    args = argparse.Namespace(
        spec=str(spec),
        model=None,
        max_sessions=5,
        max_cost_usd=None,
        session_timeout=60.0,
        address=None,
        aname="",
        noauth=False,
    )
    return Loop(args, lambda _: None)


def test_a_feature_that_passed_before_a_kill_is_committed_at_restart(tmp_path: Path) -> None:
    spec = tmp_path / "SPEC.md"
    spec.write_text("todo app\n")
    runner = loop(spec)
    runner.git("init", "-q")
    (tmp_path / "features.json").write_text(json.dumps([ADD, LIST]))
    runner.commit("auto: initialize features")
    # The worker set passes and wrote code; the kill came before the loop committed.
    (tmp_path / "features.json").write_text(json.dumps([{**ADD, "passes": True}, LIST]))
    (tmp_path / "todo.py").write_text("def add(): ...\n")
    runner.resume_commits()
    log = subprocess.run(
        ["git", "log", "--format=%s"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert log == ["auto: feature add", "auto: initialize features"]
    runner.resume_commits()  # nothing more to commit, and no second commit of add
    assert runner.committed_features() == {"add"}


def test_a_missing_spec_and_a_broken_features_file_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(AutoError, match="no such file"):
        loop(tmp_path / "SPEC.md")
    spec = tmp_path / "SPEC.md"
    spec.write_text("x\n")
    (tmp_path / "features.json").write_text("[")
    with pytest.raises(AutoError, match="remove it to initialize again"):
        loop(spec).features()
