"""`anvilctl auto`'s checks without a daemon: what features.json may hold, the JSON diff that
allows only `passes` (the worker's own) to change, the commit a restart makes for a feature that
passed before a kill -9 left it uncommitted, the shipped skills, the Stop hook's config (granted
only when auto wrote it), the hook's handling of sessions that are not auto's, and the last test
run of a session deciding whether its feature's `passes` stands."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from anvilctl import auto_hook
from anvilctl.auto import (
    INIT_SKILL,
    WORKER_SKILL,
    AutoError,
    Loop,
    last_run,
    load_features,
    only_passes_changed,
)
from anvild.config import TrustStore, digest
from anvild.config.schema import parse_bytes
from anvild.hooks import Event, HookSet
from anvild.skills import SkillCatalog

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
    # A worker may flip only its own feature.
    both = [{**ADD, "passes": True}, {**LIST, "passes": True}]
    assert only_passes_changed([ADD, LIST], both, "add") == (
        "feature 'list': passes changed (only 'add''s may)"
    )
    assert only_passes_changed([ADD, LIST], [{**ADD, "passes": True}, LIST], "add") is None


def loop(spec: Path, tmp_data: Path | None = None) -> Loop:
    args = argparse.Namespace(
        spec=str(spec),
        model=None,
        max_sessions=5,
        max_cost_usd=None,
        session_timeout=60.0,
        address=None,
        aname="",
        noauth=False,
        data_dir=tmp_data,
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


def test_the_last_stop_hook_run_decides(tmp_path: Path) -> None:
    assert last_run([]) is None
    runs = [
        {"ran": True, "passed": False, "exit_code": 1, "tail": "FAILED"},
        {"ran": True, "passed": True, "exit_code": 0, "tail": "ok"},
    ]
    assert last_run(runs) == {"runs": 2, "ran": True, "passed": True, "exit_code": 0}


def test_prepare_installs_the_skills_and_grants_its_own_hook(tmp_path: Path) -> None:
    project, data = tmp_path / "todo", tmp_path / "data"
    project.mkdir()
    spec = project / "SPEC.md"
    spec.write_text("todo app\n")
    loop(spec, data).prepare()
    # The shipped skills, found as the project's by the daemon's own discovery.
    found = SkillCatalog(tmp_path / "cfg").for_session(project, "developer")
    assert {INIT_SKILL, WORKER_SKILL} <= set(found.names())
    assert "init.sh" in found.load(WORKER_SKILL).body
    # The Stop hook: valid config, granted where the daemon reads grants, git-excluded.
    config = project / ".anvil" / "config.toml"
    settings = parse_bytes(config.read_bytes(), config)
    tables = {k[1]: v for k, v in settings.items() if k[0] == "hooks"}
    [stop] = HookSet.of(tables).matching(Event.STOP)
    assert stop.name == auto_hook.HOOK_NAME
    assert TrustStore(data).is_granted(config.resolve(), digest(config.read_bytes()))
    exclude = (project / ".git" / "info" / "exclude").read_text().splitlines()
    assert "/.anvil/auto/" in exclude
    assert "/.anvil/config.toml" in exclude
    loop(spec, data).prepare()  # again: nothing changes, no error
    # A project's own skill of that name is never overwritten.
    (project / ".anvil" / "skills" / WORKER_SKILL / "SKILL.md").write_text("mine\n")
    with pytest.raises(AutoError, match="is the project's own skill"):
        loop(spec, data).prepare()
    assert (project / ".anvil" / "skills" / WORKER_SKILL / "SKILL.md").read_text() == "mine\n"
    assert TrustStore(data).is_granted(config.resolve(), digest(config.read_bytes()))


def test_a_project_config_of_its_own_is_never_granted_by_auto(tmp_path: Path) -> None:
    project, data = tmp_path / "todo", tmp_path / "data"
    (project / ".anvil").mkdir(parents=True)
    spec = project / "SPEC.md"
    spec.write_text("todo app\n")
    config = project / ".anvil" / "config.toml"
    config.write_text('[hooks.mine]\nevent = "Stop"\ncommand = "true"\n')
    with pytest.raises(AutoError, match=r"(?s)add this table to it.*\[hooks.anvil-auto-tests\]"):
        loop(spec, data).prepare()
    assert TrustStore(data).find(config.resolve()) is None
    # With the table added by the user, auto still waits for the user's grant.
    config.write_text(config.read_text() + auto_hook.config_text(project / ".anvil" / "auto"))
    with pytest.raises(AutoError, match="is not granted: review it with `anvilctl trust show"):
        loop(spec, data).prepare()


def test_the_hook_leaves_other_sessions_alone_and_records_a_missing_init(
    tmp_path: Path,
) -> None:
    state = tmp_path / ".anvil" / "auto"
    state.mkdir(parents=True)
    assert auto_hook.check({"session_id": "s1"}, state) == (0, "")  # no auto session
    current = {"session_id": "s1", "kind": "worker", "feature": "add"}
    (state / auto_hook.CURRENT).write_text(json.dumps(current))
    assert auto_hook.check({"session_id": "other"}, state) == (0, "")
    assert not (state / auto_hook.CHECKS).exists()
    assert auto_hook.check({"session_id": "s1"}, state) == (0, "")
    [record] = [json.loads(x) for x in (state / auto_hook.CHECKS).read_text().splitlines()]
    assert (record["ran"], record["passed"], record["detail"]) == (False, False, "no init.sh")
    # A worker that marked its feature passing with no init.sh at all is sent back, saying so.
    (tmp_path / "features.json").write_text(json.dumps([{"id": "add", "passes": True}]))
    code, why = auto_hook.check({"session_id": "s1"}, state)
    assert code == 2
    assert why.startswith("./init.sh failed (no init.sh) while add is marked passing")


def test_passes_stands_only_on_a_passing_last_test_run(tmp_path: Path) -> None:
    spec = tmp_path / "SPEC.md"
    spec.write_text("todo app\n")
    runner = loop(spec)
    runner.git("init", "-q")
    before = json.dumps([ADD, LIST])
    (tmp_path / "features.json").write_text(before)
    runner.commit("auto: initialize features")
    marked = [{**ADD, "passes": True}, LIST]

    def entry(tests: dict[str, object] | None) -> dict[str, object]:
        (tmp_path / "features.json").write_text(json.dumps(marked))
        return {"session_id": "s1", "bead": None, "tests": tests, "reverted": None}

    # The last run failed: passes is set back to false, logged, nothing committed.
    failed = entry({"runs": 2, "ran": True, "passed": False, "exit_code": 1})
    runner.passed("add", [dict(f) for f in marked], before, failed)
    assert [f["passes"] for f in json.loads((tmp_path / "features.json").read_text())] == [
        False,
        False,
    ]
    assert failed["reverted"] == "feature 'add': passes set, but ./init.sh failed (exit 1)"
    assert runner.committed_features() == set()
    # No run at all, or a sandbox that could not be set up: the loop stops and says why.
    with pytest.raises(AutoError, match=r"no Stop hook ran init\.sh for session s1"):
        runner.passed("add", [dict(f) for f in marked], before, entry(None))
    infra: dict[str, object] = {"runs": 1, "passed": None, "infra": True, "detail": "no bwrap"}
    with pytest.raises(AutoError, match=r"could not run init\.sh: no bwrap"):
        runner.passed("add", [dict(f) for f in marked], before, entry(infra))
    assert json.loads((tmp_path / "features.json").read_text()) == [ADD, LIST]
    # A passing last run: committed.
    runner.passed("add", [dict(f) for f in marked], before, entry({"runs": 1, "passed": True}))
    assert runner.committed_features() == {"add"}
