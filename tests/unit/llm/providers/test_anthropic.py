"""The Anthropic Messages adapter: request snapshots, the stream state machine, the fixtures and
the HTTP glue (course chapter 3 and 03.B; review findings 8 and 9).

Every expected Completion below is written out by hand from reading the fixture, not produced by
the adapter and pasted back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from anvild.llm.builder import Completion, MessageBuilder, collect
from anvild.llm.capabilities import ANTHROPIC
from anvild.llm.errors import ApiError, ConfigError, DecodeError, HttpError, UnexpectedEof
from anvild.llm.http import Timeouts
from anvild.llm.providers import anthropic
from anvild.llm.sse import SseEvent
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
from anvild.llm.types import (
    ChatRequest,
    Image,
    Message,
    ProviderMeta,
    Reasoning,
    Role,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from tests.unit.llm.providers.replay import replay, replay_events, sse_body

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures"
RECORDED = FIXTURES / "recorded"
HANDWRITTEN = FIXTURES / "handwritten"


def anthropic_meta(**data: str) -> ProviderMeta:
    return ProviderMeta("anthropic", data)


# -- fixtures -------------------------------------------------------------------------------------

THINKING_SIGNATURE = (
    "EvMCCkYICxgCKkCHP2cSuEdcJK/0rFwqES/ecn+VurRpNTwI4XNyM0vnNfGsc9OmE8YYHauwBZ/uaRpmlEn2I4/kszHl"
    "cpptO82JEgyRMSbPkJYaegxYF3AaDHZbSm9EzZ6CM+YtliIw3iNVP/ilYrfoneo8S2+ad/5xSC62nKbk6joLtKmqXgXw"
    "YFJRpjIUjM2V7EGReOPRKtoBKfNHVmdNf7SeMhHalX/ObSeJ1G/NjDyGQAsDjyHGd7uY1r5gAIn3Cpdv5r+gHYJmWT+w"
    "2uiKZsBDRoSf4O3Km0l752EhPD4InEhqpCKyqhbUZ3dt5+JVKQHk2iyTBhQMB/XBYgZTstIpRqQRXU5ypcrydgnqj3mD"
    "1G9C7YC0ZTCNvFluAx0OL8q+cQwufgfqKquLEf2+XMYzhx9jYkVFEpnf/s1nx6gNBATKfF3Dmrs2r4tWu2QJB+FjlRuD"
    "p/8dxUxgJbmyhGxb7XsYeb1vgb7wwzDvP/UhjfQYAQ=="
)

REDACTED_1 = (
    "EqkECkYIBxgCKkA8AZ4noDfV5VcOJe/p3JTRB6Xz5297mrWhl3MbHSXDKTMfuB/Z52U2teiWWTN0gg4eQ4bGS9TPil"
    "FX/xWTIq9HEgyOmstSPriNwyn1G7AaDC51r0hQ062qEd55IiIwYQj3Z3MSBBv0bSVdXi60LEHDvC7tzzmpQfw5Hb6R9r"
    "tyOz/6vC/xPw9/E1mUqfBqKpADO2HS2QlE/CnuzR901nZOn0TOw7kEXwH7kg30c85b9W7iKALgEejY9sELMBdPyIZNlT"
    "gKqNOKtY3R/aV5rGIRPTHh2Wh9Ijmqsf/TT7i//Z+InaYTo6f/fxF8R0vFXMRPOBME4XIscb05HcNhh4c9FDkpqQGYKa"
    "q31IR1NNwPWA0BsvdDz7SIo1nfx4H+X0qKKqqegKnQ3ynaXiD5ydT1C4U7fku4ftgF0LGwIk4PwXBE+4BP0DcKr1HV3c"
    "n7YSyNakBSDTvRJMKcXW6hl7X3w2a4//sxjC1Cjq0uzkIHkhzRWirN0OSXt+g3m6b1ex0wGmSyuO17Ak6kgVBpxwPugt"
    "rqsflG0oujFem44hecXJ9LQNssPf4RSlcydiG8EXp/XLGTe0YfHbe3kJagkowSH/Dm6ErXBiVs7249brncyY8WA+7MOo"
    "qIM82YIU095B9frCqDJDUWnN84VwOszRrcaywmpJXZO4aeQLMC1kXD5Wabu+O/00tD/X67EWkkWuR0AhDIXXjpot45vn"
    "Bd4ewJ/hgB"
)
REDACTED_2 = (
    "EtgBCkYIBxgCKkDQfGkwzflEJP5asG3oQfJXcTwJLoRznn8CmuczWCsJ36dv93X9H0NCeaJRbi5BrCA2DyMgFnRKRu"
    "zZx8VTv5axEgwkFmcHJk8BSiZMZRQaDDYv2KZPfbFgRa2QjyIwm47f5YYsSK9CT/oh/WWpU1HJJVHr8lrC6HG1ItRdtM"
    "vYQYmEGy+KhyfcIACfbssVKkDGv/NKqNMOAcu0bd66gJ2+R1R0PX11Jxn2Nd1JtZqkxx7vMT/PXtHDhm9jkDZ2k/6RjR"
    "RFuab/DBV3yRYdZ1J0GAE="
)

STREET_TEXT = (
    "Here are the basic steps for safely crossing the street:\n\n"
    "**At intersections with traffic lights:**\n"
    '- Wait for the pedestrian "Walk" signal\n'
    "- Look both ways before stepping into the street\n"
    "- Make eye contact with drivers when possible\n"
    "- Stay alert for turning vehicles\n\n"
    "**At intersections without signals:**\n"
    "- Use crosswalks when available\n"
    "- Stop at the curb and look left, right, then left again\n"
    "- Wait for a clear gap in traffic\n"
    "- Walk briskly but don't run\n"
    "- Keep looking for traffic as you cross\n\n"
    "**General safety tips:**\n"
    "- Put away phones and remove headphones\n"
    "- Wear bright or reflective clothing in low light\n"
    "- Never assume drivers see you\n"
    "- Avoid crossing between parked cars\n"
    "- Walk facing traffic when there's no sidewalk\n\n"
    "**In busy urban areas:**\n"
    "- Follow pedestrian signals strictly\n"
    "- Be extra cautious of cyclists in bike lanes\n"
    "- Watch for buses and large vehicles with blind spots\n\n"
    "The key is to be visible, alert, and predictable in your movements. "
    "Always prioritize safety over speed when crossing streets."
)

LLAMA_PONG_TEXT = (
    "I'm sorry for any misunderstanding, but as a Qwen, I'm designed to assist with creative "
    "ideas and creative writing. I'm not equipped to provide editing"
)

EXPECTED: dict[str, Completion] = {
    "recorded/anthropic/tool_use_input_json_delta.sse": Completion(
        Message(
            Role.ASSISTANT,
            [
                Text("I'll check the current weather in Paris for you."),
                ToolCall("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", {"location": "Paris"}),
            ],
        ),
        FinishReason.TOOL_USE,
        Usage(input=377, output=65, cache_read=0, cache_write=0),
    ),
    "recorded/anthropic/thinking_signature_delta.sse": Completion(
        Message(
            Role.ASSISTANT,
            [
                Reasoning(
                    "This is a straightforward question about pedestrian safety. I should "
                    "provide clear, helpful advice about how to safely cross a street. This is "
                    "basic safety information that could help prevent accidents.",
                    anthropic_meta(signature=THINKING_SIGNATURE),
                ),
                Text(STREET_TEXT),
            ],
        ),
        FinishReason.END_TURN,
        Usage(input=43, output=282, cache_read=0, cache_write=0),
    ),
    "recorded/anthropic/redacted_thinking.sse": Completion(
        Message(
            Role.ASSISTANT,
            [
                Reasoning("", anthropic_meta(redacted_thinking=REDACTED_1)),
                Reasoning("", anthropic_meta(redacted_thinking=REDACTED_2)),
                Text(
                    "I notice that you've sent what appears to be some kind of test string or "
                    'command. I don\'t have any special "magic string" triggers or backdoor '
                    "commands that would expose internal systems or change my behavior.\n\n"
                    "I'm Claude, an AI assistant created by Anthropic to be helpful, harmless, "
                    "and honest. How can I assist you today with a legitimate task or question?"
                ),
            ],
        ),
        FinishReason.END_TURN,
        Usage(input=92, output=189, cache_read=0, cache_write=0),
    ),
    "recorded/anthropic/tool_no_args.chunks.jsonl": Completion(
        Message(
            Role.ASSISTANT,
            [
                Text("I'll update the issue list for you."),
                ToolCall("toolu_01QE1WLsSVp5hy5Q3GmGTmjP", "updateIssueList", {}),
            ],
        ),
        FinishReason.TOOL_USE,
        Usage(input=565, output=48, cache_read=0, cache_write=0),
    ),
    "recorded/llama-server/anthropic_pong.sse": Completion(
        Message(Role.ASSISTANT, [Text(LLAMA_PONG_TEXT)]),
        FinishReason.MAX_TOKENS,
        # llama-server reports the prompt-cache hit and no cache writes at all: unknown.
        Usage(input=1, output=32, cache_read=38, cache_write=None),
    ),
    "recorded/llama-server/anthropic_tool_oslo_any.sse": Completion(
        Message(
            Role.ASSISTANT,
            [
                ToolCall("NYOYs4CrNyoH4Z5WkIa5i69QXxUAVd3R", "get_weather", {"city": "Oslo"}),
                ToolCall("upieeIYWmoALeNl9tpMmnNuvsfx49duM", "get_weather", {"city": "Oslo"}),
            ],
        ),
        FinishReason.TOOL_USE,
        Usage(input=1, output=73, cache_read=211, cache_write=None),
    ),
    "handwritten/anthropic/pause_turn.sse": Completion(
        # The server-tool blocks are not ours to keep; the turn is not a normal end.
        Message(Role.ASSISTANT, [Text("I'll search for the current trio release.")]),
        FinishReason.UNSUPPORTED,
        Usage(input=2679, output=92, cache_read=0, cache_write=0),
        finish_detail="pause_turn",
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_replays_to_the_expected_completion(name: str) -> None:
    assert replay(FIXTURES / name, anthropic.StreamState()) == EXPECTED[name]


@pytest.mark.parametrize("chunk_size", [1, 7, 100])
def test_replay_does_not_depend_on_how_the_body_was_split(chunk_size: int) -> None:
    name = "recorded/anthropic/thinking_signature_delta.sse"
    got = replay(FIXTURES / name, anthropic.StreamState(), chunk_size=chunk_size)
    assert got == EXPECTED[name]


def test_truncated_tool_json_is_kept_verbatim_and_not_executable() -> None:
    completion = replay(
        RECORDED / "anthropic/max_tokens_truncated_tool_json.sse", anthropic.StreamState()
    )
    raw = (
        '{"filename": "taxes.txt", "lines_of_text": [\n'
        '"# COMPREHENSIVE TAX GUIDE FOR INDIVIDUALS WITH MULTIPLE W-2s",\n'
        '"",\n"## INTRODUCTION",\n"",\n"Filing taxes'
    )
    assert attrs.evolve(completion, invalid_arguments={}) == Completion(
        Message(
            Role.ASSISTANT,
            [
                Text(
                    "I'll create a comprehensive tax guide for someone with multiple W2s and "
                    "save it in a file called taxes.txt. Let me do that for you now."
                ),
                ToolCall("toolu_01EKqbqmZrGRXy18eN7m9kvY", "make_file", raw),
            ],
        ),
        FinishReason.MAX_TOKENS,
        Usage(input=450, output=124, cache_read=0, cache_write=0),
    )
    assert list(completion.invalid_arguments) == ["toolu_01EKqbqmZrGRXy18eN7m9kvY"]
    assert completion.invalid_arguments["toolu_01EKqbqmZrGRXy18eN7m9kvY"].startswith(
        "arguments are not valid JSON"
    )
    assert not completion.executable


def test_overloaded_error_mid_stream_is_an_api_error() -> None:
    with pytest.raises(ApiError) as info:
        replay(HANDWRITTEN / "anthropic/overloaded_error.sse", anthropic.StreamState())
    assert (info.value.kind, info.value.message) == ("overloaded_error", "Overloaded")
    assert info.value.is_retryable


def test_the_recorded_tool_stream_finishes_exactly_once() -> None:
    events = replay_events(
        RECORDED / "anthropic/tool_use_input_json_delta.sse", anthropic.StreamState()
    )
    assert [event for event in events if isinstance(event, Finish)] == [
        Finish(FinishReason.TOOL_USE)
    ]
    assert isinstance(events[-1], Finish)


def test_the_late_signature_lands_on_the_thinking_block() -> None:
    events = replay_events(
        RECORDED / "anthropic/thinking_signature_delta.sse", anthropic.StreamState()
    )
    metas = [event for event in events if isinstance(event, BlockMeta)]
    assert metas == [BlockMeta(0, anthropic_meta(signature=THINKING_SIGNATURE))]
    # It arrives after all the thinking text of block 0 and before the text block 1 starts.
    position = events.index(metas[0])
    assert all(isinstance(e, ReasoningDelta) for e in events[1:position])
    assert events[position + 1] == TextDelta(1, "Here are")


# -- stream state machine (synthetic events) ------------------------------------------------------


def sse(payload: dict[str, Any], event: str | None = None) -> SseEvent:
    return SseEvent(event or str(payload["type"]), json.dumps(payload))


START = sse(
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "role": "assistant",
            "content": [],
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 50,
                "output_tokens": 1,
            },
        },
    }
)


def text_start(index: int) -> SseEvent:
    return sse(
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        }
    )


def text_delta(index: int, text: str) -> SseEvent:
    return sse(
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        }
    )


def message_delta(stop_reason: str | None, **extra: Any) -> SseEvent:
    return sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": extra.get("stop_sequence")},
            "usage": {"output_tokens": 7},
        }
    )


STOP = sse({"type": "message_stop"})


def run(*events: SseEvent, end: bool = True) -> list[StreamEvent]:
    state = anthropic.StreamState()
    out: list[StreamEvent] = []
    for event in events:
        out.extend(state.on_sse(event))
    if end:
        out.extend(state.on_end())
    return out


def test_message_start_usage_maps_cache_reads_and_writes() -> None:
    assert run(START, end=False) == [
        UsageReport(Usage(input=10, output=1, cache_read=1000, cache_write=50))
    ]


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", Finish(FinishReason.END_TURN)),
        ("tool_use", Finish(FinishReason.TOOL_USE)),
        ("max_tokens", Finish(FinishReason.MAX_TOKENS)),
        ("refusal", Finish(FinishReason.REFUSAL)),
        (
            "model_context_window_exceeded",
            Finish(FinishReason.MAX_TOKENS, "model_context_window_exceeded"),
        ),
        ("pause_turn", Finish(FinishReason.UNSUPPORTED, "pause_turn")),
        ("brand_new_reason", Finish(FinishReason.UNSUPPORTED, "brand_new_reason")),
    ],
)
def test_stop_reasons(stop_reason: str, finish: Finish) -> None:
    events = run(START, message_delta(stop_reason), STOP)
    assert events[-1] == finish
    assert sum(isinstance(event, Finish) for event in events) == 1


def test_pause_turn_is_never_a_clean_end() -> None:
    events = run(START, text_start(0), text_delta(0, "hi"), message_delta("pause_turn"), STOP)
    assert isinstance(events[-1], Finish)
    assert events[-1].reason is FinishReason.UNSUPPORTED
    assert not events[-1].reason.is_clean


def test_stop_sequence_is_the_detail() -> None:
    events = run(START, message_delta("stop_sequence", stop_sequence="\nHuman:"), STOP)
    assert events[-1] == Finish(FinishReason.STOP_SEQUENCE, "\nHuman:")


def test_ping_and_unknown_events_and_deltas_are_ignored() -> None:
    events = run(
        START,
        sse({"type": "ping"}),
        sse({"type": "brand_new_event", "payload": [1, 2]}),
        text_start(0),
        sse(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "citations_delta", "citation": {"cited_text": "x"}},
            }
        ),
        text_delta(0, "ok"),
        message_delta("end_turn"),
        STOP,
    )
    assert [e for e in events if not isinstance(e, UsageReport)] == [
        TextDelta(0, "ok"),
        Finish(FinishReason.END_TURN),
    ]


def test_error_event_becomes_api_error_with_kind_and_message() -> None:
    error = sse(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, "error"
    )
    with pytest.raises(ApiError) as info:
        run(START, error)
    assert (info.value.kind, info.value.message) == ("rate_limit_error", "slow down")


def test_end_after_the_stop_reason_but_before_message_stop_finishes() -> None:
    # message_delta carries the final stop reason; only the terminator is missing.
    events = run(START, text_start(0), text_delta(0, "done"), message_delta("end_turn"))
    assert events[-1] == Finish(FinishReason.END_TURN)


@pytest.mark.parametrize(
    "events",
    [
        (),
        (START,),
        (START, text_start(0), text_delta(0, "cut")),
        (START, message_delta(None)),
    ],
    ids=["empty", "after_start", "mid_block", "delta_without_reason"],
)
def test_end_before_any_stop_reason_is_unexpected_eof(events: tuple[SseEvent, ...]) -> None:
    with pytest.raises(UnexpectedEof):
        run(*events)


def test_nothing_after_message_stop() -> None:
    state = anthropic.StreamState()
    for event in (START, message_delta("end_turn")):
        state.on_sse(event)
    assert state.on_sse(STOP) == [Finish(FinishReason.END_TURN)]
    assert state.on_sse(text_delta(0, "late")) == []
    assert state.on_end() == []


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ((START, text_delta(0, "x")), "before its start"),
        ((START, text_start(0), text_start(0)), "already started"),
        ((START, START), "second message_start"),
        ((STOP,), "before message_start"),
        ((START, STOP), "without a stop_reason"),
        ((SseEvent("message_start", "{not json"),), "not JSON"),
        ((START, sse({"type": "content_block_start", "content_block": {"type": "text"}})), "index"),
    ],
)
def test_broken_sequencing_is_a_decode_error(events: tuple[SseEvent, ...], message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        run(*events)


def test_tool_use_start_input_is_used_when_no_deltas_follow() -> None:
    start = sse(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
        }
    )
    stop = sse({"type": "content_block_stop", "index": 0})
    assert run(START, start, stop, message_delta("tool_use"), STOP)[1:] == [
        ToolCallStart(0, "t1", "f"),
        ToolCallDelta(0, '{"a": 1}'),
        UsageReport(Usage(output=7)),
        Finish(FinishReason.TOOL_USE),
    ]


def test_tool_use_deltas_win_over_a_start_input() -> None:
    start = sse(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
        }
    )
    delta = sse(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"b": 2}'},
        }
    )
    events = run(START, start, delta, sse({"type": "content_block_stop", "index": 0}), end=False)
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [ToolCallDelta(0, '{"b": 2}')]


def test_interleaved_blocks_keep_their_own_content() -> None:
    def tool_start(index: int, call_id: str) -> SseEvent:
        return sse(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": call_id, "name": "f"},
            }
        )

    def args(index: int, fragment: str) -> SseEvent:
        return sse(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": fragment},
            }
        )

    state = anthropic.StreamState()
    builder = MessageBuilder()
    for event in (
        START,
        tool_start(0, "a"),
        tool_start(1, "b"),
        args(1, '{"n":'),
        args(0, '{"n":'),
        args(0, "0}"),
        args(1, "1}"),
        message_delta("tool_use"),
        STOP,
    ):
        for out in state.on_sse(event):
            builder.push(out)
    assert builder.finish().tool_calls == [
        ToolCall("a", "f", {"n": 0}),
        ToolCall("b", "f", {"n": 1}),
    ]


# -- request --------------------------------------------------------------------------------------

WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def conversation() -> tuple[Message, ...]:
    return (
        Message.user_text("Weather in Oslo?"),
        Message(
            Role.ASSISTANT,
            [
                Reasoning("foreign thoughts", ProviderMeta("gemini", {"thoughtSignature": "g"})),
                Text(""),
                Text("Checking."),
                ToolCall("toolu_1", "get_weather", {"city": "Oslo"}),
            ],
        ),
        Message(Role.USER, [ToolResult("toolu_1", '{"temp_c": 4}')]),
    )


def test_to_wire_snapshot() -> None:
    request = ChatRequest(
        model="claude-sonnet-4-5",
        system="You are terse.",
        messages=conversation(),
        tools=(WEATHER,),
        max_tokens=1024,
        temperature=0.2,
    )
    assert anthropic.to_wire(request, ANTHROPIC) == {
        "model": "claude-sonnet-4-5",
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Oslo"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp_c": 4}'}
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
        "max_tokens": 1024,
        "temperature": 0.2,
        "stream": True,
    }


def test_own_reasoning_is_replayed_signed_or_redacted_and_the_rest_dropped() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message.user_text("q"),
            Message(
                Role.ASSISTANT,
                [
                    Reasoning("thinking text", anthropic_meta(signature="sig")),
                    Reasoning("", anthropic_meta(redacted_thinking="opaque")),
                    Reasoning("no meta at all"),
                    Reasoning("unsigned", anthropic_meta()),
                    Reasoning("foreign", ProviderMeta("openai-responses", {"id": "rs_1"})),
                    Text("answer"),
                ],
            ),
            Message.user_text("next"),
        ),
    )
    assert anthropic.to_wire(request)["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "thinking text", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "answer"},
    ]


def test_tool_results_come_first_errors_are_flagged_and_images_are_base64() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message.user_text("q"),
            Message(
                Role.ASSISTANT,
                [ToolCall("a", "f", {}), ToolCall("b", "f", "not json{")],
            ),
            Message(
                Role.USER,
                [
                    Text("look at this"),
                    ToolResult("a", "boom", is_error=True),
                    Image("image/png", "iVBORw0KGgo="),
                    ToolResult("b", ""),
                ],
            ),
        ),
    )
    messages = anthropic.to_wire(request)["messages"]
    # Arguments that never were a JSON object cannot be an `input`.
    assert messages[1]["content"][1] == {"type": "tool_use", "id": "b", "name": "f", "input": {}}
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "boom", "is_error": True},
        {"type": "tool_result", "tool_use_id": "b"},
        {"type": "text", "text": "look at this"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
    ]


def test_a_message_left_empty_is_dropped_and_its_neighbours_merged() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message.user_text("first"),
            Message(Role.ASSISTANT, [Text(""), Reasoning("gone")]),
            Message.user_text("second"),
        ),
    )
    assert anthropic.to_wire(request)["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        }
    ]


def test_images_for_a_model_without_images_are_refused() -> None:
    request = ChatRequest(model="m", messages=(Message(Role.USER, [Image("image/png", "x")]),))
    with pytest.raises(ConfigError, match="does not accept images"):
        anthropic.to_wire(request, attrs.evolve(ANTHROPIC, images=False))


def test_temperature_is_left_out_when_the_target_takes_none() -> None:
    request = ChatRequest(model="m", messages=(Message.user_text("q"),), temperature=0.5)
    assert "temperature" not in anthropic.to_wire(
        request, attrs.evolve(ANTHROPIC, temperature=False)
    )
    assert "temperature" not in anthropic.to_wire(attrs.evolve(request, temperature=None))


def cache_controls(value: Any, path: str = "") -> list[str]:
    """The JSON paths of every cache_control in a request body."""
    if isinstance(value, dict):
        found = [f"{path}" for key in value if key == "cache_control"]
        for key, item in value.items():
            found += cache_controls(item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        return [hit for i, item in enumerate(value) for hit in cache_controls(item, f"{path}[{i}]")]
    return []


def test_cache_places_breakpoints_on_tools_system_and_last_message() -> None:
    request = ChatRequest(
        model="m", system="sys", messages=conversation(), tools=(WEATHER,), cache=True
    )
    body = anthropic.to_wire(request)
    assert sorted(cache_controls(body)) == [".messages[2].content[0]", ".system[0]", ".tools[0]"]
    assert body["system"] == [
        {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}
    ]


def test_cache_without_a_system_prompt_marks_the_last_tool() -> None:
    request = ChatRequest(model="m", messages=conversation(), tools=(WEATHER,), cache=True)
    assert sorted(cache_controls(anthropic.to_wire(request))) == [
        ".messages[2].content[0]",
        ".tools[0]",
    ]


def test_cache_with_no_prefix_marks_only_the_tail_and_never_a_thinking_block() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message.user_text("q"),
            Message(
                Role.ASSISTANT,
                [Text("partial"), Reasoning("t", anthropic_meta(signature="s"))],
            ),
        ),
        cache=True,
    )
    assert cache_controls(anthropic.to_wire(request)) == [".messages[1].content[0]"]


def test_no_cache_no_breakpoints() -> None:
    request = ChatRequest(model="m", system="s", messages=conversation(), tools=(WEATHER,))
    assert cache_controls(anthropic.to_wire(request)) == []


# -- HTTP glue ------------------------------------------------------------------------------------


def serve(body: bytes, seen: list[httpx.Request], status: int = 200) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, headers={"content-type": "text/event-stream"}, content=body)

    return httpx.MockTransport(handler)


async def test_provider_streams_a_fixture_into_a_completion() -> None:
    name = "recorded/anthropic/tool_use_input_json_delta.sse"
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=serve(sse_body(FIXTURES / name), seen)) as client:
        provider = anthropic.AnthropicProvider(
            client, "https://api.anthropic.test", "sk-ant-test", "claude", ANTHROPIC, Timeouts()
        )
        request = ChatRequest(model="claude-sonnet-4", messages=(Message.user_text("Paris?"),))
        async with provider.stream(request) as events:
            completion = await collect(events)
    assert completion == EXPECTED[name]
    (sent,) = seen
    assert str(sent.url) == "https://api.anthropic.test/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert json.loads(sent.content) == anthropic.to_wire(request, ANTHROPIC)
    assert provider.name == "claude"


async def test_provider_without_a_key_sends_no_key_header() -> None:
    seen: list[httpx.Request] = []
    body = sse_body(RECORDED / "llama-server/anthropic_pong.sse")
    async with httpx.AsyncClient(transport=serve(body, seen)) as client:
        provider = anthropic.AnthropicProvider(client, "http://127.0.0.1:8088/v1/")
        async with provider.stream(ChatRequest(model="m")) as events:
            completion = await collect(events)
    assert completion.finish is FinishReason.MAX_TOKENS
    assert str(seen[0].url) == "http://127.0.0.1:8088/v1/messages"
    assert "x-api-key" not in seen[0].headers
    assert "authorization" not in seen[0].headers


async def test_provider_http_401_is_an_http_error() -> None:
    body = json.dumps(
        {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    ).encode()
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=serve(body, seen, status=401)) as client:
        provider = anthropic.AnthropicProvider(client, "https://api.anthropic.test", "bad")
        with pytest.raises(HttpError) as info:
            async with provider.stream(ChatRequest(model="m")):
                pytest.fail("the block must not run for a 401")
    assert info.value.status == 401
    assert "invalid x-api-key" in info.value.body
    assert not info.value.is_retryable


async def test_provider_stops_reading_after_message_stop() -> None:
    # A server that keeps talking after message_stop: whatever follows is never read.
    body = sse_body(RECORDED / "llama-server/anthropic_pong.sse") + b"data: {not json\n\n"
    async with httpx.AsyncClient(transport=serve(body, [])) as client:
        provider = anthropic.AnthropicProvider(client, "http://127.0.0.1:8088")
        async with provider.stream(ChatRequest(model="m")) as events:
            completion = await collect(events)
    assert completion.finish is FinishReason.MAX_TOKENS


async def test_provider_stream_error_surfaces_from_the_iteration() -> None:
    body = (HANDWRITTEN / "anthropic/overloaded_error.sse").read_bytes()
    received: list[StreamEvent] = []
    async with httpx.AsyncClient(transport=serve(body, [])) as client:
        provider = anthropic.AnthropicProvider(client, "http://127.0.0.1:8088")
        with pytest.raises(ApiError, match="overloaded_error"):
            async with provider.stream(ChatRequest(model="m")) as events:
                async for event in events:
                    received.append(event)
    # The text before the error is delivered first (joined: the body comes in one read).
    texts = [e for e in received if isinstance(e, TextDelta)]
    assert "".join(e.text for e in texts) == "Let me look at the failing test"
    assert {e.block for e in texts} == {0}


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
        ("https://proxy.example/anthropic/", "https://proxy.example/anthropic/v1/messages"),
        ("http://127.0.0.1:8088/v1", "http://127.0.0.1:8088/v1/messages"),
    ],
)
def test_messages_url(base_url: str, url: str) -> None:
    assert anthropic.messages_url(base_url) == url
