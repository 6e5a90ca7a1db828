"""Gemini GenerateContent (`POST {base_url}/models/{model}:streamGenerateContent?alt=sse`).

The GenerateContent family only (the Interactions API is another protocol). `to_wire` (pure)
maps call ids to function names over the whole transcript first (a `functionResponse` names its
function); reasoning with another provider's meta is dropped; schemas go verbatim in
`parametersJsonSchema`, or compiled to `parameters` for the legacy dialect. Nothing is sent for
caching (Gemini caches implicitly).
Thought signatures go back on the same part they came on (call meta, or a reasoning block's
`BlockMeta`), only when the target says `replay = thought-signatures`. A call without a Gemini id
gets a fresh unique one, never sent back. `StreamState` (sans-IO) assembles streamed
`partialArgs` into one `ToolCallDelta` per call, normalizes usage (missing counts are zero) and
maps finish reasons (safety kinds -> REFUSAL, unknown -> UNSUPPORTED). An input-token-count
400 is a `ContextOverflow`. Details: docs/decisions.md, "Module notes" (...providers.gemini).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import httpx

from anvild.llm import stream, types
from anvild.llm.capabilities import GEMINI, Capabilities, Replay, SchemaDialect
from anvild.llm.errors import ApiError, ConfigError, ContextOverflow, DecodeError, UnexpectedEof
from anvild.llm.providers import _overflow
from anvild.llm.providers._events import SseProvider, output_options
from anvild.llm.schema import UnsupportedSchema, gemini_schema
from anvild.llm.sse import SseEvent

KIND: Final = "gemini"
PROVIDER_META: Final = "gemini"

_TOKEN_COUNT: Final = re.compile(
    r"input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)",
    re.IGNORECASE,
)

REFUSAL_REASONS: Final = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)


# -- request ----------------------------------------------------------------------------------


def to_wire(request: types.ChatRequest, capabilities: Capabilities) -> dict[str, Any]:
    """The JSON body of a streamGenerateContent request (the model is in the URL)."""
    names: dict[str, str] = {}
    wire_ids: dict[str, str] = {}
    for message in request.messages:
        for call in message.tool_calls():
            names[call.id] = call.name
            if (wire_id := _meta(call.meta).get("id")) is not None:
                wire_ids[call.id] = str(wire_id)

    contents = []
    for message in request.messages:
        if message.role is types.Role.USER:
            parts = _user_parts(message, names, wire_ids, capabilities)
        else:
            parts = _model_parts(message, capabilities)
        if parts:
            contents.append(
                {"role": "user" if message.role is types.Role.USER else "model", "parts": parts}
            )

    body: dict[str, Any] = {"contents": contents}
    if request.system:
        body["systemInstruction"] = {"parts": [{"text": request.system}]}
    if request.tools:
        body["tools"] = [
            {"functionDeclarations": [_declaration(tool, capabilities) for tool in request.tools]}
        ]
    body["generationConfig"] = output_options(request, capabilities)
    return body


def _meta(meta: types.ProviderMeta | None) -> dict[str, Any]:
    """Gemini's own meta data, or {} for none or another provider's."""
    if meta is None or meta.provider != PROVIDER_META or not isinstance(meta.data, dict):
        return {}
    return meta.data


def _image(block: types.Image, capabilities: Capabilities) -> dict[str, Any]:
    capabilities.require_images()
    return {"inlineData": {"mimeType": block.media_type, "data": block.data}}


def _user_parts(
    message: types.Message,
    names: dict[str, str],
    wire_ids: dict[str, str],
    capabilities: Capabilities,
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for block in message.content:
        match block:
            case types.ToolResult(call_id, content, is_error):
                if call_id not in names:
                    raise ConfigError(
                        f"tool result for call {call_id!r}, which no assistant message made; "
                        "validate the transcript before sending it"
                    )
                response: dict[str, Any] = {
                    "name": names[call_id],
                    "response": {"error" if is_error else "result": content},
                }
                if call_id in wire_ids:
                    response["id"] = wire_ids[call_id]
                results.append({"functionResponse": response})
            case types.Text(text):
                if text:
                    rest.append({"text": text})
            case types.Image():
                rest.append(_image(block, capabilities))
            case types.Reasoning() | types.ToolCall():
                raise ConfigError(
                    f"a user message holds a {type(block).__name__} block, which only the "
                    "assistant may write; validate the transcript before sending it"
                )
    return results + rest


def _model_parts(message: types.Message, capabilities: Capabilities) -> list[dict[str, Any]]:
    # Signatures go back only to a target that takes them (the capability table's `replay`).
    signed = capabilities.replay is Replay.THOUGHT_SIGNATURES
    parts: list[dict[str, Any]] = []
    for block in message.content:
        match block:
            case types.Text(text):
                if text:
                    parts.append({"text": text})
            case types.Image():
                parts.append(_image(block, capabilities))
            case types.Reasoning(text, meta):
                data = _meta(meta)
                signature = data.get("thoughtSignature")
                if signature is None or not signed:
                    continue  # foreign or unsigned reasoning cannot be replayed
                if text:
                    parts.append({"text": text, "thought": True, "thoughtSignature": signature})
                elif (
                    data.get("part") == "text"
                    and parts
                    and "text" in parts[-1]
                    and "thoughtSignature" not in parts[-1]
                    and not parts[-1].get("thought")
                ):
                    parts[-1]["thoughtSignature"] = signature
                else:
                    parts.append({"text": "", "thoughtSignature": signature})
            case types.ToolCall(_, name, arguments, meta):
                data = _meta(meta)
                call: dict[str, Any] = {"name": name, "args": _arguments(arguments)}
                if "id" in data:
                    call["id"] = data["id"]
                part: dict[str, Any] = {"functionCall": call}
                if signed and "thoughtSignature" in data:
                    part["thoughtSignature"] = data["thoughtSignature"]
                parts.append(part)
            case types.ToolResult():
                raise ConfigError(
                    "an assistant message holds a tool result, which only the user may send; "
                    "validate the transcript before sending it"
                )
    return parts


def _arguments(arguments: types.Json) -> dict[str, Any]:
    """Gemini takes arguments as an object. Anything else can only come from another
    provider's history (a model that wrote invalid JSON); it is wrapped, not lost."""
    if isinstance(arguments, dict):
        return arguments
    return {"_raw_arguments": arguments}


def _declaration(tool: types.ToolSpec, capabilities: Capabilities) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
    if capabilities.schema_dialect is SchemaDialect.JSON_SCHEMA:
        declaration["parametersJsonSchema"] = dict(tool.input_schema)
        return declaration
    try:
        parameters = gemini_schema(tool.input_schema)
    except UnsupportedSchema as exc:
        raise ConfigError(
            f"tool {tool.name!r} has a parameter schema this Gemini target cannot take "
            f'({exc}); simplify the schema, or set schema_dialect = "json-schema" for a model '
            "that accepts parametersJsonSchema"
        ) from exc
    # The legacy dialect refuses an OBJECT with no properties; a tool without parameters
    # simply declares none.
    if not (parameters.get("type") == "OBJECT" and not parameters.get("properties")):
        declaration["parameters"] = parameters
    return declaration


# -- stream -----------------------------------------------------------------------------------

_PATH_SEGMENT = re.compile(
    r"\.(?P<name>[^\W\d]\w*)"
    r"|\[(?P<index>\d+)\]"
    r"|\['(?P<single>(?:[^'\\]|\\.)*)'\]"
    r'|\["(?P<double>(?:[^"\\]|\\.)*)"\]'
)


def _parse_path(path: str) -> list[str | int]:
    """The segments of a normalized RFC 9535 JSON path such as `$.a.b[0]['c d']`."""
    if not path.startswith("$"):
        raise DecodeError(f"partialArgs jsonPath {path!r} does not start at the root ($)")
    segments: list[str | int] = []
    position = 1
    while position < len(path):
        match = _PATH_SEGMENT.match(path, position)
        if match is None:
            raise DecodeError(f"partialArgs jsonPath {path!r} is not a supported JSON path")
        if (index := match.group("index")) is not None:
            segments.append(int(index))
        else:
            quoted = match.group("single") or match.group("double")
            name = match.group("name")
            segments.append(name if name is not None else re.sub(r"\\(.)", r"\1", quoted or ""))
        position = match.end()
    return segments


def _assign(
    root: dict[str, Any], path: list[str | int], value: types.Json, *, append: bool
) -> None:
    """Set (or, for a continued string, extend) the value at `path` inside `root`."""
    if not path:
        raise DecodeError("partialArgs jsonPath names the root, not an argument")
    node: dict[str, Any] | list[Any] = root
    for position, segment in enumerate(path):
        last = position == len(path) - 1
        if isinstance(node, list):
            if not isinstance(segment, int):
                raise DecodeError("partialArgs jsonPath names a member of an array")
            while len(node) <= segment:
                node.append(None)
            current = node[segment]
        else:
            if not isinstance(segment, str):
                raise DecodeError("partialArgs jsonPath indexes into an object")
            current = node.get(segment)
        if last:
            if append and isinstance(current, str) and isinstance(value, str):
                value = current + value
            child: Any = value
        elif isinstance(current, dict | list):
            node = current
            continue
        elif current is None:
            child = [] if isinstance(path[position + 1], int) else {}
        else:
            raise DecodeError("partialArgs jsonPath goes through a value that is not a container")
        if isinstance(node, list):
            assert isinstance(segment, int)
            node[segment] = child
        else:
            assert isinstance(segment, str)
            node[segment] = child
        if not last:
            node = child


@attrs.define
class _Call:
    block: int
    args: dict[str, Any] = attrs.Factory(dict)
    continuing: set[str] = attrs.Factory(set)  # jsonPaths whose string value goes on
    open: bool = True


def _new_call_id() -> str:
    return f"gemini-{uuid.uuid4().hex}"


def _count(metadata: dict[str, Any], key: str) -> int:
    value = metadata.get(key, 0)
    return value if isinstance(value, int) else 0


class StreamState:
    """Turns streamGenerateContent chunks into StreamEvents (see the module docstring).

    `new_id` makes the ids of calls Gemini did not name; tests pass a deterministic one."""

    def __init__(self, *, new_id: Callable[[], str] = _new_call_id) -> None:
        self._new_id = new_id
        self._next_block = 0
        self._open: tuple[str, int] | None = None  # (kind, block) of the block text extends
        self._call: _Call | None = None
        self._called = False
        self._finish: stream.Finish | None = None
        self._usage: stream.Usage | None = None

    def on_sse(self, event: SseEvent) -> list[stream.StreamEvent]:
        try:
            data = json.loads(event.data)
        except json.JSONDecodeError as exc:
            raise DecodeError(f"Gemini chunk is not JSON ({exc}): {event.data[:200]!r}") from exc
        if not isinstance(data, dict):
            raise DecodeError(f"Gemini chunk is not a JSON object: {event.data[:200]!r}")
        if isinstance(error := data.get("error"), dict):
            if (overflow := context_overflow(error)) is not None:
                raise overflow
            kind = error.get("status") or error.get("code") or "error"
            raise ApiError(str(kind), str(error.get("message") or json.dumps(error)))

        events: list[stream.StreamEvent] = []
        candidates = data.get("candidates")
        candidate = _first_candidate(candidates)
        if candidate is not None:
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict):
                    events += self._part(part)
            if isinstance(reason := candidate.get("finishReason"), str):
                events += self._close_call()
                self._finish = _finish(reason, self._called, candidate.get("finishMessage"))
        feedback = data.get("promptFeedback")
        if (
            candidate is None
            and isinstance(feedback, dict)
            and isinstance(blocked := feedback.get("blockReason"), str)
        ):
            self._finish = stream.Finish(stream.FinishReason.REFUSAL, f"prompt blocked: {blocked}")
        if isinstance(metadata := data.get("usageMetadata"), dict):
            usage = _usage(metadata)
            if usage is not None and usage != self._usage:
                self._usage = usage
                events.append(stream.UsageReport(usage))
        return events

    def on_end(self) -> list[stream.StreamEvent]:
        events = self._close_call()
        if self._finish is None:
            raise UnexpectedEof(
                "the Gemini stream ended without a finishReason; the answer is truncated"
            )
        finish = self._finish
        if finish.reason is stream.FinishReason.END_TURN and self._called:
            finish = stream.Finish(stream.FinishReason.TOOL_USE, finish.detail)
        events.append(finish)
        return events

    # -- parts ---------------------------------------------------------------------------------

    def _block(self, kind: str) -> int:
        """The block a part of `kind` extends: the open one if it has that kind, else new."""
        if self._open is not None and self._open[0] == kind:
            return self._open[1]
        block = self._next_block
        self._next_block += 1
        self._open = (kind, block)
        return block

    def _signature_block(self) -> int:
        """A block of its own for a signature that came on a text part."""
        block = self._next_block
        self._next_block += 1
        self._open = None  # text after a signed part starts a new part
        return block

    def _part(self, part: dict[str, Any]) -> list[stream.StreamEvent]:
        signature = part.get("thoughtSignature")
        if isinstance(call := part.get("functionCall"), dict):
            return self._function_call(call, signature if isinstance(signature, str) else None)
        events = self._close_call()
        text = part.get("text")
        if not isinstance(text, str):
            if isinstance(signature, str):
                # A signature on a part this harness does not keep (code execution, a
                # generated image): kept like one on an empty text part.
                meta = types.ProviderMeta(PROVIDER_META, {"thoughtSignature": signature})
                events.append(stream.BlockMeta(self._signature_block(), meta))
            return events
        if part.get("thought") is True:
            block = self._block("thought")
            if text:
                events.append(stream.ReasoningDelta(block, text))
            if isinstance(signature, str):
                meta = types.ProviderMeta(PROVIDER_META, {"thoughtSignature": signature})
                events.append(stream.BlockMeta(block, meta))
                self._open = None
            return events
        if text:
            events.append(stream.TextDelta(self._block("text"), text))
        if isinstance(signature, str):
            data: dict[str, Any] = {"thoughtSignature": signature}
            if text:
                data["part"] = "text"
            events.append(
                stream.BlockMeta(self._signature_block(), types.ProviderMeta(PROVIDER_META, data))
            )
        return events

    def _function_call(
        self, call: dict[str, Any], signature: str | None
    ) -> list[stream.StreamEvent]:
        events: list[stream.StreamEvent] = []
        name = call.get("name")
        current = self._call
        if current is not None and current.open and not name:
            # The next piece of the call being streamed.
            if signature is not None:
                meta = types.ProviderMeta(PROVIDER_META, {"thoughtSignature": signature})
                events.append(stream.BlockMeta(current.block, meta))
            self._apply(current, call)
            current.open = call.get("willContinue") is True
            if not current.open:
                events += self._close_call()
            return events
        events += self._close_call()
        if not name:
            if call.get("partialArgs") or call.get("args"):
                raise DecodeError(f"Gemini functionCall without a name outside a call: {call!r}")
            return events  # an empty terminator after a call that already ended
        if not isinstance(name, str):
            raise DecodeError(f"Gemini functionCall name is not a string: {call!r}")
        wire_id = call.get("id")
        meta_data: dict[str, Any] = {}
        if signature is not None:
            meta_data["thoughtSignature"] = signature
        if isinstance(wire_id, str) and wire_id:
            meta_data["id"] = wire_id
        call_id = wire_id if isinstance(wire_id, str) and wire_id else self._new_id()
        block = self._next_block
        self._next_block += 1
        self._open = None
        self._called = True
        call_meta = types.ProviderMeta(PROVIDER_META, meta_data) if meta_data else None
        events.append(stream.ToolCallStart(block, call_id, name, call_meta))
        self._call = _Call(block)
        self._apply(self._call, call)
        self._call.open = call.get("willContinue") is True
        if not self._call.open:
            events += self._close_call()
        return events

    def _apply(self, current: _Call, call: dict[str, Any]) -> None:
        args = call.get("args")
        if isinstance(args, dict):
            current.args.update(args)
        partial = call.get("partialArgs")
        for piece in partial if isinstance(partial, list) else []:
            if not isinstance(piece, dict) or not isinstance(path := piece.get("jsonPath"), str):
                raise DecodeError(f"Gemini partialArgs entry without a jsonPath: {piece!r}")
            value: types.Json
            if "stringValue" in piece:
                value = piece["stringValue"]
            elif "numberValue" in piece:
                value = piece["numberValue"]
            elif "boolValue" in piece:
                value = piece["boolValue"]
            elif "nullValue" in piece:
                value = None
            else:
                raise DecodeError(f"Gemini partialArgs entry without a value: {piece!r}")
            _assign(
                current.args,
                _parse_path(path),
                value,
                append=path in current.continuing,
            )
            if piece.get("willContinue") is True:
                current.continuing.add(path)
            else:
                current.continuing.discard(path)

    def _close_call(self) -> list[stream.StreamEvent]:
        current = self._call
        if current is None:
            return []
        self._call = None
        if not current.args:
            return []  # no arguments: the builder makes them {}
        return [stream.ToolCallDelta(current.block, json.dumps(current.args, ensure_ascii=False))]


def context_overflow(error: Mapping[str, Any]) -> ContextOverflow | None:
    """The error object as a ContextOverflow (see the module doc), else None."""
    if error.get("status") != "INVALID_ARGUMENT" and error.get("code") != 400:
        return None
    message = _overflow.message_of(error)
    found = _TOKEN_COUNT.search(message)
    if found is None:
        return None
    return ContextOverflow(message, requested=int(found.group(1)), limit=int(found.group(2)))


def _first_candidate(candidates: object) -> dict[str, Any] | None:
    """Candidate 0: this harness asks for one candidate."""
    if not isinstance(candidates, list):
        return None
    for candidate in candidates:
        if isinstance(candidate, dict) and candidate.get("index", 0) == 0:
            return candidate
    return None


def _finish(reason: str, called: bool, message: object) -> stream.Finish:
    detail = f"{reason}: {message}" if isinstance(message, str) and message else reason
    if reason == "STOP":
        return stream.Finish(
            stream.FinishReason.TOOL_USE if called else stream.FinishReason.END_TURN
        )
    if reason == "MAX_TOKENS":
        return stream.Finish(stream.FinishReason.MAX_TOKENS)
    if reason in REFUSAL_REASONS:
        return stream.Finish(stream.FinishReason.REFUSAL, detail)
    return stream.Finish(stream.FinishReason.UNSUPPORTED, detail)


def _usage(metadata: dict[str, Any]) -> stream.Usage | None:
    if not any(key in metadata for key in ("promptTokenCount", "totalTokenCount")):
        return None  # a chunk that only says how it was served (trafficType)
    prompt = _count(metadata, "promptTokenCount")
    cached = _count(metadata, "cachedContentTokenCount")
    return stream.Usage(
        input=prompt - cached,
        output=_count(metadata, "candidatesTokenCount") + _count(metadata, "thoughtsTokenCount"),
        cache_read=cached,
    )


# -- HTTP glue --------------------------------------------------------------------------------


class GeminiProvider(SseProvider):
    """The Gemini API (generativelanguage.googleapis.com/v1beta) or a compatible endpoint."""

    kind = KIND
    default_capabilities = GEMINI
    wire_state = StreamState
    overflow = context_overflow

    @staticmethod
    def endpoint(base_url: str) -> str:
        return base_url.rstrip("/")

    def url(self, model: str) -> str:
        model = model.removeprefix("models/")
        return f"{self._endpoint}/models/{model}:streamGenerateContent"

    def build_request(self, request: types.ChatRequest) -> httpx.Request:
        headers = {"accept": "text/event-stream"}
        if self._api_key:
            headers["x-goog-api-key"] = self._api_key
        return self._client.build_request(
            "POST",
            self.url(request.model),
            params={"alt": "sse"},
            json=to_wire(request, self.capabilities),
            headers=headers,
        )
