"""End to end: `anvilctl auto SPEC.md` against a real daemon whose model is scripted by the fake
provider server: an initializer session, one worker session per feature with one commit each,
a worker that edits a feature's description reverted, `--max-cost-usd` and `--max-sessions`
stopping the loop, a second run resuming where the first stopped, and a run killed with
kill -9 mid-session resuming without redoing a passed feature."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_headless import TIMEOUT, env_for, processes_with
from tests.integration.test_sessions_e2e import FakeServer, user_config

FEATURES = [
    {"id": "add", "description": "add a todo", "passes": False},
    {"id": "list", "description": "list todos", "passes": False},
    {"id": "done", "description": "mark a todo done", "passes": False},
]
FEATURES_TEXT = "[\n" + ",\n".join(json.dumps(f) for f in FEATURES) + "\n]\n"


def line(feature: str, passes: bool) -> str:
    description = next(f["description"] for f in FEATURES if f["id"] == feature)
    return json.dumps({"id": feature, "description": description, "passes": passes})


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}], "repeat": True}


def edit(old: str, new: str) -> dict[str, Any]:
    return call("edit_file", file_path="features.json", old_string=old, new_string=new)


def when(contains: str, answer: dict[str, Any]) -> dict[str, Any]:
    return {"contains": contains, **answer}


TURNS: list[dict[str, Any]] = [
    when(
        "You are the initializer",
        call("write_file", file_path="features.json", content=FEATURES_TEXT),
    ),
    when(
        "Created features.json",
        call("write_file", file_path="init.sh", content="#!/bin/sh\nexit 0\n"),
    ),
    when("Created init.sh", {"text": "initialized", "repeat": True}),
    when("Edited features.json", {"text": "feature done", "repeat": True}),
    when("Build exactly one feature", call("read_file", file_path="features.json")),
    # The `done` worker cheats: it rewrites the description as it marks the feature passing.
    when(
        line("list", True),
        edit(line("done", False), line("done", True).replace("mark a todo done", "nothing")),
    ),
    when(line("add", True), edit(line("list", False), line("list", True))),
    when(line("add", False), edit(line("add", False), line("add", True))),
]


@pytest.fixture
def fake(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, getattr(request, "param", TURNS))
    yield server
    server.stop()


@pytest.fixture
def daemon(namespace: Path, tmp_path: Path, fake: FakeServer) -> Iterator[Anvild]:
    config = user_config(tmp_path, fake.url)
    priced = "\n[models.fake.pricing]\ninput = 1.0\noutput = 1.0\n"
    config.write_text(config.read_text() + priced + '\n[permissions]\nmax_mode = "bypass"\n')
    d = Anvild(namespace, "--config", str(config))
    d.wait_serving()
    yield d
    code, log = d.stop()
    assert code == 0, log


def auto(namespace: Path, spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", "auto", str(spec), *args],
        capture_output=True,
        text=True,
        timeout=8 * TIMEOUT,
        env=env_for(namespace),
        check=False,
    )


def git_log(project: Path) -> list[str]:
    done = subprocess.run(
        ["git", "log", "--format=%s"], cwd=project, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_a_spec_is_built_feature_by_feature_and_resumed(
    daemon: Anvild, namespace: Path, tmp_path: Path
) -> None:
    project = tmp_path / "todo"
    project.mkdir()
    spec = project / "SPEC.md"
    spec.write_text("# A CLI todo app\nadd, list and done, with persistence and tests.\n")
    # A tiny cost cap stops the loop after the initializer's (priced) session.
    first = auto(namespace, spec, "--max-cost-usd", "0.000001")
    assert first.returncode == 3, first.stderr
    assert "--max-cost-usd 1e-06 reached" in first.stderr
    assert json.loads((project / "features.json").read_text()) == FEATURES
    assert git_log(project) == ["auto: initialize features"]
    # Resumed: the count goes on from the records; add and list pass, one commit each; the
    # `done` worker's description edit is reverted, so the cap on sessions ends the run.
    second = auto(namespace, spec, "--max-sessions", "4")
    assert second.returncode == 3, second.stderr
    assert "--max-sessions 4 reached" in second.stderr
    assert "reverted features.json: feature 'done': description changed" in second.stderr
    features = json.loads((project / "features.json").read_text())
    assert [f["passes"] for f in features] == [True, True, False]
    assert features[2]["description"] == "mark a todo done"
    assert git_log(project) == [
        "auto: feature list",
        "auto: feature add",
        "auto: initialize features",
    ]
    records = [
        json.loads(x) for x in (project / ".anvil-auto" / "sessions.jsonl").read_text().splitlines()
    ]
    assert [(r["kind"], r["feature"]) for r in records] == [
        ("initializer", None),
        ("worker", "add"),
        ("worker", "list"),
        ("worker", "done"),
    ]
    assert records[3]["reverted"] == "feature 'done': description changed"
    assert all(r["cost_usd"] > 0 and r["session_id"] for r in records)
    # The loop's records are not in the project's history.
    assert (
        ".anvil-auto"
        not in subprocess.run(
            ["git", "ls-files"], cwd=project, capture_output=True, text=True, check=True
        ).stdout
    )


# The `list` worker's first edit request is held (never released): the session in flight when
# `auto` is killed. Later requests get the same answer at once.
HELD = [
    *TURNS[:6],
    {**TURNS[6], "repeat": False, "hold": 1},
    *TURNS[6:],
]
REQUESTS_BEFORE_HELD = 8  # initializer 3, add worker 3, list worker's read and held edit


@pytest.mark.parametrize("fake", [HELD], indirect=True)
def test_kill_9_mid_session_resumes_without_redoing_a_feature(
    daemon: Anvild, namespace: Path, tmp_path: Path, fake: FakeServer
) -> None:
    project = tmp_path / "todo"
    project.mkdir()
    spec = project / "SPEC.md"
    spec.write_text("# A CLI todo app\nadd, list and done.\n")
    argv = [sys.executable, "-m", "anvilctl", "auto", str(spec), "--max-sessions", "4"]
    proc = subprocess.Popen(
        argv, env=env_for(namespace), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"{fake.url}/_fake/wait?requests={REQUESTS_BEFORE_HELD}&timeout={TIMEOUT}"
        with urllib.request.urlopen(url, timeout=TIMEOUT + 5) as reply:
            assert reply.status == 200
    finally:
        proc.kill()
        proc.wait()
    for pid in processes_with(str(project)):  # its `anvilctl -p`, in its own session
        os.kill(pid, signal.SIGKILL)
    assert git_log(project) == ["auto: feature add", "auto: initialize features"]
    resumed = auto(namespace, spec, "--max-sessions", "4")
    assert resumed.returncode == 3, resumed.stderr
    assert "worker session: add" not in resumed.stderr
    features = json.loads((project / "features.json").read_text())
    assert [f["passes"] for f in features] == [True, True, False]
    assert git_log(project) == [
        "auto: feature list",
        "auto: feature add",
        "auto: initialize features",
    ]
    records = [
        json.loads(x) for x in (project / ".anvil-auto" / "sessions.jsonl").read_text().splitlines()
    ]
    # The killed session left no line; the list worker ran again after the restart.
    assert [r["feature"] for r in records] == [None, "add", "list", "done"]
