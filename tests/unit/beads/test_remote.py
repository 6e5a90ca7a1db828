"""Bead stores sharing a git remote (`anvild.beads.remote`): real git, one bare repository in a
tmp dir, one clone per store (each store stands for a daemon on its own host)."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from anvild.beads import (
    BeadConflict,
    BeadStatus,
    BeadStore,
    BeadStoreError,
    NewBead,
    NewConvoy,
)
from anvild.beads.events import BeadChanged, BeadCreated, ConvoyChanged, ConvoyCreated


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def remote_subjects(bare: Path) -> list[str]:
    return git(bare, "log", "--format=%s", "main").splitlines()


def bare_repo(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    return bare


@asynccontextmanager
async def stores(
    tmp_path: Path, url: str | Callable[[str], str], *hosts: str, interval: float = 60.0
) -> AsyncIterator[list[BeadStore]]:
    opened: list[BeadStore] = []
    try:
        for host in hosts:
            where = url(host) if callable(url) else url
            store = BeadStore(
                tmp_path / host, remote=where, host=host, pull_interval=interval, pull_bound=0.0
            )
            await store.open()
            opened.append(store)
        yield opened
    finally:
        for store in opened:
            store.close()


async def test_a_bead_made_on_one_host_shows_on_the_other_with_its_claimers_host(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1", "h2") as (one, two):
        bead = await one.create(NewBead("Shared work", "developer"), by="user")
        assert remote_subjects(bare)[0] == (
            "new shared-work-001: Shared work (role developer) (by user)"
        )
        await two.refresh()
        assert [b.id for b in two.ready()] == [bead.id]
        await two.claim(bead.id, "s2", by="user")
        await one.refresh()
        claimed = one.bead(bead.id)
        assert (claimed.status, claimed.assigned_to, claimed.host) == (
            BeadStatus.IN_PROGRESS,
            "s2",
            "h2",
        )
        assert one.ready() == []
        for store in (one, two):
            assert "state\tin sync\n" in store.sync_state.text()
            assert "queued\t0\n" in store.sync_state.text()


async def test_concurrent_claims_from_two_hosts_one_wins_the_other_hears_who_and_where(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1", "h2") as (one, two):
        bead = await one.create(NewBead("Contended", "developer"), by="user")
        await two.refresh()
        won: list[str] = []
        refused: list[str] = []

        async def claim(store: BeadStore, session: str) -> None:
            try:
                await store.claim(bead.id, session, by="user")
            except BeadConflict as exc:
                refused.append(str(exc))
            else:
                won.append(session)

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(claim, one, f"a{n}")
                nursery.start_soon(claim, two, f"b{n}")
        assert len(won) == 1, (won, refused)
        assert len(refused) == 9
        host = "h1" if won[0].startswith("a") else "h2"
        assert all(f"already claimed by {won[0]} on host {host} " in r for r in refused), refused
        claims = [s for s in remote_subjects(bare) if s.startswith("claim")]
        assert claims == [f"claim contended-001 for {won[0]} (by user)"]
        for store in (one, two):
            await store.refresh()
            assert (store.bead(bead.id).assigned_to, store.bead(bead.id).host) == (won[0], host)


async def test_unrelated_changes_on_both_hosts_merge_and_equal_ids_are_decided_again(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1", "h2") as (one, two):
        a = await one.create(NewBead("Alpha", "dev"), by="user")
        b = await one.create(NewBead("Beta", "dev"), by="user")
        await two.refresh()
        # Neither pulls before its change: the second push is rejected, rebased, retried.
        await one.set_description(a.id, "from h1", by="user")
        await two.set_description(b.id, "from h2", by="user")
        # The same title on both: the same id, the same file; the later one gets a new id.
        first = await one.create(NewBead("Gamma", "dev"), by="user")
        second = await two.create(NewBead("Gamma", "dev"), by="user")
        assert first.id != second.id
        for store in (one, two):
            await store.refresh()
            assert store.bead(a.id).description == "from h1"
            assert store.bead(b.id).description == "from h2"
            assert {first.id, second.id} <= set(store.board.beads)
        heads = {git(tmp_path / h, "rev-parse", "HEAD") for h in ("h1", "h2")}
        assert len(heads) == 1
        assert git(bare, "rev-parse", "main") == git(tmp_path / "h1", "rev-parse", "HEAD")


async def test_remote_down_changes_queue_sync_says_so_and_they_push_when_it_returns(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1", "h2") as (one, two):
        convoy = await one.create_convoy(NewConvoy("Auth system"), by="user")
        bare.rename(tmp_path / "away.git")
        made = await one.create(NewBead("Offline work", "dev", convoy=convoy.id), by="user")
        await one.claim(made.id, "s1", by="user")
        text = one.sync_state.text()
        assert "state\toffline\n" in text
        assert "queued\t2\n" in text
        assert "does not appear to be a git repository" in text
        await two.refresh()
        assert made.id not in two.board.beads
        (tmp_path / "away.git").rename(bare)
        await one.sync()
        assert "state\tin sync\n" in one.sync_state.text()
        await two.refresh()
        assert two.bead(made.id).status is BeadStatus.IN_PROGRESS
        assert two.convoy(convoy.id).beads == (made.id,)
        assert remote_subjects(bare)[:2] == [
            f"claim {made.id} for s1; convoy {convoy.id} in progress (by user)",
            f"new {made.id}: Offline work (role dev, in convoy {convoy.id}) (by user)",
        ]


async def test_an_offline_change_the_remote_contradicts_is_dropped_and_reported(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    # h1 reaches the remote through a link that can be cut while h2 stays online.
    link = tmp_path / "link.git"
    link.symlink_to(bare)
    async with stores(tmp_path, lambda h: str(link if h == "h1" else bare), "h1", "h2") as (
        one,
        two,
    ):
        bead = await one.create(NewBead("Contended", "dev"), by="user")
        await two.refresh()
        link.unlink()
        await one.claim(bead.id, "s1", by="user")  # queued
        await two.claim(bead.id, "s2", by="user")  # lands first
        link.symlink_to(bare)
        await one.sync()
        assert one.bead(bead.id).assigned_to == "s2"
        text = one.sync_state.text()
        assert f"claim {bead.id} for s1 (by user)" in text
        assert "dropped\t" in text
        assert [s for s in remote_subjects(bare) if s.startswith("claim")] == [
            f"claim {bead.id} for s2 (by user)"
        ]


async def test_a_change_committed_but_not_pushed_is_pushed_when_the_store_opens_again(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1") as (one,):
        bare.rename(tmp_path / "away.git")
        made = await one.create(NewBead("Before the crash", "dev"), by="user")
        assert one.sync_state.queued == 1
    (tmp_path / "away.git").rename(bare)
    async with stores(tmp_path, str(bare), "h1", "h2") as (again, other):
        assert again.sync_state.queued == 0
        assert other.bead(made.id).title == "Before the crash"


async def test_a_new_store_takes_the_remotes_board_and_waits_see_other_hosts(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1") as (one,):
        bead = await one.create(NewBead("Wait for me", "dev"), by="user")
        await one.claim(bead.id, "s1", by="user")
        async with stores(tmp_path, str(bare), "h2", interval=0.05) as (two,):
            assert two.bead(bead.id).assigned_to == "s1"
            assert len(git(tmp_path / "h2", "log", "--format=%s").splitlines()) == 3
            seen: list[str] = []

            async def wait() -> None:
                seen.append((await two.wait_bead(bead.id)).status.value)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep(0.1)
                assert seen == []
                await one.complete(bead.id, "done", by="user")
            assert seen == ["completed"]


async def test_the_background_sync_pulls_on_its_interval(tmp_path: Path) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1", "h2", interval=0.05) as (one, two):
        async with trio.open_nursery() as nursery:
            await nursery.start(two.run_sync)
            bead = await one.create(NewBead("Pulled", "dev"), by="user")
            for _ in range(250):  # the sync's own pace: nothing here asks it to pull
                if bead.id in two.board.beads:
                    break
                await trio.sleep(0.02)
            assert bead.id in two.board.beads
            nursery.cancel_scope.cancel()
        assert two.sync_state.last_pull is not None


async def test_without_a_remote_sync_says_local_only_and_beads_name_no_host(
    tmp_path: Path,
) -> None:
    store = BeadStore(tmp_path / "beads")
    await store.open()
    try:
        bead = await store.create(NewBead("Local", "dev"), by="user")
        await store.claim(bead.id, "s1", by="user")
        assert store.bead(bead.id).host is None
        assert store.sync_state.text() == (
            "remote\t-\nstate\tlocal only: no [beads] remote configured\n"
        )
        await store.sync()  # nothing to do
        await _returns(store.run_sync)
    finally:
        store.close()


async def _returns(run: Callable[..., Awaitable[None]]) -> None:
    with trio.fail_after(1):
        await run()


async def test_a_rejected_change_that_cannot_be_fetched_after_is_withdrawn(
    tmp_path: Path,
) -> None:
    bare = bare_repo(tmp_path)
    # h1's git pushes, but its fetches fail while `no-fetch` exists.
    flag = tmp_path / "no-fetch"
    wrapper = tmp_path / "git-no-fetch"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ -e {flag} ]; then for a in "$@"; do [ "$a" = fetch ] && exit 128; done; fi\n'
        'exec git "$@"\n'
    )
    wrapper.chmod(0o755)
    one = BeadStore(tmp_path / "h1", remote=str(bare), host="h1", git=str(wrapper))
    await one.open()
    try:
        async with stores(tmp_path, str(bare), "h2") as (two,):
            bead = await one.create(NewBead("Contended", "dev"), by="user")
            await two.refresh()
            await two.claim(bead.id, "s2", by="user")
            flag.touch()
            before = git(tmp_path / "h1", "rev-parse", "HEAD")
            with pytest.raises(BeadStoreError, match="could not be reached to see how"):
                await one.claim(bead.id, "s1", by="user")
            assert git(tmp_path / "h1", "rev-parse", "HEAD") == before
            assert one.bead(bead.id).status is BeadStatus.PENDING  # as it last knew it
            assert one.sync_state.queued == 0
            assert "state\terror\n" in one.sync_state.text()
            flag.unlink()
            await one.sync()
            assert one.bead(bead.id).assigned_to == "s2"
            claims = [s for s in remote_subjects(bare) if s.startswith("claim")]
            assert claims == [f"claim {bead.id} for s2 (by user)"]
    finally:
        one.close()


async def test_changes_pulled_from_another_host_are_published_as_events(tmp_path: Path) -> None:
    bare = bare_repo(tmp_path)
    async with stores(tmp_path, str(bare), "h1", "h2") as (one, two):
        heard: list[object] = []
        two.on_event = heard.append
        convoy = await one.create_convoy(NewConvoy("Ship it"), by="user")
        bead = await one.create(NewBead("Shared work", "developer", convoy=convoy.id), by="user")
        await two.refresh()
        assert [type(e).__name__ for e in heard] == ["BeadCreated", "ConvoyCreated"]
        assert {e.by for e in heard if isinstance(e, BeadCreated | ConvoyCreated)} == {"remote"}
        heard.clear()
        await one.claim(bead.id, "s1", by="user")
        await two.refresh()
        changed, moved = heard
        assert isinstance(changed, BeadChanged)
        assert (changed.action, changed.status, changed.assigned_to, changed.detail) == (
            "pull",
            "in_progress",
            "s1",
            "on host h1",
        )
        assert isinstance(moved, ConvoyChanged)
        assert (moved.id, moved.action, moved.status) == (convoy.id, "pull", "in_progress")
        heard.clear()
        await two.refresh()  # nothing new: nothing heard
        assert heard == []
