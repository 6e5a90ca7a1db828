"""`anvild.sandbox.litter`: the lists of what launches create on the host, and the sweep that
removes what a dead process's launches left, only as it was left."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from anvild.sandbox import SandboxRefused, litter
from anvild.sandbox.bwrap import SandboxSettings
from tests.unit.session.support import running

SEED = b".\n"


def as_dead(listed: Path) -> None:
    """Make a list look like one of a process that is gone (another start time)."""
    obj = json.loads(listed.read_bytes())
    obj["start"] = "0"
    listed.write_text(json.dumps(obj))


def test_nothing_to_list_writes_nothing(tmp_path: Path) -> None:
    assert litter.record(tmp_path / "lists", []) is None
    assert not (tmp_path / "lists").exists()


def test_what_a_dead_process_left_is_removed_only_as_it_was_left(tmp_path: Path) -> None:
    ws, lists = tmp_path / "ws", tmp_path / "lists"
    ws.mkdir()
    empty_dir, empty_file = ws / ".git", ws / ".anvil"
    (ws / "repo" / ".git").mkdir(parents=True)
    seed = ws / "repo" / ".git" / "commondir"
    hooks = ws / "repo" / ".git" / "hooks"
    used_dir, changed_seed = ws / "used", ws / "repo2-commondir"
    listed = litter.record(
        lists,
        [empty_dir, empty_file, hooks, used_dir, ws / "gone"],
        [(seed, SEED), (changed_seed, SEED)],
    )
    assert listed is not None
    assert listed.parent == lists
    empty_dir.mkdir()
    (empty_dir / "commondir").write_bytes(SEED)  # a seed of a launch that found .git empty
    empty_file.touch()
    seed.write_bytes(SEED)
    hooks.mkdir()
    used_dir.mkdir()
    (used_dir / "file").write_text("the user's\n")
    changed_seed.write_bytes(b"../elsewhere\n")
    also = litter.record(lists, [], [(empty_dir / "commondir", SEED)])
    assert also is not None
    as_dead(listed)
    as_dead(also)
    removed = litter.sweep(lists)
    assert set(removed) == {empty_dir, empty_dir / "commondir", empty_file, seed, hooks}
    assert sorted(p.name for p in ws.iterdir()) == ["repo", "repo2-commondir", "used"]
    assert os.listdir(ws / "repo" / ".git") == []
    assert (used_dir / "file").exists()
    assert changed_seed.read_bytes() == b"../elsewhere\n"
    assert list(lists.iterdir()) == []


def test_a_live_process_list_is_left_alone(tmp_path: Path) -> None:
    placeholder = tmp_path / ".git"
    placeholder.mkdir()
    listed = litter.record(tmp_path / "lists", [placeholder])
    assert litter.sweep(tmp_path / "lists") == []
    assert placeholder.is_dir()
    assert listed is not None
    assert listed.exists()


def test_a_path_a_live_process_lists_stays_even_when_a_dead_one_lists_it(tmp_path: Path) -> None:
    placeholder = tmp_path / ".git"
    placeholder.mkdir()
    dead = litter.record(tmp_path / "lists", [placeholder])
    assert dead is not None
    as_dead(dead)
    live = litter.record(tmp_path / "lists", [placeholder])
    assert litter.sweep(tmp_path / "lists") == []
    assert placeholder.is_dir()
    assert not dead.exists()
    assert live is not None
    assert live.exists()


def test_never_through_a_symbolic_link(tmp_path: Path) -> None:
    outside, ws = tmp_path / "outside", tmp_path / "ws"
    (outside / "empty").mkdir(parents=True)
    ws.mkdir()
    listed = litter.record(tmp_path / "lists", [ws / "link" / "empty"])
    assert listed is not None
    (ws / "link").symlink_to(outside)
    as_dead(listed)
    assert litter.sweep(tmp_path / "lists") == []
    assert (outside / "empty").is_dir()


def test_a_list_cut_by_a_crash_is_dropped(tmp_path: Path) -> None:
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "123-456-abcd.json").write_bytes(b'{"pid": 123, "paths": [["/x", nu')
    assert litter.sweep(lists) == []
    assert list(lists.iterdir()) == []


def test_a_list_that_cannot_be_written_refuses_the_launch(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory\n")
    with pytest.raises(SandboxRefused, match="lists there what it creates"):
        litter.record(blocked / "lists", [tmp_path / ".git"])
    assert not (tmp_path / ".git").exists()


async def test_the_session_manager_sweeps_at_start(tmp_path: Path) -> None:
    lists, placeholder = tmp_path / "lists", tmp_path / "ws" / ".git"
    placeholder.mkdir(parents=True)
    listed = litter.record(lists, [placeholder])
    assert listed is not None
    as_dead(listed)
    async with running(tmp_path, [], sandbox_settings=SandboxSettings(litter_dir=lists)):
        assert not placeholder.exists()
    assert list(lists.iterdir()) == []
