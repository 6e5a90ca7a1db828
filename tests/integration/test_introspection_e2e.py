"""End to end: a session's `systemprompt`, `history` and `env` through the real `anvild` with the
fake provider, read with `anvilctl read` (a stock 9P client's read). The model runs `env` in the
sandbox, so the session's `env` file is checked against what a command really got."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from anvild.session import roles
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, read, user_config

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

TOKEN = "ghp_e2etokenpassedthrough99"
UNPASSED = "e2e-secret-not-passed-through-77"
AGENTS = "Always run `make check` before you say done."
BASH_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}  # what `bash -c` itself exports

TURNS: list[dict[str, Any]] = [
    {
        "contains": "show the environment",
        "tool_calls": [{"name": "bash", "arguments": {"command": "env"}, "id": "c1"}],
    },
    {"text": f"done, the token is {TOKEN}", "repeat": True},
]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, TURNS)
    yield server
    server.stop()


@pytest.fixture
def daemon(namespace: Path, tmp_path: Path, fake: FakeServer) -> Iterator[Anvild]:
    config = user_config(tmp_path, fake.url)
    body = config.read_text()
    config.write_text(
        'env_passthrough = ["GH_TOKEN", "ANVIL_E2E_PLAIN"]\n'
        + body
        + '\n[permissions]\nmax_mode = "bypass"\n'
    )
    env = {"GH_TOKEN": TOKEN, "ANVIL_E2E_PLAIN": "plain value", "ANVIL_E2E_OPAQUE": UNPASSED}
    d = Anvild(namespace, "--config", str(config), env=env)
    d.wait_serving()
    yield d
    code, log = d.stop()
    assert code == 0, log


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A workspace the sandbox can enter (as root it runs commands as uid 65534)."""
    top = Path(tempfile.mkdtemp(prefix="anvil-introspection-", dir="/var/tmp"))
    top.chmod(0o755)
    work = top / "work"
    work.mkdir()
    if os.geteuid() == 0:
        os.chown(work, DEFAULT_UID, DEFAULT_GID)
    try:
        yield work
    finally:
        shutil.rmtree(top, ignore_errors=True)


def history(namespace: Path, sid: str) -> list[dict[str, Any]]:
    text = read(namespace, f"agent/{sid}/history")
    assert TOKEN not in text
    return [json.loads(line) for line in text.splitlines()]


def test_systemprompt_history_and_env_over_the_daemon(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    (workdir / "AGENTS.md").write_text(f"{AGENTS}\n")
    sid = ok(anvilctl(namespace, "new", "permission=bypass", cwd=workdir)).strip()

    prompt = read(namespace, f"agent/{sid}/systemprompt")
    assert AGENTS in prompt
    role = roles.role_text("developer", user_dir=workdir / "no-user-roles")
    assert f"# Your role: developer\n\n{role}" in prompt
    assert prompt.index(AGENTS) < prompt.index("# Your role: developer")

    assert history(namespace, sid) == []
    ok(anvilctl(namespace, "send", "--wait", sid, "show the environment"))
    first = history(namespace, sid)
    assert [line["role"] for line in first] == ["user", "assistant", "user", "assistant"]
    assert first[0]["content"] == [{"type": "text", "text": "show the environment"}]
    [result] = first[2]["content"]
    assert result["type"] == "tool_result"
    ok(anvilctl(namespace, "send", "--wait", sid, "once more"))
    second = history(namespace, sid)
    assert second[:4] == first
    assert [line["role"] for line in second[4:]] == ["user", "assistant"]

    env_text = read(namespace, f"agent/{sid}/env")
    assert TOKEN not in env_text
    assert UNPASSED not in env_text
    env = dict(line.split("=", 1) for line in env_text.splitlines())
    assert env["GH_TOKEN"] == "***"
    assert env["ANVIL_E2E_PLAIN"] == "plain value"
    assert "ANVIL_E2E_OPAQUE" not in env
    # The names are exactly those the sandboxed `env` printed, but bash's own.
    stdout = result["content"].split("stdout:\n", 1)[1].split("\n\nstderr:", 1)[0]
    printed = {m.group(1) for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)=", stdout, re.M)}
    assert set(env) == printed - BASH_OWN, set(env) ^ printed
    assert "GH_TOKEN=[redacted:GH_TOKEN]" in stdout  # the tool's output is redacted too
