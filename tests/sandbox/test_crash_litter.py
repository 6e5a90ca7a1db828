"""A daemon killed (SIGKILL) while a sandboxed command runs leaves the sandbox's placeholders and
seeds in the workspace (`.git`, `.anvil`, `.git/commondir`, `.git/hooks`, ...); the next start
(`SessionManager.run`, which sweeps with `anvild.sandbox.litter.sweep`) removes them, and nothing
of the user's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from anvild.sandbox import litter
from anvild.sandbox.bwrap import SandboxSettings
from tests.sandbox.conftest import git, give, make_repo, pids_with
from tests.unit.session.support import running

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def _daemon_code(ws: Path, lists: Path, script: str) -> str:
    """A stand-in daemon: launches `script` as the bash tool does (developer role), then waits."""
    command = ("bash", "-c", script)
    return (
        "import subprocess, sys\n"
        "from pathlib import Path\n"
        "from anvild.sandbox import WorkspaceWrite\n"
        "from anvild.sandbox.bwrap import SandboxSettings\n"
        "from anvild.sandbox.confine import Sandbox\n"
        "from anvild.sandbox.roles import load_role\n"
        f"settings = SandboxSettings(litter_dir=Path({str(lists)!r}))\n"
        "sandbox = Sandbox(WorkspaceWrite(), load_role('developer'), settings)\n"
        f"launch = sandbox.prepare({command!r}, Path({str(ws)!r}))\n"
        "subprocess.Popen(launch.argv, env=launch.env, pass_fds=launch.pass_fds, cwd='/')\n"
        "print('started', flush=True)\n"
        "sys.stdin.read()\n"
    )


def kill_daemon_mid_command(ws: Path, lists: Path, marker: str) -> None:
    """Start the stand-in daemon, wait until the command runs, SIGKILL the daemon, and wait
    until the sandbox is gone (its supervisor kills it when the lifeline closes)."""
    ready = ws / "running"
    script = f"touch {ready} && exec -a {marker} sleep 300"
    daemon = subprocess.Popen(
        [sys.executable, "-c", _daemon_code(ws, lists, script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stdout is not None
        assert daemon.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 20
        while not (ready.exists() and pids_with(marker)):
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.01)
    finally:
        daemon.kill()
        daemon.wait()
        for stream in (daemon.stdin, daemon.stdout):
            assert stream is not None
            stream.close()
    deadline = time.monotonic() + 10
    while pids_with(marker):
        assert time.monotonic() < deadline, "the sandbox outlived its daemon"
        time.sleep(0.05)
    ready.unlink()


async def restart(top: Path, lists: Path) -> None:
    """The next daemon start: a session manager over a fresh data dir, started and stopped."""
    daemon = top / "daemon"
    daemon.mkdir(exist_ok=True)
    async with running(daemon, [], sandbox_settings=SandboxSettings(litter_dir=lists)):
        pass


@pytest.fixture
def top(base_dir: Path) -> Path:
    path = base_dir / f"litter-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o755)
    return path


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


async def test_a_killed_sandbox_in_a_bare_workspace_leaves_nothing_after_a_restart(
    top: Path, marker: str
) -> None:
    ws, lists = top / "ws", top / "data" / "sandbox-mounts"
    ws.mkdir()
    (ws / "mine.txt").write_text("the user's\n")
    give(ws)
    kill_daemon_mid_command(ws, lists, marker)
    left = tree(ws)
    assert {".git", ".anvil"} <= left  # the crash left the placeholders (what the sweep is for)
    assert list(lists.iterdir())  # and their list
    await restart(top, lists)
    assert tree(ws) == {"mine.txt"}
    assert list(lists.iterdir()) == []


async def test_a_killed_sandbox_in_a_repository_leaves_its_git_directory_as_it_was(
    top: Path, marker: str
) -> None:
    ws, lists = top / "ws", top / "data" / "sandbox-mounts"
    make_repo(ws)
    before = set(os.listdir(ws / ".git"))
    give(ws)
    kill_daemon_mid_command(ws, lists, marker)
    assert "commondir" in os.listdir(ws / ".git")  # the seed stayed
    await restart(top, lists)
    assert set(os.listdir(ws / ".git")) == before
    assert not (ws / ".anvil").exists()
    assert git(ws, "status", "--porcelain") == ""


def test_the_sweep_leaves_a_live_daemons_placeholders(top: Path, marker: str) -> None:
    """Another process's lists (a daemon still running) are never touched: removing a mount
    point in use would detach that sandbox's protection."""
    ws, lists = top / "ws", top / "data" / "sandbox-mounts"
    ws.mkdir()
    placeholder = ws / ".git"
    placeholder.mkdir()
    listed = litter.record(lists, [placeholder])
    assert listed is not None
    assert litter.sweep(lists) == []  # this process is alive
    assert placeholder.is_dir()
    litter.forget(listed)
