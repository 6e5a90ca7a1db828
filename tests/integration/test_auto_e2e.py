"""End to end: `anvilctl auto SPEC.md` against a real daemon whose model is scripted by the fake
provider server, on a small todo-app spec (add, list, done). The sessions load the shipped
`auto-initializer` and `auto-worker` skills through the `skill` tool; the Stop hook auto grants
runs init.sh in the real sandbox after every turn, and a worker whose tests fail is sent back
(the hook's two runs are in `.anvil/auto/checks.jsonl`); a worker that edits a feature's
description is reverted; one commit per feature; the spec is a convoy whose beads are claimed by
the workers' sessions and end completed (`agent/beads`, `agent/convoys`); `--max-cost-usd` stops
the loop and a second run resumes. The kills are in test_auto_kill_e2e.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvilctl.auto_board import Board
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_headless import TIMEOUT, env_for
from tests.integration.test_sessions_e2e import FakeServer, user_config

FEATURES = [
    {"id": "add", "description": "add a todo", "passes": False},
    {"id": "list", "description": "list todos", "passes": False},
    {"id": "done", "description": "mark a todo done", "passes": False},
]
FEATURES_TEXT = "[\n" + ",\n".join(json.dumps(f) for f in FEATURES) + "\n]\n"
# The project's tests: `done` needs done.txt once it is marked passing.
INIT_SH = """#!/bin/sh
echo "running the todo tests"
if grep -q '"id": "done", "description": "mark a todo done", "passes": true' features.json; then
  test -f done.txt || { echo "FAIL: done is not implemented (no done.txt)"; exit 1; }
fi
echo "all tests pass"
"""


def line(feature: str, passes: bool) -> str:
    description = next(f["description"] for f in FEATURES if f["id"] == feature)
    return json.dumps({"id": feature, "description": description, "passes": passes})


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}], "repeat": True}


def edit(old: str, new: str) -> dict[str, Any]:
    return call("edit_file", file_path="features.json", old_string=old, new_string=new)


def when(contains: str, answer: dict[str, Any]) -> dict[str, Any]:
    return {"contains": contains, **answer}


TURNS: list[dict[str, Any]] = [
    when("You are the initializer", call("skill", name="auto-initializer")),
    when(
        "# anvilctl auto: the initializer",
        call("write_file", file_path="features.json", content=FEATURES_TEXT),
    ),
    when("Created features.json", call("write_file", file_path="init.sh", content=INIT_SH)),
    when("Created init.sh", {"text": "initialized", "repeat": True}),
    # The Stop hook sent the `done` worker back: it writes what was missing.
    when("./init.sh failed", call("write_file", file_path="done.txt", content="done\n")),
    when("Created done.txt", {"text": "fixed", "repeat": True}),
    when("Edited features.json", {"text": "feature done", "repeat": True}),
    when("Build exactly one feature", call("skill", name="auto-worker")),
    when("# anvilctl auto: a worker session", call("read_file", file_path="features.json")),
    # The first `done` worker cheats: it rewrites the description as it marks it passing.
    {
        **when(
            line("list", True),
            edit(line("done", False), line("done", True).replace("mark a todo done", "nothing")),
        ),
        "repeat": False,
    },
    when(line("list", True), edit(line("done", False), line("done", True))),
    when(line("add", True), edit(line("list", False), line("list", True))),
    when(line("add", False), edit(line("add", False), line("add", True))),
]
LIST_EDIT = 11  # the `list` worker's edit in TURNS


# Fixture bodies, shared with test_auto_kill_e2e.py (which runs on another xdist worker).
def fake_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, getattr(request, "param", TURNS))
    yield server
    server.stop()


def daemon_config(tmp_path: Path, fake: FakeServer) -> Path:
    path = user_config(tmp_path, fake.url)
    priced = "\n[models.fake.pricing]\ninput = 1.0\noutput = 1.0\n"
    path.write_text(path.read_text() + priced + '\n[permissions]\nmax_mode = "bypass"\n')
    return path


def running_daemon(namespace: Path, config: Path) -> Iterator[Anvild]:
    d = Anvild(namespace, "--config", str(config))
    d.wait_serving()
    yield d
    code, log = d.stop()
    assert code in (0, -signal.SIGKILL), log


def spec_project() -> Iterator[Path]:
    """The spec's directory, where the sandbox's uid (as root: 65534, which cannot enter
    pytest's 0700 tmp dir) may run init.sh."""
    top = Path(tempfile.mkdtemp(prefix="anvil-auto-", dir="/var/tmp"))
    top.chmod(0o755)
    work = top / "todo"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "SPEC.md").write_text("# A CLI todo app\nadd, list and done, with persistence.\n")
    if os.geteuid() == 0:  # as a user's checkout is the user's
        for path in (work, *work.rglob("*")):
            os.chown(path, DEFAULT_UID, DEFAULT_GID, follow_symlinks=False)
    yield work
    shutil.rmtree(top)


fake = pytest.fixture(fake_server, name="fake")
config = pytest.fixture(daemon_config, name="config")
daemon = pytest.fixture(running_daemon, name="daemon")
project = pytest.fixture(spec_project, name="project")


def auto(
    namespace: Path, daemon: Anvild, spec: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    argv = ["auto", str(spec), "--data-dir", str(daemon.data_dir), *args]
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", *argv],
        capture_output=True,
        text=True,
        timeout=12 * TIMEOUT,
        env=env_for(namespace),
        check=False,
    )


def git_log(project: Path) -> list[str]:
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "log", "--format=%s"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def board(namespace: Path, project: Path) -> tuple[str, dict[str, tuple[str, str]]]:
    """The convoy's status and progress, and each feature's bead (status, assigned_to)."""
    ids = json.loads((project / ".anvil" / "auto" / "beads.json").read_text())
    convoy = ids["convoy"]
    files = Board(f"unix!{namespace / 'agent'}", "", True)  # 9P in process: no CLI start-up
    state = files.read(f"convoys/{convoy}/status")
    progress = files.read(f"convoys/{convoy}/progress")
    rows = {}
    listed = files.read("beads/list").splitlines()
    for feature, bead in ids["beads"].items():
        [row] = [r.split("\t") for r in listed if r.startswith(bead + "\t")]
        rows[feature] = (row[1], row[3])
    return f"{state} {progress}", rows


def test_a_spec_is_built_feature_by_feature_and_resumed(
    daemon: Anvild, namespace: Path, project: Path
) -> None:
    spec = project / "SPEC.md"
    # A tiny cost cap stops the loop after the initializer's (priced) session.
    first = auto(namespace, daemon, spec, "--max-cost-usd", "0.000001")
    assert first.returncode == 3, first.stderr
    assert "--max-cost-usd 1e-06 reached" in first.stderr
    assert json.loads((project / "features.json").read_text()) == FEATURES
    assert git_log(project) == ["auto: initialize features"]
    # The convoy and one pending bead per feature.
    convoy, beads = board(namespace, project)
    assert convoy.startswith("planning 0/3")
    assert {status for status, _ in beads.values()} == {"pending"}
    # Resumed: the count goes on from the records; add and list pass, one commit each; the
    # first `done` worker's description edit is reverted; the second one's tests fail at the
    # Stop hook, it is sent back, fixes them, and the feature passes.
    second = auto(namespace, daemon, spec, "--max-sessions", "7")
    assert second.returncode == 0, second.stderr
    assert "done: all 3 features pass after 5 sessions" in second.stderr
    assert "reverted features.json: feature 'done': description changed" in second.stderr
    features = json.loads((project / "features.json").read_text())
    assert [f["passes"] for f in features] == [True, True, True]
    assert features[2]["description"] == "mark a todo done"
    assert git_log(project) == [
        "auto: feature done",
        "auto: feature list",
        "auto: feature add",
        "auto: initialize features",
    ]
    state = project / ".anvil" / "auto"
    records = jsonl(state / "sessions.jsonl")
    assert [(r["kind"], r["feature"]) for r in records] == [
        ("initializer", None),
        ("worker", "add"),
        ("worker", "list"),
        ("worker", "done"),
        ("worker", "done"),
    ]
    assert records[3]["reverted"] == "feature 'done': description changed"
    assert all(r["cost_usd"] > 0 and r["session_id"] for r in records)
    # The Stop hook ran init.sh at the end of every session; the last `done` session's first
    # run failed (and sent the worker back), its second passed.
    assert [r["tests"]["runs"] for r in records] == [1, 1, 1, 1, 2]
    assert all(r["tests"]["passed"] is True for r in records)
    runs = jsonl(state / "checks.jsonl")
    last = [r for r in runs if r["session_id"] == records[4]["session_id"]]
    assert [(r["passed"], r["exit_code"]) for r in last] == [(False, 1), (True, 0)]
    assert "FAIL: done is not implemented" in last[0]["tail"]
    assert "all tests pass" in last[1]["tail"]
    # Each worker's session held its feature's bead; all completed, and so is the convoy.
    convoy, beads = board(namespace, project)
    assert convoy.startswith("completed 3/3")
    assert {f: status for f, (status, _) in beads.items()} == dict.fromkeys(
        ("add", "list", "done"), "completed"
    )
    holders = {r["feature"]: r["session_id"] for r in records if r["kind"] == "worker"}
    assert {f: holder for f, (_, holder) in beads.items()} == holders
    # The loop's files and the skills it installed are not in the project's history.
    tracked = subprocess.run(
        ["git", "-c", "safe.directory=*", "ls-files"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(tracked) == ["SPEC.md", "done.txt", "features.json", "init.sh"]
