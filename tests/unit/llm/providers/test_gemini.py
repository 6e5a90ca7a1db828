"""Gemini GenerateContent: request mapping, thought signatures, the stream state machine,
fixtures, and the HTTP glue.

Every fixture's expected Completion is written by hand from reading the fixture. Thought
signatures are long base64 blobs: they are checked by their first and last characters and their
length. Gemini does not give call ids, so the state machine takes a deterministic id factory.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from anvild.llm.builder import Completion, collect
from anvild.llm.capabilities import GEMINI, GEMINI_LEGACY_SCHEMA, Capabilities
from anvild.llm.errors import ApiError, ConfigError, DecodeError, UnexpectedEof
from anvild.llm.providers import gemini
from anvild.llm.providers.gemini import GeminiProvider, StreamState, to_wire
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

from .replay import replay
from .test_openai_responses import Opaque

ROOT = Path(__file__).resolve().parents[4]
RECORDED = ROOT / "fixtures/recorded/gemini"
HANDWRITTEN = ROOT / "fixtures/handwritten/gemini"

SIG_COUNTRY = Opaque("EpwICpkIAXLI2nxl", "AXOk15QuFyU=", 1408)
SIG_WEATHER = Opaque("CiMBjz1rX25KieIB", "y5Zy5VsZ0qQ=", 1032)
SIG_STRAWBERRY = Opaque("EpAICo0IAb4+9vuk", "Isk9vG9i114=", 1392)


def state() -> StreamState:
    counter = itertools.count(1)
    return StreamState(new_id=lambda: f"call-{next(counter)}")


def gemini_meta(**data: Any) -> ProviderMeta:
    return ProviderMeta("gemini", data)


def assistant(*blocks: Any) -> Message:
    return Message(Role.ASSISTANT, blocks)


# -- fixtures ---------------------------------------------------------------------------------


def test_function_call_with_thought_signature() -> None:
    completion = replay(RECORDED / "functioncall_thoughtsignature_usage.sse", state())
    assert completion == Completion(
        message=assistant(
            ToolCall("call-1", "get_country", {}, gemini_meta(thoughtSignature=SIG_COUNTRY))
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=29, output=10 + 202, cache_read=0),
    )


def test_streamed_partial_args_two_calls() -> None:
    completion = replay(RECORDED / "streamed_function_call_partialargs.chunks.jsonl", state())
    assert completion == Completion(
        message=assistant(
            ToolCall(
                "call-1",
                "getWeather",
                {"location": "Boston"},
                gemini_meta(thoughtSignature=SIG_WEATHER),
            ),
            ToolCall("call-2", "getWeather", {"location": "San Francisco"}),
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=26, output=23 + 132, cache_read=0),
    )


def test_signature_on_a_later_empty_text_part() -> None:
    completion = replay(RECORDED / "gemini3_reasoning_thoughtsignature.chunks.jsonl", state())
    assert completion == Completion(
        message=assistant(
            Text('There are **3** "r"s in strawberry.\n\nSt**r**awbe**rr**y'),
            Reasoning("", gemini_meta(thoughtSignature=SIG_STRAWBERRY)),
        ),
        finish=FinishReason.END_TURN,
        usage=Usage(input=9, output=23 + 302, cache_read=0),
    )


@pytest.mark.parametrize("size", [1, 13, 200])
def test_fixtures_do_not_depend_on_chunking(size: int) -> None:
    for path in sorted(RECORDED.iterdir()) + sorted(HANDWRITTEN.glob("[!e]*.sse")):
        assert replay(path, state(), chunk_size=size) == replay(path, state())


def test_safety_finish_is_a_refusal() -> None:
    completion = replay(HANDWRITTEN / "safety_finish.sse", state())
    assert completion == Completion(
        message=assistant(Text("Here is how you")),
        finish=FinishReason.REFUSAL,
        usage=Usage(input=14, output=4, cache_read=0),
        finish_detail="SAFETY",
    )
    assert not completion.executable


def test_parallel_calls_without_ids_get_distinct_ids() -> None:
    completion = replay(HANDWRITTEN / "parallel_calls_without_ids.sse", state())
    assert completion == Completion(
        message=assistant(
            ToolCall(
                "call-1",
                "get_weather",
                {"city": "Oslo"},
                gemini_meta(thoughtSignature="c2lnbmF0dXJlLW9uLWZpcnN0LWNhbGw="),
            ),
            ToolCall("call-2", "get_weather", {"city": "Lima"}),
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=20, output=94, cache_read=100),
    )


def test_default_ids_are_unique() -> None:
    first = replay(HANDWRITTEN / "parallel_calls_without_ids.sse", StreamState())
    second = replay(HANDWRITTEN / "parallel_calls_without_ids.sse", StreamState())
    ids = [call.id for call in first.tool_calls + second.tool_calls]
    assert len(set(ids)) == 4
    assert all(call_id.startswith("gemini-") for call_id in ids)


def test_thought_summary_then_signed_text() -> None:
    completion = replay(HANDWRITTEN / "thought_summary_signed_text.sse", state())
    assert completion == Completion(
        message=assistant(
            Reasoning("**Weighing the units**\n\nThe user wants Celsius."),
            Text("It is -3 °C in Oslo, with snow."),
            Reasoning(
                "", gemini_meta(thoughtSignature="c2lnbmF0dXJlLW9uLWxhc3QtdGV4dA==", part="text")
            ),
        ),
        finish=FinishReason.END_TURN,
        usage=Usage(input=40, output=60, cache_read=0),
    )


def test_error_inside_the_stream_is_an_api_error() -> None:
    with pytest.raises(ApiError) as info:
        replay(HANDWRITTEN / "error_midstream_unavailable.sse", state())
    assert info.value.kind == "UNAVAILABLE"
    assert info.value.message == "The model is overloaded. Please try again later."
    assert info.value.is_retryable


# -- follow-up requests -----------------------------------------------------------------------


def follow_up(completion: Completion, *results: ToolResult) -> dict[str, Any]:
    messages = [Message.user_text("question"), completion.message]
    if results:
        messages.append(Message(Role.USER, results))
    return to_wire(ChatRequest(model="gemini-3-pro-preview", messages=messages), GEMINI)


def test_follow_up_puts_the_call_signature_back_on_the_call() -> None:
    completion = replay(RECORDED / "functioncall_thoughtsignature_usage.sse", state())
    body = follow_up(completion, ToolResult("call-1", "France"))
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "question"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "get_country", "args": {}},
                    "thoughtSignature": SIG_COUNTRY,
                }
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_country", "response": {"result": "France"}}}
            ],
        },
    ]


def test_follow_up_keeps_the_signature_on_the_first_of_parallel_calls() -> None:
    completion = replay(HANDWRITTEN / "parallel_calls_without_ids.sse", state())
    body = follow_up(
        completion,
        ToolResult("call-1", "-3 C, snow"),
        ToolResult("call-2", "no such city", is_error=True),
    )
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Oslo"}},
                    "thoughtSignature": "c2lnbmF0dXJlLW9uLWZpcnN0LWNhbGw=",
                },
                {"functionCall": {"name": "get_weather", "args": {"city": "Lima"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"result": "-3 C, snow"}}},
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"error": "no such city"},
                    }
                },
            ],
        },
    ]


def test_follow_up_replays_a_signature_that_came_on_an_empty_part() -> None:
    completion = replay(RECORDED / "gemini3_reasoning_thoughtsignature.chunks.jsonl", state())
    assert follow_up(completion)["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": 'There are **3** "r"s in strawberry.\n\nSt**r**awbe**rr**y'},
            {"text": "", "thoughtSignature": SIG_STRAWBERRY},
        ],
    }


def test_follow_up_puts_a_text_signature_back_on_its_text_part() -> None:
    completion = replay(HANDWRITTEN / "thought_summary_signed_text.sse", state())
    # The unsigned thought summary is not replayed; the signature rides on the text it came on.
    assert follow_up(completion)["contents"][1] == {
        "role": "model",
        "parts": [
            {
                "text": "It is -3 °C in Oslo, with snow.",
                "thoughtSignature": "c2lnbmF0dXJlLW9uLWxhc3QtdGV4dA==",
            }
        ],
    }


def test_follow_up_drops_foreign_reasoning_and_replays_signed_thoughts() -> None:
    message = assistant(
        Reasoning("anthropic thinking", ProviderMeta("anthropic", {"signature": "a"})),
        Reasoning("openai reasoning", ProviderMeta("openai-responses", {"id": "rs"})),
        Reasoning("unsigned thought"),
        Reasoning("signed thought", gemini_meta(thoughtSignature="s1")),
        Text("answer"),
        ToolCall("c1", "f", {"x": 1}, ProviderMeta("anthropic", {"thoughtSignature": "no"})),
    )
    body = to_wire(ChatRequest(model="m", messages=(Message.user_text("q"), message)), GEMINI)
    assert body["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "signed thought", "thought": True, "thoughtSignature": "s1"},
            {"text": "answer"},
            {"functionCall": {"name": "f", "args": {"x": 1}}},
        ],
    }


def test_signatures_go_only_to_targets_that_replay_them() -> None:
    message = assistant(
        Reasoning("signed thought", gemini_meta(thoughtSignature="s1")),
        Text("answer"),
        Reasoning("", gemini_meta(thoughtSignature="s2")),
        ToolCall("c1", "f", {}, gemini_meta(thoughtSignature="s3")),
    )
    request = ChatRequest(model="m", messages=(Message.user_text("q"), message))
    plain = Capabilities(max_tokens_field="maxOutputTokens")
    assert to_wire(request, plain)["contents"][1]["parts"] == [
        {"text": "answer"},
        {"functionCall": {"name": "f", "args": {}}},
    ]


def test_ids_gemini_gave_are_kept_and_sent_back() -> None:
    chunk = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"id": "fc-7", "name": "f", "args": {"a": 1}}}],
                },
                "finishReason": "STOP",
            }
        ]
    }
    events = feed(chunk)
    assert events == [
        ToolCallStart(0, "fc-7", "f", gemini_meta(id="fc-7")),
        ToolCallDelta(0, '{"a": 1}'),
        Finish(FinishReason.TOOL_USE),
    ]
    call = ToolCall("fc-7", "f", {"a": 1}, gemini_meta(id="fc-7"))
    body = to_wire(
        ChatRequest(
            model="m",
            messages=(
                Message.user_text("q"),
                assistant(call),
                Message(Role.USER, (ToolResult("fc-7", "ok"),)),
            ),
        ),
        GEMINI,
    )
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "f", "args": {"a": 1}, "id": "fc-7"}}],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "f", "response": {"result": "ok"}, "id": "fc-7"}}
            ],
        },
    ]


# -- to_wire ----------------------------------------------------------------------------------

WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "title": {"type": ["string", "null"]}},
        "required": ["city", "title"],
        "additionalProperties": False,
    },
)
NO_ARGS = ToolSpec("now", "The time.", {"type": "object", "properties": {}})


def test_to_wire_full_request_with_json_schema_tools() -> None:
    request = ChatRequest(
        model="gemini-2.5-flash",
        system="Be brief.",
        messages=(
            Message(Role.USER, (Text("What is this?"), Image("image/jpeg", "/9j/4AAQ"), Text(""))),
            assistant(Text("A cat.")),
            Message.user_text("Thanks"),
        ),
        tools=(WEATHER, NO_ARGS),
        max_tokens=256,
        temperature=0.0,
    )
    assert to_wire(request, GEMINI) == {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "What is this?"},
                    {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}},
                ],
            },
            {"role": "model", "parts": [{"text": "A cat."}]},
            {"role": "user", "parts": [{"text": "Thanks"}]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Weather for a city.",
                        "parametersJsonSchema": WEATHER.input_schema,
                    },
                    {
                        "name": "now",
                        "description": "The time.",
                        "parametersJsonSchema": {"type": "object", "properties": {}},
                    },
                ]
            }
        ],
        "generationConfig": {"maxOutputTokens": 256, "temperature": 0.0},
    }


def test_to_wire_legacy_dialect_compiles_parameters() -> None:
    request = ChatRequest(model="m", tools=(WEATHER, NO_ARGS), messages=(Message.user_text("q"),))
    assert to_wire(request, GEMINI_LEGACY_SCHEMA)["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather for a city.",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {
                            "city": {"type": "STRING"},
                            "title": {"type": "STRING", "nullable": True},
                        },
                        "required": ["city", "title"],
                    },
                },
                # The legacy dialect refuses an OBJECT without properties: no parameters at all.
                {"name": "now", "description": "The time."},
            ]
        }
    ]


def test_to_wire_legacy_dialect_names_the_tool_and_path_it_cannot_take() -> None:
    tool = ToolSpec("edit", "Edit.", {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}})
    request = ChatRequest(model="m", tools=(tool,), messages=(Message.user_text("q"),))
    with pytest.raises(ConfigError) as info:
        to_wire(request, GEMINI_LEGACY_SCHEMA)
    message = str(info.value)
    assert "'edit'" in message
    assert "$.properties.p['$ref']" in message
    assert "json-schema" in message


def test_to_wire_respects_capabilities() -> None:
    caps = Capabilities(images=False, temperature=False, max_tokens_field="maxOutputTokens")
    request = ChatRequest(model="m", messages=(Message.user_text("q"),), temperature=0.3)
    assert to_wire(request, caps)["generationConfig"] == {"maxOutputTokens": 4096}
    with_image = ChatRequest(model="m", messages=(Message(Role.USER, (Image("image/png", "AA"),)),))
    with pytest.raises(ConfigError, match="does not accept images"):
        to_wire(with_image, caps)


def test_to_wire_rejects_a_result_for_an_unknown_call() -> None:
    request = ChatRequest(model="m", messages=(Message(Role.USER, (ToolResult("nope", "x"),)),))
    with pytest.raises(ConfigError, match="'nope'"):
        to_wire(request, GEMINI)


def test_to_wire_wraps_arguments_that_are_not_an_object() -> None:
    call = ToolCall("c1", "f", '{"broken')
    request = ChatRequest(model="m", messages=(Message.user_text("q"), assistant(call)))
    assert to_wire(request, GEMINI)["contents"][1]["parts"] == [
        {"functionCall": {"name": "f", "args": {"_raw_arguments": '{"broken'}}}
    ]


# -- state machine ----------------------------------------------------------------------------


def chunk(*parts: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], **extra}


def feed(*chunks: dict[str, Any], end: bool = True) -> list[StreamEvent]:
    machine = state()
    events: list[StreamEvent] = []
    for payload in chunks:
        events += machine.on_sse(SseEvent("message", json.dumps(payload)))
    if end:
        events += machine.on_end()
    return events


def test_stop_with_a_function_call_is_tool_use() -> None:
    events = feed(chunk({"functionCall": {"name": "f", "args": {}}}), chunk(finish="STOP"))
    assert events == [ToolCallStart(0, "call-1", "f"), Finish(FinishReason.TOOL_USE)]


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("STOP", Finish(FinishReason.END_TURN)),
        ("MAX_TOKENS", Finish(FinishReason.MAX_TOKENS)),
        ("SAFETY", Finish(FinishReason.REFUSAL, "SAFETY")),
        ("RECITATION", Finish(FinishReason.REFUSAL, "RECITATION")),
        ("BLOCKLIST", Finish(FinishReason.REFUSAL, "BLOCKLIST")),
        ("PROHIBITED_CONTENT", Finish(FinishReason.REFUSAL, "PROHIBITED_CONTENT")),
        ("SPII", Finish(FinishReason.REFUSAL, "SPII")),
        ("MALFORMED_FUNCTION_CALL", Finish(FinishReason.UNSUPPORTED, "MALFORMED_FUNCTION_CALL")),
        ("OTHER", Finish(FinishReason.UNSUPPORTED, "OTHER")),
    ],
)
def test_finish_reasons(reason: str, finish: Finish) -> None:
    assert feed(chunk({"text": "x"}, finish=reason)) == [TextDelta(0, "x"), finish]


def test_finish_message_is_kept_in_the_detail() -> None:
    payload = chunk(finish="MALFORMED_FUNCTION_CALL")
    payload["candidates"][0]["finishMessage"] = "Malformed function call: print(x"
    assert feed(payload) == [
        Finish(
            FinishReason.UNSUPPORTED, "MALFORMED_FUNCTION_CALL: Malformed function call: print(x"
        )
    ]


def test_blocked_prompt_is_a_refusal() -> None:
    payload = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {}}
    assert feed(payload) == [Finish(FinishReason.REFUSAL, "prompt blocked: PROHIBITED_CONTENT")]


def test_stream_without_a_finish_reason_is_unexpected_eof() -> None:
    with pytest.raises(UnexpectedEof, match="finishReason"):
        feed(chunk({"text": "partial"}))


def test_text_thought_and_calls_get_their_own_blocks() -> None:
    events = feed(
        chunk({"text": "plan", "thought": True}),
        chunk({"text": " more", "thought": True}, {"text": "Hello"}),
        chunk({"text": " world"}, {"functionCall": {"name": "f", "args": {"a": [1, 2]}}}),
        chunk({"functionCall": {"name": "f", "args": {}}}, {"text": "after"}, finish="STOP"),
    )
    assert events == [
        ReasoningDelta(0, "plan"),
        ReasoningDelta(0, " more"),
        TextDelta(1, "Hello"),
        TextDelta(1, " world"),
        ToolCallStart(2, "call-1", "f"),
        ToolCallDelta(2, '{"a": [1, 2]}'),
        ToolCallStart(3, "call-2", "f"),
        TextDelta(4, "after"),
        Finish(FinishReason.TOOL_USE),
    ]


def test_signatures_land_on_the_part_they_came_on() -> None:
    events = feed(
        chunk({"text": "think", "thought": True, "thoughtSignature": "s-thought"}),
        chunk({"text": "answer"}),
        chunk({"text": "", "thoughtSignature": "s-empty"}, finish="STOP"),
    )
    assert events == [
        ReasoningDelta(0, "think"),
        BlockMeta(0, gemini_meta(thoughtSignature="s-thought")),
        TextDelta(1, "answer"),
        BlockMeta(2, gemini_meta(thoughtSignature="s-empty")),
        Finish(FinishReason.END_TURN),
    ]


def test_partial_args_with_nested_paths_and_typed_values() -> None:
    events = feed(
        chunk({"functionCall": {"name": "edit", "willContinue": True}}),
        chunk(
            {
                "functionCall": {
                    "partialArgs": [
                        {"jsonPath": "$.file.path", "stringValue": "src/", "willContinue": True},
                        {"jsonPath": "$.file.path", "stringValue": "main.py"},
                        {"jsonPath": "$.lines[1]", "numberValue": 12},
                        {"jsonPath": "$.lines[0]", "numberValue": 3},
                        {"jsonPath": "$['dry run']", "boolValue": True},
                        {"jsonPath": "$.note", "nullValue": "NULL_VALUE"},
                        {"jsonPath": "$.items[0].name", "stringValue": "a"},
                    ],
                    "willContinue": True,
                }
            }
        ),
        chunk({"functionCall": {}}, finish="STOP"),
    )
    assert events[0] == ToolCallStart(0, "call-1", "edit")
    assert isinstance(events[1], ToolCallDelta)
    assert json.loads(events[1].arguments) == {
        "file": {"path": "src/main.py"},
        "lines": [3, 12],
        "dry run": True,
        "note": None,
        "items": [{"name": "a"}],
    }
    assert events[2:] == [Finish(FinishReason.TOOL_USE)]


def test_a_truncated_streamed_call_keeps_what_arrived() -> None:
    events = feed(
        chunk({"functionCall": {"name": "f", "willContinue": True}}),
        chunk(
            {
                "functionCall": {
                    "partialArgs": [{"jsonPath": "$.q", "stringValue": "ab", "willContinue": True}],
                    "willContinue": True,
                }
            },
            finish="MAX_TOKENS",
        ),
    )
    assert events == [
        ToolCallStart(0, "call-1", "f"),
        ToolCallDelta(0, '{"q": "ab"}'),
        Finish(FinishReason.MAX_TOKENS),
    ]


@pytest.mark.parametrize(
    "part",
    [
        {"functionCall": {"partialArgs": [{"jsonPath": "$.a", "stringValue": "x"}]}},
        {
            "functionCall": {
                "name": "f",
                "partialArgs": [{"jsonPath": "a", "stringValue": "x"}],
            }
        },
        {"functionCall": {"name": "f", "partialArgs": [{"jsonPath": "$.a"}]}},
        {"functionCall": {"name": "f", "partialArgs": [{"jsonPath": "$", "stringValue": "x"}]}},
        {"functionCall": {"name": "f", "partialArgs": [{"jsonPath": "$.a-", "boolValue": True}]}},
        {"functionCall": {"name": 3}},
    ],
    ids=["args-outside-a-call", "relative-path", "no-value", "root", "bad-path", "bad-name"],
)
def test_malformed_function_calls_are_decode_errors(part: dict[str, Any]) -> None:
    with pytest.raises(DecodeError):
        feed(chunk(part), end=False)


def test_partial_args_through_a_scalar_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="not a container"):
        feed(
            chunk(
                {
                    "functionCall": {
                        "name": "f",
                        "partialArgs": [
                            {"jsonPath": "$.a", "stringValue": "x"},
                            {"jsonPath": "$.a.b", "stringValue": "y"},
                        ],
                    }
                }
            ),
            end=False,
        )


def test_usage_repeats_are_absorbed_and_service_only_metadata_ignored() -> None:
    events = feed(
        chunk({"text": "a"}, usageMetadata={"trafficType": "ON_DEMAND"}),
        chunk({"text": "b"}, usageMetadata={"promptTokenCount": 50, "cachedContentTokenCount": 20}),
        chunk({"text": "c"}, usageMetadata={"promptTokenCount": 50, "cachedContentTokenCount": 20}),
        chunk(
            finish="STOP",
            usageMetadata={
                "promptTokenCount": 50,
                "cachedContentTokenCount": 20,
                "candidatesTokenCount": 3,
                "thoughtsTokenCount": 7,
            },
        ),
    )
    assert events == [
        TextDelta(0, "a"),
        TextDelta(0, "b"),
        UsageReport(Usage(input=30, output=0, cache_read=20)),
        TextDelta(0, "c"),
        UsageReport(Usage(input=30, output=10, cache_read=20)),
        Finish(FinishReason.END_TURN),
    ]


def test_only_the_first_candidate_counts() -> None:
    payload = {
        "candidates": [
            {"index": 1, "content": {"parts": [{"text": "other"}]}, "finishReason": "STOP"},
            {"index": 0, "content": {"parts": [{"text": "mine"}]}, "finishReason": "STOP"},
        ]
    }
    assert feed(payload) == [TextDelta(0, "mine"), Finish(FinishReason.END_TURN)]


@pytest.mark.parametrize("data", ["nope", "[]"], ids=["not-json", "not-object"])
def test_bad_chunks_are_decode_errors(data: str) -> None:
    with pytest.raises(DecodeError):
        state().on_sse(SseEvent("message", data))


# -- HTTP -------------------------------------------------------------------------------------


async def test_provider_posts_the_request_and_streams_the_fixture() -> None:
    body = (RECORDED / "functioncall_thoughtsignature_usage.sse").read_bytes()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    request = ChatRequest(
        model="models/gemini-3-pro-preview",
        messages=(Message.user_text("Which country?"),),
        tools=(ToolSpec("get_country", "The country.", {"type": "object", "properties": {}}),),
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = GeminiProvider(
            client,
            "https://generativelanguage.googleapis.com/v1beta/",
            "AIza-test",
            "google",
            GEMINI,
        )
        assert provider.name == "google"
        async with provider.stream(request) as events:
            completion = await collect(events)

    assert completion.finish is FinishReason.TOOL_USE
    assert completion.tool_calls[0].name == "get_country"
    assert completion.tool_calls[0].meta == gemini_meta(thoughtSignature=SIG_COUNTRY)
    (sent,) = seen
    assert sent.method == "POST"
    assert str(sent.url) == (
        "https://generativelanguage.googleapis.com/v1beta/models/"
        "gemini-3-pro-preview:streamGenerateContent?alt=sse"
    )
    assert sent.headers["x-goog-api-key"] == "AIza-test"
    assert "authorization" not in sent.headers
    assert sent.headers["accept"] == "text/event-stream"
    assert json.loads(sent.content) == to_wire(request, GEMINI)


async def test_provider_without_a_key_and_early_exit() -> None:
    body = (HANDWRITTEN / "safety_finish.sse").read_bytes()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = GeminiProvider(client, "http://127.0.0.1:9/v1beta", None, "local", GEMINI)
        async with provider.stream(ChatRequest(model="g")) as events:
            first = await anext(events)
    assert first == TextDelta(0, "Here is how you")
    assert "x-goog-api-key" not in seen[0].headers


async def test_provider_stream_error_surfaces_from_the_iteration() -> None:
    body = (HANDWRITTEN / "error_midstream_unavailable.sse").read_bytes()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = GeminiProvider(client, "https://g.test/v1beta", "k", "g", GEMINI)
        with pytest.raises(ApiError, match="UNAVAILABLE"):
            async with provider.stream(ChatRequest(model="g")) as events:
                await collect(events)


def test_module_shape() -> None:
    assert gemini.KIND == "gemini"
