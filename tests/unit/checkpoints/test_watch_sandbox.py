"""The change watcher and the real bubblewrap sandbox: a file a sandboxed command writes in the
bind-mounted workspace is reported (inotify follows inodes, not mounts), and a command that only
reads reports nothing (the mount points the sandbox makes and removes are no change): a
snapshot after it does not scan."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvild.checkpoints import Snapshot, Workspaces
from anvild.checkpoints.watch import Watcher
from anvild.sandbox import SandboxError, WorkspaceWrite, probe
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from anvild.sandbox.confine import Sandbox


def run_sandboxed(cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
    """`script` as the bash tool runs it: prepared by the sandbox, run, checked."""
    with Sandbox(WorkspaceWrite()).prepare(("bash", "-c", script), cwd) as launch:
        done = subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            cwd=launch.cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert launch.verdict(done.returncode, done.stderr) is None, done.stderr
    return done


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace the sandbox uid may write (as root the command runs as that uid, and the
    pytest tmp dir is 0700 root, so it lives under /var/tmp)."""
    try:
        probe.ensure_available(Sandbox(WorkspaceWrite()).settings)
    except SandboxError as exc:
        pytest.skip(f"no sandbox on this machine: {exc}")
    top = Path(tempfile.mkdtemp(prefix="anvil-watch-", dir="/var/tmp"))
    top.chmod(0o755)
    root = top / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a\n")
    if os.geteuid() == 0:
        for path in (root, root / "src", root / "src" / "a.py"):
            os.chown(path, DEFAULT_UID, DEFAULT_GID)
    try:
        yield root
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_sandboxed_command_s_writes_are_seen_and_its_reads_are_not(workspace: Path) -> None:
    watcher = Watcher(workspace)
    watcher.start()
    assert watcher.watching, watcher.off
    assert watcher.changed()
    assert not watcher.changed()
    done = run_sandboxed(workspace, "ls -la; cat src/a.py; git status 2>/dev/null; true")
    assert "a.py" not in done.stderr
    assert not watcher.changed()  # `bash ls`: nothing to scan
    run_sandboxed(workspace, "echo b >> src/a.py")
    assert watcher.changed()
    assert (workspace / "src" / "a.py").read_text() == "a\nb\n"
    run_sandboxed(workspace, "mkdir -p new/deep && echo c > new/deep/c.txt")
    assert watcher.changed()
    run_sandboxed(workspace, "echo d > new/deep/c.txt")
    assert watcher.changed()
    watcher.close()


async def test_a_sandboxed_ls_costs_no_scan_and_a_sandboxed_write_is_recorded(
    workspace: Path, tmp_path: Path
) -> None:
    shadow = Workspaces(tmp_path / "data", max_file_bytes=1000).workspace(workspace).shadow
    await shadow.open()
    scans = [0]
    scan = shadow._scan

    async def counting() -> Snapshot:
        scans[0] += 1
        return await scan()

    shadow._scan = counting  # type: ignore[method-assign]
    first = await shadow.snapshot()
    run_sandboxed(workspace, "ls -la")  # `bash ls`: a mutating call that changes nothing
    assert await shadow.snapshot() == first
    assert scans == [1]
    run_sandboxed(workspace, "echo b >> src/a.py")
    after = await shadow.snapshot()
    assert scans == [2]
    assert [c.path for c in await shadow.changes(first.tree, after.tree)] == ["src/a.py"]
    shadow.close()
