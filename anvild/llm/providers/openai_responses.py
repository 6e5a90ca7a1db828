"""OpenAI Responses (`POST {base_url}/responses`): request mapping and the stream state machine.

`to_wire` (pure): the system prompt is `instructions`, the transcript `input` items in order
(tool outputs before the user's text); reasoning items are replayed exactly as received, only
from this provider. Stateless (`store: false`) with `include: ["reasoning.encrypted_content"]`,
both only when the target says `replay = reasoning-items`. Tools are `strict: false` (strict
mode rejects ordinary schemas); `prompt_cache_key` only when the target's capabilities say so.
`StreamState` (sans-IO) tells items apart by `output_index` or item id (llama.cpp omits the
index), one block per item; unknown event types are ignored, and nothing after the terminal
event is read. Usage: input = input_tokens - cached. `context_length_exceeded` and
llama-server's `exceed_context_size_error` are `ContextOverflow`. The event table:
docs/decisions.md, "Module notes" (anvild.llm.providers.openai_responses).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import attrs
import httpx

from anvild.llm import stream, types
from anvild.llm.capabilities import OPENAI_RESPONSES, Capabilities, Replay
from anvild.llm.errors import ApiError, ConfigError, ContextOverflow, DecodeError, UnexpectedEof
from anvild.llm.providers import _overflow
from anvild.llm.providers._events import SseProvider, output_options
from anvild.llm.sse import SseEvent

KIND: Final = "openai-responses"
PROVIDER_META: Final = "openai-responses"
INCLUDE: Final = ("reasoning.encrypted_content",)
ERROR_PREFIX: Final = "ERROR: "


# -- request ----------------------------------------------------------------------------------


def to_wire(request: types.ChatRequest, capabilities: Capabilities) -> dict[str, Any]:
    """The JSON body of a streaming Responses request."""
    body: dict[str, Any] = {"model": request.model}
    if request.system:
        body["instructions"] = request.system
    body["input"] = [item for message in request.messages for item in _items(message, capabilities)]
    body["store"] = False
    if capabilities.replay is Replay.REASONING_ITEMS:
        body["include"] = list(INCLUDE)
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.input_schema),
                "strict": False,
            }
            for tool in request.tools
        ]
    body.update(output_options(request, capabilities))
    if request.cache_key and capabilities.prompt_cache_key:
        body["prompt_cache_key"] = request.cache_key
    body["stream"] = True
    return body


def _items(message: types.Message, capabilities: Capabilities) -> list[dict[str, Any]]:
    if message.role is types.Role.USER:
        return _user_items(message, capabilities)
    return _assistant_items(message, replay=capabilities.replay is Replay.REASONING_ITEMS)


def _user_items(message: types.Message, capabilities: Capabilities) -> list[dict[str, Any]]:
    outputs: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for block in message.content:
        match block:
            case types.ToolResult(call_id, text, is_error):
                outputs.append(
                    {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": ERROR_PREFIX + text if is_error else text,
                    }
                )
            case types.Text(text):
                if text:
                    content.append({"type": "input_text", "text": text})
            case types.Image(media_type, data):
                capabilities.require_images()
                content.append(
                    {
                        "type": "input_image",
                        "image_url": f"data:{media_type};base64,{data}",
                        "detail": "auto",
                    }
                )
            case types.Reasoning() | types.ToolCall():
                raise ConfigError(
                    f"a user message holds a {type(block).__name__} block, which only the "
                    "assistant may write; validate the transcript before sending it"
                )
    if content:
        outputs.append({"role": "user", "content": content})
    return outputs


def _assistant_items(message: types.Message, *, replay: bool) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    text: list[dict[str, Any]] = []

    def flush() -> None:
        if text:
            items.append({"type": "message", "role": "assistant", "content": list(text)})
            text.clear()

    for block in message.content:
        match block:
            case types.Text(value):
                if value:
                    text.append({"type": "output_text", "text": value})
            case types.Reasoning(_, meta):
                # Only our own reasoning items can be replayed, and only to a target that takes
                # them back; foreign reasoning is dropped.
                if replay and meta is not None and meta.provider == PROVIDER_META:
                    flush()
                    items.append(meta.data)
            case types.ToolCall(call_id, name, arguments):
                flush()
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": name,
                        # Arguments that were not valid JSON are kept as the model's raw text.
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments, ensure_ascii=False),
                    }
                )
            case types.Image() | types.ToolResult():
                raise ConfigError(
                    f"an assistant message holds a {type(block).__name__} block, which the "
                    "Responses API cannot take from the assistant; validate the transcript"
                )
    flush()
    return items


# -- stream -----------------------------------------------------------------------------------


@attrs.define
class _Item:
    block: int
    kind: str
    streamed: bool = False  # a delta carried (some of) this item's content
    started: bool = False  # ToolCallStart was sent (function calls)
    summary_index: int | None = None


def _usage(raw: object) -> stream.Usage | None:
    if not isinstance(raw, dict):
        return None
    total_input = raw.get("input_tokens")
    details = raw.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    output = raw.get("output_tokens")
    uncached = total_input
    if isinstance(total_input, int) and isinstance(cached, int):
        uncached = total_input - cached
    return stream.Usage(
        input=uncached if isinstance(uncached, int) else None,
        output=output if isinstance(output, int) else None,
        cache_read=cached if isinstance(cached, int) else None,
    )


def _text_of(parts: object, kinds: tuple[str, ...]) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        part.get("text") or part.get("refusal") or ""
        for part in parts
        if isinstance(part, dict) and part.get("type") in kinds
    )


class StreamState:
    """Turns Responses stream events into StreamEvents (see the module docstring)."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, object], _Item] = {}
        self._latest: dict[str, _Item] = {}  # kind -> the item of that kind seen last
        self._next_block = 0
        self._called = False
        self._refused = False
        self._done = False

    @property
    def finished(self) -> bool:
        """Whether the terminal event (completed or incomplete) has been seen."""
        return self._done

    def on_sse(self, event: SseEvent) -> list[stream.StreamEvent]:
        if self._done or event.data == "[DONE]":
            return []
        try:
            data = json.loads(event.data)
        except json.JSONDecodeError as exc:
            raise DecodeError(f"Responses event is not JSON ({exc}): {event.data[:200]!r}") from exc
        if not isinstance(data, dict):
            raise DecodeError(f"Responses event is not a JSON object: {event.data[:200]!r}")
        kind = data.get("type")
        if not isinstance(kind, str):
            kind = event.event
        return self._dispatch(kind, data)

    def on_end(self) -> list[stream.StreamEvent]:
        if not self._done:
            raise UnexpectedEof(
                "the Responses stream ended before response.completed, response.incomplete or "
                "response.failed; the answer is truncated"
            )
        return []

    # -- events --------------------------------------------------------------------------------

    def _dispatch(self, kind: str, data: dict[str, Any]) -> list[stream.StreamEvent]:
        match kind:
            case "response.output_item.added":
                return self._item_added(data)
            case "response.output_text.delta" | "response.refusal.delta":
                return self._text_delta(data, refusal=kind == "response.refusal.delta")
            case "response.output_text.done" | "response.refusal.done":
                return self._text_done(data, refusal=kind == "response.refusal.done")
            case "response.reasoning_summary_text.delta" | "response.reasoning_text.delta":
                return self._reasoning_delta(data)
            case "response.reasoning_summary_text.done" | "response.reasoning_text.done":
                return self._reasoning_done(data)
            case "response.function_call_arguments.delta":
                return self._arguments(data, str(data.get("delta") or ""))
            case "response.function_call_arguments.done":
                item = self._item(data, "function_call")
                if item.streamed:
                    return []
                return self._arguments(data, str(data.get("arguments") or ""))
            case "response.output_item.done":
                return self._item_done(data)
            case "response.completed":
                reason = stream.FinishReason.END_TURN
                if self._refused:
                    reason = stream.FinishReason.REFUSAL
                elif self._called:
                    reason = stream.FinishReason.TOOL_USE
                return self._finish(data, stream.Finish(reason))
            case "response.incomplete":
                return self._finish(data, self._incomplete(data))
            case "response.failed":
                response = data.get("response")
                error = response.get("error") if isinstance(response, dict) else None
                raise _api_error(error, "response_failed", "the response failed")
            case "error":
                nested = data.get("error")
                raise _api_error(nested if isinstance(nested, dict) else data, "error", "")
            case _:
                return []

    def _item_added(self, data: dict[str, Any]) -> list[stream.StreamEvent]:
        raw = data.get("item")
        if not isinstance(raw, dict):
            raise DecodeError("response.output_item.added without an item")
        item = self._item(data, str(raw.get("type")), raw, added=True)
        if item.kind == "function_call":
            return self._start_call(item, raw)
        return []

    def _item_done(self, data: dict[str, Any]) -> list[stream.StreamEvent]:
        raw = data.get("item")
        if not isinstance(raw, dict):
            raise DecodeError("response.output_item.done without an item")
        item = self._item(data, str(raw.get("type")), raw)
        events: list[stream.StreamEvent] = []
        match item.kind:
            case "function_call":
                events += self._start_call(item, raw)
                if not item.streamed and (arguments := raw.get("arguments")):
                    item.streamed = True
                    events.append(stream.ToolCallDelta(item.block, str(arguments)))
            case "reasoning":
                if not item.streamed:
                    summary = raw.get("summary")
                    texts = [
                        part["text"]
                        for part in (summary if isinstance(summary, list) else [])
                        if isinstance(part, dict) and isinstance(part.get("text"), str)
                    ]
                    if text := "\n\n".join(texts):
                        item.streamed = True
                        events.append(stream.ReasoningDelta(item.block, text))
                events.append(stream.BlockMeta(item.block, types.ProviderMeta(PROVIDER_META, raw)))
            case "message":
                if not item.streamed:
                    parts = raw.get("content")
                    if _text_of(parts, ("refusal",)):
                        self._refused = True
                    if text := _text_of(parts, ("output_text", "refusal")):
                        item.streamed = True
                        events.append(stream.TextDelta(item.block, text))
            case _:
                pass  # server-side tool items (web search, ...) are outside this harness
        return events

    def _start_call(self, item: _Item, raw: dict[str, Any]) -> list[stream.StreamEvent]:
        if item.started:
            return []
        call_id = raw.get("call_id") or raw.get("id")
        name = raw.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str) or not call_id or not name:
            raise DecodeError(f"function_call item without a call_id or a name: {raw!r}")
        item.started = True
        self._called = True
        return [stream.ToolCallStart(item.block, call_id, name)]

    def _text_delta(self, data: dict[str, Any], *, refusal: bool) -> list[stream.StreamEvent]:
        item = self._item(data, "message")
        self._refused = self._refused or refusal
        delta = data.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        item.streamed = True
        return [stream.TextDelta(item.block, delta)]

    def _text_done(self, data: dict[str, Any], *, refusal: bool) -> list[stream.StreamEvent]:
        item = self._item(data, "message")
        self._refused = self._refused or refusal
        text = data.get("refusal" if refusal else "text")
        if item.streamed or not isinstance(text, str) or not text:
            return []
        item.streamed = True
        return [stream.TextDelta(item.block, text)]

    def _reasoning_delta(self, data: dict[str, Any]) -> list[stream.StreamEvent]:
        item = self._item(data, "reasoning")
        delta = data.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        events: list[stream.StreamEvent] = []
        index = data.get("summary_index")
        if isinstance(index, int):
            if item.summary_index is not None and index != item.summary_index and item.streamed:
                events.append(stream.ReasoningDelta(item.block, "\n\n"))
            item.summary_index = index
        item.streamed = True
        events.append(stream.ReasoningDelta(item.block, delta))
        return events

    def _reasoning_done(self, data: dict[str, Any]) -> list[stream.StreamEvent]:
        item = self._item(data, "reasoning")
        text = data.get("text")
        if item.streamed or not isinstance(text, str) or not text:
            return []
        item.streamed = True
        return [stream.ReasoningDelta(item.block, text)]

    def _arguments(self, data: dict[str, Any], fragment: str) -> list[stream.StreamEvent]:
        item = self._item(data, "function_call")
        if not item.started:
            raise DecodeError("function call arguments before their response.output_item.added")
        if not fragment:
            return []
        item.streamed = True
        return [stream.ToolCallDelta(item.block, fragment)]

    def _incomplete(self, data: dict[str, Any]) -> stream.Finish:
        response = data.get("response")
        details = response.get("incomplete_details") if isinstance(response, dict) else None
        reason = details.get("reason") if isinstance(details, dict) else None
        match reason:
            case "max_output_tokens":
                return stream.Finish(stream.FinishReason.MAX_TOKENS, reason)
            case "content_filter":
                return stream.Finish(stream.FinishReason.REFUSAL, reason)
            case _:
                return stream.Finish(stream.FinishReason.UNSUPPORTED, f"incomplete: {reason}")

    def _finish(self, data: dict[str, Any], finish: stream.Finish) -> list[stream.StreamEvent]:
        self._done = True
        response = data.get("response")
        usage = _usage(response.get("usage")) if isinstance(response, dict) else None
        events: list[stream.StreamEvent] = [] if usage is None else [stream.UsageReport(usage)]
        events.append(finish)
        return events

    # -- item bookkeeping ---------------------------------------------------------------------

    def _item(
        self,
        data: dict[str, Any],
        kind: str,
        raw: dict[str, Any] | None = None,
        *,
        added: bool = False,
    ) -> _Item:
        """The item an event is about, found by output index or item id (whichever the server
        sent; with neither, the latest item of that kind), or a new block for a new item."""
        keys: list[tuple[str, object]] = []
        index = data.get("output_index")
        if isinstance(index, int):
            keys.append(("index", index))
        item_id = raw.get("id") if raw is not None else data.get("item_id")
        if isinstance(item_id, str) and item_id:
            keys.append(("id", item_id))
        item = next((self._keys[key] for key in keys if key in self._keys), None)
        if item is None and not keys and not added:
            # Neither index nor id: the event continues the latest item of its kind.
            item = self._latest.get(kind)
        if item is None:
            item = _Item(self._next_block, kind)
            self._next_block += 1
        elif item.kind != kind:
            raise DecodeError(
                f"Responses output item {keys[0][1]!r} is a {item.kind}, but an event for a "
                f"{kind} named it"
            )
        self._latest[kind] = item
        for key in keys:
            self._keys.setdefault(key, item)
        return item


def context_overflow(error: Mapping[str, Any]) -> ContextOverflow | None:
    """The error object as a ContextOverflow (OpenAI's, llama-server's or vLLM's shape), else
    None."""
    return _overflow.openai(error) or _overflow.llama_server(error) or _overflow.vllm(error)


def _api_error(
    error: object, default_kind: str, default_message: str
) -> ApiError | ContextOverflow:
    if not isinstance(error, dict):
        return ApiError(default_kind, default_message or "the provider reported an error")
    if (overflow := context_overflow(error)) is not None:
        return overflow
    kind = error.get("code") or error.get("type") or default_kind
    message = error.get("message") or default_message or json.dumps(error)
    return ApiError(str(kind), str(message))


# -- HTTP glue --------------------------------------------------------------------------------


class OpenAIResponsesProvider(SseProvider):
    """A Responses endpoint: OpenAI's, or a compatible server's (llama.cpp, vLLM, ...)."""

    kind = KIND
    default_capabilities = OPENAI_RESPONSES
    wire_state = StreamState
    overflow = context_overflow

    @staticmethod
    def endpoint(base_url: str) -> str:
        return base_url.rstrip("/") + "/responses"

    def build_request(self, request: types.ChatRequest) -> httpx.Request:
        headers = {"accept": "text/event-stream"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return self._client.build_request(
            "POST", self._endpoint, json=to_wire(request, self.capabilities), headers=headers
        )
