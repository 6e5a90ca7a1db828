"""The check after a command (`anvild.sandbox.gitguard`): the pure judges as tables, then the
guard on a real directory tree (no sandbox: the files are written as a command would)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from anvild.sandbox.gitguard import (
    GITDIR_NAMES,
    WORKTREE_NAMES,
    Guard,
    allowed,
    find_repositories,
    parse_config_list,
    sets_program,
    todo_runs_commands,
)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


@pytest.mark.parametrize(
    ("key", "runs"),
    [
        ("core.fsmonitor", True),
        ("core.hookspath", True),
        ("core.sshcommand", True),
        ("core.pager", True),
        ("core.editor", True),
        ("core.askpass", True),
        ("core.gitproxy", True),
        ("diff.Evil.textconv", True),
        ("diff.x.command", True),
        ("diff.external", True),
        ("filter.lfs.smudge", True),
        ("credential.helper", True),
        ("credential.https://example.com.helper", True),
        ("include.path", True),
        ("includeif.gitdir:/x/.path", True),
        ("sequence.editor", True),
        ("merge.ours.driver", True),
        ("gpg.program", True),
        ("gpg.ssh.defaultkeycommand", True),
        ("uploadpack.packobjectshook", True),
        ("alias.st", True),
        ("submodule.x.update", True),
        ("remote.origin.uploadpack", True),
        ("pager.log", True),
        ("extensions.worktreeconfig", True),
        ("user.name", False),
        ("core.bare", False),
        ("core.repositoryformatversion", False),
        ("core.filemode", False),
        ("remote.origin.url", False),
        ("remote.origin.fetch", False),
        ("branch.main.merge", False),
        ("diff.renames", False),
        ("merge.conflictstyle", False),
        ("extensions.objectformat", False),
    ],
)
def test_sets_program(key: str, runs: bool) -> None:
    assert sets_program(key) is runs


def test_parse_config_list() -> None:
    out = b"core.bare\nfalse\0alias.x\n!id\nmore\0novalue\0"
    assert parse_config_list(out) == (
        ("core.bare", "false"),
        ("alias.x", "!id\nmore"),
        ("novalue", ""),
    )


@pytest.mark.parametrize(
    ("todo", "runs"),
    [
        ("pick 1234 a\nexec make test\n", True),
        ("pick 1234 a\n  x true\n", True),
        ("pick 1234 a\n# exec make\n", False),
        ("break\npick 1234 exec\n", False),
        ("", False),
    ],
)
def test_todo_runs_commands(todo: str, runs: bool) -> None:
    assert todo_runs_commands(todo) is runs


@pytest.mark.parametrize(
    ("name", "top", "linked"),
    [
        ("index.lock", True, True),
        ("ORIG_HEAD", True, True),
        ("CHERRY_PICK_HEAD", True, True),
        ("rebase-merge", True, True),
        ("packed-refs", True, False),
        ("commondir", False, True),
        ("config.worktree", False, False),
        ("config", False, False),
        ("hooks", False, False),
        ("modules", False, False),
        ("anything-else", False, False),
    ],
)
def test_names_git_writes(name: str, top: bool, linked: bool) -> None:
    assert allowed(name, GITDIR_NAMES) is top
    assert allowed(name, WORKTREE_NAMES) is linked


def test_find_repositories(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "a" / ".git").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".git").write_text("gitdir: ../x\n")
    bare = tmp_path / "c" / "bare.git"
    for sub in ("objects", "refs"):
        (bare / sub).mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    found, truncated = find_repositories(tmp_path, 100)
    assert set(found) == {tmp_path / ".git", tmp_path / "a/.git", tmp_path / "b/.git", bare}
    assert not truncated
    assert find_repositories(tmp_path, 2)[1]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@needs_git
def test_guard_quarantines_what_the_command_planted_and_leaves_the_rest(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    _git(ws, "config", "core.pager", "less")  # the user's own: read-only in the sandbox
    (ws / "old").mkdir()
    _git(ws / "old", "init", "-q")
    _git(ws / "old", "config", "alias.st", "status")  # there before: not the command's
    gitdir = ws / ".git"
    guard = Guard.prepare(
        [ws],
        [gitdir],
        [(ws, True), (gitdir, True), (gitdir / "config", False), (gitdir / "hooks", False)],
        [],
        limit=1000,
        quarantine=tmp_path / "q",
    )
    # What a command does: a planted repository, a harmless one, a stray name in .git.
    (ws / "evil").mkdir()
    _git(ws / "evil", "init", "-q")
    _git(ws / "evil", "config", "core.fsmonitor", "/tmp/pwn")
    (ws / "fine").mkdir()
    _git(ws / "fine", "init", "-q")
    _git(ws / "fine", "config", "user.name", "someone")
    (gitdir / "stray").write_text("x")
    (gitdir / "ORIG_HEAD").write_text("0" * 40 + "\n")
    report = guard.inspect()
    moved = {f.path: f for f in report.findings}
    assert set(moved) == {ws / "evil/.git", gitdir / "stray"}
    assert "core.fsmonitor" in moved[ws / "evil/.git"].reason
    for finding in report.findings:
        assert finding.moved_to is not None
        assert finding.moved_to.exists()
        assert not finding.path.exists()
    message = report.message()
    assert message is not None
    assert str(ws / "evil/.git") in message
    (manifest,) = (tmp_path / "q").glob("*/manifest.jsonl")
    assert len(manifest.read_text().splitlines()) == 2
    assert json.loads(manifest.read_text().splitlines()[0])["reason"]
    assert (ws / "fine/.git").is_dir()
    assert (ws / "old/.git").is_dir()
    assert (gitdir / "ORIG_HEAD").exists()
    assert guard.inspect().message() is None  # nothing left to find


@needs_git
def test_guard_quarantines_a_new_worktree_not_made_by_git(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    gitdir = ws / ".git"
    guard = Guard.prepare([ws], [gitdir], [(ws, True)], [], limit=1000, quarantine=tmp_path / "q")
    admin = gitdir / "worktrees" / "evil"
    admin.mkdir(parents=True)
    (admin / "commondir").write_text("/elsewhere\n")
    ok = gitdir / "worktrees" / "ok"
    ok.mkdir()
    (ok / "commondir").write_text("../..\n")
    (ok / "HEAD").write_text("0" * 40 + "\n")
    report = guard.inspect()
    assert [f.path for f in report.findings] == [admin]
    assert ok.is_dir()


@needs_git
def test_a_rebase_with_exec_moves_its_state_never_the_repository(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    gitdir = ws / ".git"
    (ws / "sub").mkdir()
    _git(ws / "sub", "init", "-q")
    mounts = [(ws, True), (gitdir, True), (gitdir / "config", False), (gitdir / "hooks", False)]
    guard = Guard.prepare([ws], [gitdir], mounts, [], limit=1000, quarantine=tmp_path / "q")
    for where in (gitdir, ws / "sub" / ".git"):
        (where / "rebase-merge").mkdir()
        (where / "rebase-merge" / "git-rebase-todo").write_text("pick 1234 a\nexec make\n")
    report = guard.inspect()
    assert sorted(f.path for f in report.findings) == [
        gitdir / "rebase-merge",
        ws / "sub" / ".git",  # not held by the plan here: judged as a whole
    ]
    assert gitdir.is_dir()
    assert not (gitdir / "rebase-merge").exists()
