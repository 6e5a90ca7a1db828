"""AnviLLM compatibility through a real daemon: its `new` line, its sandbox role files, and the
usage column of `anvilctl sessions`.

The `new` line is AnviLLM's (IDEAS.md, "Role-Based Sessions": `new kiro /project reviewer`),
with the test's workspace for /project and `kiro` configured as a model alias; the role files
are AnviLLM's documented reviewer.yaml and developer.yaml, placed in the user's sandbox-roles
directory, where the daemon (and `anvilctl sandbox`) find them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvilctl.sessions import usage_text
from tests.integration.test_daemon_cli import Anvild, isolated_env
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)
from tests.unit.sandbox.test_anvillm_roles import ANVILLM_DEVELOPER, ANVILLM_REVIEWER

pytestmark = pytest.mark.slow


def roles_dir(tmp_path: Path) -> Path:
    """The user's sandbox-roles directory of the test daemon (XDG_CONFIG_HOME of isolated_env)."""
    path = tmp_path / "xdg-config" / "anvil" / "sandbox-roles"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def config(tmp_path: Path, fake: FakeServer) -> Path:
    """The default config (alias `fake`), plus `kiro`, so AnviLLM's line works as it is."""
    path = user_config(tmp_path, fake.url)
    text = path.read_text()
    text += '\n[models.kiro]\nprovider = "fake"\nmodel = "fake-model"\ncontext_window = 8192\n'
    path.write_text(text)
    return path


@pytest.fixture
def daemon(namespace: Path, config: Path, tmp_path: Path) -> Iterator[Anvild]:
    (roles_dir(tmp_path) / "reviewer.yaml").write_text(ANVILLM_REVIEWER)
    d = start_daemon(namespace, config)
    yield d
    code, log = d.stop()
    assert code == 0, log


def new(namespace: Path, line: str) -> subprocess.CompletedProcess[str]:
    return anvilctl(namespace, "rdwr", "agent/ctl", stdin=f"{line}\n")


def test_anvillms_new_line_creates_the_session_it_names(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    # The user's reviewer.yaml is AnviLLM's: without the mapping the role would not load.
    for line, model in [(f"new kiro {workdir} reviewer", "kiro"), (f"new fake {workdir}", "fake")]:
        session_id = ok(new(namespace, line)).split("\n")[1]
        assert session_id.isalnum(), line
        role = "reviewer" if "reviewer" in line else "developer"
        assert read(namespace, f"agent/{session_id}/role") == f"{role}\n"
        assert read(namespace, f"agent/{session_id}/cwd") == f"{workdir}\n"
        assert read(namespace, f"agent/{session_id}/model") == f"{model}\n"
    assert read(namespace, f"agent/{session_id}/sandbox") == "workspace-write\n"


def test_an_ambiguous_or_unknown_positional_word_is_refused(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    bad = new(namespace, f"new claude {workdir} reviewer")
    assert bad.returncode == 1
    assert (
        "new: 'claude' is AnviLLM's backend for the anthropic provider, and no model alias uses "
        "it; write model=ALIAS with one of: fake, kiro"
    ) in bad.stderr
    bad = new(namespace, "new project")
    assert "write model=project, role=project or cwd=/ABSOLUTE/PATH" in bad.stderr
    assert read(namespace, "agent/list") == ""


def test_a_bad_anvillm_role_file_refuses_new_naming_the_file_and_key(
    namespace: Path, config: Path, workdir: Path, tmp_path: Path
) -> None:
    bad = roles_dir(tmp_path) / "reviewer.yaml"
    bad.write_text(ANVILLM_REVIEWER.replace("enabled: false", "enabled: false\n  proxy: x"))
    d = start_daemon(namespace, config)
    try:
        refused = new(namespace, f"new fake {workdir} reviewer")
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert refused.returncode == 1
    assert f"{bad}: unknown key network.proxy" in refused.stderr


def sandbox(
    role: str, workdir: Path, tmp_path: Path, *cmd: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", "sandbox", "--role", role, "--", *cmd],
        capture_output=True,
        text=True,
        timeout=TURN_TIMEOUT,
        # {TMPDIR} of AnviLLM's developer file: a directory of the test's, not the host's /tmp
        env={**isolated_env(tmp_path), "TMPDIR": str(workdir.parent / "tmp")},
        cwd=workdir,
        check=False,
    )


@pytest.fixture
def open_workdir() -> Iterator[Path]:
    """A workspace the sandbox's uid can enter and write (pytest's tmp_path is private)."""
    top = Path(tempfile.mkdtemp(prefix="anvil-anvillm-", dir="/var/tmp"))
    top.chmod(0o777)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_anvilctl_sandbox_runs_an_anvillm_role_with_the_mapped_policy(
    open_workdir: Path, tmp_path: Path
) -> None:
    workdir = open_workdir / "ws"
    for path in (workdir, open_workdir / "tmp"):
        path.mkdir()
        path.chmod(0o777)
    (roles_dir(tmp_path) / "anvillm-reviewer.yaml").write_text(ANVILLM_REVIEWER)
    (roles_dir(tmp_path) / "anvillm-developer.yaml").write_text(ANVILLM_DEVELOPER)

    done = sandbox("anvillm-reviewer", workdir, tmp_path, "true")
    assert done.returncode == 0, done.stderr
    assert "policy: read-only (network off); role: anvillm-reviewer\n" in done.stderr
    assert "  filesystem.read_only: ['{CWD}', '/usr', '/lib']\n" in done.stderr
    assert "  filesystem.read_write: []\n" in done.stderr
    refused = sandbox("anvillm-reviewer", workdir, tmp_path, "touch", "made")
    assert refused.returncode != 0
    assert not (workdir / "made").exists()

    done = sandbox("anvillm-developer", workdir, tmp_path, "touch", "made")
    assert done.returncode == 0, done.stderr
    assert "policy: workspace-write (network on); role: anvillm-developer\n" in done.stderr
    assert (workdir / "made").exists()


def test_anvilctl_sessions_shows_each_sessions_usage(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    session_id = ok(new(namespace, f"new kiro {workdir} reviewer")).split("\n")[1]
    before = ok(anvilctl(namespace, "sessions", cwd=workdir)).splitlines()
    assert before[0].split()[:8] == [
        *("ID", "ALIAS", "STATE", "OUTCOME", "ROLE", "MODEL", "USAGE", "AGE")
    ]
    state = before[1].split()[2]
    assert before[1].split()[:7] == [session_id, "-", state, "-", "reviewer", "kiro", "-"]

    ok(anvilctl(namespace, "write", f"agent/{session_id}/in", stdin="ping"))
    assert read(namespace, f"agent/{session_id}/wait") == "await\n"
    usage = read(namespace, f"agent/{session_id}/usage")
    used, window = usage.split()[0].split("/")
    assert (int(used) > 0, window) == (True, "8192"), usage
    after = ok(anvilctl(namespace, "sessions", cwd=workdir)).splitlines()
    assert after[1].split()[3] == "done", after
    assert after[1].split()[6:8] == usage_text(usage).split(), after
    assert after[1].split()[6].endswith("/8.2k"), after
