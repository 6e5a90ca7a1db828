"""Snapshots with the change watcher are the snapshots without it: the same trees and skipped
paths after every step of a scripted sequence (edits, bash-style moves, .gitignore and
.git/info/exclude changes, a nested repository), with the scans left out only when nothing
changed; turns, a user's edit between two turns, and undo give the same steps."""

from __future__ import annotations

import mmap
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from anvild.checkpoints import Snapshot, UndoRefused, Workspaces
from anvild.checkpoints.shadow import Shadow


def git_init(root: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("one\ntwo\nthree\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("object\n")
    git_init(root)
    (root / ".git" / "info" / "exclude").write_text("secret.txt\n")
    (root / "secret.txt").write_text("hidden\n")
    return root


def counted(shadow: Shadow, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times `shadow` really scanned (a list of one count)."""
    scans = [0]
    scan = shadow._scan

    async def counting() -> Snapshot:
        scans[0] += 1
        return await scan()

    monkeypatch.setattr(shadow, "_scan", counting)
    return scans


def steps(root: Path) -> list[tuple[str, Callable[[], object]]]:
    def write(path: str, text: str) -> Callable[[], object]:
        return lambda: (root / path).write_text(text)

    def nested() -> None:
        (root / "vendor" / "lib").mkdir(parents=True)
        (root / "vendor" / "lib" / "x.c").write_text("int x;\n")
        git_init(root / "vendor" / "lib")

    def file_to_directory() -> None:
        (root / "run.sh").unlink()
        (root / "run.sh").mkdir()
        (root / "run.sh" / "inner").write_text("inner\n")

    return [
        ("nothing", lambda: None),
        ("create", write("new.txt", "new\n")),
        ("modify", write("src/a.py", "one\nTWO\nthree\n")),
        ("nothing again", lambda: None),
        ("chmod", lambda: (root / "run.sh").chmod(0o755)),
        ("nested directories", lambda: (root / "deep" / "er").mkdir(parents=True)),
        ("a file in them", write("deep/er/f.txt", "f\n")),
        ("rename a directory", lambda: (root / "deep").rename(root / "shallow")),
        ("edit in the moved one", write("shallow/er/f.txt", "g\n")),
        ("delete", lambda: (root / "new.txt").unlink()),
        ("over the size cap", lambda: (root / "big.bin").write_bytes(b"x" * 5000)),
        ("symlink", lambda: (root / "link").symlink_to("src/a.py")),
        ("ignored file", write("build/out.o", "rebuilt\n")),
        ("unignore build/", write(".gitignore", "")),
        ("exclude changed only", write(".git/info/exclude", "")),
        ("the user's git", write(".git/HEAD", "ref: refs/heads/other\n")),
        ("nested repository", nested),
        ("file to directory", file_to_directory),
        ("the end", lambda: None),
    ]


async def test_every_snapshot_is_the_same_with_and_without_the_watcher(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watched = Workspaces(tmp_path / "w", max_file_bytes=1000).workspace(workspace).shadow
    scanned = Workspaces(tmp_path / "s", max_file_bytes=1000, watch=False).workspace(workspace)
    plain = scanned.shadow
    for shadow in (watched, plain):
        await shadow.open()
    scans = counted(watched, monkeypatch)
    quiet = 0
    for name, step in steps(workspace):
        step()
        before = scans[0]
        ours, theirs = await watched.snapshot(), await plain.snapshot()
        assert ours == theirs, name
        quiet += scans[0] == before
        after = scans[0]
        again = await watched.snapshot()  # nothing happened since: no scan, same answer
        assert again == ours, name
        assert scans[0] == after, name
    assert watched.watcher is not None
    assert watched.watcher.watching
    assert plain.watcher is None
    # Only the steps that change nothing git sees leave out the scan ("nothing again", "the
    # user's git" and "the end"; the first snapshot always scans).
    assert quiet == 3, quiet
    assert "secret.txt" in (await watched.git("ls-files")).decode()  # the exclude change


async def test_turns_a_users_edit_between_them_and_undo_match(
    tmp_path: Path, workspace: Path
) -> None:
    sessions = [
        Workspaces(tmp_path / name, watch=watch).session("s1", workspace)
        for name, watch in (("w", True), ("s", False))
    ]

    for s in sessions:
        s.begin_turn(1, "edit", 0)
        await s.before_change()
    (workspace / "src" / "a.py").write_text("one\ntwo\nthree\nfour\n")  # the turn's edit
    for s in sessions:
        await s.end_turn("done")
    (workspace / "src" / "a.py").write_text("zero\none\ntwo\nthree\nfour\n")  # the user's
    for s in sessions:
        s.begin_turn(2, "ls", 0)
        await s.before_change()  # a mutating call (bash ls) that changed nothing
        await s.end_turn("done")
    first, second = ([s.turn(n) for n in (1, 2)] for s in sessions)
    assert first == second
    turn2 = first[1]
    assert turn2 is not None
    assert turn2.before is not None
    assert not turn2.changed
    assert turn2.changes == ""
    # The user's edit is in turn 2's snapshot: undo of turn 1 merges with it.
    shadow = Workspaces(tmp_path / "w").workspace(workspace).shadow
    assert (await shadow.git("cat-file", "-p", f"{turn2.before}:src/a.py")).startswith(b"zero")
    text = await sessions[0].undo()
    assert "merged with later edits: src/a.py" in text
    assert (workspace / "src" / "a.py").read_text() == "zero\none\ntwo\nthree\n"
    for s in sessions:
        s.begin_turn(3, "nothing", 0)
        await s.before_change()
        await s.end_turn("done")
    watched, plain = (s.turn(3) for s in sessions)
    assert watched is not None
    assert plain is not None
    assert watched.before == plain.before == watched.after  # the undo is seen by both


async def test_undo_scans_for_a_write_through_a_mapping_inotify_does_not_report(
    tmp_path: Path, workspace: Path
) -> None:
    checkpoints = Workspaces(tmp_path / "w").session("s1", workspace)
    checkpoints.begin_turn(1, "edit", 0)
    await checkpoints.before_change()
    (workspace / "src" / "a.py").write_text("one\nTWO\nthree\n")
    await checkpoints.end_turn("done")
    watcher = checkpoints._workspace.shadow.watcher
    assert watcher is not None
    assert watcher.watching
    fd = os.open(workspace / "src" / "a.py", os.O_RDWR)
    mapped = mmap.mmap(fd, 0)  # holds a descriptor of its own until closed
    os.close(fd)
    try:
        mapped[4:7] = b"Two"  # through the mapping: no inotify event at all
        mapped.flush()
        assert not watcher.changed()  # the limit: the watcher did not see it
        with pytest.raises(UndoRefused) as refused:
            await checkpoints.undo()  # compares with a real scan: the write is not clobbered
        assert "src/a.py" in str(refused.value)
        assert (workspace / "src" / "a.py").read_text() == "one\nTwo\nthree\n"
    finally:
        mapped.close()
    assert watcher.changed()  # its descriptor, opened for writing, closed: that is seen
