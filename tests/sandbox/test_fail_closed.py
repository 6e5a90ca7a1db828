"""Fail closed, through the real bash tool: no bwrap, no user namespaces, no seccomp, or a sandbox
that dies during setup → the command is refused with what to do, and a marker proves it never ran
(not sandboxed, not unsandboxed). Also: the environment is scrubbed, and `--new-session` is on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from anvild.agent.tools.base import Failed, ToolContext
from anvild.agent.tools.bash import BashTool
from anvild.sandbox import WorkspaceWrite, probe, seccomp
from tests.sandbox.conftest import ROOT, give

NOUSERNS = """#!/bin/sh
# bwrap whose namespace creation fails: user namespaces disabled in a parent namespace.
exec unshare --user --map-root-user sh -c \\
  'echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --inh-caps=-all "$0" "$@"' \\
  /usr/bin/bwrap "$@"
"""


@pytest.fixture
def ws(base_dir: Path) -> Path:
    path = base_dir / f"fc-{os.urandom(4).hex()}"
    path.mkdir()
    give(path)
    return path


async def _bash(ws: Path, command: str) -> str:
    ctx = ToolContext(cwd=ws)
    ctx.sandbox = WorkspaceWrite()
    return (await BashTool().call({"command": command}, ctx)).content


async def test_a_working_sandbox_runs_the_marker(ws: Path) -> None:
    # The control for the refusals below: the same command does leave its marker.
    out = await _bash(ws, "touch marker && id -u")
    assert (ws / "marker").exists()
    if ROOT:
        assert "65534" in out


async def test_no_bwrap_on_path(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(ws / "nothing-here"))
    with pytest.raises(Failed, match="install bubblewrap"):
        await _bash(ws, "touch marker")
    assert not (ws / "marker").exists()


async def test_user_namespaces_unavailable(
    ws: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = base_dir / f"bin-{os.urandom(4).hex()}"
    fake.mkdir()
    (fake / "bwrap").write_text(NOUSERNS)
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    with pytest.raises(Failed, match="user namespaces"):
        await _bash(ws, "touch marker")
    assert not (ws / "marker").exists()


async def test_sandbox_dies_during_setup_after_the_probe(
    ws: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe.ensure_available()  # the probe passes and is cached with the real bwrap ...
    fake = base_dir / f"bin-{os.urandom(4).hex()}"
    fake.mkdir()
    (fake / "bwrap").write_text(NOUSERNS)
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")  # ... then setup fails: status stream
    with pytest.raises(Failed, match=r"could not be set up.*never re-run without the sandbox"):
        await _bash(ws, "touch marker")
    assert not (ws / "marker").exists()


async def test_seccomp_unavailable(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # import fails like a missing library
    seccomp.filter_bpf.cache_clear()
    try:
        with pytest.raises(Failed, match="libseccomp"):
            await _bash(ws, "touch marker")
    finally:
        seccomp.filter_bpf.cache_clear()
    assert not (ws / "marker").exists()


async def test_unwritable_workspace_is_refused_with_the_reason(base_dir: Path) -> None:
    if not ROOT:
        pytest.skip("the drop happens only as root")
    path = base_dir / f"rootonly-{os.urandom(4).hex()}"
    path.mkdir()
    with pytest.raises(Failed, match=r"cannot write .*chown"):
        await _bash(path, "touch marker")
    assert not (path / "marker").exists()


async def test_env_has_no_api_key(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-" + "7" * 30)
    monkeypatch.setenv("MY_SERVICE_API_KEY", "planted-" + "8" * 30)
    out = await _bash(ws, "env | grep -i api_key; echo done")
    assert "planted" not in out
    assert "stdout:\ndone" in out


async def test_new_session_and_seccomp_are_in_the_command_line(ws: Path) -> None:
    from anvild.sandbox.confine import Sandbox

    with Sandbox(WorkspaceWrite()).prepare(("true",), ws) as launch:
        argv = launch.argv
    assert "--new-session" in argv
    assert "--die-with-parent" in argv
    assert "--unshare-net" in argv
    assert argv[argv.index("--seccomp") + 1] == str(launch.pass_fds[0])
    assert argv[argv.index("--json-status-fd") + 1] == str(launch.pass_fds[1])
    assert argv[argv.index("-S") + 1].endswith("supervisor.py")  # the supervisor comes first
    assert argv[argv.index("-S") + 2] == str(launch.pass_fds[2])  # with its lifeline
    if ROOT:
        assert argv[argv.index("--") + 1].endswith("setpriv")
        assert "--reuid=65534" in argv
        assert argv.index("--no-new-privs") < argv.index(next(a for a in argv if "bwrap" in a))
