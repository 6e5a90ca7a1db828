"""The attack table of tests/unit/permissions/test_attacks.py, end to end.

A real daemon, a headless `anvilctl -p` session and the fake provider as a model that calls the
bash tool once per attack, in one step. The session's bash runs in the real sandbox, in a git
workspace the sandbox could write: with the realistic rule set no hidden program runs and no
file changes; in bypass mode with deny rules for the hidden programs every call is denied. Plain
commands the rules cover still run without asking.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_headless import headless
from tests.integration.test_sessions_e2e import FakeServer, user_config
from tests.sandbox.conftest import git
from tests.unit.permissions.test_attacks import ALLOW, ATTACKS, DENY

pytestmark = pytest.mark.slow

PLAIN = ["git status", "ls -la src", "cat README src/main.py | sed -n 1p", "git log --oneline"]
if shutil.which("npm"):
    PLAIN.append("npm test")

TURNS: list[dict[str, Any]] = [
    {
        "contains": "attack-all",
        "tool_calls": [{"name": "bash", "arguments": {"command": c}} for c, _ in ATTACKS],
        "repeat": True,
    },
    {
        "contains": "plain-all",
        "tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in PLAIN],
        "repeat": True,
    },
    {"text": "understood", "repeat": True},
]


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A git workspace the sandboxed command could write (as root it runs as uid 65534)."""
    top = Path(tempfile.mkdtemp(prefix="anvil-attacks-", dir="/var/tmp"))
    top.chmod(0o755)
    work = top / "work"
    (work / "src").mkdir(parents=True)
    (work / "README").write_text("readme\n")
    (work / "src" / "main.py").write_text("print('main')\n")
    (work / ".env").write_text("SECRET=1\n")
    (work / "package.json").write_text('{"name": "w", "scripts": {"test": "echo npm-ok"}}\n')
    git(work, "init", "-q", "-b", "main", ".")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "init")
    if os.geteuid() == 0:
        for path in (work, *work.rglob("*")):
            os.lchown(path, DEFAULT_UID, DEFAULT_GID)
    yield work
    shutil.rmtree(top)


def snapshot(work: Path) -> dict[str, bytes]:
    """Every file outside .git (git status may refresh the index) and its bytes."""
    return {
        str(p.relative_to(work)): p.read_bytes()
        for p in work.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(work).parts
    }


def start(tmp_path: Path, namespace: Path, fake: FakeServer, allow: tuple[str, ...],
          deny: tuple[str, ...]) -> Anvild:  # fmt: skip
    config = user_config(tmp_path, fake.url)
    rules = (
        '\n[permissions]\nmax_mode = "bypass"\n'
        f"allow = {json.dumps(list(allow))}\ndeny = {json.dumps(list(deny))}\n"
    )
    config.write_text(config.read_text() + rules)
    daemon = Anvild(namespace, "--config", str(config))
    daemon.wait_serving()
    return daemon


def tool_results(fake: FakeServer) -> list[str]:
    """The bash results the model was sent after its calls, in the order of the calls."""
    answered = [r for r in fake.requests() if r["answered"]]
    messages = answered[-1]["body"]["messages"]
    return [m["content"] for m in messages if m.get("role") == "tool"]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, TURNS)
    yield server
    server.stop()


def run_attacks(namespace: Path, workspace: Path, fake: FakeServer, *mode: str) -> list[str]:
    before = snapshot(workspace)
    result = headless(namespace, "-p", "attack-all", *mode, "--output-format", "json",
                      cwd=workspace)  # fmt: skip
    assert result.returncode == 0, result.stderr
    results = tool_results(fake)
    assert len(results) == len(ATTACKS)
    assert not (workspace / "X").exists(), "a hidden touch ran"
    assert snapshot(workspace) == before, "an attack changed the workspace"
    return results


def test_no_attack_runs_with_the_realistic_rules(
    tmp_path: Path, namespace: Path, workspace: Path, fake: FakeServer
) -> None:
    daemon = start(tmp_path, namespace, fake, ALLOW, DENY)
    try:
        results = run_attacks(namespace, workspace, fake)
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    for (command, _), result in zip(ATTACKS, results, strict=True):
        assert result.startswith("ERROR: Permission denied for bash: "), (command, result)


def test_every_attack_is_denied_in_bypass_mode_with_deny_rules_for_what_it_hides(
    tmp_path: Path, namespace: Path, workspace: Path, fake: FakeServer
) -> None:
    hidden = tuple(dict.fromkeys(f"bash({h}:*)" for _, h in ATTACKS))
    daemon = start(tmp_path, namespace, fake, ALLOW, (*DENY, *hidden))
    try:
        results = run_attacks(namespace, workspace, fake, "--permission-mode", "bypass")
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    for (command, _), result in zip(ATTACKS, results, strict=True):
        assert result.startswith("ERROR: Permission denied for bash: "), (command, result)
        assert "nobody can approve it" not in result, (command, result)  # denied, not asked


def test_plain_commands_the_rules_cover_run_without_asking(
    tmp_path: Path, namespace: Path, workspace: Path, fake: FakeServer
) -> None:
    daemon = start(tmp_path, namespace, fake, (*ALLOW, "bash(git status)"), DENY)
    try:
        result = headless(namespace, "-p", "plain-all", "--output-format", "json", cwd=workspace)
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    assert result.returncode == 0, result.stderr
    results = tool_results(fake)
    assert len(results) == len(PLAIN)
    for command, output in zip(PLAIN, results, strict=True):
        assert "Permission denied" not in output, (command, output)
    assert "On branch main" in results[0]
    assert "main.py" in results[1]
    if "npm test" in PLAIN:
        assert "npm-ok" in results[-1]
