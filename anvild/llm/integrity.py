"""Transcript integrity: the structural rules every request and every committed step must meet.

`validate_transcript`, in one pass: the first message is the user's and roles alternate; calls
only on assistant messages, results only on user messages; ids non-empty and unique across the
transcript; every call of assistant message *i* has exactly one result in message *i + 1* (no
orphans, no duplicates); the last assistant message may leave calls unanswered only with
`allow_pending_tail=True`. Violations raise `TranscriptError` naming the message index, block
kind, id and `Rule`. `TranscriptCheck` gives the same verdicts but checks only what a transcript
adds to the last one it passed, so a growing transcript costs per step what the step appended.
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
    TranscriptCheck().check(tuple(messages), allow_pending_tail=allow_pending_tail)


class TranscriptCheck:
    """`validate_transcript` that remembers the last transcript it passed: a transcript that
    keeps a prefix of it is checked only from where they differ, with the same verdict and the
    same error. The prefix is compared by value (identity first: a pointer compare per message),
    or, by `append`, known to be the passed transcript itself, so no caller can make it skip a
    message it has not passed."""

    def __init__(self) -> None:
        self._valid: tuple[Message, ...] = ()  # the last transcript that passed
        self._seen: dict[str, int] = {}  # the call ids of `_valid`: the message each is on

    def check(self, messages: tuple[Message, ...], *, allow_pending_tail: bool = False) -> None:
        """Raise `TranscriptError` unless `messages` is valid; remember it when it is."""
        if messages is not self._valid:
            self._advance(messages, self._rewind(messages))
        self._check_tail(messages, allow_pending_tail)

    def append(
        self,
        base: tuple[Message, ...],
        added: Sequence[Message],
        *,
        allow_pending_tail: bool = False,
    ) -> tuple[Message, ...]:
        """`base + added`, checked as `check` does; when `base` is the last transcript passed
        (the same object), without comparing it again: the cost is what `added` holds."""
        after = base + tuple(added)
        self._advance(after, len(base) if base is self._valid else self._rewind(after))
        self._check_tail(after, allow_pending_tail)
        return after

    @staticmethod
    def _check_tail(messages: tuple[Message, ...], allow_pending_tail: bool) -> None:
        last = len(messages) - 1
        if not allow_pending_tail and last >= 0 and messages[last].role is Role.ASSISTANT:
            for block in messages[last].content:
                if isinstance(block, ToolCall):
                    raise TranscriptError(Rule.PENDING_TAIL, last, "tool_call", block.id)

    def _rewind(self, messages: tuple[Message, ...]) -> int:
        """Forget `_valid` back to its longest prefix `messages` keeps (all, or all but the
        last message, else none); returns that prefix's length."""
        valid, kept = self._valid, len(self._valid)
        if len(messages) < kept or messages[:kept] != valid:
            kept = kept - 1 if kept and messages[: kept - 1] == valid[: kept - 1] else 0
        if not kept:
            self._seen.clear()
        for index in range(kept, len(valid) if kept else 0):
            for block in valid[index].content:
                if isinstance(block, ToolCall):
                    del self._seen[block.id]
        self._valid = valid[:kept]
        return kept

    def _advance(self, messages: tuple[Message, ...], start: int) -> None:
        """Check `messages[start:]` after the passed `messages[:start]`."""
        seen = self._seen
        pending: list[ToolCall] = []  # calls of the previous assistant message, in order
        if start and messages[start - 1].role is Role.ASSISTANT:
            pending = [b for b in messages[start - 1].content if isinstance(b, ToolCall)]
        try:
            for index in range(start, len(messages)):
                message = messages[index]
                if index == 0 and message.role is not Role.USER:
                    raise TranscriptError(Rule.FIRST_NOT_USER, index)
                if index > 0 and message.role is messages[index - 1].role:
                    raise TranscriptError(Rule.ROLES_ALTERNATE, index)
                if message.role is Role.USER:
                    _check_results(index, message, pending)
                    pending = []
                else:
                    pending = _check_calls(index, message, seen)
        except TranscriptError:
            for call_id in [i for i, at in seen.items() if at >= start]:
                del seen[call_id]
            raise
        self._valid = messages


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
