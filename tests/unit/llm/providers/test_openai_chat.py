"""The OpenAI Chat Completions adapter: request snapshots, every stream quirk, the fixtures and
the HTTP glue (course chapter 4).

Every expected Completion below is written out by hand from reading the fixture, not produced by
the adapter and pasted back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from anvild.llm.builder import Completion, MessageBuilder, collect
from anvild.llm.capabilities import OPENAI_CHAT, OPENAI_CHAT_COMPAT
from anvild.llm.errors import ApiError, ConfigError, DecodeError, HttpError, UnexpectedEof
from anvild.llm.http import Timeouts
from anvild.llm.providers import openai_chat
from anvild.llm.sse import SseDecoder, SseEvent
from anvild.llm.stream import (
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


def ids(*values: str) -> Any:
    """A deterministic id source for StreamState(new_id=...)."""
    return iter(values).__next__


def assistant(*blocks: Any) -> Message:
    return Message(Role.ASSISTANT, blocks)


# -- fixtures -------------------------------------------------------------------------------------

LLAMA_PONG_TEXT = (
    "I'm sorry for any misunderstanding, but as a Qwen, I'm designed to assist with creative "
    "ideas and creative writing. I'm not equipped to provide editing"
)

EXPECTED: dict[str, Completion] = {
    "recorded/openai-chat/parallel_tool_calls_usage_done.sse": Completion(
        assistant(
            ToolCall("call_q2UyBRP7eXNTzAoR8lEhjc9Z", "get_country", {}),
            ToolCall("call_b51ijcpFkDiTQG1bQzsrmtW5", "get_product_name", {}),
        ),
        FinishReason.TOOL_USE,
        Usage(input=364, output=40, cache_read=0, cache_write=0),
    ),
    "recorded/openai-chat/compat_tool_call_index_starts_at_1.sse": Completion(
        assistant(Text("Reading it."), ToolCall("toolu_sanitized", "read_file", {"path": "a.txt"})),
        FinishReason.TOOL_USE,
        Usage(),  # no usage chunk: nothing is known
    ),
    "recorded/llama-server/chat_pong.sse": Completion(
        assistant(Text(LLAMA_PONG_TEXT)),
        FinishReason.MAX_TOKENS,
        Usage(input=39, output=32, cache_read=0, cache_write=0),
    ),
    "recorded/llama-server/chat_pong_grammar.sse": Completion(
        assistant(Text("pong")),
        FinishReason.END_TURN,
        Usage(input=1, output=3, cache_read=38, cache_write=0),
    ),
    "recorded/llama-server/chat_tool_oslo_auto.sse": Completion(
        assistant(
            Text("The weather in Oslo is mostly sunny, with a moderate temperature of 18°C (64°F).")
        ),
        FinishReason.END_TURN,
        Usage(input=212 - 21, output=25, cache_read=21, cache_write=0),
    ),
    "recorded/llama-server/chat_tool_oslo_required.sse": Completion(
        assistant(
            ToolCall("BOuHnALefTvXJetE0Y6RiWw6BS61Oyjg", "get_weather", {"city": "Oslo"}),
            ToolCall("rphbPUVhXr2mBV1hcArEONKO8IAjgZiJ", "get_weather", {"city": "Oslo"}),
        ),
        FinishReason.TOOL_USE,
        Usage(input=1, output=73, cache_read=211, cache_write=0),
    ),
    "recorded/llama-server/chat_tool_parallel_required.sse": Completion(
        assistant(
            ToolCall("DCZ0CFcGsb6Yw6VCG2uiuB706pacIcDQ", "get_weather", {"city": "Oslo"}),
            ToolCall("Du4Gveyrmum7zma3cIb9IWrWf9DpIlDL", "get_weather", {"city": "Paris"}),
        ),
        FinishReason.TOOL_USE,
        Usage(input=224 - 205, output=74, cache_read=205, cache_write=0),
    ),
    "recorded/llama-server/chat_tool_result_turn2.sse": Completion(
        assistant(Text('<tool_response>\n{"temp_c": 4, "sky": "cloudy"}\n</tool_response>')),
        FinishReason.END_TURN,
        Usage(input=281 - 205, output=28, cache_read=205, cache_write=0),
    ),
    "handwritten/openai-chat/ollama_whole_tool_call.sse": Completion(
        assistant(
            Reasoning("The user wants the weather in Oslo and in Paris. Two calls."),
            ToolCall("call_k3v9x2qa", "get_weather", {"city": "Oslo"}),
            ToolCall("call_p8m1d7zt", "get_weather", {"city": "Paris", "unit": "celsius"}),
        ),
        FinishReason.TOOL_USE,
        # Ollama reports no cached_tokens: the cache split is unknown, not zero.
        Usage(input=182, output=61, cache_read=None, cache_write=0),
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_replays_to_the_expected_completion(name: str) -> None:
    assert replay(FIXTURES / name, openai_chat.StreamState()) == EXPECTED[name]


@pytest.mark.parametrize("chunk_size", [1, 13, 200])
def test_replay_does_not_depend_on_how_the_body_was_split(chunk_size: int) -> None:
    name = "recorded/llama-server/chat_tool_parallel_required.sse"
    got = replay(FIXTURES / name, openai_chat.StreamState(), chunk_size=chunk_size)
    assert got == EXPECTED[name]


def test_no_ids_stop_and_no_done_still_gives_tool_use_with_synthesized_ids() -> None:
    path = HANDWRITTEN / "openai-chat/no_ids_stop_no_done.sse"
    state = openai_chat.StreamState(new_id=ids("call_one", "call_two"))
    assert replay(path, state) == Completion(
        assistant(
            Text("Checking both files."),
            ToolCall("call_one", "read_file", {"path": "a.txt"}),
            ToolCall("call_two", "read_file", {"path": "b.txt"}),
        ),
        FinishReason.TOOL_USE,
        Usage(input=96, output=41, cache_read=None, cache_write=0),
    )


def test_synthesized_ids_are_unique_call_uuid4_hex() -> None:
    path = HANDWRITTEN / "openai-chat/no_ids_stop_no_done.sse"
    first = replay(path, openai_chat.StreamState()).tool_calls
    second = replay(path, openai_chat.StreamState()).tool_calls
    all_ids = [call.id for call in first + second]
    assert len(set(all_ids)) == 4
    assert all(re.fullmatch(r"call_[0-9a-f]{32}", call_id) for call_id in all_ids)


def test_without_done_the_finish_comes_from_on_end() -> None:
    state = openai_chat.StreamState()
    body = sse_body(HANDWRITTEN / "openai-chat/no_ids_stop_no_done.sse")
    during = [event for sse in SseDecoder().push(body) for event in state.on_sse(sse)]
    assert not any(isinstance(event, Finish) for event in during)
    assert state.on_end() == [Finish(FinishReason.TOOL_USE)]


def test_done_emits_the_finish_after_the_usage_chunk() -> None:
    events = replay_events(
        RECORDED / "openai-chat/parallel_tool_calls_usage_done.sse", openai_chat.StreamState()
    )
    assert events[-2:] == [
        UsageReport(Usage(input=364, output=40, cache_read=0, cache_write=0)),
        Finish(FinishReason.TOOL_USE),
    ]
    assert sum(isinstance(event, Finish) for event in events) == 1


def test_call_id_and_name_come_only_on_the_first_delta() -> None:
    events = replay_events(
        RECORDED / "llama-server/chat_tool_parallel_required.sse", openai_chat.StreamState()
    )
    starts = [event for event in events if isinstance(event, ToolCallStart)]
    assert starts == [
        ToolCallStart(0, "DCZ0CFcGsb6Yw6VCG2uiuB706pacIcDQ", "get_weather"),
        ToolCallStart(1, "Du4Gveyrmum7zma3cIb9IWrWf9DpIlDL", "get_weather"),
    ]
    assert "".join(
        e.arguments for e in events if isinstance(e, ToolCallDelta) and e.block == 1
    ) == ('{\n    "city": "Paris"\n}')


def test_index_starting_at_one_after_text_gets_its_own_block() -> None:
    events = replay_events(
        RECORDED / "openai-chat/compat_tool_call_index_starts_at_1.sse", openai_chat.StreamState()
    )
    assert events == [
        TextDelta(0, "Reading"),
        TextDelta(0, " it."),
        ToolCallStart(1, "toolu_sanitized", "read_file"),
        ToolCallDelta(1, '{"pa'),
        ToolCallDelta(1, 'th": "a.txt"}'),
        Finish(FinishReason.TOOL_USE),
    ]


def test_groq_error_event_inside_a_200_is_an_api_error() -> None:
    with pytest.raises(ApiError) as info:
        replay(RECORDED / "openai-chat/groq_midstream_error_event.sse", openai_chat.StreamState())
    assert info.value.kind == "tool_use_failed"
    assert info.value.message == (
        "Tool call validation failed: tool call validation failed: parameters for tool "
        "get_something_by_name did not match schema: errors: [missing properties: 'name', "
        "additionalProperties 'invalid_param' not allowed]"
    )
    assert not info.value.is_retryable


def test_groq_reasoning_streams_before_the_error() -> None:
    state = openai_chat.StreamState()
    body = sse_body(RECORDED / "openai-chat/groq_midstream_error_event.sse")
    reasoning: list[str] = []
    with pytest.raises(ApiError):
        for sse in SseDecoder().push(body):
            for event in state.on_sse(sse):
                assert isinstance(event, ReasoningDelta)
                assert event.block == 0
                reasoning.append(event.text)
    assert "".join(reasoning).startswith("We need to call the tool with invalid parameters first")
    assert "".join(reasoning).endswith('Then second call with name: "test". Let\'s do that.')


# -- stream quirks (synthetic chunks) -------------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
) -> SseEvent:
    payload: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk"}
    payload["choices"] = (
        [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    )
    if usage is not None:
        payload["usage"] = usage
    return SseEvent("message", json.dumps(payload))


DONE = SseEvent("message", "[DONE]")


def call(
    index: int | None, *, id: str | None = None, name: str | None = None, args: Any = None
) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    tool_call: dict[str, Any] = {"function": function}
    if index is not None:
        tool_call["index"] = index
    if id is not None:
        tool_call["id"] = id
    return {"tool_calls": [tool_call]}


def complete(*events: SseEvent, new_id: Any = None) -> Completion:
    state = openai_chat.StreamState(new_id=new_id) if new_id else openai_chat.StreamState()
    builder = MessageBuilder()
    for event in events:
        for out in state.on_sse(event):
            builder.push(out)
    for out in state.on_end():
        builder.push(out)
    return builder.finish()


@pytest.mark.parametrize(
    ("finish_reason", "has_call", "finish"),
    [
        ("stop", False, Finish(FinishReason.END_TURN)),
        ("stop", True, Finish(FinishReason.TOOL_USE)),
        ("tool_calls", True, Finish(FinishReason.TOOL_USE)),
        ("function_call", True, Finish(FinishReason.TOOL_USE)),
        ("length", False, Finish(FinishReason.MAX_TOKENS)),
        ("length", True, Finish(FinishReason.MAX_TOKENS)),
        ("content_filter", False, Finish(FinishReason.REFUSAL, "content_filter")),
        ("eos_token", False, Finish(FinishReason.UNSUPPORTED, "eos_token")),
    ],
)
def test_finish_reasons(finish_reason: str, has_call: bool, finish: Finish) -> None:
    state = openai_chat.StreamState()
    events: list[StreamEvent] = []
    events += state.on_sse(chunk({"content": "x"}))
    if has_call:
        events += state.on_sse(chunk(call(0, id="c", name="f", args="{}")))
    events += state.on_sse(chunk(finish=finish_reason))
    events += state.on_end()
    assert events[-1] == finish
    assert sum(isinstance(event, Finish) for event in events) == 1


def test_length_with_a_call_is_not_executable() -> None:
    completion = complete(chunk(call(0, id="c", name="f", args='{"a": ')), chunk(finish="length"))
    assert completion.finish is FinishReason.MAX_TOKENS
    assert not completion.executable


def test_no_finish_reason_at_all_is_unexpected_eof() -> None:
    with pytest.raises(UnexpectedEof, match="without a finish_reason"):
        complete(chunk({"content": "cut"}))


def test_done_without_a_finish_reason_is_unexpected_eof() -> None:
    with pytest.raises(UnexpectedEof):
        complete(chunk({"content": "cut"}), DONE)


def test_usage_only_chunk_is_normalized_to_uncached_input() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "total_tokens": 1230,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }
    completion = complete(chunk({"content": "x"}, "stop"), chunk(usage=usage, choices=False), DONE)
    assert completion.usage == Usage(input=176, output=30, cache_read=1024, cache_write=0)


def test_usage_without_cached_tokens_leaves_cache_reads_unknown() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    completion = complete(chunk({"content": "x"}, "stop"), chunk(usage=usage, choices=False))
    assert completion.usage == Usage(input=12, output=3, cache_read=None, cache_write=0)
    assert completion.usage.total is None


def test_groq_x_groq_usage_is_read() -> None:
    payload = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "x_groq": {"id": "req_1", "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    }
    completion = complete(chunk({"content": "hi"}), SseEvent("message", json.dumps(payload)))
    assert completion.usage == Usage(input=5, output=2, cache_read=None, cache_write=0)


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_fields_are_reasoning(field: str) -> None:
    completion = complete(
        chunk({"role": "assistant", field: "think"}),
        chunk({field: "ing"}),
        chunk({"content": "answer"}, "stop"),
    )
    assert completion.message == assistant(Reasoning("thinking"), Text("answer"))


def test_both_reasoning_fields_in_one_delta_are_not_doubled() -> None:
    completion = complete(
        chunk({"reasoning": "same", "reasoning_content": "same"}), chunk({"content": "a"}, "stop")
    )
    assert completion.message == assistant(Reasoning("same"), Text("a"))


def test_refusal_delta_becomes_text_and_a_refusal_finish() -> None:
    completion = complete(chunk({"refusal": "I can't help with that."}), chunk(finish="stop"))
    assert completion.message == assistant(Text("I can't help with that."))
    assert completion.finish is FinishReason.REFUSAL
    assert not completion.executable


@pytest.mark.parametrize(
    "error",
    [
        SseEvent(
            "error",
            json.dumps(
                {"error": {"message": "model crashed", "type": "server_error", "code": 500}}
            ),
        ),
        SseEvent(
            "message",
            json.dumps(
                {"error": {"message": "model crashed", "type": "server_error", "code": 500}}
            ),
        ),
    ],
    ids=["event_error", "data_error_object"],
)
def test_error_inside_a_200_stream(error: SseEvent) -> None:
    with pytest.raises(ApiError) as info:
        complete(chunk({"content": "partial"}), error)
    # llama.cpp's numeric code is the HTTP status it would have sent; its type names the kind.
    assert (info.value.kind, info.value.message) == ("server_error", "model crashed")
    assert info.value.is_retryable


def test_ollama_string_error_is_an_api_error() -> None:
    with pytest.raises(ApiError, match="model 'x' not found"):
        complete(SseEvent("message", json.dumps({"error": "model 'x' not found"})))


def test_chunk_with_error_null_is_not_an_error() -> None:
    payload: dict[str, Any] = {
        "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
        "error": None,
    }
    assert complete(SseEvent("message", json.dumps(payload))).message == assistant(Text("ok"))


def test_a_whole_call_per_delta_all_at_index_zero_are_separate_calls() -> None:
    completion = complete(
        chunk(call(0, id="call_a", name="f", args='{"n": 1}')),
        chunk(call(0, id="call_b", name="f", args='{"n": 2}')),
        chunk(finish="tool_calls"),
    )
    assert completion.tool_calls == [
        ToolCall("call_a", "f", {"n": 1}),
        ToolCall("call_b", "f", {"n": 2}),
    ]


def test_the_same_id_repeated_on_every_delta_is_one_call() -> None:
    completion = complete(
        chunk(call(0, id="call_a", name="f", args='{"n"')),
        chunk(call(0, id="call_a", name="f", args=": 1}")),
        chunk(finish="tool_calls"),
    )
    assert completion.tool_calls == [ToolCall("call_a", "f", {"n": 1})]


def test_calls_without_an_index_are_told_apart_by_id() -> None:
    completion = complete(
        chunk(call(None, id="call_a", name="f", args='{"n"')),
        chunk(call(None, args=": 1}")),
        chunk(call(None, id="call_b", name="g", args="{}")),
        chunk(finish="tool_calls"),
    )
    assert completion.tool_calls == [ToolCall("call_a", "f", {"n": 1}), ToolCall("call_b", "g", {})]


def test_missing_ids_are_synthesized_per_call() -> None:
    completion = complete(
        chunk(call(3, name="f", args="{}")),
        chunk(call(5, name="g", args="{}")),
        chunk(finish="tool_calls"),
        new_id=ids("call_x", "call_y"),
    )
    assert completion.tool_calls == [ToolCall("call_x", "f", {}), ToolCall("call_y", "g", {})]


def test_arguments_before_the_name_wait_for_it() -> None:
    state = openai_chat.StreamState()
    assert state.on_sse(chunk(call(0, id="c", args='{"a":'))) == []
    assert state.on_sse(chunk(call(0, name="f", args="1}"))) == [
        ToolCallStart(0, "c", "f"),
        ToolCallDelta(0, '{"a":1}'),
    ]


def test_a_call_that_never_gets_a_name_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="never received a function name"):
        complete(chunk(call(0, id="c", args="{}")), chunk(finish="tool_calls"))


def test_arguments_sent_as_an_object_are_serialized() -> None:
    completion = complete(chunk(call(0, id="c", name="f", args={"a": [1]})), chunk(finish="stop"))
    assert completion.tool_calls == [ToolCall("c", "f", {"a": [1]})]


def test_only_choice_zero_is_read() -> None:
    payload = {
        "choices": [
            {"index": 1, "delta": {"content": "other"}, "finish_reason": None},
            {"index": 0, "delta": {"content": "mine"}, "finish_reason": "stop"},
        ]
    }
    assert complete(SseEvent("message", json.dumps(payload))).message == assistant(Text("mine"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"choices": {"index": 0}}', "not a list"),
        ('{"choices": [{"index": 0, "delta": {"tool_calls": [7]}}]}', "not an object"),
    ],
)
def test_malformed_chunks_are_decode_errors(data: str, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        openai_chat.StreamState().on_sse(SseEvent("message", data))


def test_nothing_after_the_finish() -> None:
    state = openai_chat.StreamState()
    state.on_sse(chunk({"content": "a"}, "stop"))
    assert state.on_sse(DONE) == [Finish(FinishReason.END_TURN)]
    assert state.on_sse(chunk({"content": "late"})) == []
    assert state.on_end() == []


# -- request --------------------------------------------------------------------------------------

READ = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {}}})


def two_calls_two_results() -> tuple[Message, ...]:
    return (
        Message.user_text("Read a and b."),
        Message(
            Role.ASSISTANT,
            [
                Reasoning(
                    "thinking that cannot go back", ProviderMeta("anthropic", {"signature": "s"})
                ),
                ToolCall("call_a", "read_file", {"path": "a"}),
                ToolCall("call_b", "read_file", {"path": "b"}),
            ],
        ),
        Message(
            Role.USER,
            [
                ToolResult("call_a", "contents of a"),
                ToolResult("call_b", "no such file", is_error=True),
            ],
        ),
    )


def test_to_wire_snapshot_two_calls_then_two_results() -> None:
    request = ChatRequest(
        model="qwen3:8b",
        system="Be brief.",
        messages=two_calls_two_results(),
        tools=(READ,),
        max_tokens=512,
        temperature=0.0,
    )
    assert openai_chat.to_wire(request, OPENAI_CHAT_COMPAT) == {
        "model": "qwen3:8b",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Read a and b."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "b"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "contents of a"},
            {"role": "tool", "tool_call_id": "call_b", "content": "ERROR: no such file"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": {"type": "object", "properties": {"path": {}}},
                },
            }
        ],
        "max_tokens": 512,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_tool_results_go_before_the_rest_of_the_user_message() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message(Role.ASSISTANT, [Text("Let me see."), ToolCall("c", "f", {})]),
            Message(
                Role.USER,
                [
                    Text("Also, look:"),
                    ToolResult("c", "failed", is_error=True),
                    Image("image/png", "iVBORw0KGgo="),
                    Text(""),
                ],
            ),
        ),
    )
    assert openai_chat.to_wire(request)["messages"] == [
        {
            "role": "assistant",
            "content": "Let me see.",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "ERROR: failed"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Also, look:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
    ]


def test_assistant_text_only_and_empty() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message.user_text("q"),
            Message.assistant_text("a"),
            Message.user_text("q2"),
            Message(Role.ASSISTANT, [Reasoning("only thoughts")]),
        ),
    )
    messages = openai_chat.to_wire(request)["messages"]
    assert messages[1] == {"role": "assistant", "content": "a"}
    assert messages[3] == {"role": "assistant", "content": ""}


def test_arguments_that_were_not_json_go_back_verbatim() -> None:
    request = ChatRequest(
        model="m",
        messages=(Message.user_text("q"), Message(Role.ASSISTANT, [ToolCall("c", "f", '{"a": ')])),
    )
    message = openai_chat.to_wire(request)["messages"][1]
    assert message["tool_calls"][0]["function"]["arguments"] == '{"a": '


def test_max_token_field_follows_the_capabilities() -> None:
    request = ChatRequest(model="gpt-4o", messages=(Message.user_text("q"),), max_tokens=99)
    body = openai_chat.to_wire(request, OPENAI_CHAT)
    assert body["max_completion_tokens"] == 99
    assert "max_tokens" not in body
    assert openai_chat.to_wire(request, OPENAI_CHAT_COMPAT)["max_tokens"] == 99


def test_no_system_no_tools_no_temperature() -> None:
    request = ChatRequest(model="m", messages=(Message.user_text("q"),), temperature=0.7)
    body = openai_chat.to_wire(request, attrs.evolve(OPENAI_CHAT_COMPAT, temperature=False))
    assert body["messages"] == [{"role": "user", "content": "q"}]
    assert "tools" not in body
    assert "temperature" not in body


def test_images_for_a_model_without_images_are_refused() -> None:
    request = ChatRequest(model="m", messages=(Message(Role.USER, [Image("image/png", "x")]),))
    with pytest.raises(ConfigError, match="does not accept images"):
        openai_chat.to_wire(request, attrs.evolve(OPENAI_CHAT_COMPAT, images=False))


# -- HTTP glue ------------------------------------------------------------------------------------


def serve(body: bytes, seen: list[httpx.Request], status: int = 200) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, headers={"content-type": "text/event-stream"}, content=body)

    return httpx.MockTransport(handler)


async def test_provider_streams_a_fixture_without_authorization_when_keyless() -> None:
    name = "recorded/llama-server/chat_tool_parallel_required.sse"
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=serve(sse_body(FIXTURES / name), seen)) as client:
        provider = openai_chat.OpenAiChatProvider(
            client, "http://127.0.0.1:8088/v1", None, "local", OPENAI_CHAT_COMPAT, Timeouts()
        )
        request = ChatRequest(model="smollm2-135m", messages=(Message.user_text("Weather?"),))
        async with provider.stream(request) as events:
            completion = await collect(events)
    assert completion == EXPECTED[name]
    (sent,) = seen
    assert str(sent.url) == "http://127.0.0.1:8088/v1/chat/completions"
    assert "authorization" not in sent.headers
    assert json.loads(sent.content) == openai_chat.to_wire(request, OPENAI_CHAT_COMPAT)
    assert provider.name == "local"


async def test_provider_sends_a_bearer_key_when_it_has_one() -> None:
    seen: list[httpx.Request] = []
    body = sse_body(RECORDED / "llama-server/chat_pong_grammar.sse")
    async with httpx.AsyncClient(transport=serve(body, seen)) as client:
        provider = openai_chat.OpenAiChatProvider(client, "https://api.openai.test/v1/", "sk-1")
        async with provider.stream(ChatRequest(model="m")) as events:
            await collect(events)
    assert seen[0].headers["authorization"] == "Bearer sk-1"
    assert str(seen[0].url) == "https://api.openai.test/v1/chat/completions"


async def test_provider_http_401_is_an_http_error() -> None:
    body = json.dumps({"error": {"message": "Incorrect API key", "type": "invalid_request_error"}})
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=serve(body.encode(), seen, status=401)) as client:
        provider = openai_chat.OpenAiChatProvider(client, "https://api.openai.test/v1", "bad")
        with pytest.raises(HttpError) as info:
            async with provider.stream(ChatRequest(model="m")):
                pytest.fail("the block must not run for a 401")
    assert info.value.status == 401
    assert "Incorrect API key" in info.value.body
    assert not info.value.is_retryable


async def test_provider_raises_the_mid_stream_error_from_the_iteration() -> None:
    body = (RECORDED / "openai-chat/groq_midstream_error_event.sse").read_bytes()
    async with httpx.AsyncClient(transport=serve(body, [])) as client:
        provider = openai_chat.OpenAiChatProvider(client, "https://api.groq.test/openai/v1", "k")
        with pytest.raises(ApiError, match="tool_use_failed"):
            async with provider.stream(ChatRequest(model="m")) as events:
                await collect(events)


async def test_leaving_the_block_early_closes_the_stream() -> None:
    body = sse_body(RECORDED / "llama-server/chat_pong.sse")
    async with httpx.AsyncClient(transport=serve(body, [])) as client:
        provider = openai_chat.OpenAiChatProvider(client, "http://127.0.0.1:8088/v1")
        async with provider.stream(ChatRequest(model="m")) as events:
            first = await anext(events)
    # The body comes in one read, so its text deltas arrive joined into one.
    assert isinstance(first, TextDelta)
    assert first.block == 0
    assert first.text.startswith("I")
