"""Restart from the session index: sessions at rest are listed from it without reading their
files, and a session built from an index entry answers as one restored by a full replay; a
stale, corrupt or missing index falls back to replaying the files."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from anvild.store import (
    AliasChanged,
    Record,
    SessionStarted,
    SessionStatus,
    SessionStore,
    StateChanged,
    read_index,
    replay,
)
from anvild.store.index import index_path
from anvild.store.records import encode
from tests.unit.session.support import workspace
from tests.unit.session.test_lazy_restore import _manager, _write
from tests.unit.session.test_lazy_restore import _restart as _start
from tests.unit.store.support import valid_records


class _Loads:
    """Counts the session files a restart reads (`SessionStore.load`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ids: list[str] = []
        load = SessionStore.load

        def counted(store: SessionStore, session_id: str) -> Any:
            self.ids.append(session_id)
            return load(store, session_id)

        monkeypatch.setattr(SessionStore, "load", counted)


def _sessions(
    tmp_path: Path, histories: list[list[Record]], models: list[str] | None = None
) -> Path:
    """A data dir with one session file per history (session `sN` on model `models[N]`, else
    `fake`), none with a prompt left in its queue."""
    data = tmp_path / "data"
    shutil.rmtree(data, ignore_errors=True)
    cwd = str(workspace(tmp_path))
    for index, records in enumerate(histories):
        first = records[0]
        assert isinstance(first, SessionStarted)
        model = "fake" if models is None else models[index]
        started = attrs.evolve(first, id=f"s{index}", alias=None, model=model, cwd=cwd)
        assume(not replay([started, *records[1:]]).queue)  # (see test_lazy_restore)
        _write(data, [started, *records[1:]])
    return data


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(histories=st.lists(valid_records(max_size=20), min_size=1, max_size=3))
def test_a_session_built_from_the_index_is_one_restored_by_a_full_replay(
    tmp_path: Path, histories: list[list[Record]]
) -> None:
    data = _sessions(tmp_path, histories)
    eager_copy = tmp_path / "eager"
    shutil.rmtree(eager_copy, ignore_errors=True)
    shutil.copytree(data, eager_copy)

    async def main() -> None:
        eager = await _start(tmp_path, eager_copy, eager=True)
        first = await _start(tmp_path, data)  # no index yet: every file replayed, then indexed
        assert index_path(data).exists()
        indexed = await _start(tmp_path, data)  # from the index
        assert first == eager
        assert indexed == eager

    trio.run(main)


def _two_at_rest(tmp_path: Path) -> Path:
    cwd = str(workspace(tmp_path))
    data = tmp_path / "data"
    now = dt.datetime.now(dt.UTC)
    for index in range(2):
        started = SessionStarted(
            id=f"s{index}", alias=f"a{index}", role="developer", model="fake", cwd=cwd,
            sandbox="workspace-write", created_at=now + dt.timedelta(seconds=index),
        )  # fmt: skip
        _write(data, [started, StateChanged(SessionStatus.IDLE, "")])
    return data


async def test_a_restart_from_the_index_reads_no_file_until_one_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _two_at_rest(tmp_path)
    before, _, _ = await _start(tmp_path, data)
    assert set(read_index(data)) == {"s0", "s1"}
    loads = _Loads(monkeypatch)
    manager = _manager(tmp_path, data)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        assert manager.list_text() == before
        assert loads.ids == []
        session = await manager.load("a1")
        assert (session.id, loads.ids) == ("s1", ["s1"])
        assert manager.get("s1") is session
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("damage", ["stale", "corrupt", "missing"])
async def test_a_stale_corrupt_or_missing_index_falls_back_to_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    data = _two_at_rest(tmp_path)
    await _start(tmp_path, data)
    path = data / "s1.jsonl"
    if damage == "stale":  # a record appended after the index was written
        with path.open("ab") as f:
            f.write(encode(3, AliasChanged("renamed")))
    elif damage == "corrupt":
        index_path(data).write_bytes(b'{"version": 1, "sessions": {"s0": ')
    else:
        index_path(data).unlink()
    loads = _Loads(monkeypatch)
    manager = _manager(tmp_path, data)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        assert sorted(loads.ids) == (["s1"] if damage == "stale" else ["s0", "s1"])
        alias = "renamed" if damage == "stale" else "a1"
        assert manager.list_text().splitlines()[1].split("\t")[1] == alias
        assert manager.get(alias).record == SessionStore(data).read("s1").state
        nursery.cancel_scope.cancel()
    assert set(read_index(data)) == {"s0", "s1"}  # written again


async def test_an_ended_session_is_not_read_again_after_it_was_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _two_at_rest(tmp_path)
    manager = _manager(tmp_path, data)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.kill("s0")
        nursery.cancel_scope.cancel()
    assert read_index(data)["s0"].summary.ended
    loads = _Loads(monkeypatch)
    before, _, _ = await _start(tmp_path, data)
    assert loads.ids == ["s1"]  # s1 is used by _start; s0 is not read at all
    assert [line.split("\t")[0] for line in before.splitlines()] == ["s1"]
