"""Transcript validator: one passing and one failing transcript per rule (course 1.2, 01.B,
review finding 1)."""

from __future__ import annotations

import pytest

from anvild.llm.integrity import Rule, TranscriptError, validate_transcript
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult


def user(*blocks: Text | ToolCall | ToolResult) -> Message:
    return Message(Role.USER, blocks)


def assistant(*blocks: Text | ToolCall | ToolResult) -> Message:
    return Message(Role.ASSISTANT, blocks)


def call(call_id: str, name: str = "t") -> ToolCall:
    return ToolCall(call_id, name, {})


def result(call_id: str, content: str = "ok") -> ToolResult:
    return ToolResult(call_id, content)


# (rule, valid twin, invalid transcript, expected index, expected kind, expected id)
CASES = [
    (
        Rule.FIRST_NOT_USER,
        [user(Text("hi")), assistant(Text("hello"))],
        [assistant(Text("hello"))],
        0,
        None,
        None,
    ),
    (
        Rule.ROLES_ALTERNATE,
        [user(Text("a")), assistant(Text("b")), user(Text("c"))],
        [user(Text("a")), user(Text("c"))],
        1,
        None,
        None,
    ),
    (
        Rule.CALL_ON_USER,
        [user(Text("go")), assistant(call("c1")), user(result("c1"))],
        [user(Text("go"), call("c1"))],
        0,
        "tool_call",
        "c1",
    ),
    (
        # A result on an assistant message fails even though its id matches a real call.
        Rule.RESULT_ON_ASSISTANT,
        [user(Text("go")), assistant(call("c1")), user(result("c1")), assistant(Text("done"))],
        [user(Text("go")), assistant(call("c1"), result("c1"))],
        1,
        "tool_result",
        "c1",
    ),
    (
        Rule.EMPTY_ID,
        [user(Text("go")), assistant(call("x")), user(result("x"))],
        [user(Text("go")), assistant(call("")), user(result(""))],
        1,
        "tool_call",
        "",
    ),
    (
        # Two calls sharing an id with one result: the set of ids would hide it.
        Rule.DUPLICATE_CALL,
        [user(Text("go")), assistant(call("a"), call("b")), user(result("a"), result("b"))],
        [user(Text("go")), assistant(call("a"), call("a")), user(result("a"))],
        1,
        "tool_call",
        "a",
    ),
    (
        Rule.MISSING_RESULT,
        [user(Text("go")), assistant(call("a"), call("b")), user(result("b"), result("a"))],
        [user(Text("go")), assistant(call("a"), call("b")), user(result("a"))],
        2,
        "tool_call",
        "b",
    ),
    (
        Rule.ORPHAN_RESULT,
        [user(Text("go")), assistant(call("a")), user(result("a"))],
        [user(Text("go")), assistant(call("a")), user(result("a"), result("zzz"))],
        2,
        "tool_result",
        "zzz",
    ),
    (
        Rule.DUPLICATE_RESULT,
        [user(Text("go")), assistant(call("a")), user(result("a"), Text("and more"))],
        [user(Text("go")), assistant(call("a")), user(result("a"), result("a", "again"))],
        2,
        "tool_result",
        "a",
    ),
    (
        Rule.PENDING_TAIL,
        [user(Text("go")), assistant(call("a")), user(result("a")), assistant(Text("done"))],
        [user(Text("go")), assistant(call("a"))],
        1,
        "tool_call",
        "a",
    ),
]


@pytest.mark.parametrize(
    ("rule", "valid", "invalid", "index", "kind", "block_id"),
    CASES,
    ids=[case[0].name for case in CASES],
)
def test_rule(
    rule: Rule,
    valid: list[Message],
    invalid: list[Message],
    index: int,
    kind: str | None,
    block_id: str | None,
) -> None:
    validate_transcript(valid)
    with pytest.raises(TranscriptError) as info:
        validate_transcript(invalid)
    error = info.value
    assert (error.rule, error.index, error.kind, error.block_id) == (rule, index, kind, block_id)
    assert rule.value in str(error)
    assert f"message {index}" in str(error)


def test_every_rule_has_a_case() -> None:
    assert {case[0] for case in CASES} == set(Rule)


def test_duplicate_call_id_across_steps() -> None:
    transcript = [
        user(Text("go")),
        assistant(call("a")),
        user(result("a")),
        assistant(call("a")),
        user(result("a")),
    ]
    with pytest.raises(TranscriptError) as info:
        validate_transcript(transcript)
    assert (info.value.rule, info.value.index) == (Rule.DUPLICATE_CALL, 3)


def test_empty_result_id_is_reported_as_such() -> None:
    with pytest.raises(TranscriptError) as info:
        validate_transcript([user(result(""))])
    assert (info.value.rule, info.value.kind) == (Rule.EMPTY_ID, "tool_result")


def test_pending_tail_passes_only_with_the_flag_and_is_a_request_only_after_results() -> None:
    pending = [user(Text("go")), assistant(call("a"), call("b"))]
    with pytest.raises(TranscriptError):
        validate_transcript(pending)
    validate_transcript(pending, allow_pending_tail=True)
    # Half the results appended: still not a legal request, not even with the flag.
    half = [*pending, user(result("a"))]
    with pytest.raises(TranscriptError) as info:
        validate_transcript(half, allow_pending_tail=True)
    assert info.value.rule is Rule.MISSING_RESULT
    validate_transcript([*pending, user(result("a"), result("b"))])


def test_pending_tail_flag_does_not_excuse_an_earlier_unanswered_call() -> None:
    transcript = [user(Text("go")), assistant(call("a")), user(Text("no result"))]
    with pytest.raises(TranscriptError) as info:
        validate_transcript(transcript, allow_pending_tail=True)
    assert info.value.rule is Rule.MISSING_RESULT


def test_empty_transcript_is_valid() -> None:
    validate_transcript([])
