"""Streamed answer text (`TextStreamed`): what the reducer keeps of it, that it survives a
reload, how recovery ends a turn cut while it streamed, and the temporary files recovery names."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.llm.integrity import validate_transcript
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult
from anvild.store import (
    ContextReplaced,
    Journal,
    MessageAppended,
    MessageExtended,
    Note,
    PromptQueued,
    PromptTaken,
    Record,
    ReplaceReason,
    SessionStatus,
    StateChanged,
    TextStreamed,
    ToolStarted,
    TurnEnded,
    apply,
    read_journal,
    recover,
    replay,
)
from anvild.store.recovery import (
    RECOVERED_DETAIL,
    STREAMED_NOTE,
    TEMP_REMOVED,
    TURN_DETAIL,
    UNKNOWN_OUTCOME,
)
from tests.unit.store.support import assistant, started, user

TURN = (
    PromptQueued("p1", "say hello"),
    PromptTaken("p1"),
    StateChanged(SessionStatus.RUNNING),
    MessageAppended(user("say hello")),
)


def test_streamed_text_accumulates_until_the_answer_is_in_the_transcript() -> None:
    state = replay([started(), *TURN, TextStreamed("Hel"), TextStreamed("lo wor")])
    assert state.streamed == "Hello wor"
    assert state.messages == (user("say hello"),)  # display only: never the transcript
    assert apply(state, MessageAppended(assistant("Hello world"))).streamed == ""


@pytest.mark.parametrize(
    ("record", "kept"),
    [
        (MessageExtended((Text("more"),)), True),  # a cancel note: the partial stays shown
        (TurnEnded("cancelled", "the turn was cancelled"), True),
        (StateChanged(SessionStatus.AWAIT), True),
        (ContextReplaced((), ReplaceReason.CLEAR), False),
        (PromptQueued("p2", "next"), True),
    ],
)
def test_what_clears_the_streamed_text(record: Record, kept: bool) -> None:
    state = replay([started(), *TURN, TextStreamed("Hel"), record])
    assert state.streamed == ("Hel" if kept else "")


def test_the_next_prompt_taken_clears_the_text_of_a_cancelled_answer() -> None:
    state = replay(
        [
            started(),
            *TURN,
            TextStreamed("Hel"),
            TurnEnded("cancelled"),
            PromptQueued("p2", "again"),
            PromptTaken("p2"),
        ]
    )
    assert state.streamed == ""


def test_streamed_records_survive_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "s1.jsonl"
    with Journal.create(path, started()) as journal:
        for record in (*TURN, TextStreamed("Hel"), TextStreamed("lo")):
            journal.append(record)
        live = journal.state
    loaded = read_journal(path)
    assert loaded.state == live
    assert loaded.state.streamed == "Hello"


def test_a_turn_cut_while_streaming_drops_the_partial_answer_and_says_so() -> None:
    state = replay([started(), *TURN, TextStreamed("Hello wor")])
    found = recover(state)
    note = STREAMED_NOTE.format(chars=9)
    assert list(found.records) == [
        MessageExtended((Text(note),)),
        TurnEnded("error", TURN_DETAIL, interrupted=True),
        StateChanged(SessionStatus.IDLE, RECOVERED_DETAIL),
        Note("recovered after a restart: the session was running, now idle"),
    ]
    after = replay([started(), *TURN, TextStreamed("Hello wor"), *found.records])
    # The provider-facing transcript holds no word of the unfinished answer, and is valid.
    assert after.messages == (Message(Role.USER, (Text("say hello"), Text(note))),)
    validate_transcript(after.messages)
    assert after.streamed == "Hello wor"  # still shown in `out`
    assert after.last_turn is not None
    assert after.last_turn.interrupted
    assert recover(after).records == ()


def test_a_turn_cut_while_streaming_after_a_tool_step() -> None:
    call = ToolCall("c1", "bash", {"command": "ls"})
    records: list[Record] = [
        started(),
        *TURN,
        MessageAppended(assistant("looking", call)),
        ToolStarted("c1", "bash"),
    ]
    state = replay(records)
    state = apply(state, MessageAppended(Message(Role.USER, (ToolResult("c1", "a.txt"),))))
    state = apply(state, TextStreamed("There is a"))
    found = recover(state)
    after = state
    for record in found.records:
        after = apply(after, record)
    validate_transcript(after.messages)
    assert [m.role for m in after.messages] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert "There is a" not in str(after.messages)
    assert after.messages[-1].content[-1] == Text(STREAMED_NOTE.format(chars=10))


def test_removed_temporary_files_are_named_in_the_result_and_the_log() -> None:
    call = ToolCall("w1", "write_file", {"file_path": "notes/x.txt", "content": "x"})
    state = replay(
        [started(), *TURN, MessageAppended(assistant("", call)), ToolStarted("w1", "write_file")]
    )
    temp = "/src/app/notes/.x.txt.anvil-0123456789ab.tmp"
    found = recover(state, {"w1": [temp]})
    removed = TEMP_REMOVED.format(paths=temp)
    result = found.records[0]
    assert isinstance(result, MessageAppended)
    assert result.message.content[0] == ToolResult(
        "w1", UNKNOWN_OUTCOME.format(name="write_file") + removed, is_error=True
    )
    notes = [r.text for r in found.records if isinstance(r, Note)]
    assert any(temp in text and "outcome unknown" in text for text in notes)
    # nothing removed: the plain unknown outcome
    plain = recover(state).records[0]
    assert isinstance(plain, MessageAppended)
    assert plain.message.content[0] == ToolResult(
        "w1", UNKNOWN_OUTCOME.format(name="write_file"), is_error=True
    )
