"""Transcript integrity: the structural rules every request and every committed step must meet.

`validate_transcript`, in one pass: the first message is the user's and roles alternate; calls
only on assistant messages, results only on user messages; ids non-empty and unique across the
transcript; every call of assistant message *i* has exactly one result in message *i + 1* (no
orphans, no duplicates); the last assistant message may leave calls unanswered only with
`allow_pending_tail=True`. Violations raise `TranscriptError` naming the message index, block
kind, id and `Rule`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from anvild.llm.types import Message, Role, ToolCall, ToolResult, block_kind


class Rule(enum.StrEnum):
    FIRST_NOT_USER = "the first message must be from the user"
    ROLES_ALTERNATE = "roles must alternate between user and assistant"
    CALL_ON_USER = "tool calls may only appear on assistant messages"
    RESULT_ON_ASSISTANT = "tool results may only appear on user messages"
    EMPTY_ID = "tool call and tool result ids must not be empty"
    DUPLICATE_CALL = "tool call ids must be unique across the transcript"
    MISSING_RESULT = "every tool call needs exactly one result in the next message"
    ORPHAN_RESULT = "a tool result must answer a call from the previous message"
    DUPLICATE_RESULT = "a tool call may have only one result"
    PENDING_TAIL = "the last message has unanswered tool calls"


class TranscriptError(ValueError):
    """A transcript broke one of the `Rule`s."""

    def __init__(
        self, rule: Rule, index: int, kind: str | None = None, block_id: str | None = None
    ):
        self.rule = rule
        self.index = index
        self.kind = kind
        self.block_id = block_id
        where = f"message {index}"
        if kind is not None:
            where += f", {kind} block"
        if block_id is not None:
            where += f" id {block_id!r}"
        super().__init__(f"invalid transcript at {where}: {rule.value}")


def validate_transcript(messages: Sequence[Message], *, allow_pending_tail: bool = False) -> None:
    """Raise `TranscriptError` unless `messages` is a structurally valid transcript."""
    call_seen_at: dict[str, int] = {}
    pending: list[ToolCall] = []  # calls of the previous assistant message, in order
    for index, message in enumerate(messages):
        if index == 0 and message.role is not Role.USER:
            raise TranscriptError(Rule.FIRST_NOT_USER, index)
        if index > 0 and message.role is messages[index - 1].role:
            raise TranscriptError(Rule.ROLES_ALTERNATE, index)
        if message.role is Role.USER:
            _check_results(index, message, pending)
            pending = []
        else:
            pending = _check_calls(index, message, call_seen_at)
    if pending and not allow_pending_tail:
        raise TranscriptError(Rule.PENDING_TAIL, len(messages) - 1, "tool_call", pending[0].id)


def _check_calls(index: int, message: Message, call_seen_at: dict[str, int]) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for block in message.content:
        if isinstance(block, ToolResult):
            raise TranscriptError(Rule.RESULT_ON_ASSISTANT, index, "tool_result", block.call_id)
        if isinstance(block, ToolCall):
            if not block.id:
                raise TranscriptError(Rule.EMPTY_ID, index, "tool_call", block.id)
            if block.id in call_seen_at:
                raise TranscriptError(Rule.DUPLICATE_CALL, index, "tool_call", block.id)
            call_seen_at[block.id] = index
            calls.append(block)
    return calls


def _check_results(index: int, message: Message, pending: list[ToolCall]) -> None:
    expected = {call.id for call in pending}  # ids were checked unique before this set was built
    answered: set[str] = set()
    for block in message.content:
        if isinstance(block, ToolCall):
            raise TranscriptError(Rule.CALL_ON_USER, index, "tool_call", block.id)
        if isinstance(block, ToolResult):
            if not block.call_id:
                raise TranscriptError(Rule.EMPTY_ID, index, block_kind(block), block.call_id)
            if block.call_id in answered:
                raise TranscriptError(Rule.DUPLICATE_RESULT, index, "tool_result", block.call_id)
            if block.call_id not in expected:
                raise TranscriptError(Rule.ORPHAN_RESULT, index, "tool_result", block.call_id)
            answered.add(block.call_id)
    for call in pending:
        if call.id not in answered:
            raise TranscriptError(Rule.MISSING_RESULT, index, "tool_call", call.id)
