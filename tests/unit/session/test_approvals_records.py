"""Approvals through the session, role ceilings, records (replay == live), recovery, a failed
record write, and 100 sessions behind one provider slot."""

from __future__ import annotations

import datetime as dt
import errno
import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from anvild.agent.permissions.policy import Mode
from anvild.llm import stream
from anvild.llm.integrity import validate_transcript
from anvild.llm.testing import Pause, ScriptedProvider, script
from anvild.llm.types import Message, Role, ToolCall
from anvild.session.errors import InvalidSessionRequest, SessionRefused
from anvild.session.session import Session
from anvild.store import (
    ApprovalAnswered,
    JournalWriteError,
    MessageAppended,
    SessionStarted,
    SessionStatus,
    SessionStore,
    StateChanged,
    ToolStarted,
    Verdict,
    read_journal,
)
from tests.unit.agent.test_loop import Probe
from tests.unit.session.support import Models, ask, new, running, target

S = SessionStatus
WRITE = {"file_path": "a.txt", "content": "written\n"}


async def wait_for(session: Session, status: SessionStatus) -> None:
    while session.status is not status:
        await session.wait_changed(session.version)


def last_result(provider: ScriptedProvider) -> str:
    results = provider.requests[-1].messages[-1].tool_results()
    assert results, provider.requests[-1].messages[-1]
    return results[0].content


def assert_replays(session: Session) -> None:
    loaded = read_journal(session.journal.path).state
    assert loaded == session.record
    assert loaded.messages == session.agent.messages


async def test_a_write_waits_for_approval_until_approve(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.DEFAULT) as manager:
        session = await new(manager)
        seq = session.submit("write a.txt")
        await wait_for(session, S.AWAIT_APPROVAL)
        text = session.approval_text()
        assert "tool write_file\n" in text
        assert '"file_path": "a.txt"' in text
        assert not (tmp_path / "work" / "a.txt").exists()
        assert session.record.approval is not None
        assert_replays(session)
        with pytest.raises(InvalidSessionRequest, match="approve, always or reject"):
            session.answer_approval("yes please")
        session.answer_approval("approve")
        assert await session.wait_handled(seq) is S.AWAIT
        assert (tmp_path / "work" / "a.txt").read_text() == "written\n"
        assert session.approval_text() == ""
        assert ApprovalAnswered("c1", Verdict.APPROVE) in read_journal(session.journal.path).records
        with pytest.raises(SessionRefused, match="no approval is pending"):
            session.answer_approval("approve")
        assert_replays(session)


async def test_reject_with_a_reason_reaches_the_model_as_the_tool_result(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    async with running(tmp_path, Models({"fake": target(provider)}), mode=Mode.DEFAULT) as manager:
        session = await new(manager)
        seq = session.submit("write a.txt")
        await wait_for(session, S.AWAIT_APPROVAL)
        session.answer_approval("reject because X")
        await session.wait_handled(seq)
        assert "because X" in last_result(provider)
        assert not (tmp_path / "work" / "a.txt").exists()
        assert_replays(session)


@pytest.mark.parametrize("verb", ["cancel", "stop", "kill", "shutdown"])
async def test_cancel_stop_kill_and_shutdown_never_approve(tmp_path: Path, verb: str) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.DEFAULT) as manager:
        session = await new(manager)
        session.submit("write a.txt")
        await wait_for(session, S.AWAIT_APPROVAL)
        path = session.journal.path
        if verb != "shutdown":  # shutdown: leaving `running` cancels the manager's scope
            await session.control(verb)
            expected = {"cancel": S.AWAIT, "stop": S.STOPPED, "kill": S.EXITED}[verb]
            assert session.status is expected
    assert not (tmp_path / "work" / "a.txt").exists()
    loaded = read_journal(path)
    answers = [r for r in loaded.records if isinstance(r, ApprovalAnswered)]
    assert [a.verdict for a in answers] == [Verdict.CANCELLED]
    assert loaded.state.approval is None
    assert len(provider.requests) == 1


async def test_a_reviewer_cannot_write_even_when_the_model_tries(tmp_path: Path) -> None:
    edit = {"file_path": "a.txt", "old_string": "a", "new_string": "b"}
    provider = ScriptedProvider(
        [
            script.tool_call("c1", "write_file", WRITE),
            script.tool_call("c2", "edit_file", edit),
            script.text("VERDICT: CHANGES"),
        ]
    )
    async with running(tmp_path, Models({"fake": target(provider)}), mode=Mode.BYPASS) as manager:
        session = await new(manager, role="reviewer")
        assert session.sandbox == "read-only"
        assert await ask(session, "fix it yourself") == "VERDICT: CHANGES\n"
        first = provider.requests[1].messages[-1].tool_results()[0]
        second = provider.requests[2].messages[-1].tool_results()[0]
        for result in (first, second):
            assert result.is_error
            assert result.content.startswith("Permission denied")
            assert "reviewer" in result.content
        assert not (tmp_path / "work" / "a.txt").exists()


async def test_the_journal_replays_to_the_live_session_after_a_tool_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[tuple[str, str]] = []
    probe = Probe("probe", log, seconds=1, writes=True)
    provider = ScriptedProvider(
        [
            script.tool_call("c1", "probe", {"tag": "x"}, usage=stream.Usage(50, 5, 0, 0)),
            script.tool_call(
                "c2", "todo_write", {"todos": [{"content": "check", "status": "in_progress"}]}
            ),
            script.text("done", usage=stream.Usage(80, 5, 0, 0)),
        ]
    )
    async with running(tmp_path, Models({"fake": target(provider)}), tools=[probe]) as manager:
        session = await new(manager, alias="rec")
        await ask(session, "go")
        assert_replays(session)
        assert session.todos_text() == "in_progress\tcheck\n", session.log.backlog()
        records = read_journal(session.journal.path).records
        started = records.index(ToolStarted("c1", "probe"))
        assert type(records[started + 1]).__name__ == "ToolFinished"
        session.mark_out_read()
        await session.control("clear")
        assert_replays(session)
        assert session.todos_text() == ""
    # a new manager over the same data dir restores the same session
    async with running(tmp_path, [script.text("again")]) as manager:
        restored = manager.get("rec")
        assert restored.status is S.IDLE
        assert restored.log.backlog() == ()  # cleared: the context (and so the past) is empty
        assert restored.record == read_journal(restored.journal.path).state
        assert await ask(restored, "hello") == "again\n"


async def test_recovery_marks_an_unknown_outcome_and_never_reruns(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "data" / "sessions")
    work = tmp_path / "work"
    work.mkdir()
    started = SessionStarted(
        id="crashed",
        alias="c",
        role="developer",
        model="fake",
        cwd=str(work),
        sandbox="workspace-write",
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    call = ToolCall("c1", "probe", {"tag": "x"})
    with store.create(started) as journal:
        journal.append(StateChanged(S.IDLE))
        journal.append(MessageAppended(Message.user_text("do it")))
        journal.append(StateChanged(S.RUNNING))
        journal.append(MessageAppended(Message(Role.ASSISTANT, [call])))
        journal.append(ToolStarted("c1", "probe"))
    log: list[tuple[str, str]] = []
    probe = Probe("probe", log)
    async with running(tmp_path, [script.text("checked")], tools=[probe]) as manager:
        session = manager.get("c")
        assert session.status is S.IDLE
        results = session.agent.messages[-1].tool_results()
        assert "Outcome unknown" in results[0].content
        assert any("outcome unknown" in note for note in session.record.notes)
        assert any("outcome unknown" in line for line in session.log.backlog())
        assert "[turn ended: error" in session.out
        past = session.log.backlog()
        assert past[:2] == ("USER: do it", 'TOOL: probe {"tag": "x"}')
        assert past[2].startswith("ERROR: Outcome unknown")
        validate_transcript(session.agent.messages)
        assert await ask(session, "what happened?") == "checked\n"
        assert log == []  # never re-run


class FailingAppends:
    """Makes a journal's appends of some record types fail like a full disk."""

    def __init__(self, session: Session, kinds: tuple[type, ...]) -> None:
        self.journal = session.journal
        self.original = self.journal.append
        self.kinds = kinds

    def __call__(self, record: Any, *, sync: bool | None = None) -> Any:
        if isinstance(record, self.kinds):
            raise JournalWriteError(
                self.journal.path, "No space left on device", errno=errno.ENOSPC, intact=True
            )
        return self.original(record, sync=sync)


async def test_a_failed_record_write_moves_only_that_session_to_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[tuple[str, str]] = []
    probe = Probe("probe", log, writes=True)
    provider = ScriptedProvider(
        [script.tool_call("c1", "probe", {"tag": "x"}), script.text("other"), script.text("back")]
    )
    async with running(tmp_path, Models({"fake": target(provider)}), tools=[probe]) as manager:
        session = await new(manager)
        failing = FailingAppends(session, (ToolStarted,))
        monkeypatch.setattr(session.journal, "append", failing)
        seq = session.submit("run the probe")
        assert await session.wait_handled(seq) is S.ERROR
        assert log == []  # a call whose start could not be recorded never runs
        assert "No space left" in session.status_detail
        with pytest.raises(SessionRefused, match="is error"):
            session.submit("more")
        failed = [json.loads(line) for line in manager.events.backlog()]
        assert any(event["type"] == "session_failed" for event in failed)
        # the manager and other sessions carry on
        other = await new(manager)
        assert await ask(other, "hi") == "other\n"
        # once the disk has room again, start resumes the session
        monkeypatch.setattr(session.journal, "append", failing.original)
        await session.start()
        assert session.status is S.IDLE
        assert await ask(session, "again") == "back\n"
        assert_replays(session)


class Gauge:
    """A provider wrapper that counts streams in flight and the order they finish."""

    def __init__(self, inner: ScriptedProvider) -> None:
        self.inner = inner
        self.in_flight = 0
        self.peak = 0
        self.finished: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def stream(self, request: Any) -> Any:
        gauge = self

        class _Stream:
            async def __aenter__(self) -> Any:
                gauge.in_flight += 1
                gauge.peak = max(gauge.peak, gauge.in_flight)
                self.inner = gauge.inner.stream(request)
                return await self.inner.__aenter__()

            async def __aexit__(self, *exc: Any) -> Any:
                gauge.in_flight -= 1
                gauge.finished.append(request.messages[-1].text())
                return await self.inner.__aexit__(*exc)

        return _Stream()


async def test_a_hundred_sessions_queue_behind_one_slot_in_order(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    scripts = [[stream.TextDelta(0, f"a{i}"), Pause(1), *script.text("")] for i in range(100)]
    gauge = Gauge(ScriptedProvider(scripts, name="llama"))
    models = Models({"fake": target(gauge)})  # type: ignore[arg-type]
    async with running(tmp_path, models, concurrency={"llama": 1}) as manager:
        sessions = [await new(manager) for _ in range(100)]
        start = trio.current_time()
        seqs = []
        for i, session in enumerate(sessions):
            seqs.append(session.submit(f"prompt {i}"))
            await trio.testing.wait_all_tasks_blocked()  # it reached the limiter: arrival order
        assert trio.current_time() == start
        providers = manager.statistics().providers
        assert providers["llama"] == (1, 99)  # one streams, 99 parked on the limiter
        async with trio.open_nursery() as nursery:
            for session, seq in zip(sessions, seqs, strict=True):
                nursery.start_soon(session.wait_handled, seq)
        assert gauge.peak == 1
        assert gauge.finished == [f"prompt {i}" for i in range(100)]
        assert trio.current_time() - start == pytest.approx(100, abs=1)
        assert all(s.status is S.AWAIT for s in sessions)
        assert [s.out for s in sessions[:2]] == ["a0\n", "a1\n"]


async def test_a_session_whose_model_is_gone_comes_back_on_the_default(tmp_path: Path) -> None:
    first = Models(
        {
            "fake": target(ScriptedProvider([])),
            "other": target(ScriptedProvider([script.text("a")]), name="other"),
        }
    )
    async with running(tmp_path, first) as manager:
        session = await new(manager, model="other", alias="o")
        await ask(session, "hi")
    async with running(tmp_path, [script.text("b")]) as manager:
        restored = manager.get("o")
        assert restored.model == "fake"
        assert any("no longer available" in note for note in restored.record.notes)
        assert await ask(restored, "still there?") == "b\n"
    nothing = Models({}, default="missing")
    async with running(tmp_path, nothing) as manager:
        assert manager.sessions() == ()
        failed = [json.loads(line) for line in manager.events.backlog()]
        assert failed[0]["type"] == "session_failed"
        assert "not restored" in failed[0]["error"]


async def test_a_reviewer_cannot_commit_and_a_tester_writes_only_tests(tmp_path: Path) -> None:
    from tests.unit.permissions.test_gate import FakeBash

    bash = FakeBash()
    provider = ScriptedProvider(
        [
            script.tool_call("c1", "bash", {"command": "git commit -am 'sneaky'"}),
            script.text("VERDICT: LGTM"),
            script.tool_call("t1", "write_file", {"file_path": "tests/test_a.py", "content": "x"}),
            script.tool_call("t2", "write_file", {"file_path": "src/a.py", "content": "x"}),
            script.text("done"),
        ]
    )
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, tools=[bash], mode=Mode.BYPASS) as manager:
        reviewer = await new(manager, role="reviewer")
        await ask(reviewer, "commit it")
        assert bash.ran == []
        assert "Permission denied" in provider.requests[1].messages[-1].tool_results()[0].content
        tester = await new(manager, role="tester")
        await ask(tester, "write tests")
        work = tmp_path / "work"
        assert (work / "tests" / "test_a.py").read_text() == "x"
        assert not (work / "src" / "a.py").exists()
        denied = provider.requests[4].messages[-1].tool_results()[0]
        assert denied.is_error
        assert "Permission denied" in denied.content


async def test_kill_removes_an_exited_ephemeral_session_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(tmp_path, [script.text("done")]) as manager:
        session = await new(manager, ephemeral=True)
        await session.wait_handled(session.submit("once"))
        assert session.status is S.EXITED
        await manager.kill(session.id)
        assert manager.sessions() == ()
        with pytest.raises(SessionRefused, match="is exited: it has ended; create a new"):
            session.submit("again")
