"""End to end: a kill -9 of `anvilctl auto`, and one of the daemon, in the middle of a worker's
session (its model request held by the fake provider): the restarted loop kills the session in
flight, releases its bead, and goes on to the end without redoing a passed feature; the beads
and the convoy end completed. The scripted todo-app spec is test_auto_e2e.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_auto_e2e import (
    LIST_EDIT,
    TURNS,
    auto,
    board,
    daemon_config,
    fake_server,
    git_log,
    jsonl,
    running_daemon,
    spec_project,
)
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_headless import TIMEOUT, env_for, processes_with
from tests.integration.test_sessions_e2e import FakeServer

fake = pytest.fixture(fake_server, name="fake")
config = pytest.fixture(daemon_config, name="config")
daemon = pytest.fixture(running_daemon, name="daemon")
project = pytest.fixture(spec_project, name="project")

# The `list` worker's edit request is held (never released): the session in flight at the kill.
# Later requests get the same answer at once.
# No cheating `done` worker here (test_auto_e2e.py has it): `done` takes one session.
HONEST = [t for t in TURNS if t.get("repeat") is not False]
AT = HONEST.index(TURNS[LIST_EDIT])
HELD = [*HONEST[:AT], {**HONEST[AT], "repeat": False, "hold": 1}, *HONEST[AT:]]
# initializer 4, add worker 4 (skill, read, edit, text), list worker's skill, read and held edit
REQUESTS_BEFORE_HELD = 11


def start_and_hold(namespace: Path, daemon: Anvild, fake: FakeServer, spec: Path) -> Any:
    argv = ["auto", str(spec), "--data-dir", str(daemon.data_dir)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "anvilctl", *argv],
        env=env_for(namespace),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"{fake.url}/_fake/wait?requests={REQUESTS_BEFORE_HELD}&timeout={TIMEOUT}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT + 5) as reply:
            assert reply.status == 200
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc


def assert_resumed(
    namespace: Path, project: Path, resumed: subprocess.CompletedProcess[str]
) -> None:
    assert resumed.returncode == 0, resumed.stderr
    assert "was in flight when the loop stopped: it is killed" in resumed.stderr
    assert "worker session: add" not in resumed.stderr
    assert [f["passes"] for f in json.loads((project / "features.json").read_text())] == [
        True,
        True,
        True,
    ]
    assert git_log(project) == [
        "auto: feature done",
        "auto: feature list",
        "auto: feature add",
        "auto: initialize features",
    ]
    records = jsonl(project / ".anvil" / "auto" / "sessions.jsonl")
    # The killed session left no line; the list worker ran again after the restart.
    assert [r["feature"] for r in records] == [None, "add", "list", "done"]
    convoy, beads = board(namespace, project)
    assert convoy.startswith("completed 3/3")
    assert {status for status, _ in beads.values()} == {"completed"}


@pytest.mark.parametrize("fake", [HELD], indirect=True)
def test_kill_9_of_auto_mid_session_resumes_without_redoing_a_feature(
    daemon: Anvild, namespace: Path, project: Path, fake: FakeServer
) -> None:
    spec = project / "SPEC.md"
    proc = start_and_hold(namespace, daemon, fake, spec)
    proc.kill()
    proc.communicate()
    in_flight = json.loads((project / ".anvil" / "auto" / "current.json").read_text())
    assert in_flight["feature"] == "list"
    # Its `anvilctl -p` (in its own process session) is still waiting on the turn.
    assert processes_with(in_flight["session_id"])
    assert git_log(project) == ["auto: feature add", "auto: initialize features"]
    _, beads = board(namespace, project)
    assert beads["list"] == ("in_progress", in_flight["session_id"])
    resumed = auto(namespace, daemon, spec)
    assert_resumed(namespace, project, resumed)
    deadline = time.monotonic() + TIMEOUT  # the old `anvilctl -p` ends with its session
    while processes_with(in_flight["session_id"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(in_flight["session_id"])


@pytest.mark.parametrize("fake", [HELD], indirect=True)
def test_kill_9_of_the_daemon_mid_session_resumes_without_redoing_a_feature(
    daemon: Anvild, namespace: Path, project: Path, fake: FakeServer, config: Path
) -> None:
    spec = project / "SPEC.md"
    proc = start_and_hold(namespace, daemon, fake, spec)
    os.kill(daemon.proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 1, stderr  # the daemon went away: the loop stops, says why
    assert "is anvild running?" in stderr, stderr
    code, log = daemon.stop()
    assert code == -signal.SIGKILL, log
    restarted = Anvild(namespace, "--config", str(config))
    restarted.wait_serving()
    try:
        resumed = auto(namespace, restarted, spec)
        assert_resumed(namespace, project, resumed)
    finally:
        code, log = restarted.stop()
    assert code == 0, log
