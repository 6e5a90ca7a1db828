"""MessageBuilder: course 3.1 and 03.B, review finding 8."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing

import pytest

from anvild.llm.builder import Completion, MessageBuilder, collect
from anvild.llm.errors import DecodeError, UnexpectedEof
from anvild.llm.stream import (
    BlockMeta,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageReport,
)
from anvild.llm.types import ProviderMeta, Reasoning, Role, Text, ToolCall


def build(events: Sequence[StreamEvent]) -> Completion:
    builder = MessageBuilder()
    for event in events:
        builder.push(event)
    return builder.finish()


def test_text_then_tool_call() -> None:
    done = build(
        [
            TextDelta(0, "Hel"),
            TextDelta(0, "lo"),
            ToolCallStart(1, "c0", "calc"),
            ToolCallDelta(1, '{"a"'),
            ToolCallDelta(1, ":1}"),
            Finish(FinishReason.TOOL_USE),
        ]
    )
    assert done.message.role is Role.ASSISTANT
    assert done.message.content == (Text("Hello"), ToolCall("c0", "calc", {"a": 1}))
    assert done.finish is FinishReason.TOOL_USE
    assert done.executable
    assert done.invalid_arguments == {}


def test_tool_call_without_deltas_gets_empty_object() -> None:
    done = build([ToolCallStart(0, "c", "now"), Finish(FinishReason.TOOL_USE)])
    assert done.tool_calls == [ToolCall("c", "now", {})]


def test_interleaved_calls_keep_order_and_arguments() -> None:
    done = build(
        [
            ToolCallStart(0, "a", "weather"),
            ToolCallStart(1, "b", "weather"),
            ToolCallDelta(0, '{"city":'),
            ToolCallDelta(1, '{"city":'),
            ToolCallDelta(1, '"Lima"}'),
            ToolCallDelta(0, '"Oslo"}'),
            Finish(FinishReason.TOOL_USE),
        ]
    )
    assert done.tool_calls == [
        ToolCall("a", "weather", {"city": "Oslo"}),
        ToolCall("b", "weather", {"city": "Lima"}),
    ]


def test_invalid_json_arguments_are_kept_and_flagged() -> None:
    done = build(
        [ToolCallStart(0, "c", "t"), ToolCallDelta(0, '{"a": 1'), Finish(FinishReason.TOOL_USE)]
    )
    assert done.tool_calls == [ToolCall("c", "t", '{"a": 1')]
    assert "not valid JSON" in done.invalid_arguments["c"]
    assert done.executable  # malformed model output is tool feedback, not a protocol error


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ('{"x": NaN}', "NaN is not a JSON value"),
        ('{"x": [-Infinity]}', "-Infinity is not a JSON value"),
        ('{"x": 1e999}', "the number 1e999 is out of range"),
    ],
)
def test_arguments_with_values_json_lacks_are_flagged_not_kept_as_floats(
    raw: str, named: str
) -> None:
    """Python's reader turns these into float NaN or inf, which no record or request may hold
    (they would be written as bare NaN, which strict readers refuse)."""
    done = build([ToolCallStart(0, "c", "t"), ToolCallDelta(0, raw), Finish(FinishReason.TOOL_USE)])
    assert done.tool_calls == [ToolCall("c", "t", raw)]
    assert done.invalid_arguments["c"] == f"arguments are not valid JSON ({named})"


@pytest.mark.parametrize(
    "reason",
    [FinishReason.MAX_TOKENS, FinishReason.REFUSAL, FinishReason.UNSUPPORTED],
)
def test_abnormal_finish_makes_calls_not_executable(reason: FinishReason) -> None:
    done = build(
        [ToolCallStart(0, "c", "rm"), ToolCallDelta(0, '{"path": "/'), Finish(reason, "why")]
    )
    assert not done.executable
    assert done.finish_detail == "why"


@pytest.mark.parametrize(
    "reason", [FinishReason.END_TURN, FinishReason.TOOL_USE, FinishReason.STOP_SEQUENCE]
)
def test_clean_finishes_are_executable(reason: FinishReason) -> None:
    assert build([TextDelta(0, "x"), Finish(reason)]).executable


def test_reasoning_signature_arriving_after_its_text_stays_on_that_block() -> None:
    anthropic = ProviderMeta("anthropic", {"signature": "EqQB"})
    done = build(
        [
            ReasoningDelta(0, "Let me "),
            ReasoningDelta(0, "think."),
            TextDelta(1, "Answer"),
            BlockMeta(0, anthropic),
            Finish(FinishReason.END_TURN),
        ]
    )
    assert done.message.content == (Reasoning("Let me think.", anthropic), Text("Answer"))


def test_meta_for_a_new_block_starts_an_empty_reasoning_block() -> None:
    redacted = ProviderMeta("anthropic", {"redacted": "opaque"})
    done = build([BlockMeta(0, redacted), TextDelta(1, "hi"), Finish(FinishReason.END_TURN)])
    assert done.message.content == (Reasoning("", redacted), Text("hi"))


def test_meta_from_the_same_provider_merges() -> None:
    done = build(
        [
            BlockMeta(0, ProviderMeta("p", {"a": 1})),
            BlockMeta(0, ProviderMeta("p", {"b": 2})),
            Finish(FinishReason.END_TURN),
        ]
    )
    assert done.message.content == (Reasoning("", ProviderMeta("p", {"a": 1, "b": 2})),)


def test_tool_call_meta_is_kept() -> None:
    sig = ProviderMeta("gemini", {"thoughtSignature": "s"})
    done = build([ToolCallStart(0, "c", "t", sig), Finish(FinishReason.TOOL_USE)])
    assert done.tool_calls[0].meta == sig


def test_identical_repeated_start_is_ignored() -> None:
    done = build(
        [
            ToolCallStart(0, "c", "t"),
            ToolCallDelta(0, '{"x":'),
            ToolCallStart(0, "c", "t"),
            ToolCallDelta(0, "1}"),
            Finish(FinishReason.TOOL_USE),
        ]
    )
    assert done.tool_calls == [ToolCall("c", "t", {"x": 1})]


def test_empty_text_is_dropped() -> None:
    done = build([TextDelta(0, ""), TextDelta(1, "x"), Finish(FinishReason.END_TURN)])
    assert done.message.content == (Text("x"),)


def test_usage_absorbs_across_reports() -> None:
    done = build(
        [
            UsageReport(Usage(input=10, cache_read=5)),
            TextDelta(0, "x"),
            UsageReport(Usage(output=3)),
            Finish(FinishReason.END_TURN),
        ]
    )
    assert done.usage == Usage(input=10, output=3, cache_read=5, cache_write=None)


BAD_SEQUENCES = [
    ("delta_before_start", [ToolCallDelta(0, "{}")], "before its ToolCallStart"),
    (
        "conflicting_duplicate_start",
        [ToolCallStart(0, "a", "t"), ToolCallStart(0, "b", "t")],
        "conflicting start for block 0",
    ),
    (
        "duplicate_id_on_another_block",
        [ToolCallStart(0, "a", "t"), ToolCallStart(1, "a", "t")],
        "started twice",
    ),
    ("start_over_text", [TextDelta(0, "x"), ToolCallStart(0, "a", "t")], "already text"),
    ("text_on_tool_block", [ToolCallStart(0, "a", "t"), TextDelta(0, "x")], "tool_call block"),
    ("reasoning_on_text_block", [TextDelta(0, "x"), ReasoningDelta(0, "y")], "text block"),
    ("meta_on_text", [TextDelta(0, "x"), BlockMeta(0, ProviderMeta("p", {}))], "text block"),
    ("argument_delta_on_text", [TextDelta(0, "x"), ToolCallDelta(0, "{}")], "non-tool block"),
    ("start_without_id", [ToolCallStart(0, "", "t")], "without an id"),
    ("text_after_finish", [Finish(FinishReason.END_TURN), TextDelta(0, "x")], "after Finish"),
    (
        "second_finish",
        [Finish(FinishReason.END_TURN), Finish(FinishReason.END_TURN)],
        "after Finish",
    ),
    ("usage_after_finish", [Finish(FinishReason.END_TURN), UsageReport(Usage())], "after Finish"),
]


@pytest.mark.parametrize(
    ("events", "message"), [c[1:] for c in BAD_SEQUENCES], ids=[c[0] for c in BAD_SEQUENCES]
)
def test_malformed_sequencing_is_a_decode_error(events: list[StreamEvent], message: str) -> None:
    builder = MessageBuilder()
    with pytest.raises(DecodeError, match=message):
        for event in events:
            builder.push(event)


def test_truncated_stream_is_unexpected_eof() -> None:
    builder = MessageBuilder()
    builder.push(TextDelta(0, "partial"))
    with pytest.raises(UnexpectedEof):
        builder.finish()


async def _aiter(events: Sequence[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event


async def test_collect() -> None:
    async with aclosing(_aiter([TextDelta(0, "hi"), Finish(FinishReason.END_TURN)])) as events:
        done = await collect(events)
    assert done.message.text() == "hi"
    async with aclosing(_aiter([TextDelta(0, "hi")])) as events:
        with pytest.raises(UnexpectedEof):
            await collect(events)
    late = [Finish(FinishReason.END_TURN), TextDelta(0, "late")]
    async with aclosing(_aiter(late)) as events:
        with pytest.raises(DecodeError):
            await collect(events)
