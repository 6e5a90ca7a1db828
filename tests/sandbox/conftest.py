"""Shared set-up for the escape suite: a world the sandbox uid can use, and a runner that launches
a command exactly as the bash tool does (`Sandbox.prepare`, the same argv, environment and
descriptors, the status stream checked afterwards).

As root (CI) every command goes through the privilege drop to uid 65534, so the workspaces live
under /var/tmp (the pytest tmp dir is 0700 root) and belong to that uid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvild.sandbox import ReadOnly, WorkspaceWrite, probe
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID, SandboxSettings
from anvild.sandbox.confine import Sandbox
from anvild.sandbox.roles import Role

ROOT = os.geteuid() == 0


def give(path: Path) -> None:
    """Hand a tree to the sandbox uid (as root), so the dropped process can write it."""
    if not ROOT:
        return
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, DEFAULT_UID, DEFAULT_GID)
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), DEFAULT_UID, DEFAULT_GID, follow_symlinks=False)


def git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def make_repo(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main", ".")
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@example.com")
    (path / "README").write_text("hello\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "init")


@pytest.fixture(scope="session")
def base_dir() -> Iterator[Path]:
    """A directory every uid can traverse, removed at the end."""
    top = Path(tempfile.mkdtemp(prefix="anvil-sbx-", dir="/var/tmp"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def run_reported(
    policy: ReadOnly | WorkspaceWrite,
    role: Role,
    cwd: Path,
    script: str,
    *,
    stdin: int | None = None,
    timeout: float = 60,
    settings: SandboxSettings | None = None,
) -> tuple[subprocess.CompletedProcess[str], str | None]:
    """Run `script` as the bash tool does: prepare, run, the verdict, the check after the
    command (`Launch.inspect`), close. Returns the process and the check's report."""
    sandbox = Sandbox(policy, role, settings or SandboxSettings())
    with sandbox.prepare(("bash", "-c", script), cwd) as launch:
        done = subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            cwd=launch.cwd,
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        refusal = launch.verdict(done.returncode, done.stderr)
        report = launch.inspect()
    assert refusal is None, refusal
    return done, report


def run_in(
    policy: ReadOnly | WorkspaceWrite,
    role: Role,
    cwd: Path,
    script: str,
    *,
    stdin: int | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return run_reported(policy, role, cwd, script, stdin=stdin, timeout=timeout)[0]


@pytest.fixture(autouse=True)
def _fresh_probe() -> Iterator[None]:
    probe.clear_cache()
    yield
    probe.clear_cache()


def pids_with(text: str) -> list[int]:
    """Live processes (zombies excluded) whose command line contains `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A text unique to the test, for the command lines of the processes it starts. Whatever
    still carries it at teardown is killed (a sandbox's init takes its pid namespace with it),
    so a failing run never leaves orphans behind for the next one."""
    tag = f"anvil-mark-{uuid.uuid4().hex[:10]}"
    yield tag
    deadline = time.monotonic() + 5
    while (left := pids_with(tag)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
