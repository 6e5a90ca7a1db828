"""Every adapter turns its provider's "the request is larger than the context window" into one
`ContextOverflow` with the counts the provider gave, wherever it surfaces (an HTTP 400 body or
an error inside a 2xx stream); near misses stay what they were.

The bodies are the hand-written fixtures under fixtures/handwritten/ (their README says what each
is based on); the expected counts are read off the fixtures by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from anvild.llm.builder import collect
from anvild.llm.capabilities import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from anvild.llm.errors import ApiError, ContextOverflow, HttpError, LlmError
from anvild.llm.http import Timeouts
from anvild.llm.providers import anthropic, gemini, openai_chat, openai_responses
from anvild.llm.providers._events import SseProvider
from anvild.llm.retry import Retry, RetryPolicy
from anvild.llm.types import ChatRequest, Message
from tests.unit.llm.providers.replay import StreamStateLike, replay

HANDWRITTEN = Path(__file__).resolve().parents[4] / "fixtures" / "handwritten"
REQUEST = ChatRequest(model="m", messages=(Message.user_text("a very long conversation"),))

Factory = Callable[[httpx.AsyncClient], SseProvider]


def _anthropic(client: httpx.AsyncClient) -> SseProvider:
    return anthropic.AnthropicProvider(client, "https://api.test", "k", "a", ANTHROPIC, Timeouts())


def _chat(client: httpx.AsyncClient) -> SseProvider:
    return openai_chat.OpenAiChatProvider(client, "https://api.test/v1", "k", "c", OPENAI_CHAT)


def _responses(client: httpx.AsyncClient) -> SseProvider:
    return openai_responses.OpenAIResponsesProvider(
        client, "https://api.test/v1", "k", "r", OPENAI_RESPONSES
    )


def _gemini(client: httpx.AsyncClient) -> SseProvider:
    return gemini.GeminiProvider(client, "https://api.test/v1beta", "k", "g", GEMINI)


def answering(status: int, body: bytes, content_type: str) -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda _request: httpx.Response(
            status, headers={"content-type": content_type}, content=body
        )
    )


async def failure(
    factory: Factory, status: int, body: bytes, content_type: str = "application/json"
) -> LlmError:
    """The LlmError the provider raises for a response with this status and body."""
    async with httpx.AsyncClient(transport=answering(status, body, content_type)) as client:
        with pytest.raises(LlmError) as info:
            async with factory(client).stream(REQUEST) as events:
                await collect(events)
    return info.value


# -- HTTP error bodies -------------------------------------------------------------------------

OVERFLOWS = [
    pytest.param(
        _anthropic,
        "anthropic/prompt_too_long_400.json",
        208310,
        200000,
        "prompt is too long: 208310 tokens > 200000 maximum",
        id="anthropic",
    ),
    pytest.param(
        _chat,
        "openai-chat/context_length_exceeded_400.json",
        130532,
        128000,
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130532 tokens. Please reduce the length of the messages.",
        id="openai-chat",
    ),
    *(
        pytest.param(
            factory,
            "openai-chat/vllm_max_context_length_400.json",
            6616,
            6048,
            "This model's maximum context length is 6048 tokens. However, you requested 6616 "
            "tokens (568 in the messages, 6048 in the completion). Please reduce the length of "
            "the messages or completion.",
            id=f"vllm-{name}",
        )
        for name, factory in (("chat", _chat), ("responses", _responses))
    ),
    pytest.param(
        _chat,
        "openai-chat/vllm_max_context_length_new_400.json",
        2101,
        2048,
        "This model's maximum context length is 2048 tokens. However, your request has 2101 "
        "input tokens. Please reduce the length of the input messages. (parameter=input_tokens, "
        "value=2101)",
        id="vllm-new-chat",
    ),
    pytest.param(
        _responses,
        "openai-responses/context_length_exceeded_400.json",
        None,
        None,
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again.",
        id="openai-responses",
    ),
    pytest.param(
        _gemini,
        "gemini/input_token_count_exceeded_400.json",
        1200293,
        1048576,
        "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
        id="gemini",
    ),
    *(
        pytest.param(
            factory,
            "llama-server/exceed_context_size_400.json",
            40069,
            32768,
            "request (40069 tokens) exceeds the available context size (32768 tokens), "
            "try increasing it",
            id=f"llama-server-{name}",
        )
        for name, factory in (("chat", _chat), ("responses", _responses), ("messages", _anthropic))
    ),
    *(
        pytest.param(
            factory,
            "llama-server/exceed_context_size_no_counts_400.json",
            None,
            None,
            "the request exceeds the available context size, try increasing it",
            id=f"llama-server-old-{name}",
        )
        for name, factory in (("chat", _chat), ("responses", _responses), ("messages", _anthropic))
    ),
]


@pytest.mark.parametrize(("factory", "fixture", "requested", "limit", "message"), OVERFLOWS)
async def test_an_http_400_overflow_is_a_context_overflow_with_its_counts(
    factory: Factory, fixture: str, requested: int | None, limit: int | None, message: str
) -> None:
    error = await failure(factory, 400, (HANDWRITTEN / fixture).read_bytes())
    assert isinstance(error, ContextOverflow)
    assert (error.requested, error.limit, error.message) == (requested, limit, message)
    assert not error.is_retryable
    assert str(error).startswith("the request did not fit the model's context window")
    # The HTTP error it came from stays reachable for logs.
    assert isinstance(error.__cause__, HttpError)
    assert error.__cause__.status == 400


@pytest.mark.parametrize(
    ("factory", "fixture", "status"),
    [
        pytest.param(_anthropic, "anthropic/max_tokens_too_large_400.json", 400, id="anthropic"),
        pytest.param(_chat, "openai-chat/string_above_max_length_400.json", 400, id="openai-chat"),
        pytest.param(
            _responses, "openai-chat/string_above_max_length_400.json", 400, id="openai-responses"
        ),
        pytest.param(_gemini, "gemini/invalid_argument_400.json", 400, id="gemini"),
        pytest.param(_chat, "openai-chat/vllm_max_tokens_400.json", 400, id="vllm"),
        pytest.param(_chat, "llama-server/batch_too_large_500.json", 500, id="llama-server-500"),
        # The right body with the wrong status is not an overflow either.
        pytest.param(_anthropic, "anthropic/prompt_too_long_400.json", 413, id="anthropic-413"),
        pytest.param(_chat, "openai-chat/context_length_exceeded_400.json", 429, id="chat-429"),
        pytest.param(_gemini, "gemini/input_token_count_exceeded_400.json", 500, id="gemini-500"),
    ],
)
async def test_near_misses_stay_http_errors(factory: Factory, fixture: str, status: int) -> None:
    body = (HANDWRITTEN / fixture).read_bytes()
    error = await failure(factory, status, body)
    assert type(error) is HttpError
    assert error.status == status
    assert error.body == body.decode()


@pytest.mark.parametrize("factory", [_anthropic, _chat, _responses, _gemini])
async def test_a_400_that_is_not_json_stays_an_http_error(factory: Factory) -> None:
    error = await failure(factory, 400, b"<html>Bad Request</html>", "text/html")
    assert type(error) is HttpError


async def test_gemini_reads_an_error_body_wrapped_in_a_list() -> None:
    body = b"[" + (HANDWRITTEN / "gemini/input_token_count_exceeded_400.json").read_bytes() + b"]"
    error = await failure(_gemini, 400, body)
    assert isinstance(error, ContextOverflow)
    assert (error.requested, error.limit) == (1200293, 1048576)


async def test_llama_server_counts_in_the_message_only_are_parsed() -> None:
    body = json.dumps(
        {
            "error": {
                "code": 400,
                "message": "request (4476 tokens) exceeds the available context size "
                "(4096 tokens), try increasing it",
                "type": "exceed_context_size_error",
            }
        }
    ).encode()
    error = await failure(_chat, 400, body)
    assert isinstance(error, ContextOverflow)
    assert (error.requested, error.limit) == (4476, 4096)


@pytest.mark.parametrize(
    ("message", "requested", "limit"),
    [
        (
            "This model's maximum context length is 4096 tokens. However, you requested 4130 "
            "tokens (3130 in the messages, 1000 in the completion). Please reduce the length of "
            "the messages or completion.",
            4130,
            4096,
        ),
        ("context too long", None, None),
    ],
)
async def test_openai_counts_are_read_from_each_wording(
    message: str, requested: int | None, limit: int | None
) -> None:
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
    ).encode()
    error = await failure(_chat, 400, body)
    assert isinstance(error, ContextOverflow)
    assert (error.requested, error.limit, error.message) == (requested, limit, message)


async def test_retry_gives_up_on_an_overflow_at_once() -> None:
    attempts: list[httpx.Request] = []
    body = (HANDWRITTEN / "anthropic/prompt_too_long_400.json").read_bytes()

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        return httpx.Response(400, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = Retry(_anthropic(client), RetryPolicy(max_attempts=5))
        with pytest.raises(ContextOverflow):
            async with provider.stream(REQUEST) as events:
                await collect(events)
    assert len(attempts) == 1


# -- errors inside a 2xx stream ----------------------------------------------------------------


def sse(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "body.sse"
    path.write_text(text)
    return path


def test_responses_response_failed_with_the_code_is_an_overflow() -> None:
    with pytest.raises(ContextOverflow) as info:
        replay(
            HANDWRITTEN / "openai-responses/context_length_exceeded_response_failed.sse",
            openai_responses.StreamState(),
        )
    assert info.value.message.startswith("Your input exceeds the context window")
    assert (info.value.requested, info.value.limit) == (None, None)


def test_responses_error_event_with_the_code_is_an_overflow(tmp_path: Path) -> None:
    event = {
        "type": "error",
        "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model.",
        "param": None,
        "sequence_number": 2,
    }
    body = sse(tmp_path, f"event: error\ndata: {json.dumps(event)}\n\n")
    with pytest.raises(ContextOverflow):
        replay(body, openai_responses.StreamState())


def test_chat_error_inside_the_stream_is_an_overflow(tmp_path: Path) -> None:
    error = {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 8227 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
    body = sse(tmp_path, f"data: {json.dumps({'error': error})}\n\n")
    with pytest.raises(ContextOverflow) as info:
        replay(body, openai_chat.StreamState())
    assert (info.value.requested, info.value.limit) == (8227, 8192)


def test_anthropic_error_event_with_prompt_too_long_is_an_overflow(tmp_path: Path) -> None:
    payload = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 200049 tokens > 200000 maximum",
        },
    }
    body = sse(tmp_path, f"event: error\ndata: {json.dumps(payload)}\n\n")
    with pytest.raises(ContextOverflow) as info:
        replay(body, anthropic.StreamState())
    assert (info.value.requested, info.value.limit) == (200049, 200000)


def test_gemini_error_payload_inside_the_stream_is_an_overflow(tmp_path: Path) -> None:
    payload = json.loads((HANDWRITTEN / "gemini/input_token_count_exceeded_400.json").read_text())
    body = sse(tmp_path, f"data: {json.dumps(payload)}\r\n\r\n")
    with pytest.raises(ContextOverflow) as info:
        replay(body, gemini.StreamState())
    assert (info.value.requested, info.value.limit) == (1200293, 1048576)


@pytest.mark.parametrize(
    ("state", "text"),
    [
        (
            anthropic.StreamState,
            'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
            '"message":"Overloaded"}}\n\n',
        ),
        (
            openai_chat.StreamState,
            'data: {"error":{"message":"bad tool call","code":"tool_use_failed"}}\n\n',
        ),
        (
            openai_responses.StreamState,
            'event: error\ndata: {"type":"error","code":"insufficient_quota",'
            '"message":"quota"}\n\n',
        ),
        (
            gemini.StreamState,
            'data: {"error":{"code":400,"status":"INVALID_ARGUMENT",'
            '"message":"Request contains an invalid argument."}}\r\n\r\n',
        ),
    ],
)
def test_other_stream_errors_stay_api_errors(
    tmp_path: Path, state: Callable[[], StreamStateLike], text: str
) -> None:
    with pytest.raises(ApiError):
        replay(sse(tmp_path, text), state())
