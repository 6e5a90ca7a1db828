"""The shadow repository and reverts: snapshots see every change (bash's too), honour
.gitignore, the user's info/exclude and the size cap, never touch the user's .git; undo restores
the exact tree, merges edits that do not overlap, refuses the ones that do, and finishes after a
crash from its intent."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from anvild.checkpoints import UndoRefused, Workspaces
from anvild.checkpoints.history import SessionCheckpoints
from anvild.checkpoints.revert import read_intent, write_intent
from anvild.checkpoints.shadow import Entry, Shadow


def tree_of(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under `root` outside .git: its sha256 and mode bits."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".git" or path.is_dir():
            continue
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        found[str(rel)] = (hashlib.sha256(data).hexdigest(), stat.S_IMODE(path.lstat().st_mode))
    return found


def git_state(root: Path) -> dict[str, bytes]:
    """The user's .git as bytes, every file."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / ".git").rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("one\ntwo\nthree\nfour\nfive\n")
    (root / "src" / "b.py").write_text("bee\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("object\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    (root / ".git" / "info" / "exclude").write_text("secret.txt\n")
    (root / "secret.txt").write_text("hidden\n")
    return root


def session(tmp_path: Path, root: Path, cap: int = 1000) -> SessionCheckpoints:
    return Workspaces(tmp_path / "data" / "checkpoints", max_file_bytes=cap).session("s1", root)


async def a_turn(checkpoints: SessionCheckpoints, number: int, root: Path) -> None:
    checkpoints.begin_turn(number, f"turn {number}\nmore", messages=number)
    await checkpoints.before_change()
    (root / "src" / "a.py").write_text("one\ntwo\nTHREE\nfour\nfive\n")  # an edit
    (root / "new.txt").write_text("new\n")  # a creation
    (root / "src" / "b.py").unlink()  # a deletion
    (root / "run.sh").rename(root / "start.sh")  # a rename
    (root / "start.sh").chmod(0o755)  # a mode change
    (root / "build" / "out.o").write_text("rebuilt\n")  # ignored
    (root / "secret.txt").write_text("changed\n")  # excluded in .git/info/exclude
    (root / "big.bin").write_bytes(b"x" * 5000)  # over the cap
    await checkpoints.end_turn("done")


async def test_changes_and_undo_restore_the_exact_tree(tmp_path: Path, workspace: Path) -> None:
    user_git = git_state(workspace)
    checkpoints = session(tmp_path, workspace)
    await checkpoints.recover()
    before = tree_of(workspace)
    await a_turn(checkpoints, 1, workspace)
    step = checkpoints.turn(1)
    assert step is not None
    assert step.label == "turn 1"
    lines = step.changes.splitlines()
    assert "M\t+1\t-1\tsrc/a.py" in lines
    assert "A\t+1\t-0\tnew.txt" in lines
    assert "D\t+0\t-1\tsrc/b.py" in lines
    assert "D\t+0\t-1\trun.sh" in lines
    assert "A\t+1\t-0\tstart.sh" in lines
    assert "S\t-\t-\tbig.bin\t5000 bytes, over max_file_bytes" in lines
    assert not any("out.o" in line or "secret" in line for line in lines)
    diff = (await checkpoints.diff(step)).decode()
    assert "-three\n+THREE" in diff
    assert "new file mode 100755" in diff
    report = await checkpoints.undo()
    assert "big.bin" in report
    ignored = next(line for line in report.splitlines() if line.startswith("ignored"))
    assert ignored.endswith(": build/ secret.txt"), report  # by name, a directory as one
    after = tree_of(workspace)
    assert after.pop("big.bin")[0] == hashlib.sha256(b"x" * 5000).hexdigest()  # left alone
    assert (workspace / "build" / "out.o").read_text() == "rebuilt\n"  # ignored: left alone
    assert (workspace / "secret.txt").read_text() == "changed\n"  # excluded: left alone
    for path in ("build/out.o", "secret.txt"):
        after.pop(path)
        before.pop(path)
    assert after == before
    assert git_state(workspace) == user_git
    # the undo is a step too: undoing it redoes the turn
    await checkpoints.undo()
    assert (workspace / "start.sh").exists()
    assert not (workspace / "run.sh").exists()


async def test_undo_merges_or_refuses_later_edits(tmp_path: Path, workspace: Path) -> None:
    checkpoints = session(tmp_path, workspace)
    await a_turn(checkpoints, 1, workspace)
    a = workspace / "src" / "a.py"
    a.write_text("ONE\ntwo\nTHREE\nfour\nfive\n")  # does not overlap the turn's edit
    await checkpoints.undo()
    assert a.read_text() == "ONE\ntwo\nthree\nfour\nfive\n"
    await checkpoints.undo()  # redo
    assert a.read_text() == "ONE\ntwo\nTHREE\nfour\nfive\n"
    a.write_text("ONE\ntwo\nthird\nfour\nfive\n")  # overlaps
    (workspace / "new.txt").write_text("new, edited\n")
    with pytest.raises(UndoRefused) as refused:
        await checkpoints.undo()
    assert "src/a.py" in str(refused.value)
    assert "new.txt" in str(refused.value)
    assert a.read_text() == "ONE\ntwo\nthird\nfour\nfive\n"  # nothing was done
    await checkpoints.undo(force=True)
    assert a.read_text() == "ONE\ntwo\nthree\nfour\nfive\n"  # before the redo, forced
    assert not (workspace / "new.txt").exists()


async def test_rewind_goes_back_before_a_turn(tmp_path: Path, workspace: Path) -> None:
    checkpoints = session(tmp_path, workspace)
    start = tree_of(workspace)
    for number in (1, 2, 3):
        checkpoints.begin_turn(number, f"turn {number}", messages=2 * number)
        await checkpoints.before_change()
        (workspace / f"t{number}.txt").write_text(f"{number}\n")
        await checkpoints.end_turn("done")
    text, step = await checkpoints.rewind(2)
    assert step.messages == 4
    assert "2 file(s) restored" in text
    assert (workspace / "t1.txt").exists()
    assert not (workspace / "t2.txt").exists()
    await checkpoints.rewind(1)
    assert tree_of(workspace) == start
    with pytest.raises(UndoRefused, match="turn 9 has no checkpoint"):
        await checkpoints.rewind(9)


async def test_a_turn_without_mutating_calls_takes_no_snapshot(
    tmp_path: Path, workspace: Path
) -> None:
    checkpoints = session(tmp_path, workspace)
    checkpoints.begin_turn(1, "just read", messages=0)
    await checkpoints.end_turn("done")
    step = checkpoints.turn(1)
    assert step is not None
    assert step.changes == ""
    assert step.before is None
    with pytest.raises(UndoRefused, match="nothing to undo"):
        await checkpoints.undo()


async def test_an_intent_left_by_a_crash_is_finished(tmp_path: Path, workspace: Path) -> None:
    checkpoints = session(tmp_path, workspace)
    await a_turn(checkpoints, 1, workspace)
    shadow: Shadow = checkpoints._workspace.shadow
    blob = await shadow.store(b"restored\n")
    intent = checkpoints._workspace.intent
    step = {"kind": "undo", "number": 1, "label": "undo turn 1", "before": "x"}
    step["before"] = (await shadow.snapshot()).tree
    targets: dict[str, Entry | None] = {"new.txt": None, "src/b.py": Entry("100644", blob)}
    write_intent(intent, {"session": "s1", "step": step}, targets)
    assert read_intent(intent) is not None
    again = session(tmp_path, workspace)  # a restarted daemon
    await again.recover()
    assert not intent.exists()
    assert not (workspace / "new.txt").exists()
    assert (workspace / "src" / "b.py").read_text() == "restored\n"
    assert [s.kind for s in again._steps] == ["turn", "undo"]


async def test_a_workspace_with_too_many_new_files_is_not_checkpointed(
    tmp_path: Path, workspace: Path
) -> None:
    checkpoints = session(tmp_path, workspace)
    checkpoints._workspace.shadow.max_new_files = 3
    checkpoints.begin_turn(1, "in a home directory", messages=0)
    await checkpoints.before_change()
    (workspace / "new.txt").write_text("new\n")
    await checkpoints.end_turn("done")
    step = checkpoints.turn(1)
    assert step is not None
    assert step.before is None
    assert step.changes == ""
    assert "not checkpointed" in checkpoints._workspace.disabled
    with pytest.raises(UndoRefused, match="nothing to undo"):
        await checkpoints.undo()


async def test_undo_names_at_most_ten_ignored_paths_and_says_how_many_more(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / ".gitignore").write_text("build/\n*.log\n")
    for n in range(12):
        (workspace / f"run{n:02d}.log").write_text("log\n")
    checkpoints = session(tmp_path, workspace)
    await a_turn(checkpoints, 1, workspace)
    report = await checkpoints.undo()
    ignored = next(line for line in report.splitlines() if line.startswith("ignored"))
    names = ignored.split(": ", 1)[1]
    assert (
        names == "build/ run00.log run01.log run02.log run03.log run04.log run05.log "
        "run06.log run07.log run08.log and 4 more"
    ), report  # 14 in all: build/, 12 logs, secret


async def test_undo_of_a_rewind_says_the_conversation_stays_cut(
    tmp_path: Path, workspace: Path
) -> None:
    checkpoints = session(tmp_path, workspace)
    await a_turn(checkpoints, 1, workspace)
    text, _step = await checkpoints.rewind(1)
    assert "rewind 1" in text
    assert "conversation" not in text
    report = await checkpoints.undo()
    assert report.startswith("undo rewind 1:"), report
    assert "a conversation cut by `rewind N conversation` stays cut" in report
    assert (workspace / "start.sh").exists()  # the files of turn 1 are back
