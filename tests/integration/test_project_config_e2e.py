"""End to end: a session's cwd brings its project's `.anvil/config.toml` (README "Configuration
and trust"), through the real `anvild` and the fake provider server.

- `instructions` (the user's, then the project's) are in the system prompt the provider
  receives, for a session inside the project only;
- the project's deny rule refuses a call, granted or not;
- its allow rule and its provider do nothing until the exact command the daemon reported
  (`config_ignored` on `agent/events`, once) is run; from the next turn on they apply;
- an edit of the project file applies at the next turn; the `config` file says what applied;
- `anvilctl -p` without a daemon (in process) does the same, with the grants of the user data dir.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_daemon_cli import STARTUP_TIMEOUT, Anvild
from tests.integration.test_headless import env_for, headless
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, read, user_config

USER_MARK = "USER-MARK-5c1e"
PROJECT_MARK = "PROJECT-MARK-9a7f"


def script(name: str) -> list[dict[str, Any]]:
    """Write a file or read one when asked to, else answer `from NAME`."""
    return [
        {
            "contains": "write it",
            "tool_calls": [
                {"name": "write_file", "arguments": {"file_path": "notes.txt", "content": "x"}}
            ],
            "repeat": True,
        },
        {
            "contains": "read it",
            "tool_calls": [{"name": "read_file", "arguments": {"file_path": "secret.txt"}}],
            "repeat": True,
        },
        {"text": f"from {name}", "repeat": True},
    ]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    """A: the user config's endpoint."""
    server = FakeServer(tmp_path, script("A"))
    yield server
    server.stop()


@pytest.fixture
def other(tmp_path: Path) -> Iterator[FakeServer]:
    """B: where the project config moves the provider."""
    (tmp_path / "b").mkdir()
    server = FakeServer(tmp_path / "b", script("B"))
    yield server
    server.stop()


@pytest.fixture
def config(tmp_path: Path, fake: FakeServer) -> Path:
    path = user_config(tmp_path, fake.url)
    path.write_text(f'instructions = "{USER_MARK}"\n\n' + path.read_text())
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".anvil").mkdir()
    (repo / "src").mkdir()
    return repo


def project(repo: Path, text: str) -> Path:
    path = repo / ".anvil" / "config.toml"
    path.write_text(text)
    return path


def new(namespace: Path, cwd: Path, *words: str) -> str:
    line = " ".join([f"new cwd={cwd}", *words])
    out = ok(anvilctl(namespace, "rdwr", "agent/ctl", stdin=line + "\n"))
    return out.split("\n")[1]


def turn(namespace: Path, session: str, prompt: str) -> str:
    ok(anvilctl(namespace, "write", f"agent/{session}/in", stdin=prompt))
    assert read(namespace, f"agent/{session}/wait") == "await\n"
    return read(namespace, f"agent/{session}/out")


def system_of(request: dict[str, Any]) -> str:
    messages = request["body"]["messages"]
    assert messages[0]["role"] == "system"
    content = messages[0]["content"]
    return content if isinstance(content, str) else json.dumps(content)


def tool_result(request: dict[str, Any]) -> str:
    return str(request["body"]["messages"][-1]["content"])


class Events:
    """`agent/events`, read by a subprocess until the daemon stops."""

    def __init__(self, namespace: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "anvilctl", "read", "agent/events"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NAMESPACE": str(namespace)},
        )

    def after_stop(self, daemon: Anvild) -> list[dict[str, Any]]:
        code, log = daemon.stop()
        assert code == 0, log
        try:
            out, _ = self.proc.communicate(timeout=STARTUP_TIMEOUT)
        finally:
            self.close()
        return [json.loads(line) for line in out.splitlines() if line]

    def close(self) -> None:
        """End the reader if it still runs (a test that failed before `after_stop`)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def test_instructions_reach_the_prompt_of_sessions_inside_the_project_only(
    daemon: Anvild, namespace: Path, repo: Path, workdir: Path, fake: FakeServer
) -> None:
    project(repo, f'instructions = "{PROJECT_MARK}"\n')
    inside = new(namespace, repo / "src")
    outside = new(namespace, workdir)
    assert turn(namespace, inside, "hello").strip() == "from A"
    assert turn(namespace, outside, "hello").strip() == "from A"
    first, second = fake.requests()
    system = system_of(first)
    assert USER_MARK in system
    assert PROJECT_MARK in system
    assert system.index(USER_MARK) < system.index(PROJECT_MARK)  # the user's first
    assert "# Instructions from the config (user, then project)" in system
    assert USER_MARK in system_of(second)
    assert PROJECT_MARK not in system_of(second)
    shown = read(namespace, f"agent/{inside}/config")
    assert f"instructions = {json.dumps(PROJECT_MARK)}\tproject {repo}/.anvil/config.toml" in shown
    assert f"instructions = {json.dumps(USER_MARK)}\tuser " in shown
    assert "project none" in read(namespace, f"agent/{outside}/config")


def test_a_project_deny_rule_refuses_a_call_without_any_grant(
    daemon: Anvild, namespace: Path, repo: Path, fake: FakeServer
) -> None:
    project(repo, '[permissions]\ndeny = ["read_file(secret.txt)"]\n')
    (repo / "secret.txt").write_text("the secret\n")
    session = new(namespace, repo)
    assert turn(namespace, session, "read it").strip() == "from A"
    result = tool_result(fake.requests()[-1])
    assert "Permission denied for read_file" in result, result
    assert "the secret" not in result
    assert 'permissions.deny = "read_file(secret.txt)"\tproject ' in read(
        namespace, f"agent/{session}/config"
    )


def test_project_authority_applies_only_after_the_reported_grant(
    daemon: Anvild,
    namespace: Path,
    repo: Path,
    fake: FakeServer,
    other: FakeServer,
    open_events: Callable[[Path], Events],
) -> None:
    events = open_events(namespace)
    project(
        repo,
        '[permissions]\nallow = ["write_file(notes.txt)"]\n\n'
        f'[providers.fake]\nbase_url = "{other.url}/v1"\n',
    )
    session = new(namespace, repo, "headless")
    # Not granted: the allow rule does not apply (nobody can approve in a headless session),
    # and the requests go to the user's endpoint.
    assert turn(namespace, session, "write it").strip() == "from A"
    assert "nobody can approve it" in tool_result(fake.requests()[-1])
    assert not (repo / "notes.txt").exists()
    shown = read(namespace, f"agent/{session}/config")
    assert 'permissions.allow = "write_file(notes.txt)"\tproject ignored (permission)' in shown
    assert "providers.fake.base_url" in shown
    assert "not granted: anvilctl trust grant" in shown
    assert turn(namespace, session, "hello again").strip() == "from A"  # reported once only
    assert other.requests() == []

    # The command the daemon reported, run as it is.
    log_lines = (daemon.data_dir / "logs" / "anvild.log").read_text()
    assert "config.project_ignored" in log_lines
    command = next(
        json.loads(line)["message"].split("apply it with `")[1].rstrip("`")
        for line in log_lines.splitlines()
        if "config.session_note" in line and "apply it with" in line
    )
    words = shlex.split(command)
    assert words[:3] == ["anvilctl", "trust", "grant"]
    assert "--data-dir" in words
    ok(anvilctl(namespace, *words[1:]))

    # The session's next turn goes to B; the allow rule lets a write through (in a new session:
    # the fake servers number their call ids alike, and one transcript must not repeat one).
    assert turn(namespace, session, "hello at last").strip() == "from B"
    assert "project trusted" in read(namespace, f"agent/{session}/config")
    writer = new(namespace, repo, "headless")
    assert turn(namespace, writer, "write it").strip() == "from B"
    assert (repo / "notes.txt").read_text() == "x"

    seen = events.after_stop(daemon)
    ignored = [e for e in seen if e.get("type") == "config_ignored" and e.get("id") == session]
    assert len(ignored) == 1, seen
    assert set(ignored[0]["keys"]) == {"permissions.allow", "providers.fake.base_url"}
    assert ignored[0]["command"] == command


def test_an_edit_of_the_project_config_applies_at_the_next_turn(
    daemon: Anvild, namespace: Path, repo: Path, fake: FakeServer
) -> None:
    path = project(repo, 'instructions = "FIRST-EDITION"\n')
    session = new(namespace, repo)
    assert turn(namespace, session, "hello").strip() == "from A"
    path.write_text('instructions = "SECOND-EDITION, longer"\n')
    assert turn(namespace, session, "hello").strip() == "from A"
    path.write_text("instructions = [not toml\n")  # broken: reported, the last good applies
    assert turn(namespace, session, "hello").strip() == "from A"
    first, second, third = (system_of(r) for r in fake.requests())
    assert "FIRST-EDITION" in first
    assert "SECOND-EDITION" in second
    assert "FIRST-EDITION" not in second
    assert "SECOND-EDITION" in third
    shown = read(namespace, f"agent/{session}/config")
    assert "error " in shown
    assert "not valid TOML" in shown


def test_anvilctl_p_in_process_takes_the_same_path(
    namespace: Path, tmp_path: Path, repo: Path, fake: FakeServer, other: FakeServer
) -> None:
    config_dir = tmp_path / "xdg-config" / "anvil"
    config_dir.mkdir(parents=True)
    user_config(tmp_path, fake.url).rename(config_dir / "config.toml")
    namespace.mkdir(mode=0o700)  # no daemon answers there: the turn runs in process
    project(
        repo, f'instructions = "{PROJECT_MARK}"\n\n[providers.fake]\nbase_url = "{other.url}/v1"\n'
    )
    first = headless(namespace, "-p", "hello", "-C", str(repo))
    assert (first.returncode, first.stdout) == (0, "from A\n"), first.stderr
    assert PROJECT_MARK in system_of(fake.requests()[-1])
    # Granted where `anvilctl trust` keeps grants by default (the user data dir).
    granted = subprocess.run(
        [sys.executable, "-m", "anvilctl", "trust", "grant", str(repo)],
        capture_output=True,
        text=True,
        env=env_for(namespace),
        check=False,
    )
    assert granted.returncode == 0, granted.stderr
    second = headless(namespace, "-p", "hello", "-C", str(repo))
    assert (second.returncode, second.stdout) == (0, "from B\n"), second.stderr
    assert PROJECT_MARK in system_of(other.requests()[-1])
