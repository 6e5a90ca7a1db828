"""Lazy restoration: a session restored at rest is listed from its records and built on first
use; what it then answers is what a session built during the restore answers."""

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

from anvild.llm.testing import ScriptedProvider
from anvild.session import manager as manager_module
from anvild.session.manager import SessionManager
from anvild.session.session import Session
from anvild.store import (
    PromptQueued,
    Record,
    SessionStarted,
    SessionStatus,
    SessionStore,
    StateChanged,
    replay,
)
from anvild.store.records import encode
from tests.unit.session.support import Models, file_tools, target, workspace
from tests.unit.session.support import settings as session_settings
from tests.unit.store.support import valid_records


def _write(directory: Path, records: list[Record]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    started = records[0]
    assert isinstance(started, SessionStarted)
    data = b"".join(encode(seq, record) for seq, record in enumerate(records, start=1))
    (directory / f"{started.id}.jsonl").write_bytes(data)


def _answers(session: Session) -> dict[str, Any]:
    """Everything a client reads of a session that comes from its restored state."""
    return {
        "list": session.list_line(),
        "status": (session.status, session.status_detail),
        "out": session.out,
        "queue": session.queue_text(),
        "usage": session.usage_line(),
        "cost": session.cost_text(),
        "todos": session.todos_text(),
        "approval": session.approval_text(),
        "context": session.context,
        "record": session.record,
        "history": list(session.agent.messages),
    }


def _manager(tmp_path: Path, data: Path) -> SessionManager:
    return SessionManager(
        SessionStore(data),
        Models({"fake": target(ScriptedProvider([]))}),
        settings=session_settings(tmp_path),
        tools=file_tools(),
        default_cwd=workspace(tmp_path),
    )


async def _restart(
    tmp_path: Path, data: Path, *, eager: bool = False
) -> tuple[str, list[dict[str, Any]], str]:
    """Restore `data` in place: `agent/list` before any use, every session's answers, and the
    list after (`eager`: every session built during the restore, as before lazy restoration);
    the manager writes the index as it stops."""
    manager = _manager(tmp_path, data)
    at_rest = manager_module._at_rest
    if eager:
        manager_module._at_rest = lambda state: False
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            before = manager.list_text()
            answers = [_answers(session) for session in manager.sessions()]
            after = manager.list_text()
            nursery.cancel_scope.cancel()
    finally:
        manager_module._at_rest = at_rest
    return before, answers, after


async def _restored(tmp_path: Path, data: Path, *, lazy: bool) -> tuple[str, str, list[Any]]:
    """Restore a copy of `data`: the list before any session is used, after all are built, and
    every session's answers."""
    copy = tmp_path / ("lazy" if lazy else "eager")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data, copy)
    before, answers, after = await _restart(tmp_path, copy, eager=not lazy)
    return before, after, answers


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(histories=st.lists(valid_records(max_size=20), min_size=1, max_size=3))
def test_a_lazily_restored_session_answers_as_an_eagerly_restored_one(
    tmp_path: Path, histories: list[list[Record]]
) -> None:
    data = tmp_path / "data"
    shutil.rmtree(data, ignore_errors=True)
    cwd = str(workspace(tmp_path))
    for index, records in enumerate(histories):
        first = records[0]
        assert isinstance(first, SessionStarted)
        started = attrs.evolve(first, id=f"s{index}", alias=None, model="fake", cwd=cwd)
        # A queued prompt starts a turn at once (in both restores): its answers would depend on
        # how far that turn got, not on the restore.
        assume(not replay([started, *records[1:]]).queue)
        _write(data, [started, *records[1:]])

    async def main() -> None:
        lazy_before, lazy_after, lazy = await _restored(tmp_path, data, lazy=True)
        eager_before, eager_after, eager = await _restored(tmp_path, data, lazy=False)
        assert lazy_before == lazy_after == eager_before == eager_after
        assert lazy == eager

    trio.run(main)


async def test_only_a_session_at_rest_waits_and_the_first_use_builds_it(tmp_path: Path) -> None:
    cwd = str(workspace(tmp_path))
    data = tmp_path / "data"
    base = SessionStarted(
        id="rest", alias="calm", role="developer", model="fake", cwd=cwd,
        sandbox="workspace-write", created_at=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    _write(data, [base, StateChanged(SessionStatus.IDLE, "")])
    later = base.created_at + dt.timedelta(seconds=1)
    busy = attrs.evolve(base, id="busy", alias=None, created_at=later)
    _write(data, [busy, StateChanged(SessionStatus.IDLE, ""), PromptQueued("p1", "hello")])
    manager = SessionManager(
        SessionStore(data),
        Models({"fake": target(ScriptedProvider([]))}),
        settings=session_settings(tmp_path),
        tools=file_tools(),
        default_cwd=workspace(tmp_path),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        assert [s.id for s in manager.built_sessions()] == ["busy"]  # a queued prompt runs
        assert manager.list_text().splitlines()[0] == "rest\tcalm\tidle\tdeveloper\tfake\t" + cwd
        assert len(manager.statuses()) == 2  # agent/load counts both, building none
        assert manager.ids() == ["rest", "busy"]
        assert SessionStatus.IDLE in manager.statuses()
        assert [s.id for s in manager.built_sessions()] == ["busy"]
        session = manager.get("calm")
        assert session.id == "rest"
        assert session.status is SessionStatus.IDLE
        assert manager.get("rest") is session
        assert [s.id for s in manager.built_sessions()] == ["rest", "busy"]  # creation order
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("built", [True, False])
async def test_nothing_is_built_in_the_background_only_what_is_used(
    tmp_path: Path, built: bool
) -> None:
    cwd = str(workspace(tmp_path))
    data = tmp_path / "data"
    now = dt.datetime.now(dt.UTC)
    for index in range(5):
        started = SessionStarted(
            id=f"s{index}", alias=None, role="developer", model="fake", cwd=cwd,
            sandbox="workspace-write", created_at=now + dt.timedelta(seconds=index),
        )  # fmt: skip
        _write(data, [started])
    manager = SessionManager(
        SessionStore(data),
        Models({"fake": target(ScriptedProvider([]))}),
        settings=session_settings(tmp_path),
        tools=file_tools(),
        default_cwd=workspace(tmp_path),
    )
    done = trio.Event()
    manager.on_all_built = done.set  # fired once the restore is over
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        assert done.is_set()
        if built:
            manager.get("s3")
        await trio.sleep(0.1)
        assert [s.id for s in manager.built_sessions()] == (["s3"] if built else [])
        assert manager.statuses() == [SessionStatus.IDLE] * 5
        nursery.cancel_scope.cancel()


async def test_a_session_killed_before_it_was_built_ends_as_a_built_one_does(
    tmp_path: Path,
) -> None:
    cwd = str(workspace(tmp_path))
    data = tmp_path / "data"
    started = SessionStarted(
        id="rest", alias="calm", role="developer", model="fake", cwd=cwd,
        sandbox="workspace-write", created_at=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    _write(data, [started, StateChanged(SessionStatus.IDLE, "")])
    manager = SessionManager(
        SessionStore(data),
        Models({"fake": target(ScriptedProvider([]))}),
        settings=session_settings(tmp_path, reap_delay=0.0),
        tools=file_tools(),
        default_cwd=workspace(tmp_path),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.kill("calm")
        await trio.sleep(0.05)
        assert manager.list_text() == ""
        nursery.cancel_scope.cancel()
    state = SessionStore(data).read("rest").state
    assert state.ended is not None
    assert state.status is SessionStatus.EXITED


def test_load_gives_the_journal_and_the_records_it_loaded(tmp_path: Path) -> None:
    started = SessionStarted(
        id="s0", alias=None, role="developer", model="fake", cwd=str(tmp_path),
        sandbox="workspace-write", created_at=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    _write(tmp_path, [started, StateChanged(SessionStatus.IDLE, ""), PromptQueued("p1", "hi")])
    journal, contents = SessionStore(tmp_path).load("s0")
    with journal:
        assert contents.records == SessionStore(tmp_path).read("s0").records
        assert (journal.seq, journal.state) == (3, contents.state)
