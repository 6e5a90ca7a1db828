"""The bead store (`anvild.beads.store`) over a real git repository."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from anvild.beads import (
    BeadConflict,
    BeadStatus,
    BeadStore,
    BeadStoreError,
    ConvoyStatus,
    InvalidBeadRequest,
    NewBead,
    NewConvoy,
)
from anvild.beads.events import BeadEvent


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def subjects(repo: Path) -> list[str]:
    return git(repo, "log", "--format=%s").splitlines()


def snapshot(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }


async def opened(repo: Path, events: list[BeadEvent] | None = None) -> BeadStore:
    store = BeadStore(repo, on_event=None if events is None else events.append)
    await store.open()
    return store


async def test_every_change_is_one_commit_by_anvild_saying_who_asked(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    events: list[BeadEvent] = []
    store = await opened(repo, events)
    a = await store.create(NewBead("Research auth system", "researcher", "Analyze"), by="user")
    await store.claim(a.id, "a1b2c3d4", by="user")
    await store.complete(a.id, "/tmp/auth.md", by="session a1b2c3d4", only_session="a1b2c3d4")
    assert subjects(repo) == [
        "complete research-auth-001 (by session a1b2c3d4)",
        "claim research-auth-001 for a1b2c3d4 (by user)",
        "new research-auth-001: Research auth system (role researcher) (by user)",
        "init bead store (by anvild)",
    ]
    assert set(git(repo, "log", "--format=%an <%ae> %cn <%ce>").splitlines()) == {
        "anvild <anvild@localhost> anvild <anvild@localhost>"
    }
    assert git(repo, "status", "--porcelain") == ""
    doc = json.loads((repo / "beads" / "research-auth-001.json").read_text())
    assert doc["version"] == 1
    assert doc["status"] == "completed"
    assert doc["assigned_to"] == "a1b2c3d4"
    assert doc["result"] == "/tmp/auth.md"
    assert [type(e).__name__ for e in events] == ["BeadCreated", "BeadChanged", "BeadChanged"]


async def test_twenty_concurrent_claims_one_winner_one_commit(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    bead = await store.create(NewBead("Contended", "developer"), by="user")
    won: list[str] = []
    refused: list[str] = []

    async def claim(n: int) -> None:
        try:
            await store.claim(bead.id, f"s{n:02d}", by="user")
        except BeadConflict as exc:
            refused.append(str(exc))
        else:
            won.append(f"s{n:02d}")

    async with trio.open_nursery() as nursery:
        for n in range(20):
            nursery.start_soon(claim, n)
    assert len(won) == 1
    assert len(refused) == 19
    assert all(f"already claimed by {won[0]}" in r for r in refused)
    assert [s for s in subjects(repo) if s.startswith("claim")] == [
        f"claim contended-001 for {won[0]} (by user)"
    ]
    assert store.bead(bead.id).assigned_to == won[0]


async def test_a_refused_change_leaves_files_and_history_untouched(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    await store.create(NewBead("A", "dev"), by="user")
    await store.create(NewBead("B", "dev", "", ("a-001",)), by="user")
    before, log_before = snapshot(repo), subjects(repo)
    with pytest.raises(InvalidBeadRequest, match="cycle"):
        await store.add_dep("a-001", "b-002", by="user")
    with pytest.raises(InvalidBeadRequest, match="'nope-001' is not a bead"):
        await store.create(NewBead("C", "dev", "", ("nope-001",)), by="user")
    with pytest.raises(BeadConflict, match="not ready"):
        await store.claim("b-002", "s1", by="user")
    assert snapshot(repo) == before
    assert subjects(repo) == log_before
    assert git(repo, "status", "--porcelain") == ""


async def test_reopening_gives_the_same_board(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    a = await store.create(NewBead("A", "dev"), by="user")
    await store.create(NewBead("B", "dev", "", (a.id,)), by="user")
    convoy = await store.create_convoy(NewConvoy("Auth", "goal", context="ctx"), by="user")
    await store.add_bead(convoy.id, a.id, by="user")
    await store.add_bead(convoy.id, "b-002", by="user")
    await store.claim(a.id, "s1", by="user")
    await store.complete(a.id, None, by="user")
    store.close()
    again = await opened(repo)
    assert again.board == store.board
    assert again.recovered == []
    assert again.progress(convoy.id).text() == "1/2 50%\n"
    c = await again.create(NewBead("C", "dev"), by="user")
    assert c.id == "c-003"


async def test_open_discards_a_half_done_write_and_says_so(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    await store.create(NewBead("A", "dev"), by="user")
    committed = (repo / "beads" / "a-001.json").read_bytes()
    # A crash after the rename, before the commit: visible but not committed.
    (repo / "beads" / "a-001.json").write_text(committed.decode().replace("pending", "failed"))
    (repo / "beads" / "b-002.json").write_text("{half a bead")
    (repo / "beads" / ".c-003.json.tmp").write_text("{")
    (repo / ".git" / "index.lock").write_text("")
    (repo / "notes.txt").write_text("not ours: left alone")
    store.close()
    again = await opened(repo)
    assert again.bead("a-001").status is BeadStatus.PENDING
    assert [b.id for b in again.beads()] == ["a-001"]
    assert (repo / "beads" / "a-001.json").read_bytes() == committed
    assert not (repo / "beads" / "b-002.json").exists()
    assert not (repo / "beads" / ".c-003.json.tmp").exists()
    assert (repo / "notes.txt").read_text() == "not ours: left alone"
    assert len(again.recovered) == 4
    assert again.recovered[0].startswith("removed a stale .git/index.lock")
    assert git(repo, "status", "--porcelain", "--", "beads", "convoys") == ""


async def test_a_failed_commit_changes_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    await store.create(NewBead("A", "dev"), by="user")
    before, log_before, board = snapshot(repo), subjects(repo), store.board
    # git refuses to commit while another index.lock exists: a stand-in for a full disk.
    (repo / ".git" / "index.lock").write_text("")
    with pytest.raises(BeadStoreError, match="the change was not recorded: git add failed"):
        await store.claim("a-001", "s1", by="user")
    (repo / ".git" / "index.lock").unlink()
    assert store.board == board
    assert snapshot(repo) == before
    assert subjects(repo) == log_before
    await store.claim("a-001", "s1", by="user")


async def test_git_runs_without_the_users_config_or_hooks(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    hook = repo / ".git" / "hooks" / "pre-commit"
    marker = tmp_path / "hook-ran"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    git(repo, "config", "commit.gpgsign", "false")
    await store.create(NewBead("A", "dev"), by="user")
    assert not marker.exists()
    assert store.git.env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert store.git.env["HOME"] == str(repo / ".git")


async def test_a_missing_git_makes_the_store_unavailable_with_a_reason(tmp_path: Path) -> None:
    store = BeadStore(tmp_path / "beads", git=str(tmp_path / "no-git"))
    with pytest.raises(BeadStoreError, match="is not installed or not on PATH"):
        await store.open()
    with pytest.raises(BeadStoreError, match="the bead store is unavailable: cannot run"):
        await store.create(NewBead("A", "dev"), by="user")


async def test_convoy_lifecycle_through_the_store(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    convoy = await store.create_convoy(NewConvoy("Auth", "goal"), by="user")
    await store.create(NewBead("A", "dev", convoy=convoy.id), by="user")
    await store.set_context(convoy.id, "Use the existing user table.", by="user")
    assert store.convoy(convoy.id).beads == ("a-001",)
    await store.claim("a-001", "s1", by="user")
    assert "Use the existing user table." in store.context_for("s1")
    await store.complete("a-001", None, by="user")
    assert store.convoy(convoy.id).status is ConvoyStatus.COMPLETED
    with pytest.raises(BeadConflict, match="is completed: cannot abandon it"):
        await store.end_convoy(convoy.id, ConvoyStatus.ABANDONED, by="user")
    assert subjects(repo)[0] == "complete a-001; convoy auth-001 completed (by user)"


async def test_the_same_text_twice_in_one_second_is_one_commit(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = BeadStore(repo, clock=lambda: "2026-11-30T21:00:00Z")
    await store.open()
    convoy = await store.create_convoy(NewConvoy("Auth"), by="user")
    await store.set_context(convoy.id, "same", by="user")
    await store.set_context(convoy.id, "same", by="user")
    assert subjects(repo)[:2] == [
        "context convoy auth-001 (by user)",
        "new convoy auth-001: Auth (by user)",
    ]
    assert store.convoy(convoy.id).context == "same"


async def test_an_unreadable_file_is_skipped_and_its_id_never_reused(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    await store.create(NewBead("Fix it", "dev"), by="user")
    (repo / "beads" / "fix-it-001.json").write_text("{not json")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "by hand")
    store.close()
    again = await opened(repo)
    assert again.beads() == ()
    bead = await again.create(NewBead("Fix it", "dev"), by="user")
    assert bead.id == "fix-it-002"
    assert (repo / "beads" / "fix-it-001.json").read_text() == "{not json"


async def test_a_commit_that_fails_after_the_add_is_undone(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    await store.create(NewBead("A", "dev"), by="user")
    failing = tmp_path / "git-without-commit"
    failing.write_text('#!/bin/sh\nfor a; do [ "$a" = commit ] && exit 1; done\nexec git "$@"\n')
    failing.chmod(0o755)
    store.close()
    broken = BeadStore(repo, git=str(failing))
    await broken.open()
    before, log_before, board = snapshot(repo), subjects(repo), broken.board
    with pytest.raises(BeadStoreError, match="the change was not recorded: git commit failed"):
        await broken.claim("a-001", "s1", by="user")  # a changed file
    with pytest.raises(BeadStoreError, match="the change was not recorded: git commit failed"):
        await broken.create(NewBead("B", "dev"), by="user")  # a new file
    assert broken.board == board
    assert snapshot(repo) == before
    assert subjects(repo) == log_before
    assert git(repo, "status", "--porcelain") == ""


async def test_a_second_store_on_the_same_repository_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    second = BeadStore(repo)
    with pytest.raises(BeadStoreError) as info:
        await second.open()
    assert str(info.value) == (
        f"another anvild uses the bead repository {repo} (pid={os.getpid()}); give each "
        "daemon its own ([beads] repo in the user config)"
    )
    store.close()
    await second.open()
    second.close()


async def test_the_approver_survives_a_reopen_and_old_files_read_as_user(tmp_path: Path) -> None:
    repo = tmp_path / "beads"
    store = await opened(repo)
    named = await store.create(NewBead("A", "dev", requires_approval=True, approver="s9"), by="u")
    plain = await store.create(NewBead("B", "dev", requires_approval=True), by="user")
    store.close()
    # A file written before the field existed: the same bead without `approver`.
    path = repo / "beads" / f"{plain.id}.json"
    doc = json.loads(path.read_text())
    assert doc.pop("approver") == "user"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "old file")
    again = await opened(repo)
    assert again.recovered == []
    assert (again.bead(named.id).approver, again.bead(plain.id).approver) == ("s9", "user")
    again.close()
