"""The reducer's rules (course 14.B, review finding 5), table-driven, and `message_records`."""

from __future__ import annotations

import datetime as dt
import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anvild.llm import stream
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult
from anvild.store import (
    AliasChanged,
    ApprovalAnswered,
    ApprovalRequested,
    Compacted,
    ContextFileChanged,
    ContextReplaced,
    MessageAppended,
    MessageExtended,
    ModelChanged,
    Note,
    PromptDropped,
    PromptQueued,
    PromptTaken,
    Record,
    RecordError,
    ReplaceReason,
    RoleChanged,
    SessionEnded,
    SessionState,
    SessionStatus,
    StateChanged,
    TodoItem,
    TodosChanged,
    ToolFinished,
    ToolRun,
    ToolStarted,
    TurnEnded,
    TurnUsage,
    UsageReported,
    Verdict,
    apply,
    message_records,
    replay,
)
from anvild.store.records import decode, encode
from anvild.store.state import UsageBaseline
from tests.unit.store.support import assistant, results, started, user, valid_records

CALL = ToolCall("c1", "bash", {"command": "ls"})
CALL2 = ToolCall("c2", "read_file", {"file_path": "a"})


def state_of(*records: Record) -> SessionState:
    return replay([started(), *records])


TOOL_TAIL = (MessageAppended(user("hi")), MessageAppended(assistant("", CALL, CALL2)))


def test_a_session_starts_starting_with_its_header_fields() -> None:
    state = state_of()
    assert (state.id, state.role, state.model, state.status) == (
        "s1",
        "developer",
        "sonnet",
        SessionStatus.STARTING,
    )
    assert state.messages == ()
    assert state.usage == stream.Usage(0, 0, 0, 0)


def test_a_turn_with_a_tool_call() -> None:
    state = state_of(*TOOL_TAIL, ToolStarted("c1", "bash"))
    assert state.tools == (ToolRun("c1", "bash"),)
    state = apply(state, ToolFinished(ToolResult("c1", "a.txt")))
    assert state.tools == (ToolRun("c1", "bash", ToolResult("c1", "a.txt")),)
    answer = results(("c1", "a.txt"), ("c2", "x"))
    state = apply(state, MessageAppended(answer))
    assert state.tools == ()  # answered
    assert state.messages[-1] == answer
    assert state.first_prompt == "hi"


def test_merged_prompt_extends_the_trailing_user_message() -> None:
    state = state_of(*TOOL_TAIL, MessageAppended(results(("c1", "1"), ("c2", "2"))))
    state = apply(state, MessageExtended((Text("continue"),)))
    assert state.messages[-1] == Message(
        Role.USER, (ToolResult("c1", "1"), ToolResult("c2", "2"), Text("continue"))
    )
    assert len(state.messages) == 3


def test_usage_sums_keeps_unknown_and_sets_a_baseline_that_resets() -> None:
    state = state_of(MessageAppended(user("hi")), UsageReported(stream.Usage(100, 20, 0, 0)))
    assert state.baseline == UsageBaseline(stream.Usage(100, 20, 0, 0), 1)
    state = apply(state, UsageReported(stream.Usage(10, None, 0, 0)))
    assert state.usage == stream.Usage(110, None, 0, 0)  # unknown poisons the sum
    assert apply(state, ModelChanged("gpt")).baseline is None
    assert apply(state, ContextReplaced((), ReplaceReason.CLEAR)).baseline is None


def test_simple_fields() -> None:
    todo = TodoItem("write tests", "in_progress")
    state = state_of(
        StateChanged(SessionStatus.ERROR, "disk full"),
        TodosChanged((todo,)),
        ContextFileChanged("be brief"),
        RoleChanged("reviewer"),
        AliasChanged("r1"),
        ModelChanged("gpt"),
        TurnEnded("cancelled", "the turn was cancelled"),
        Note("hello"),
        Note("again"),
    )
    assert state.status is SessionStatus.ERROR
    assert state.status_detail == "disk full"
    assert state.todos == (todo,)
    assert (state.context, state.role, state.alias, state.model) == (
        "be brief",
        "reviewer",
        "r1",
        "gpt",
    )
    assert state.last_turn == TurnEnded("cancelled", "the turn was cancelled")
    assert state.notes == ("hello", "again")


def test_queue_is_fifo_and_survives_as_state() -> None:
    state = state_of(PromptQueued("p1", "one"), PromptQueued("p2", "two"), PromptQueued("p3", "3"))
    state = apply(state, PromptTaken("p1"))
    assert [p.prompt_id for p in state.queue] == ["p2", "p3"]
    state = apply(state, PromptDropped(("p3", "p2")))
    assert state.queue == ()


def test_approval_always_remembers_the_tool() -> None:
    state = state_of(*TOOL_TAIL, ApprovalRequested("c1", "bash", {"command": "ls"}, "writes"))
    assert state.approval is not None
    assert state.approval.reason == "writes"
    state = apply(state, ApprovalAnswered("c1", Verdict.ALWAYS))
    assert state.approval is None
    assert state.always_allowed == ("bash",)
    state = apply(state, ApprovalRequested("c2", "read_file", {}, "outside the workspace"))
    state = apply(state, ApprovalAnswered("c2", Verdict.REJECT, "no"))
    assert state.always_allowed == ("bash",)


def test_session_ended_exits_and_is_final() -> None:
    state = state_of(SessionEnded("killed"))
    assert state.ended == "killed"
    assert state.status is SessionStatus.EXITED
    with pytest.raises(RecordError, match="note after the session ended"):
        apply(state, Note("x"))


PENDING = (*TOOL_TAIL, ApprovalRequested("c1", "bash", {}, "why"))


@pytest.mark.parametrize(
    ("before", "record", "message"),
    [
        ((), started(), "a second SessionStarted"),
        ((), MessageAppended(assistant("hi")), "first message must be from the user"),
        ((), MessageAppended(Message(Role.USER, ())), "empty message"),
        ((MessageAppended(user("a")),), MessageAppended(user("b")), "two user messages"),
        ((), MessageExtended((Text("x"),)), "no message to extend"),
        ((MessageAppended(user("a")),), MessageExtended(()), "without blocks"),
        ((*TOOL_TAIL, ToolStarted("c1", "bash")), MessageExtended((Text("x"),)), "in flight"),
        (
            (*TOOL_TAIL, ToolStarted("c1", "bash")),
            ContextReplaced((), ReplaceReason.CLEAR),
            "in flight",
        ),
        (PENDING, MessageAppended(results(("c1", "x"), ("c2", "y"))), "approval for 'c1'"),
        (PENDING, MessageExtended((Text("x"),)), "pending"),
        (PENDING, ContextReplaced((), ReplaceReason.CLEAR), "pending"),
        (PENDING, ApprovalRequested("c2", "read_file", {}, "why"), "still pending"),
        (PENDING, ApprovalAnswered("c2", Verdict.APPROVE), "not pending"),
        ((), ApprovalAnswered("c1", Verdict.APPROVE), "not pending"),
        (TOOL_TAIL, ToolStarted("c9", "bash"), "not a call of the last message"),
        (TOOL_TAIL, ToolStarted("c1", "grep"), "names 'grep', but 'c1' is 'bash'"),
        ((*TOOL_TAIL, ToolStarted("c1", "bash")), ToolStarted("c1", "bash"), "started twice"),
        (
            (*TOOL_TAIL, ToolStarted("c1", "bash")),
            ApprovalRequested("c1", "bash", {}, "why"),
            "already started",
        ),
        (TOOL_TAIL, ToolFinished(ToolResult("c1", "x")), "not running"),
        (
            (*TOOL_TAIL, ToolStarted("c1", "bash"), ToolFinished(ToolResult("c1", "x"))),
            ToolFinished(ToolResult("c1", "x")),
            "finished twice",
        ),
        (
            (*TOOL_TAIL, MessageAppended(results(("c1", "x"), ("c2", "y")))),
            ToolStarted("c1", "bash"),
            "not a call of the last message",
        ),
        (TOOL_TAIL, SessionEnded("killed"), "unanswered tool calls: end the turn first"),
        (PENDING, SessionEnded("killed"), "pending"),
        ((PromptQueued("p1", "a"),), PromptQueued("p1", "b"), "already queued"),
        ((PromptQueued("p1", "a"), PromptQueued("p2", "b")), PromptTaken("p2"), "head"),
        ((), PromptTaken("p1"), "head"),
        ((PromptQueued("p1", "a"),), PromptDropped(("p1", "p2")), r"not queued: \['p2'\]"),
    ],
)
def test_records_that_do_not_fit_are_rejected(
    before: tuple[Record, ...], record: Record, message: str
) -> None:
    state = state_of(*before)
    with pytest.raises(RecordError, match=message):
        apply(state, record)


def test_the_first_record_must_start_the_session_with_the_current_schema() -> None:
    with pytest.raises(RecordError, match="starts with SessionStarted, not note"):
        apply(None, Note("x"))
    with pytest.raises(RecordError, match="schema 0"):
        apply(None, started(schema=0))
    with pytest.raises(RecordError, match="no records"):
        replay([])


def test_apply_does_not_mutate_its_input() -> None:
    state = state_of(*TOOL_TAIL)
    copy = attrs.evolve(state)
    apply(state, ToolStarted("c1", "bash"))
    assert state == copy


# -- message_records ----------------------------------------------------------------------------


def test_message_records_appends_extends_and_explains_replacements() -> None:
    a = (user("hi"), assistant("", CALL))
    b = (*a, results(("c1", "ok")))
    assert message_records(a, b) == (MessageAppended(results(("c1", "ok"))),)
    merged = (*a, Message(Role.USER, (ToolResult("c1", "ok"), Text("next"))))
    assert message_records(b, merged) == (MessageExtended((Text("next"),)),)
    more = (*merged, assistant("done"))
    assert message_records(b, more) == (
        MessageExtended((Text("next"),)),
        MessageAppended(assistant("done")),
    )
    assert message_records(b, b) == ()
    with pytest.raises(RecordError, match="needs a reason"):
        message_records(b, (user("summary"),))
    assert message_records(b, (), replace_reason=ReplaceReason.CLEAR) == (
        ContextReplaced((), ReplaceReason.CLEAR),
    )
    # a changed last message is not an extension
    with pytest.raises(RecordError):
        message_records(a, (user("hi"), assistant("other", CALL)))


@settings(max_examples=40, deadline=None)
@given(valid_records(), valid_records(), st.data())
def test_message_records_turn_any_transcript_into_any_other(
    first: list[Record], second: list[Record], data: st.DataObject
) -> None:
    old = replay(first)
    new_messages = replay(second).messages
    if data.draw(st.booleans()) and old.messages:  # a prefix of `old`: a rewind, replaced
        cut = data.draw(st.integers(0, len(old.messages)))
        new_messages = old.messages[:cut]
    records = message_records(old.messages, new_messages, replace_reason=ReplaceReason.COMPACTION)
    state = attrs.evolve(old, tools=(), approval=None, ended=None)
    for record in records:
        state = apply(state, record)
    assert state.messages == new_messages


def _compacted(messages: tuple[Message, ...] = (user("[Compacted history: S]"),)) -> Compacted:
    return Compacted(
        messages,
        "S",
        dropped=4,
        before=5200,
        after=900,
        model="m",
        trigger="auto",
        at=dt.datetime(2026, 12, 2, tzinfo=dt.UTC),
        focus="the parser",
        usage=stream.Usage(3000, 200, 0, 0),
    )


def test_a_compaction_replaces_the_transcript_lists_itself_and_sets_the_baseline() -> None:
    before = state_of(
        MessageAppended(user("a")),
        MessageAppended(assistant("b")),
        UsageReported(stream.Usage(10, 5, 0, 0)),
    )
    after = apply(before, _compacted())
    assert after.messages == (user("[Compacted history: S]"),)
    assert after.usage == stream.Usage(3010, 205, 0, 0)  # the summary requests are paid for
    assert after.baseline == UsageBaseline(stream.Usage(900, 0, 0, 0), 1)
    assert [(c.before, c.after, c.trigger, c.model, c.dropped) for c in after.compactions] == [
        (5200, 900, "auto", "m", 4)
    ]
    assert replay([started(), MessageAppended(user("a")), _compacted()]).compactions == (
        after.compactions
    )


@pytest.mark.parametrize("prior", [(*TOOL_TAIL, ToolStarted("c1", "bash")), PENDING])
def test_a_compaction_waits_for_the_calls_in_flight_and_approvals(
    prior: tuple[Record, ...],
) -> None:
    with pytest.raises(RecordError):
        apply(state_of(*prior), _compacted())


def test_a_compaction_round_trips_through_json() -> None:
    record = _compacted()
    seq, decoded = decode(json.loads(encode(7, record)))
    assert (seq, decoded) == (7, record)


def test_each_finished_turn_keeps_its_own_usage() -> None:
    records: list[Record] = []
    for turn in range(1, 24):
        records += [
            PromptQueued(f"p{turn}", "go"),
            PromptTaken(f"p{turn}"),
            UsageReported(stream.Usage(turn, 1, 0, 0)),
            UsageReported(stream.Usage(turn, 1, 5, 0)),
            TurnEnded("done"),
        ]
    state = state_of(*records)
    assert state.turn_count == 23
    assert len(state.turns) == 20  # the recent ones only
    assert state.turns[-1] == TurnUsage(23, stream.Usage(46, 2, 5, 0))
    assert state.turns[0].turn == 4
