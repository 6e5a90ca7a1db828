"""Crash recovery (course 14.B, review finding 5): a started call without a durable finish is an
unknown outcome, reported and never re-run; the transcript validates afterwards."""

from __future__ import annotations

from pathlib import Path

from anvild.llm.integrity import validate_transcript
from anvild.llm.types import Message, Role, Text, ToolResult
from anvild.store import (
    ApprovalAnswered,
    ApprovalRequested,
    Journal,
    MessageAppended,
    Note,
    PromptQueued,
    Record,
    SessionEnded,
    SessionStatus,
    StateChanged,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    Verdict,
    apply,
    read_journal,
    recover,
    replay,
)
from anvild.store.recovery import (
    APPROVAL_CANCELLED,
    INTERRUPTED_NOTE,
    NOT_RUN,
    RECOVERED_DETAIL,
    TURN_DETAIL,
    UNKNOWN_OUTCOME,
)
from tests.unit.store.support import assistant, started, user
from tests.unit.store.test_reducer import CALL, CALL2

RUNNING = (
    StateChanged(SessionStatus.RUNNING),
    MessageAppended(user("tidy up")),
    MessageAppended(assistant("on it", CALL, CALL2)),
)


def recovered(*records: Record) -> tuple[list[Record], list[Message]]:
    state = replay([started(), *records])
    found = recover(state)
    after = state
    for record in found.records:
        after = apply(after, record)
    validate_transcript(after.messages)
    assert recover(after).records == ()
    return list(found.records), list(after.messages)


def test_started_without_finish_is_unknown_finished_is_kept_unstarted_is_not_run() -> None:
    records, messages = recovered(
        *RUNNING,
        ToolStarted("c1", "bash"),
        ToolFinished(ToolResult("c1", "removed 3 files")),
        ToolStarted("c2", "read_file"),
    )
    unknown = ToolResult("c2", UNKNOWN_OUTCOME.format(name="read_file"), is_error=True)
    assert records == [
        MessageAppended(
            Message(
                Role.USER,
                (ToolResult("c1", "removed 3 files"), unknown, Text(INTERRUPTED_NOTE)),
            )
        ),
        Note(
            "tool call c2 (read_file): outcome unknown. anvild stopped while it was running and "
            "no result was recorded; it was not re-run."
        ),
        TurnEnded("error", TURN_DETAIL, interrupted=True),
        StateChanged(SessionStatus.IDLE, RECOVERED_DETAIL),
        Note("recovered after a restart: the session was running, now idle"),
    ]
    assert "not re-run" in unknown.content
    assert messages[-1].tool_results()[0].content == "removed 3 files"  # known work not redone


def test_a_call_that_never_started_is_reported_not_run() -> None:
    records, _ = recovered(*RUNNING, ToolStarted("c1", "bash"))
    answer = records[0]
    assert isinstance(answer, MessageAppended)
    assert answer.message.tool_results()[1] == ToolResult(
        "c2", NOT_RUN.format(name="read_file"), is_error=True
    )
    assert [r.call_id for r in answer.message.tool_results()] == ["c1", "c2"]


def test_a_pending_approval_is_cancelled_never_approved() -> None:
    records, messages = recovered(
        *RUNNING,
        StateChanged(SessionStatus.AWAIT_APPROVAL),
        ApprovalRequested("c1", "bash", CALL.arguments, "runs a command"),
    )
    assert records[0] == ApprovalAnswered("c1", Verdict.CANCELLED, APPROVAL_CANCELLED)
    assert all(r.is_error for r in messages[-1].tool_results())
    assert records[-2] == StateChanged(SessionStatus.IDLE, RECOVERED_DETAIL)


def test_an_interrupted_sample_gets_a_note_in_the_trailing_user_message() -> None:
    records, messages = recovered(StateChanged(SessionStatus.RUNNING), MessageAppended(user("go")))
    assert messages == [Message(Role.USER, (Text("go"), Text(INTERRUPTED_NOTE)))]
    assert records[1:] == [
        TurnEnded("error", TURN_DETAIL, interrupted=True),
        StateChanged(SessionStatus.IDLE, RECOVERED_DETAIL),
        Note("recovered after a restart: the session was running, now idle"),
    ]


def test_sessions_at_rest_need_nothing_and_queued_prompts_are_kept() -> None:
    done = (
        MessageAppended(user("hi")),
        MessageAppended(assistant("hello")),
        StateChanged(SessionStatus.AWAIT),
        PromptQueued("p1", "next"),
    )
    records, _ = recovered(*done)
    assert records == []
    assert replay([started(), *done]).queue[0].text == "next"
    assert recovered(*done, SessionEnded("killed"))[0] == []


def test_a_session_in_error_keeps_its_state_but_gets_a_valid_transcript() -> None:
    records, messages = recovered(
        *RUNNING, ToolStarted("c1", "bash"), StateChanged(SessionStatus.ERROR, "disk full")
    )
    assert [type(r) for r in records] == [MessageAppended, Note]
    assert not any(isinstance(b, Text) for b in messages[-1].content)


def test_journal_recover_appends_durably_and_a_reload_agrees(tmp_path: Path) -> None:
    path = tmp_path / "s1.jsonl"
    with Journal.create(path, started()) as journal:
        for record in (*RUNNING, ToolStarted("c1", "bash")):
            journal.append(record)
    with Journal.open(path) as journal:
        found = journal.recover()
        assert [call.id for call in found.unknown] == ["c1"]
        assert journal.state.status is SessionStatus.IDLE
        assert journal.recover().records == ()
    loaded = read_journal(path)
    assert loaded.state == journal.state
    validate_transcript(loaded.state.messages)
    assert any("outcome unknown" in note for note in loaded.state.notes)
    assert loaded.state.messages[-1] == Message(
        Role.USER,
        (
            ToolResult("c1", UNKNOWN_OUTCOME.format(name="bash"), is_error=True),
            ToolResult("c2", NOT_RUN.format(name="read_file"), is_error=True),
            Text(INTERRUPTED_NOTE),
        ),
    )


def test_a_session_cut_while_starting_goes_idle_without_a_turn() -> None:
    records, messages = recovered()  # only SessionStarted: the status is still starting
    assert records == [
        StateChanged(SessionStatus.IDLE, RECOVERED_DETAIL),
        Note("recovered after a restart: the session was starting, now idle"),
    ]
    assert messages == []
