"""OpenAI Responses: request mapping, the stream state machine, fixtures, and the HTTP glue.

Every fixture's expected Completion is written by hand from reading the fixture. Long opaque
values (encrypted reasoning) are checked by their first and last characters and their length.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from anvild.llm.builder import Completion, collect
from anvild.llm.capabilities import OPENAI_RESPONSES, Capabilities
from anvild.llm.errors import ApiError, ConfigError, DecodeError, UnexpectedEof
from anvild.llm.http import Timeouts
from anvild.llm.providers import openai_responses
from anvild.llm.providers.openai_responses import (
    OpenAIResponsesProvider,
    StreamState,
    to_wire,
)
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

ROOT = Path(__file__).resolve().parents[4]
RECORDED = ROOT / "fixtures/recorded"
HANDWRITTEN = ROOT / "fixtures/handwritten/openai-responses"


class Opaque:
    """Equal to a string with this start, end and length: for long opaque blobs."""

    def __init__(self, start: str, end: str, length: int) -> None:
        self.start, self.end, self.length = start, end, length

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, str)
            and other.startswith(self.start)
            and other.endswith(self.end)
            and len(other) == self.length
        )

    def __hash__(self) -> int:
        return hash((self.start, self.end, self.length))

    def __repr__(self) -> str:
        return f"Opaque({self.start!r}…{self.end!r}, {self.length})"


def assistant(*blocks: Any) -> Message:
    return Message(Role.ASSISTANT, blocks)


# -- fixtures ---------------------------------------------------------------------------------


def test_function_call_stream() -> None:
    completion = replay(RECORDED / "openai-responses/function_call_stream.sse", StreamState())
    assert completion == Completion(
        message=assistant(
            ToolCall("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", {"country": "France"})
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=255, output=16, cache_read=0),
    )


def test_function_call_stream_does_not_depend_on_chunking() -> None:
    path = RECORDED / "openai-responses/function_call_stream.sse"
    whole = replay(path, StreamState())
    for size in (1, 7, 64):
        assert replay(path, StreamState(), chunk_size=size) == whole


REASONING_ITEM = {
    "id": "rs_01830d662ab3856501693c321405c88190be3ab04d5782d5f9",
    "type": "reasoning",
    "encrypted_content": Opaque("gAAAAABpPDIVOKrs", "Nxat0wz4uQ==", 1060),
    "summary": [
        {
            "type": "summary_text",
            "text": "**Calculating step-by-step using calculator**\n\nI'll compute 12 plus 7, then "
            "multiply the result by 3, and finally multiply that by 10, reporting the final "
            "product.",
        }
    ],
}
REASONING_TEXT = (
    "**Calculating step-by-step using calculator**\n\nI'll compute 12 plus 7, then multiply the "
    "result by 3, and finally multiply that by 10, reporting the final product."
)

# The four streams of reasoning_encrypted_summary_function_call.chunks.jsonl, in order.
MULTI_STEP = [
    Completion(
        message=assistant(
            Reasoning(REASONING_TEXT, ProviderMeta("openai-responses", REASONING_ITEM)),
            ToolCall("call_AB6AaRZ1FYZB2RwS6A5vbdqn", "calculator", {"a": 12, "b": 7, "op": "add"}),
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=134, output=28, cache_read=0),
    ),
    Completion(
        message=assistant(
            ToolCall(
                "call_Q6pW65MUgW9vF59BmItYGos3", "calculator", {"a": 19, "b": 3, "op": "multiply"}
            )
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=221, output=26, cache_read=0),
    ),
    Completion(
        message=assistant(
            ToolCall(
                "call_Zl5vIMnD7dVAjgU6FkhmiCZh", "calculator", {"a": 57, "b": 10, "op": "multiply"}
            )
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=260, output=26, cache_read=0),
    ),
    Completion(
        message=assistant(Text("The final result is **570**.")),
        finish=FinishReason.END_TURN,
        usage=Usage(input=299, output=12, cache_read=0),
    ),
]


def split_streams(path: Path, into: Path) -> list[Path]:
    """The fixture holds several streams back to back; each starts with response.created."""
    groups: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if json.loads(line)["type"] == "response.created":
            groups.append([])
        groups[-1].append(line)
    paths = []
    for number, lines in enumerate(groups):
        part = into / f"stream{number}.chunks.jsonl"
        part.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(part)
    return paths


def test_reasoning_multi_step_fixture(tmp_path: Path) -> None:
    streams = split_streams(
        RECORDED / "openai-responses/reasoning_encrypted_summary_function_call.chunks.jsonl",
        tmp_path,
    )
    assert [replay(path, StreamState()) for path in streams] == MULTI_STEP


def test_error_fixture_is_an_api_error() -> None:
    with pytest.raises(ApiError) as info:
        replay(
            RECORDED / "openai-responses/error_insufficient_quota_response_failed.chunks.jsonl",
            StreamState(),
        )
    assert info.value.kind == "insufficient_quota"
    assert info.value.message.startswith("You exceeded your current quota")
    assert not info.value.is_retryable


def test_llama_server_text_without_output_index_or_sequence_number() -> None:
    completion = replay(RECORDED / "llama-server/responses_pong.sse", StreamState())
    assert completion == Completion(
        message=assistant(
            Text(
                "I'm sorry for any misunderstanding, but as a Qwen, I'm designed to assist with "
                "creative ideas and creative writing. I'm not equipped to provide editing"
            )
        ),
        finish=FinishReason.END_TURN,
        usage=Usage(input=1, output=32, cache_read=38),
    )


def test_llama_server_calls_without_arguments_done() -> None:
    completion = replay(RECORDED / "llama-server/responses_tool_oslo_required.sse", StreamState())
    assert completion == Completion(
        message=assistant(
            ToolCall("call_Kkieu0AbvQUVXJKb28ODbG0q9x2ne7oT", "get_weather", {"city": "Oslo"}),
            ToolCall("call_oNN1Vxz6iWRR4zLVdcAA1mmYTuq6anKW", "get_weather", {"city": "Oslo"}),
        ),
        finish=FinishReason.TOOL_USE,
        usage=Usage(input=1, output=73, cache_read=211),
    )


def test_incomplete_max_output_tokens_is_max_tokens() -> None:
    completion = replay(HANDWRITTEN / "incomplete_max_output_tokens.sse", StreamState())
    assert completion == Completion(
        message=assistant(Text("The three longest rivers are the Nile, the Amazon and")),
        finish=FinishReason.MAX_TOKENS,
        usage=Usage(input=31, output=16, cache_read=0),
        finish_detail="max_output_tokens",
    )
    assert not completion.executable


# -- follow-up requests -----------------------------------------------------------------------


def test_follow_up_replays_reasoning_call_and_output_in_order(tmp_path: Path) -> None:
    first = replay(
        split_streams(
            RECORDED / "openai-responses/reasoning_encrypted_summary_function_call.chunks.jsonl",
            tmp_path,
        )[0],
        StreamState(),
    )
    foreign = Reasoning("thinking elsewhere", ProviderMeta("anthropic", {"signature": "x"}))
    replayed = Message(Role.ASSISTANT, (foreign, *first.message.content))
    request = ChatRequest(
        model="gpt-5.1-codex-max",
        messages=(
            Message.user_text("What is (12 + 7) * 3 * 10?"),
            replayed,
            Message(Role.USER, (ToolResult("call_AB6AaRZ1FYZB2RwS6A5vbdqn", "19"),)),
        ),
    )
    body = to_wire(request, OPENAI_RESPONSES)
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "What is (12 + 7) * 3 * 10?"}]},
        REASONING_ITEM,
        {
            "type": "function_call",
            "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
            "name": "calculator",
            "arguments": '{"a": 12, "b": 7, "op": "add"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
            "output": "19",
        },
    ]
    # The reasoning item goes back exactly as the server sent it, encrypted content included.
    assert body["input"][1] is first.message.content[0].meta.data  # type: ignore[union-attr]


def test_to_wire_full_request() -> None:
    request = ChatRequest(
        model="gpt-5-mini",
        system="You are terse.",
        messages=(
            Message(Role.USER, (Text("Look:"), Image("image/png", "iVBORw0KGgo="), Text(""))),
            Message(
                Role.ASSISTANT,
                (
                    Text("Checking."),
                    Text("Two calls."),
                    ToolCall("c1", "read_file", {"path": "a.txt"}),
                    ToolCall("c2", "read_file", '{"path": broken'),
                    Text("Done?"),
                ),
            ),
            Message(
                Role.USER,
                (
                    Text("Also this."),
                    ToolResult("c1", "contents"),
                    ToolResult("c2", "arguments are not valid JSON", is_error=True),
                ),
            ),
        ),
        tools=(
            ToolSpec(
                "read_file",
                "Read a file.",
                {"type": "object", "properties": {"path": {"type": "string"}}},
            ),
        ),
        max_tokens=1000,
        temperature=0.2,
        cache=True,
    )
    assert to_wire(request, OPENAI_RESPONSES) == {
        "model": "gpt-5-mini",
        "instructions": "You are terse.",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look:"},
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,iVBORw0KGgo=",
                        "detail": "auto",
                    },
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Checking."},
                    {"type": "output_text", "text": "Two calls."},
                ],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "read_file",
                "arguments": '{"path": "a.txt"}',
            },
            {
                "type": "function_call",
                "call_id": "c2",
                "name": "read_file",
                "arguments": '{"path": broken',
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Done?"}],
            },
            {"type": "function_call_output", "call_id": "c1", "output": "contents"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": "ERROR: arguments are not valid JSON",
            },
            {"role": "user", "content": [{"type": "input_text", "text": "Also this."}]},
        ],
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "tools": [
            {
                "type": "function",
                "name": "read_file",
                "description": "Read a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                "strict": False,
            }
        ],
        "max_output_tokens": 1000,
        "temperature": 0.2,
        "stream": True,
    }


def test_to_wire_minimal_request_and_capabilities() -> None:
    caps = Capabilities(temperature=False, max_tokens_field="max_output_tokens", images=False)
    request = ChatRequest(model="m", messages=(Message.user_text("hi"),), temperature=0.5)
    assert to_wire(request, caps) == {
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "store": False,
        "max_output_tokens": 4096,
        "stream": True,
    }
    with pytest.raises(ConfigError, match="does not accept images"):
        to_wire(
            ChatRequest(model="m", messages=(Message(Role.USER, (Image("image/png", "AA=="),)),)),
            caps,
        )


def test_reasoning_items_go_only_to_targets_that_replay_them() -> None:
    item = {"id": "rs1", "type": "reasoning", "summary": [], "encrypted_content": "e"}
    request = ChatRequest(
        model="m",
        messages=(
            Message.user_text("q"),
            assistant(Reasoning("", ProviderMeta("openai-responses", item)), Text("a")),
        ),
    )
    replaying = to_wire(request, OPENAI_RESPONSES)
    assert replaying["include"] == ["reasoning.encrypted_content"]
    assert replaying["input"][1] == item
    plain = to_wire(request, Capabilities(max_tokens_field="max_output_tokens"))
    assert "include" not in plain
    assert plain["input"][1:] == [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]}
    ]


def test_to_wire_rejects_blocks_in_the_wrong_role() -> None:
    bad = Message(Role.USER, (ToolCall("c1", "f", {}),))
    with pytest.raises(ConfigError, match="only the assistant"):
        to_wire(ChatRequest(model="m", messages=(bad,)), OPENAI_RESPONSES)


# -- state machine ----------------------------------------------------------------------------


def sse(payload: dict[str, Any]) -> SseEvent:
    return SseEvent(payload["type"], json.dumps(payload))


def feed(*payloads: dict[str, Any], end: bool = True) -> list[StreamEvent]:
    state = StreamState()
    events: list[StreamEvent] = []
    for payload in payloads:
        events += state.on_sse(sse(payload))
    if end:
        events += state.on_end()
    return events


COMPLETED = {"type": "response.completed", "response": {"usage": None}}


def test_interleaved_items_keep_their_blocks() -> None:
    events = feed(
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "call_id": "c1", "name": "f", "id": "fc1"},
        },
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Hel"},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"a"'},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "lo"},
        {"type": "response.function_call_arguments.delta", "item_id": "fc1", "delta": ":1}"},
        {"type": "response.function_call_arguments.done", "output_index": 1, "arguments": "x"},
        COMPLETED,
    )
    assert events == [
        ToolCallStart(1, "c1", "f"),
        TextDelta(0, "Hel"),
        ToolCallDelta(1, '{"a"'),
        TextDelta(0, "lo"),
        ToolCallDelta(1, ":1}"),
        Finish(FinishReason.TOOL_USE),
    ]


def test_events_without_index_or_id_continue_the_latest_item_of_their_kind() -> None:
    events = feed(
        {"type": "response.output_text.delta", "delta": "a"},
        {"type": "response.output_text.delta", "delta": "b"},
        {"type": "response.output_item.added", "item": {"type": "message"}},
        {"type": "response.output_text.delta", "delta": "c"},
        COMPLETED,
    )
    assert events == [
        TextDelta(0, "a"),
        TextDelta(0, "b"),
        TextDelta(1, "c"),
        Finish(FinishReason.END_TURN),
    ]


def test_arguments_only_in_the_done_event_or_the_done_item() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x":2}'}
    only_done_event = feed(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**call, "arguments": ""},
        },
        {
            "type": "response.function_call_arguments.done",
            "output_index": 0,
            "arguments": '{"x":1}',
        },
        {"type": "response.output_item.done", "output_index": 0, "item": call},
        COMPLETED,
    )
    assert only_done_event[:2] == [ToolCallStart(0, "c1", "f"), ToolCallDelta(0, '{"x":1}')]
    assert len(only_done_event) == 3
    only_done_item = feed({"type": "response.output_item.done", "item": call}, COMPLETED)
    assert only_done_item == [
        ToolCallStart(0, "c1", "f"),
        ToolCallDelta(0, '{"x":2}'),
        Finish(FinishReason.TOOL_USE),
    ]


def test_reasoning_summary_parts_and_meta() -> None:
    item = {"id": "rs1", "type": "reasoning", "summary": [], "encrypted_content": "enc"}
    events = feed(
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "summary_index": 0,
            "delta": "First.",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "summary_index": 1,
            "delta": "Second.",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        COMPLETED,
    )
    assert events == [
        ReasoningDelta(0, "First."),
        ReasoningDelta(0, "\n\n"),
        ReasoningDelta(0, "Second."),
        BlockMeta(0, ProviderMeta("openai-responses", item)),
        Finish(FinishReason.END_TURN),
    ]


def test_reasoning_without_deltas_takes_its_summary_from_the_item() -> None:
    item = {
        "id": "rs1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "A"}, {"type": "summary_text", "text": "B"}],
    }
    events = feed({"type": "response.output_item.done", "output_index": 3, "item": item}, COMPLETED)
    assert events[:2] == [
        ReasoningDelta(0, "A\n\nB"),
        BlockMeta(0, ProviderMeta("openai-responses", item)),
    ]


def test_message_without_deltas_takes_its_text_from_the_item() -> None:
    item = {"id": "m1", "type": "message", "content": [{"type": "output_text", "text": "hi"}]}
    assert feed({"type": "response.output_item.done", "item": item}, COMPLETED) == [
        TextDelta(0, "hi"),
        Finish(FinishReason.END_TURN),
    ]


def test_refusal_finishes_as_refusal() -> None:
    events = feed(
        {"type": "response.refusal.delta", "output_index": 0, "item_id": "m1", "delta": "No."},
        {"type": "response.refusal.done", "output_index": 0, "item_id": "m1", "refusal": "No."},
        COMPLETED,
    )
    assert events == [TextDelta(0, "No."), Finish(FinishReason.REFUSAL)]


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("max_output_tokens", Finish(FinishReason.MAX_TOKENS, "max_output_tokens")),
        ("content_filter", Finish(FinishReason.REFUSAL, "content_filter")),
        ("something_new", Finish(FinishReason.UNSUPPORTED, "incomplete: something_new")),
    ],
)
def test_incomplete_reasons(reason: str, finish: Finish) -> None:
    events = feed(
        {
            "type": "response.incomplete",
            "response": {
                "incomplete_details": {"reason": reason},
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
        }
    )
    assert events == [UsageReport(Usage(input=10, output=5)), finish]


def test_response_failed_is_an_api_error() -> None:
    failed = {
        "type": "response.failed",
        "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
    }
    with pytest.raises(ApiError) as info:
        feed(failed)
    assert (info.value.kind, info.value.message) == ("server_error", "boom")
    assert info.value.is_retryable


def test_documented_error_event_shape() -> None:
    with pytest.raises(ApiError) as info:
        feed({"type": "error", "code": "rate_limit_exceeded", "message": "slow", "param": None})
    assert (info.value.kind, info.value.message) == ("rate_limit_exceeded", "slow")


def test_stream_without_a_terminal_event_is_unexpected_eof() -> None:
    with pytest.raises(UnexpectedEof, match=r"response\.completed"):
        feed({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"})


def test_unknown_events_and_anything_after_the_end_are_ignored() -> None:
    state = StreamState()
    assert state.on_sse(sse({"type": "response.brand_new_event", "x": 1})) == []
    assert state.on_sse(sse(COMPLETED)) == [Finish(FinishReason.END_TURN)]
    assert state.on_sse(SseEvent("message", "[DONE]")) == []
    assert state.on_sse(sse({"type": "response.output_text.delta", "delta": "late"})) == []
    assert state.on_end() == []


@pytest.mark.parametrize(
    "event",
    [
        SseEvent("message", "not json"),
        SseEvent("message", "[1, 2]"),
        sse({"type": "response.output_item.added"}),
        sse({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{"}),
        sse({"type": "response.output_item.added", "item": {"type": "function_call"}}),
    ],
    ids=["not-json", "not-object", "no-item", "args-before-start", "call-without-id"],
)
def test_protocol_violations_are_decode_errors(event: SseEvent) -> None:
    with pytest.raises(DecodeError):
        StreamState().on_sse(event)


def test_an_item_id_naming_an_item_of_another_kind_is_a_decode_error() -> None:
    state = StreamState()
    state.on_sse(
        sse({"type": "response.output_item.added", "item": {"type": "message", "id": "m"}})
    )
    with pytest.raises(DecodeError, match="is a message"):
        state.on_sse(
            sse({"type": "response.function_call_arguments.delta", "item_id": "m", "delta": "{"})
        )


# -- HTTP -------------------------------------------------------------------------------------


async def test_provider_posts_the_request_and_streams_the_fixture() -> None:
    body = (RECORDED / "openai-responses/function_call_stream.sse").read_bytes()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    request = ChatRequest(model="gpt-4o", messages=(Message.user_text("Capital of France?"),))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = OpenAIResponsesProvider(
            client, "https://api.openai.test/v1/", "sk-test", "openai", OPENAI_RESPONSES
        )
        assert provider.name == "openai"
        async with provider.stream(request) as events:
            completion = await collect(events)

    assert completion.tool_calls == [
        ToolCall("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", {"country": "France"})
    ]
    (sent,) = seen
    assert sent.method == "POST"
    assert str(sent.url) == "https://api.openai.test/v1/responses"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "text/event-stream"
    assert json.loads(sent.content) == to_wire(request, OPENAI_RESPONSES)


async def test_provider_without_a_key_sends_no_authorization() -> None:
    body = (RECORDED / "llama-server/responses_pong.sse").read_bytes()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = OpenAIResponsesProvider(
            client, "http://127.0.0.1:8088/v1", None, "local", OPENAI_RESPONSES
        )
        async with provider.stream(
            ChatRequest(model="smollm2-135m", messages=(Message.user_text("ping"),))
        ) as events:
            first = await anext(events)  # leave early: the stream must still close cleanly
    # The body comes in one read, so its text deltas arrive joined into one.
    assert isinstance(first, TextDelta)
    assert first.block == 0
    assert first.text.startswith("I'm sorry for any misunderstanding")
    assert "authorization" not in seen[0].headers
    assert str(seen[0].url) == "http://127.0.0.1:8088/v1/responses"


async def test_provider_raises_stream_errors_from_the_iteration() -> None:
    body = (
        RECORDED / "openai-responses/error_insufficient_quota_response_failed.chunks.jsonl"
    ).read_text()
    sse_body = "".join(
        f"event: {json.loads(line)['type']}\ndata: {line}\n\n" for line in body.splitlines()
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=sse_body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = OpenAIResponsesProvider(client, "https://x.test/v1", "k", "o", OPENAI_RESPONSES)
        with pytest.raises(ApiError, match="insufficient_quota"):
            async with provider.stream(ChatRequest(model="m")) as events:
                await collect(events)


def test_module_shape() -> None:
    assert openai_responses.KIND == "openai-responses"


class _HangsAfter(httpx.AsyncByteStream):
    """A body that sends `data` and then never ends (until closed)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data
        await trio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


async def test_provider_stops_reading_at_the_terminal_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    body = _HangsAfter((RECORDED / "openai-responses/function_call_stream.sse").read_bytes())

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = OpenAIResponsesProvider(
            client, "https://x.test/v1", "k", "o", OPENAI_RESPONSES, Timeouts(idle=30)
        )
        start = trio.current_time()
        async with provider.stream(ChatRequest(model="m")) as events:
            completion = await collect(events)
    assert completion.finish is FinishReason.TOOL_USE
    assert trio.current_time() - start < 1  # no wait for the idle deadline
    assert body.closed
