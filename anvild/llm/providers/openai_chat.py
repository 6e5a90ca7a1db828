"""OpenAI Chat Completions (`POST {base_url}/chat/completions`), streamed: OpenAI and the servers
that copy it (Ollama, llama-server, vLLM, Groq, compatibility endpoints).

`to_wire` (pure): system message first; tool results as `tool` messages before the user's text
(an error result's content starts `ERROR: `); text-only user content as a plain string; reasoning
dropped (no replay here); the output cap in the field the target reads; `prompt_cache_key` only
when the target's capabilities say so.
`StreamState` (sans-IO) reads choice 0; tool calls are keyed by wire `index` (any start, or
missing; a different id on a used index starts a new call); missing ids are synthesized and
unique. Finish comes at `[DONE]` or `on_end`; unknown reasons are UNSUPPORTED, none at all is
`UnexpectedEof`. Usage: input = prompt - cached, cache_write 0; unreported cache stays unknown.
Errors inside the 200 stream raise `ApiError`; `context_length_exceeded` and llama-server's
`exceed_context_size_error` are `ContextOverflow`. Wire table and server quirks:
docs/decisions.md, "Module notes" (anvild.llm.providers.openai_chat).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import httpx

from anvild.llm import stream, types
from anvild.llm.capabilities import OPENAI_CHAT_COMPAT, Capabilities
from anvild.llm.errors import ApiError, ContextOverflow, DecodeError, UnexpectedEof
from anvild.llm.providers import _overflow
from anvild.llm.providers._events import SseProvider, output_options
from anvild.llm.sse import SseEvent

KIND: Final = "openai-chat"
ERROR_PREFIX: Final = "ERROR: "

_FINISH_REASONS: Final = {
    "stop": stream.FinishReason.END_TURN,
    "tool_calls": stream.FinishReason.TOOL_USE,
    "function_call": stream.FinishReason.TOOL_USE,
    "length": stream.FinishReason.MAX_TOKENS,
    "content_filter": stream.FinishReason.REFUSAL,
}


# -- request -------------------------------------------------------------------------------------


def to_wire(
    request: types.ChatRequest, capabilities: Capabilities = OPENAI_CHAT_COMPAT
) -> dict[str, Any]:
    """The JSON body of a streaming Chat Completions request."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role is types.Role.USER:
            messages.extend(_user(message, capabilities))
        else:
            messages.append(_assistant(message))
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": dict(spec.input_schema),
                },
            }
            for spec in request.tools
        ]
    body.update(output_options(request, capabilities))
    if request.cache_key and capabilities.prompt_cache_key:
        body["prompt_cache_key"] = request.cache_key
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    return body


def _user(message: types.Message, capabilities: Capabilities) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        match block:
            case types.ToolResult(call_id, content, is_error):
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": ERROR_PREFIX + content if is_error else content,
                    }
                )
            case types.Text(text) if text:
                parts.append({"type": "text", "text": text})
            case types.Image(media_type, data):
                capabilities.require_images()
                url = f"data:{media_type};base64,{data}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            case _:
                pass  # empty text; reasoning and calls never sit on a user message
    if len(parts) == 1 and parts[0]["type"] == "text":
        out.append({"role": "user", "content": parts[0]["text"]})
    elif parts:
        out.append({"role": "user", "content": parts})
    return out


def _assistant(message: types.Message) -> dict[str, Any]:
    # Reasoning blocks are left out: Chat Completions has no way to take them back.
    text = "".join(block.text for block in message.content if isinstance(block, types.Text))
    calls = [
        {
            "id": block.id,
            "type": "function",
            "function": {"name": block.name, "arguments": _arguments(block)},
        }
        for block in message.content
        if isinstance(block, types.ToolCall)
    ]
    wire: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        wire["tool_calls"] = calls
    return wire


def _arguments(call: types.ToolCall) -> str:
    if isinstance(call.arguments, str):
        return call.arguments  # what the model wrote, kept verbatim because it was not JSON
    return json.dumps(call.arguments, ensure_ascii=False)


# -- response ------------------------------------------------------------------------------------


def new_call_id() -> str:
    """An id for a tool call the server sent without one."""
    return f"call_{uuid.uuid4().hex}"


def _int(data: Any, key: str) -> int | None:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalize_usage(raw: Mapping[str, Any]) -> stream.Usage:
    """Chat Completions usage in anvil's meaning (uncached input, cache reads apart)."""
    prompt = _int(raw, "prompt_tokens")
    cached = _int(raw.get("prompt_tokens_details"), "cached_tokens")
    uncached = prompt if prompt is None or cached is None else max(0, prompt - cached)
    return stream.Usage(
        input=uncached,
        output=_int(raw, "completion_tokens"),
        cache_read=cached,
        cache_write=0,
    )


@attrs.define
class _Call:
    block: int
    id: str
    id_from_wire: bool
    name: str | None = None
    started: bool = False
    pending: list[str] = attrs.Factory(list)  # arguments received before the name


class StreamState:
    """Turns the SSE events of one Chat Completions response into StreamEvents."""

    def __init__(self, *, new_id: Callable[[], str] = new_call_id) -> None:
        self._new_id = new_id
        self._next_block = 0
        self._text_block: int | None = None
        self._reasoning_block: int | None = None
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}
        self._finish_reason: str | None = None
        self._refused = False
        self._finished = False

    def on_sse(self, event: SseEvent) -> list[stream.StreamEvent]:
        if self._finished:
            return []
        data = event.data.strip()
        if data == "[DONE]":
            return self._finish() if self._finish_reason is not None else []
        try:
            payload = json.loads(data)
        except json.JSONDecodeError as exc:
            raise DecodeError(
                f"the server sent a chunk that is not JSON ({exc}): {data[:200]!r}"
            ) from exc
        if not isinstance(payload, dict):
            raise DecodeError(f"the server sent a chunk that is not a JSON object: {data[:200]!r}")
        if event.event == "error" or payload.get("error") is not None:
            raise _api_error(payload.get("error") or payload)
        # Parsed JSON: every object is a dict (a cheaper check than `Mapping`, per chunk).
        events: list[stream.StreamEvent] = []
        choices = payload.get("choices") or []
        if not isinstance(choices, list):
            raise DecodeError(f"`choices` is not a list: {choices!r}")
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                events.extend(self._choice(choice))
                break
        usage = payload.get("usage")
        if not isinstance(usage, dict):
            groq = payload.get("x_groq")  # Groq reports usage there on the last chunk
            usage = groq.get("usage") if isinstance(groq, dict) else None
        if isinstance(usage, dict):
            events.append(stream.UsageReport(normalize_usage(usage)))
        return events

    def on_end(self) -> list[stream.StreamEvent]:
        if self._finished:
            return []
        if self._finish_reason is None:
            raise UnexpectedEof(
                "the chat completion stream ended without a finish_reason; "
                "the response is incomplete"
            )
        return self._finish()

    # -- chunks ----------------------------------------------------------------------------------

    def _choice(self, choice: Mapping[str, Any]) -> list[stream.StreamEvent]:
        events: list[stream.StreamEvent] = []
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = _text(delta, "reasoning_content") or _text(delta, "reasoning")
            if reasoning:
                events.append(stream.ReasoningDelta(self._reasoning(), reasoning))
            if content := _text(delta, "content"):
                events.append(stream.TextDelta(self._text(), content))
            if refusal := _text(delta, "refusal"):
                self._refused = True
                events.append(stream.TextDelta(self._text(), refusal))
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                for tool_call in tool_calls:
                    if not isinstance(tool_call, Mapping):
                        raise DecodeError(f"a tool call delta is not an object: {tool_call!r}")
                    events.extend(self._tool_call(tool_call))
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self._finish_reason = reason
        return events

    def _text(self) -> int:
        if self._text_block is None:
            self._text_block = self._allocate()
        return self._text_block

    def _reasoning(self) -> int:
        if self._reasoning_block is None:
            self._reasoning_block = self._allocate()
        return self._reasoning_block

    def _allocate(self) -> int:
        block = self._next_block
        self._next_block += 1
        return block

    def _tool_call(self, delta: Mapping[str, Any]) -> list[stream.StreamEvent]:
        index = delta.get("index")
        if isinstance(index, bool) or not isinstance(index, int):
            index = None
        wire_id = delta.get("id") if isinstance(delta.get("id"), str) else None
        function = delta.get("function")
        if not isinstance(function, Mapping):
            function = {}
        name = function.get("name") if isinstance(function.get("name"), str) else None
        arguments = function.get("arguments")
        if isinstance(arguments, Mapping | list):
            arguments = json.dumps(arguments)  # some servers send the parsed object
        elif not isinstance(arguments, str):
            arguments = ""

        call = self._by_index.get(index) if index is not None else self._last_call()
        if call is None or (wire_id and call.id_from_wire and wire_id != call.id):
            call = _Call(
                block=self._allocate(),
                id=wire_id or self._new_id(),
                id_from_wire=bool(wire_id),
            )
            self._calls.append(call)
            if index is not None:
                self._by_index[index] = call
        elif wire_id and not call.id_from_wire and not call.started:
            call.id, call.id_from_wire = wire_id, True
        if name and call.name is None:
            call.name = name

        events: list[stream.StreamEvent] = []
        if not call.started:
            if arguments:
                call.pending.append(arguments)
            if call.name is not None:
                call.started = True
                events.append(stream.ToolCallStart(call.block, call.id, call.name))
                if call.pending:
                    events.append(stream.ToolCallDelta(call.block, "".join(call.pending)))
                    call.pending.clear()
        elif arguments:
            events.append(stream.ToolCallDelta(call.block, arguments))
        return events

    def _last_call(self) -> _Call | None:
        return self._calls[-1] if self._calls else None

    def _finish(self) -> list[stream.StreamEvent]:
        assert self._finish_reason is not None
        for call in self._calls:
            if not call.started:
                raise DecodeError(
                    f"tool call {call.id!r} never received a function name; the server's "
                    "stream is malformed"
                )
        raw = self._finish_reason
        reason = _FINISH_REASONS.get(raw)
        finish: stream.Finish
        if reason is None:
            finish = stream.Finish(stream.FinishReason.UNSUPPORTED, raw)
        elif reason is stream.FinishReason.END_TURN and self._refused:
            finish = stream.Finish(stream.FinishReason.REFUSAL, "refusal")
        elif reason is stream.FinishReason.END_TURN and self._calls:
            # Some servers (older Ollama, some vLLM builds) say "stop" after tool calls.
            finish = stream.Finish(stream.FinishReason.TOOL_USE)
        elif reason is stream.FinishReason.REFUSAL:
            finish = stream.Finish(reason, raw)
        else:
            finish = stream.Finish(reason)
        self._finished = True
        return [finish]


def _text(delta: Mapping[str, Any], key: str) -> str:
    value = delta.get(key)
    return value if isinstance(value, str) else ""


def context_overflow(error: Mapping[str, Any]) -> ContextOverflow | None:
    """The error object as a ContextOverflow (OpenAI's, llama-server's or vLLM's shape), else
    None."""
    return _overflow.openai(error) or _overflow.llama_server(error) or _overflow.vllm(error)


def _api_error(error: Any) -> ApiError | ContextOverflow:
    if isinstance(error, Mapping):
        if (overflow := context_overflow(error)) is not None:
            return overflow
        # Groq's `code` names the failure ("tool_use_failed"); llama.cpp's is the HTTP status
        # it would have sent, and its `type` ("server_error") says more.
        code, kind = error.get("code"), error.get("type")
        if isinstance(code, str) and code:
            kind = code
        message = error.get("message") or json.dumps(error)
        return ApiError(str(kind or "error"), str(message))
    return ApiError("error", str(error))


# -- HTTP glue -----------------------------------------------------------------------------------


def completions_url(base_url: str) -> str:
    """`{base_url}/chat/completions`: the base URL includes the version (`.../v1`)."""
    return f"{base_url.rstrip('/')}/chat/completions"


class OpenAiChatProvider(SseProvider):
    """A Provider for Chat Completions servers. Without an API key no Authorization header is
    sent (local Ollama and llama-server need none)."""

    kind = KIND
    default_capabilities = OPENAI_CHAT_COMPAT
    wire_state = StreamState
    overflow = context_overflow
    endpoint = staticmethod(completions_url)

    def build_request(self, request: types.ChatRequest) -> httpx.Request:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return self._client.build_request(
            "POST", self._endpoint, headers=headers, json=to_wire(request, self.capabilities)
        )
