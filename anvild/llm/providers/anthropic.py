"""Anthropic Messages (`POST /v1/messages`, `anthropic-version: 2023-06-01`), streamed.

`to_wire` (pure): `system`, tools with `input_schema`, `max_tokens` always; empty text blocks
left out; tool results first on their user message; reasoning replayed only from Anthropic's own
signed meta (foreign reasoning cannot be signed, so it is dropped); an emptied message is dropped
and same-role neighbours merged. `cache=True` places at most the API's four `cache_control`
breakpoints: last tool, system, the `stable_prefix` end, the last message.
`StreamState` (sans-IO) maps the events by content-block `index` (so a late `signature_delta`
lands on its block). Stop reasons map to `FinishReason`; `pause_turn` and unknown ones are
UNSUPPORTED, never END_TURN. A body ending after `message_delta` carried the stop reason is
finished by `on_end`; one ending before is `UnexpectedEof`. "prompt is too long: N > M" (and
llama-server's shape) is a `ContextOverflow` with both counts. The full wire mapping:
docs/decisions.md, "Module notes" (anvild.llm.providers.anthropic).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

import httpx

from anvild.llm import stream, types
from anvild.llm.capabilities import ANTHROPIC, Capabilities
from anvild.llm.errors import ApiError, ContextOverflow, DecodeError, UnexpectedEof
from anvild.llm.providers import _overflow
from anvild.llm.providers._events import SseProvider, output_options
from anvild.llm.sse import SseEvent

KIND: Final = "anthropic"
API_VERSION: Final = "2023-06-01"

# Keys of the ProviderMeta data this adapter writes and reads back.
SIGNATURE: Final = "signature"
REDACTED: Final = "redacted_thinking"

_EPHEMERAL: Final = {"type": "ephemeral"}
# Blocks the API does not let carry cache_control.
_NOT_CACHEABLE: Final = frozenset({"thinking", "redacted_thinking"})
# The API refuses a request with more cache_control breakpoints than this.
MAX_BREAKPOINTS: Final = 4

_PROMPT_TOO_LONG: Final = re.compile(
    r"prompt is too long:\s*(\d+) tokens\s*>\s*(\d+) maximum", re.IGNORECASE
)

_STOP_REASONS: Final = {
    "end_turn": stream.FinishReason.END_TURN,
    "tool_use": stream.FinishReason.TOOL_USE,
    "max_tokens": stream.FinishReason.MAX_TOKENS,
    "stop_sequence": stream.FinishReason.STOP_SEQUENCE,
    "refusal": stream.FinishReason.REFUSAL,
    "model_context_window_exceeded": stream.FinishReason.MAX_TOKENS,
}


# -- request -------------------------------------------------------------------------------------


def to_wire(request: types.ChatRequest, capabilities: Capabilities = ANTHROPIC) -> dict[str, Any]:
    """The JSON body of a streaming Messages request."""
    messages, origins = _messages(request.messages, capabilities)
    body: dict[str, Any] = {"model": request.model}
    if request.system:
        body["system"] = (
            [{"type": "text", "text": request.system}] if request.cache else request.system
        )
    body["messages"] = messages
    if request.tools:
        tools: list[dict[str, Any]] = []
        for spec in request.tools:
            tool: dict[str, Any] = {"name": spec.name}
            if spec.description:
                tool["description"] = spec.description
            tool["input_schema"] = dict(spec.input_schema)
            tools.append(tool)
        body["tools"] = tools
    body.update(output_options(request, capabilities))
    body["stream"] = True
    if request.cache:
        _place_cache_breakpoints(body, origins, request.stable_prefix)
    return body


def _messages(
    messages: tuple[types.Message, ...], capabilities: Capabilities
) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """The wire messages, and for each of their blocks the index of the canonical message it
    came from (merging and reordering move blocks; the stable-prefix breakpoint needs to know)."""
    out: list[dict[str, Any]] = []
    origins: list[list[int]] = []
    for index, message in enumerate(messages):
        blocks = [
            wire for block in message.content if (wire := _block(block, capabilities)) is not None
        ]
        if not blocks:
            continue
        if out and out[-1]["role"] == message.role.value:
            out[-1]["content"].extend(blocks)
            origins[-1].extend([index] * len(blocks))
        else:
            out.append({"role": message.role.value, "content": blocks})
            origins.append([index] * len(blocks))
    for wire_message, origin in zip(out, origins, strict=True):
        if wire_message["role"] == types.Role.USER.value:
            # tool_result blocks must come first in a user message; sorted() is stable.
            pairs = sorted(
                zip(origin, wire_message["content"], strict=True),
                key=lambda pair: pair[1]["type"] != "tool_result",
            )
            origin[:] = [index for index, _ in pairs]
            wire_message["content"] = [block for _, block in pairs]
    return out, origins


def _block(block: types.ContentBlock, capabilities: Capabilities) -> dict[str, Any] | None:
    match block:
        case types.Text(text):
            return {"type": "text", "text": text} if text else None
        case types.Image(media_type, data):
            capabilities.require_images()
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": media_type, "data": data},
            }
        case types.Reasoning(text, meta):
            return _thinking(text, meta)
        case types.ToolCall(call_id, name, arguments):
            # Arguments that were not a JSON object (invalid JSON kept as text) cannot be sent
            # as `input`, which must be an object; the tool result for that call already told
            # the model what was wrong with them.
            return {
                "type": "tool_use",
                "id": call_id,
                "name": name,
                "input": arguments if isinstance(arguments, dict) else {},
            }
        case types.ToolResult(call_id, content, is_error):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
            if content:
                result["content"] = content
            if is_error:
                result["is_error"] = True
            return result
    raise TypeError(f"not a content block: {block!r}")  # pragma: no cover - exhaustive match


def _thinking(text: str, meta: types.ProviderMeta | None) -> dict[str, Any] | None:
    if meta is None or meta.provider != KIND or not isinstance(meta.data, Mapping):
        return None
    redacted = meta.data.get(REDACTED)
    if isinstance(redacted, str) and redacted:
        return {"type": "redacted_thinking", "data": redacted}
    signature = meta.data.get(SIGNATURE)
    if isinstance(signature, str) and signature:
        return {"type": "thinking", "thinking": text, "signature": signature}
    return None


def _place_cache_breakpoints(
    body: dict[str, Any], origins: list[list[int]], stable_prefix: int
) -> None:
    """Mark the blocks the module doc lists: tools, system, stable prefix, tail."""
    marked: list[dict[str, Any]] = []

    def mark(block: dict[str, Any] | None) -> None:
        if block is not None and not any(block is seen for seen in marked):
            marked.append(block)

    if tools := body.get("tools"):
        mark(tools[-1])
    if isinstance(system := body.get("system"), list) and system:
        mark(system[-1])
    messages: list[dict[str, Any]] = body["messages"]
    if stable_prefix > 0:
        mark(_stable_end(messages, origins, stable_prefix))
    if messages:
        mark(_last_cacheable(messages[-1]["content"]))
    for block in marked[:MAX_BREAKPOINTS]:
        block["cache_control"] = dict(_EPHEMERAL)


def _last_cacheable(blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((block for block in reversed(blocks) if block["type"] not in _NOT_CACHEABLE), None)


def _stable_end(
    messages: list[dict[str, Any]], origins: list[list[int]], stable_prefix: int
) -> dict[str, Any] | None:
    """The last block that may carry a breakpoint in the longest rendered prefix made only of
    blocks from the first `stable_prefix` canonical messages, or None."""
    end: dict[str, Any] | None = None
    for message, origin in zip(messages, origins, strict=True):
        for block, index in zip(message["content"], origin, strict=True):
            if index >= stable_prefix:
                return end
            if block["type"] not in _NOT_CACHEABLE:
                end = block
    return end


# -- response ------------------------------------------------------------------------------------


def context_overflow(error: Mapping[str, Any]) -> ContextOverflow | None:
    """The error object as a ContextOverflow, if it is one (see the module doc), else None."""
    message = _overflow.message_of(error)
    if error.get("type") == "invalid_request_error" and message.lower().startswith(
        "prompt is too long"
    ):
        found = _PROMPT_TOO_LONG.match(message)
        return ContextOverflow(
            message,
            requested=int(found.group(1)) if found else None,
            limit=int(found.group(2)) if found else None,
        )
    return _overflow.llama_server(error)


def _int(data: Any, key: str) -> int | None:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(raw: Any) -> stream.Usage | None:
    """Anthropic's usage object: `input_tokens` is already uncached input."""
    if not isinstance(raw, Mapping):
        return None
    usage = stream.Usage(
        input=_int(raw, "input_tokens"),
        output=_int(raw, "output_tokens"),
        cache_read=_int(raw, "cache_read_input_tokens"),
        cache_write=_int(raw, "cache_creation_input_tokens"),
    )
    return None if usage == stream.Usage() else usage


class StreamState:
    """Turns the SSE events of one Messages response into StreamEvents (see the module doc)."""

    def __init__(self) -> None:
        self._started = False  # message_start seen
        self._finished = False  # Finish emitted at message_stop
        self._blocks: dict[int, str] = {}  # content-block index -> wire block type
        # tool_use blocks whose content_block_start carried a non-empty `input`: used only if
        # no input_json_delta arrives for that block.
        self._start_input: dict[int, str] = {}
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None

    def on_sse(self, event: SseEvent) -> list[stream.StreamEvent]:
        if self._finished:
            return []  # nothing may follow message_stop; the glue stops reading there
        try:
            payload = json.loads(event.data)
        except json.JSONDecodeError as exc:
            raise DecodeError(
                f"Anthropic sent a {event.event!r} event whose data is not JSON ({exc}): "
                f"{event.data[:200]!r}"
            ) from exc
        if not isinstance(payload, dict):
            raise DecodeError(f"Anthropic sent a {event.event!r} event that is not a JSON object")
        kind = payload.get("type")
        if not isinstance(kind, str):
            kind = event.event
        match kind:
            case "message_start":
                return self._message_start(payload)
            case "content_block_start":
                return self._block_start(payload)
            case "content_block_delta":
                return self._block_delta(payload)
            case "content_block_stop":
                return self._flush_start_input(_index(payload, kind))
            case "message_delta":
                return self._message_delta(payload)
            case "message_stop":
                return self._message_stop()
            case "error":
                error = payload.get("error")
                if not isinstance(error, Mapping):
                    error = payload
                if (overflow := context_overflow(error)) is not None:
                    raise overflow
                raise ApiError(
                    str(error.get("type") or "error"),
                    str(error.get("message") or "the provider reported an error mid-stream"),
                )
            case _:
                return []  # ping, and event types newer than this adapter

    def on_end(self) -> list[stream.StreamEvent]:
        if self._finished:
            return []
        if not self._started:
            raise UnexpectedEof("the Anthropic stream ended before message_start")
        if self._stop_reason is None:
            raise UnexpectedEof(
                "the Anthropic stream ended before the provider sent its stop reason; "
                "the response is incomplete"
            )
        # The stop reason is final: only the message_stop terminator is missing (module doc).
        return self._finish()

    # -- events ----------------------------------------------------------------------------------

    def _message_start(self, payload: dict[str, Any]) -> list[stream.StreamEvent]:
        if self._started:
            raise DecodeError("Anthropic sent a second message_start in one stream")
        self._started = True
        message = payload.get("message")
        usage = _usage(message.get("usage")) if isinstance(message, Mapping) else None
        return [stream.UsageReport(usage)] if usage is not None else []

    def _block_start(self, payload: dict[str, Any]) -> list[stream.StreamEvent]:
        index = _index(payload, "content_block_start")
        block = payload.get("content_block")
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise DecodeError(f"content_block_start {index} has no content_block type")
        if index in self._blocks:
            raise DecodeError(f"content_block_start for block {index}, which already started")
        block_type: str = block["type"]
        self._blocks[index] = block_type
        match block_type:
            case "text":
                text = block.get("text")
                return [stream.TextDelta(index, text)] if isinstance(text, str) and text else []
            case "thinking":
                events: list[stream.StreamEvent] = []
                thinking = block.get("thinking")
                if isinstance(thinking, str) and thinking:
                    events.append(stream.ReasoningDelta(index, thinking))
                signature = block.get("signature")
                if isinstance(signature, str) and signature:
                    events.append(
                        stream.BlockMeta(index, types.ProviderMeta(KIND, {SIGNATURE: signature}))
                    )
                return events
            case "redacted_thinking":
                data = block.get("data")
                if not isinstance(data, str) or not data:
                    raise DecodeError(f"redacted_thinking block {index} has no data")
                return [stream.BlockMeta(index, types.ProviderMeta(KIND, {REDACTED: data}))]
            case "tool_use":
                call_id, name = block.get("id"), block.get("name")
                if not isinstance(call_id, str) or not isinstance(name, str):
                    raise DecodeError(f"tool_use block {index} has no id or name")
                start_input = block.get("input")
                if isinstance(start_input, Mapping) and start_input:
                    self._start_input[index] = json.dumps(start_input)
                return [stream.ToolCallStart(index, call_id, name)]
            case _:
                # Server tools and block types newer than this adapter. Requests from this
                # harness enable no server tools; a pause_turn that needs them ends UNSUPPORTED.
                return []

    def _block_delta(self, payload: dict[str, Any]) -> list[stream.StreamEvent]:
        index = _index(payload, "content_block_delta")
        block_type = self._blocks.get(index)
        if block_type is None:
            raise DecodeError(f"content_block_delta for block {index} before its start")
        delta = payload.get("delta")
        if not isinstance(delta, Mapping):
            raise DecodeError(f"content_block_delta for block {index} has no delta")
        match delta.get("type"):
            case "text_delta":
                text = delta.get("text")
                return [stream.TextDelta(index, text)] if isinstance(text, str) and text else []
            case "thinking_delta":
                thinking = delta.get("thinking")
                if isinstance(thinking, str) and thinking:
                    return [stream.ReasoningDelta(index, thinking)]
                return []
            case "signature_delta":
                signature = delta.get("signature")
                if isinstance(signature, str) and signature:
                    return [
                        stream.BlockMeta(index, types.ProviderMeta(KIND, {SIGNATURE: signature}))
                    ]
                return []
            case "input_json_delta":
                # The deltas are the input; a start `input` was only a placeholder.
                self._start_input.pop(index, None)
                fragment = delta.get("partial_json")
                if isinstance(fragment, str) and fragment and block_type == "tool_use":
                    return [stream.ToolCallDelta(index, fragment)]
                return []
            case _:
                return []  # citations and delta types newer than this adapter

    def _flush_start_input(self, index: int | None = None) -> list[stream.StreamEvent]:
        indices = list(self._start_input) if index is None else [index]
        return [
            stream.ToolCallDelta(i, self._start_input.pop(i))
            for i in indices
            if i in self._start_input
        ]

    def _message_delta(self, payload: dict[str, Any]) -> list[stream.StreamEvent]:
        events = self._flush_start_input()
        delta = payload.get("delta")
        if isinstance(delta, Mapping):
            reason = delta.get("stop_reason")
            if isinstance(reason, str) and reason:
                self._stop_reason = reason
            sequence = delta.get("stop_sequence")
            if isinstance(sequence, str):
                self._stop_sequence = sequence
        usage = _usage(payload.get("usage"))
        if usage is not None:
            events.append(stream.UsageReport(usage))
        return events

    def _message_stop(self) -> list[stream.StreamEvent]:
        if not self._started:
            raise DecodeError("Anthropic sent message_stop before message_start")
        if self._stop_reason is None:
            raise DecodeError("Anthropic sent message_stop without a stop_reason")
        return self._finish()

    def _finish(self) -> list[stream.StreamEvent]:
        assert self._stop_reason is not None
        events = self._flush_start_input()
        reason = _STOP_REASONS.get(self._stop_reason)
        if reason is None:
            events.append(stream.Finish(stream.FinishReason.UNSUPPORTED, self._stop_reason))
        elif self._stop_reason == "model_context_window_exceeded":
            events.append(stream.Finish(reason, self._stop_reason))
        elif reason is stream.FinishReason.STOP_SEQUENCE:
            events.append(stream.Finish(reason, self._stop_sequence))
        else:
            events.append(stream.Finish(reason))
        self._finished = True
        return events


def _index(payload: Mapping[str, Any], kind: str) -> int:
    index = payload.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise DecodeError(f"{kind} without a valid content-block index: {index!r}")
    return index


# -- HTTP glue -----------------------------------------------------------------------------------


def messages_url(base_url: str) -> str:
    """`{base_url}/v1/messages`; a base URL that already ends in `/v1` is not doubled."""
    base = base_url.rstrip("/")
    return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"


class AnthropicProvider(SseProvider):
    """A Provider for the Anthropic Messages API and servers that speak it."""

    kind = KIND
    default_capabilities = ANTHROPIC
    wire_state = StreamState
    overflow = context_overflow
    endpoint = staticmethod(messages_url)

    def build_request(self, request: types.ChatRequest) -> httpx.Request:
        headers = {
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return self._client.build_request(
            "POST", self._endpoint, headers=headers, json=to_wire(request, self.capabilities)
        )
