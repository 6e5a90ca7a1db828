"""`TranscriptCheck` against a whole-transcript reference: over generated histories of
transcripts (grown a step at a time as the loop does, the last message replaced, cut back, copied,
or started afresh; valid or not), checking only what changed gives the verdict and the error
(rule, message index, block kind, id) that checking everything does."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anvild.llm.integrity import Rule, TranscriptCheck, TranscriptError, validate_transcript
from anvild.llm.types import ContentBlock, Message, Role, Text, ToolCall, ToolResult

Outcome = tuple[Rule, int, str | None, str | None] | None


def reference(messages: Sequence[Message], allow_pending_tail: bool) -> Outcome:
    """The rules, written out once more in one pass over everything: the oracle."""
    seen: set[str] = set()
    pending: list[ToolCall] = []
    for index, message in enumerate(messages):
        if index == 0 and message.role is not Role.USER:
            return (Rule.FIRST_NOT_USER, index, None, None)
        if index > 0 and message.role is messages[index - 1].role:
            return (Rule.ROLES_ALTERNATE, index, None, None)
        if message.role is Role.USER:
            expected = {call.id for call in pending}
            answered: set[str] = set()
            for block in message.content:
                if isinstance(block, ToolCall):
                    return (Rule.CALL_ON_USER, index, "tool_call", block.id)
                if isinstance(block, ToolResult):
                    if not block.call_id:
                        return (Rule.EMPTY_ID, index, "tool_result", block.call_id)
                    if block.call_id in answered:
                        return (Rule.DUPLICATE_RESULT, index, "tool_result", block.call_id)
                    if block.call_id not in expected:
                        return (Rule.ORPHAN_RESULT, index, "tool_result", block.call_id)
                    answered.add(block.call_id)
            for call in pending:
                if call.id not in answered:
                    return (Rule.MISSING_RESULT, index, "tool_call", call.id)
            pending = []
        else:
            pending = []
            for block in message.content:
                if isinstance(block, ToolResult):
                    return (Rule.RESULT_ON_ASSISTANT, index, "tool_result", block.call_id)
                if isinstance(block, ToolCall):
                    if not block.id:
                        return (Rule.EMPTY_ID, index, "tool_call", block.id)
                    if block.id in seen:
                        return (Rule.DUPLICATE_CALL, index, "tool_call", block.id)
                    seen.add(block.id)
                    pending.append(block)
    if pending and not allow_pending_tail:
        return (Rule.PENDING_TAIL, len(messages) - 1, "tool_call", pending[0].id)
    return None


def outcome(run: Callable[..., object], *args: Any, **kwargs: bool) -> Outcome:
    try:
        run(*args, **kwargs)
    except TranscriptError as exc:
        return (exc.rule, exc.index, exc.kind, exc.block_id)
    return None


OLD_IDS = ("", "c0", "c1", "c2")  # reused ids: empty, duplicate, orphan
PENDING = {"allow_pending_tail": True}


class Messages:
    """Makes messages that mostly continue a transcript the way a loop would (alternating
    roles, fresh call ids, a result for each call), and sometimes break a rule."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.fresh = 0

    def chance(self, percent: int) -> bool:
        return self.rng.randrange(100) < percent

    def next(self, previous: Message | None) -> Message:
        role = Role.USER if previous is None or previous.role is Role.ASSISTANT else Role.ASSISTANT
        if self.chance(8):
            role = Role.ASSISTANT if role is Role.USER else Role.USER
        blocks: list[ContentBlock] = []
        if role is Role.USER:
            calls = [] if previous is None else previous.tool_calls()
            ids = [call.id for call in calls if not self.chance(5)]
            if ids and self.chance(5):
                ids.append(ids[0])
            if self.chance(5):
                ids.append(self.rng.choice(OLD_IDS))
            blocks += [ToolResult(call_id, "ok") for call_id in ids]
            if self.chance(4):
                blocks.append(ToolCall(self.rng.choice(OLD_IDS), "t", {}))
        else:
            for _ in range(self.rng.randrange(4)):
                if self.chance(6):  # an id used before, or empty
                    call_id = self.rng.choice((*OLD_IDS, f"f{self.rng.randrange(self.fresh + 1)}"))
                else:
                    call_id, self.fresh = f"f{self.fresh}", self.fresh + 1
                blocks.append(ToolCall(call_id, "t", {"n": self.fresh}))
            if self.chance(4):
                blocks.append(ToolResult(self.rng.choice(OLD_IDS), "no"))
        if not blocks or self.chance(30):
            blocks.insert(0, Text("words"))
        return Message(role, blocks)

    def after(self, base: tuple[Message, ...], count: int) -> list[Message]:
        added: list[Message] = []
        for _ in range(count):
            added.append(self.next(added[-1] if added else base[-1] if base else None))
        return added


def append_to(
    returned: list[tuple[Message, ...]],
    checker: TranscriptCheck,
    base: tuple[Message, ...],
    added: list[Message],
    pending: bool,
) -> None:
    returned.append(checker.append(base, added, allow_pending_tail=pending))


OPS = ("grow", "grow", "grow", "replace", "cut", "copy", "afresh")


@settings(max_examples=300)
@given(st.randoms(use_true_random=True), st.integers(1, 16))
def test_checking_what_changed_agrees_with_checking_everything(
    rng: random.Random, steps: int
) -> None:
    messages = Messages(rng)
    checker = TranscriptCheck()
    current: tuple[Message, ...] = ()
    for _ in range(steps):
        op = rng.choice(OPS)
        base, added = current, messages.after(current, rng.randrange(4))
        if op == "replace":
            base = current[:-1]
            added = messages.after(base, 1)
        elif op == "cut":
            base, added = current[: rng.randint(0, len(current))], []
        elif op == "copy":  # equal values, other objects
            base, added = tuple(Message(m.role, m.content) for m in current), []
        elif op == "afresh":
            base, added = (), messages.after((), rng.randrange(7))
        after = base + tuple(added)
        pending = rng.random() < 0.5
        expected = reference(after, pending)
        assert outcome(validate_transcript, after, allow_pending_tail=pending) == expected
        if rng.random() < 0.5:
            got = outcome(checker.check, after, allow_pending_tail=pending)
        else:
            returned: list[tuple[Message, ...]] = []
            got = outcome(append_to, returned, checker, base, added, pending)
            assert returned == ([] if expected else [after])
            after = returned[0] if returned else after
        assert got == expected, (op, after)
        if expected is None or rng.random() < 0.5:
            current = after  # an invalid one too: the checker must not have kept it


def test_a_failed_append_leaves_the_last_passed_transcript_as_the_prefix() -> None:
    checker = TranscriptCheck()
    go = checker.append((), [Message.user_text("go")])
    called = checker.append(go, [Message(Role.ASSISTANT, (ToolCall("a", "t", {}),))], **PENDING)
    with pytest.raises(TranscriptError) as info:
        checker.append(called, [Message(Role.USER, (ToolResult("b", "?"),))])
    assert (info.value.rule, info.value.index) == (Rule.ORPHAN_RESULT, 2)
    answered = checker.append(called, [Message(Role.USER, (ToolResult("a", "ok"),))])
    assert len(answered) == 3
    with pytest.raises(TranscriptError) as info:  # "a" was passed once: not again
        checker.append(answered, [Message(Role.ASSISTANT, (ToolCall("a", "t", {}),))], **PENDING)
    assert info.value.rule is Rule.DUPLICATE_CALL


def test_a_request_may_not_end_in_calls_even_when_the_transcript_was_passed_with_them() -> None:
    checker = TranscriptCheck()
    transcript = (Message.user_text("go"), Message(Role.ASSISTANT, (ToolCall("a", "t", {}),)))
    checker.check(transcript, allow_pending_tail=True)
    with pytest.raises(TranscriptError) as info:
        checker.check(transcript)
    assert (info.value.rule, info.value.block_id) == (Rule.PENDING_TAIL, "a")
