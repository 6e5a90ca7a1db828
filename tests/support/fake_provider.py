"""A fake LLM provider over real HTTP: real sockets on 127.0.0.1, real SSE, scripted answers.

One server speaks all four protocol families, each on its usual path:

    POST /v1/messages                                        Anthropic Messages
    POST /v1/chat/completions                                OpenAI Chat Completions
    POST /v1/responses                                       OpenAI Responses
    POST /v1beta/models/{model}:streamGenerateContent?alt=sse  Gemini GenerateContent

so a provider configured with `base_url = <server.url>/v1` (or `/v1beta` for Gemini) talks to it
unchanged. Answers are *scripted* as canonical turns (text, reasoning, tool calls, a finish, an
HTTP failure, a mid-stream error) and rendered into whichever protocol the request used, so one
script drives an agent whatever provider kind it is configured with.

From a trio test:

    fake = FakeProvider([Turn.reply("pong"), Turn.calls(Call("get_weather", {"city": "Oslo"}))])
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)          # binds 127.0.0.1 on a free port
        ... base_url = fake.url + "/v1" ...
        nursery.cancel_scope.cancel()
    assert fake.requests[0].protocol == "anthropic"

As a subprocess (end-to-end tests that run a real daemon against it):

    python -m tests.support.fake_provider --port 0 --script turns.json
    # prints "http://127.0.0.1:PORT" on its first stdout line once it is listening

Scripting. Turns wait in one ordered list. Each request takes the *first* waiting turn whose
conditions it meets (`model`: the request's model id; `contains`: a substring of the text of the
request's last user-side message, tool results included), so several agents sharing one server
each get their own answers: give each agent its own model id (or a distinctive prompt) and
script its turns with that condition. A turn with `repeat=True` answers every matching request
and stays. A request that no turn matches gets HTTP 400 with a message naming the model and the
request number (400, not 5xx, so no retry loop hides a script that ran out).

The JSON script format (`--script FILE`, `POST /_fake/turns`) mirrors `Turn`:

    {"turns": [
      {"model": "dev", "text": "pong"},
      {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
      {"contains": "Oslo", "reasoning": "hm", "text": "-3 °C", "usage": {"input": 9, "output": 4}},
      {"status": 529, "message": "Overloaded", "retry_after": 1},
      {"text": "half", "stream_error": {"kind": "overloaded_error", "message": "Overloaded"}},
      {"text": "cut", "finish": "max_tokens", "chunk_delay": 0.05, "repeat": true},
      {"text": "@T@;0001 @T@;0002 ", "piece": 9, "stamp": "@T@"}
    ]}

`piece` is how many characters of text (and reasoning) each delta carries (default 8). `stamp`
is a marker that the server replaces, in each SSE event just before it sends it, by its
`time.monotonic_ns()`: a benchmark scripts text like the last turn above, one marker per
delta, and a reader of the daemon's streams subtracts the embedded send time from the time it
got the line (CLOCK_MONOTONIC is one clock for every process of the machine).

Recording. Every request is kept (`requests`: method, path, query, lower-cased headers, parsed
JSON body, protocol, model, and the turn it got); a subprocess serves them at
`GET /_fake/requests`, and the count of waiting turns at `GET /_fake/pending`.
`GET /_fake/wait?requests=N&timeout=S` blocks until N requests have arrived (200, with the
count) or S seconds (default 30) went by (408): a test that must act while a turn is in flight
waits on it instead of polling.

Holding. A turn with `"hold": N` sends its first N SSE events and then waits for a release:
each `POST /_fake/release` (from a trio test: `release()`) lets one held stream go on, one
that waits now or else the next to reach its hold, so a release that comes before the request
is not lost. A test that needs a turn to stay running while it acts (queue prompts behind it,
attach to it, cancel it) holds it instead of slowing it down with `chunk_delay`, and waits on
what the client shows rather than on the clock. A held stream sends an SSE comment every
second, as providers send pings, so an HTTP client's read timeout does not end it. With
openai-chat the first event is the empty role delta, so `"hold": 1` holds before any text and
`"hold": 2` after the first piece.

Faults. A turn with `"fault"` breaks its 200 stream after `"fault_after"` SSE events (default
0): `reset` closes the connection with a TCP reset, `eof` ends the body cleanly without the
stream's last events, `truncate` sends half of the next event and then ends the body, `stall`
sends nothing more (no pings either) until the client hangs up. With `status` >= 400 (a 5xx)
and `delay` (a server that never answers), they are the provider faults the reliability harness
injects (tests/chaos/provider_faults.py).

Usage is deterministic: input tokens default to the request body's length / 4, output tokens
to the reply's length / 4 (at least 1 each), unless the turn gives `usage`.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import parse_qs, unquote, urlsplit

import attrs
import h11
import trio

Protocol: TypeAlias = Literal["anthropic", "openai-chat", "openai-responses", "gemini"]
Fault: TypeAlias = Literal["reset", "eof", "truncate", "stall"]
FAULTS: tuple[Fault, ...] = ("reset", "eof", "truncate", "stall")
Finish: TypeAlias = Literal["end_turn", "tool_use", "max_tokens", "refusal", "pause_turn"]
FINISHES: tuple[Finish, ...] = ("end_turn", "tool_use", "max_tokens", "refusal", "pause_turn")
"""`pause_turn` is Anthropic's stop for a server-tool continuation, which the harness does not
drive; the other protocols get a stop they do not define either (chat `pause_turn`, responses
incomplete for `pause_turn`, Gemini `OTHER`), so every adapter ends it as unsupported."""

MAX_BODY = 32 * 1024 * 1024
HOLD_PING = 1.0  # seconds between the SSE comments of a held stream


@attrs.frozen
class Call:
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    id: str | None = None  # None: the server makes one up (unique per request)


@attrs.frozen
class Usage:
    input: int
    output: int
    # Chat Completions only: sent as prompt_tokens_details.cached_tokens when given (as OpenAI
    # does), so every token kind is known; None leaves it out (as Ollama does).
    cache_read: int | None = None


@attrs.frozen
class StreamFailure:
    """An error event sent in the 200 stream after the turn's content."""

    kind: str = "overloaded_error"
    message: str = "Overloaded"


@attrs.frozen
class Turn:
    """One scripted answer, and the requests it may answer."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[Call, ...] = attrs.field(default=(), converter=tuple)
    finish: Finish | None = None  # None: tool_use when there are calls, else end_turn
    usage: Usage | None = None
    # An HTTP failure instead of a stream (status >= 400), with an optional Retry-After.
    status: int = 200
    message: str = ""
    retry_after: float | None = None
    stream_error: StreamFailure | None = None
    delay: float = 0.0  # seconds before the response headers
    chunk_delay: float = 0.0  # seconds between two SSE events
    piece: int = 8  # characters of text (and reasoning) per delta
    hold: int = 0  # > 0: after this many SSE events, wait for a POST /_fake/release
    stamp: str = ""  # replaced by time.monotonic_ns() in each event as it is sent
    fault: Fault | None = None  # break the stream after `fault_after` events
    fault_after: int = 0
    # Conditions.
    model: str | None = None
    contains: str | None = None
    repeat: bool = False

    @classmethod
    def reply(cls, text: str, **kwargs: Any) -> Turn:
        return cls(text=text, **kwargs)

    @classmethod
    def calls(cls, *calls: Call, text: str = "", **kwargs: Any) -> Turn:
        return cls(text=text, tool_calls=calls, **kwargs)

    @classmethod
    def failure(cls, status: int, message: str = "", **kwargs: Any) -> Turn:
        return cls(status=status, message=message or f"fake failure {status}", **kwargs)

    @property
    def finish_reason(self) -> Finish:
        if self.finish is not None:
            return self.finish
        return "tool_use" if self.tool_calls else "end_turn"

    def matches(self, request: RecordedRequest) -> bool:
        if self.model is not None and request.model != self.model:
            return False
        return self.contains is None or self.contains in request.last_user_text

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Turn:
        known = {f.name for f in attrs.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown turn keys: {sorted(unknown)} (known: {sorted(known)})")
        values = dict(data)
        if "tool_calls" in values:
            values["tool_calls"] = tuple(Call(**call) for call in values["tool_calls"])
        if values.get("usage") is not None:
            values["usage"] = Usage(**values["usage"])
        if values.get("stream_error") is not None:
            values["stream_error"] = StreamFailure(**values["stream_error"])
        if not isinstance(values.get("hold", 0), int) or values.get("hold", 0) < 0:
            raise ValueError(f"hold must be a count of events, got {values['hold']!r}")
        if not isinstance(values.get("piece", 1), int) or values.get("piece", 1) < 1:
            raise ValueError(f"piece must be a positive integer, got {values['piece']!r}")
        if values.get("fault") not in (None, *FAULTS):
            raise ValueError(f"fault must be one of {FAULTS}, got {values['fault']!r}")
        if values.get("finish") not in (None, *FINISHES):
            raise ValueError(f"finish must be one of {FINISHES}, got {values['finish']!r}")
        return cls(**values)


def load_turns(data: Mapping[str, Any]) -> list[Turn]:
    turns = data.get("turns")
    if not isinstance(turns, list):
        raise ValueError('a script is {"turns": [...]}')
    return [Turn.from_json(turn) for turn in turns]


@attrs.define
class RecordedRequest:
    number: int  # 1-based, in arrival order
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: Any
    protocol: Protocol | None
    model: str | None
    last_user_text: str
    turn: Turn | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "body": self.body,
            "protocol": self.protocol,
            "model": self.model,
            "last_user_text": self.last_user_text,
            "answered": self.turn is not None,
        }


# -- reading requests --------------------------------------------------------------------------


def _texts(content: Any) -> Iterator[str]:
    """Every text inside one message's content, whatever the protocol's block shape."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            yield from _texts(part)
    elif isinstance(content, dict):
        for key in ("text", "output", "content", "response"):
            if key in content:
                yield from _texts(content[key])
        if "functionResponse" in content:
            yield json.dumps(content["functionResponse"].get("response"))


def last_user_text(protocol: Protocol | None, body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    if protocol == "openai-responses":
        items = body.get("input")
        if isinstance(items, str):
            return items
        tail: list[str] = []
        for item in reversed(items or []):
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call_output" or item.get("role") == "user":
                tail.insert(0, " ".join(_texts(item)))
            elif tail:
                break
        return " ".join(tail)
    if protocol == "gemini":
        messages, user_roles, key = body.get("contents") or [], ("user",), "parts"
    else:
        messages, user_roles, key = body.get("messages") or [], ("user", "tool"), "content"
    tail = []
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") in user_roles:
            tail.insert(0, " ".join(_texts(message.get(key))))
        elif tail:
            break
    return " ".join(tail)


def classify(method: str, path: str) -> tuple[Protocol | None, str | None]:
    """The protocol a request path belongs to, and the model named in a Gemini path."""
    if method != "POST":
        return None, None
    if path.endswith("/messages"):
        return "anthropic", None
    if path.endswith("/chat/completions"):
        return "openai-chat", None
    if path.endswith("/responses"):
        return "openai-responses", None
    if "/models/" in path and path.endswith(":streamGenerateContent"):
        model = unquote(path.rsplit("/models/", 1)[1].rsplit(":", 1)[0])
        return "gemini", model
    return None, None


# -- rendering answers -------------------------------------------------------------------------


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _halves(text: str) -> list[str]:
    if len(text) < 2:
        return [text]
    middle = len(text) // 2
    return [text[:middle], text[middle:]]


def _sse(data: Any, event: str | None = None, *, crlf: bool = False) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    nl = "\r\n" if crlf else "\n"
    head = f"event: {event}{nl}" if event else ""
    return f"{head}data: {payload}{nl}{nl}".encode()


@attrs.frozen
class _Answer:
    """A turn made concrete for one request: ids, arguments text and usage fixed."""

    turn: Turn
    model: str
    number: int
    calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments JSON)
    usage: Usage
    # Chat Completions sends its usage chunk only when the request asks for it, as OpenAI does.
    chat_usage: bool


def _answer(turn: Turn, request: RecordedRequest, raw_body: bytes) -> _Answer:
    calls = tuple(
        (
            call.id or f"call_{request.number}_{index}",
            call.name,
            json.dumps(dict(call.arguments), ensure_ascii=False),
        )
        for index, call in enumerate(turn.tool_calls)
    )
    produced = len(turn.text) + len(turn.reasoning) + sum(len(c[2]) for c in calls)
    usage = turn.usage or Usage(input=max(1, len(raw_body) // 4), output=max(1, produced // 4))
    body = request.body if isinstance(request.body, dict) else {}
    options = body.get("stream_options")
    chat_usage = isinstance(options, dict) and options.get("include_usage") is True
    return _Answer(turn, request.model or "fake-model", request.number, calls, usage, chat_usage)


def render(protocol: Protocol, answer: _Answer) -> list[bytes]:
    """The SSE events (one bytes each) of a scripted answer in a protocol's wire format."""
    return {
        "anthropic": _anthropic,
        "openai-chat": _chat,
        "openai-responses": _responses,
        "gemini": _gemini,
    }[protocol](answer)


def _anthropic(a: _Answer) -> list[bytes]:
    t = a.turn
    out = [
        _sse(
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_fake_{a.number}",
                    "type": "message",
                    "role": "assistant",
                    "model": a.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": a.usage.input, "output_tokens": 1},
                },
            },
            "message_start",
        ),
        _sse({"type": "ping"}, "ping"),
    ]
    index = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal index
        out.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        for delta in deltas:
            out.append(
                _sse(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
            )
        out.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        index += 1

    if t.reasoning:
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            [{"type": "thinking_delta", "thinking": p} for p in _pieces(t.reasoning, t.piece)]
            + [{"type": "signature_delta", "signature": f"fake-signature-{a.number}"}],
        )
    if t.text:
        block(
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": p} for p in _pieces(t.text, t.piece)],
        )
    for call_id, name, arguments in a.calls:
        block(
            {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in _halves(arguments)],
        )
    if t.stream_error is not None:
        out.append(
            _sse(
                {
                    "type": "error",
                    "error": {"type": t.stream_error.kind, "message": t.stream_error.message},
                },
                "error",
            )
        )
        return out
    stop = {
        "end_turn": "end_turn",
        "tool_use": "tool_use",
        "max_tokens": "max_tokens",
        "pause_turn": "pause_turn",
    }
    out.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": stop.get(t.finish_reason, "refusal"),
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": a.usage.output},
            },
            "message_delta",
        )
    )
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return out


def _chat(a: _Answer) -> list[bytes]:
    t = a.turn
    base = {"id": f"chatcmpl-fake-{a.number}", "object": "chat.completion.chunk", "created": 0}
    base["model"] = a.model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _sse({**base, "choices": [choice]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"reasoning_content": p}) for p in _pieces(t.reasoning, t.piece)]
    out += [chunk({"content": p}) for p in _pieces(t.text, t.piece)]
    for index, (call_id, name, arguments) in enumerate(a.calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _halves(arguments):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    if t.stream_error is not None:
        error = {"message": t.stream_error.message, "type": t.stream_error.kind}
        out.append(_sse({"error": {**error, "code": t.stream_error.kind}}, "error"))
        return out
    finish = {
        "end_turn": "stop",
        "tool_use": "tool_calls",
        "max_tokens": "length",
        "pause_turn": "pause_turn",
    }
    out.append(chunk({}, finish.get(t.finish_reason, "content_filter")))
    if a.chat_usage:
        usage: dict[str, Any] = {
            "prompt_tokens": a.usage.input,
            "completion_tokens": a.usage.output,
            "total_tokens": a.usage.input + a.usage.output,
        }
        if a.usage.cache_read is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": a.usage.cache_read}
        out.append(_sse({**base, "choices": [], "usage": usage}))
    out.append(_sse("[DONE]"))
    return out


def _responses(a: _Answer) -> list[bytes]:
    t = a.turn
    sequence = 0
    out: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        nonlocal sequence
        out.append(_sse({"type": kind, "sequence_number": sequence, **fields}, kind))
        sequence += 1

    response = {
        "id": f"resp_fake_{a.number}",
        "object": "response",
        "created_at": 0,
        "status": "in_progress",
        "model": a.model,
        "output": [],
    }
    emit("response.created", response=response)
    emit("response.in_progress", response=response)
    items: list[dict[str, Any]] = []
    if t.reasoning:
        item_id, index = f"rs_fake_{a.number}", len(items)
        emit(
            "response.output_item.added",
            output_index=index,
            item={"id": item_id, "type": "reasoning", "summary": []},
        )
        for piece in _pieces(t.reasoning, t.piece):
            emit(
                "response.reasoning_summary_text.delta",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                delta=piece,
            )
        done = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t.reasoning}],
            "encrypted_content": f"fake-encrypted-{a.number}",
        }
        emit("response.output_item.done", output_index=index, item=done)
        items.append(done)
    if t.text:
        item_id, index = f"msg_fake_{a.number}", len(items)
        message = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        emit("response.output_item.added", output_index=index, item=message)
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        emit("response.content_part.added", **where, part=part)
        for piece in _pieces(t.text, t.piece):
            emit("response.output_text.delta", **where, delta=piece)
        emit("response.output_text.done", **where, text=t.text)
        emit("response.content_part.done", **where, part={**part, "text": t.text})
        done = {
            **message,
            "status": "completed",
            "content": [{**part, "text": t.text}],
        }
        emit("response.output_item.done", output_index=index, item=done)
        items.append(done)
    for call_id, name, arguments in a.calls:
        item_id, index = f"fc_{call_id}", len(items)
        call = {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        emit("response.output_item.added", output_index=index, item=call)
        for piece in _halves(arguments):
            emit(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=piece,
            )
        emit(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=index,
            arguments=arguments,
        )
        done = {**call, "status": "completed", "arguments": arguments}
        emit("response.output_item.done", output_index=index, item=done)
        items.append(done)
    if t.stream_error is not None:
        emit(
            "error",
            code=t.stream_error.kind,
            message=t.stream_error.message,
            param=None,
        )
        failed = {
            **response,
            "status": "failed",
            "error": {"code": t.stream_error.kind, "message": t.stream_error.message},
        }
        emit("response.failed", response=failed)
        return out
    usage = {
        "input_tokens": a.usage.input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": a.usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": a.usage.input + a.usage.output,
    }
    final = {**response, "output": items, "usage": usage}
    if t.finish_reason == "max_tokens":
        final |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
        emit("response.incomplete", response=final)
    elif t.finish_reason == "refusal":
        final |= {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}
        emit("response.incomplete", response=final)
    elif t.finish_reason == "pause_turn":
        final |= {"status": "incomplete", "incomplete_details": {"reason": "pause_turn"}}
        emit("response.incomplete", response=final)
    else:
        emit("response.completed", response={**final, "status": "completed"})
    return out


def _gemini(a: _Answer) -> list[bytes]:
    t = a.turn

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        data: dict[str, Any] = {
            "candidates": [candidate],
            "modelVersion": a.model,
            "responseId": f"fake-{a.number}",
        }
        if finish is not None:
            candidate["finishReason"] = finish
            data["usageMetadata"] = {
                "promptTokenCount": a.usage.input,
                "candidatesTokenCount": a.usage.output,
                "totalTokenCount": a.usage.input + a.usage.output,
            }
        return _sse(data, crlf=True)

    out = [chunk([{"text": p, "thought": True}]) for p in _pieces(t.reasoning, t.piece)]
    out += [chunk([{"text": p}]) for p in _pieces(t.text, t.piece)]
    signature = {"thoughtSignature": f"fake-signature-{a.number}"} if t.reasoning else {}
    calls = [
        {
            "functionCall": {"name": name, "args": json.loads(arguments)},
            **(signature if i == 0 else {}),
        }
        for i, (_, name, arguments) in enumerate(a.calls)
    ]
    if t.stream_error is not None:
        out += [chunk(calls)] if calls else []
        status = {"overloaded_error": "UNAVAILABLE", "rate_limit_error": "RESOURCE_EXHAUSTED"}
        error = {
            "code": 503,
            "message": t.stream_error.message,
            "status": status.get(t.stream_error.kind, t.stream_error.kind),
        }
        out.append(_sse({"error": error}, crlf=True))
        return out
    finish = {
        "end_turn": "STOP",
        "tool_use": "STOP",
        "max_tokens": "MAX_TOKENS",
        "pause_turn": "OTHER",
    }
    out.append(chunk(calls or [{"text": ""}], finish.get(t.finish_reason, "SAFETY")))
    return out


def error_body(protocol: Protocol | None, status: int, message: str) -> dict[str, Any]:
    """A failure in the shape each provider uses for its error responses."""
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }
    kind = kinds.get(status, "api_error")
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    if protocol == "gemini":
        return {"error": {"code": status, "message": message, "status": kind.upper()}}
    return {"error": {"message": message, "type": kind, "code": kind, "param": None}}


# -- the server --------------------------------------------------------------------------------


class _Dropped(Exception):
    """A scripted fault ended the connection."""


class FakeProvider:
    def __init__(self, turns: Sequence[Turn] = (), *, host: str = "127.0.0.1") -> None:
        self.turns: list[Turn] = list(turns)
        self.requests: list[RecordedRequest] = []
        self.host = host
        self.port: int | None = None
        self._arrived = trio.Event()  # set and replaced whenever a request is recorded
        self._releases = 0  # releases not yet taken by a held stream
        self._released = trio.Event()  # set and replaced by each release()
        self.hangups = 0  # connections the client closed while the server was sending
        self._hung_up = trio.Event()  # set and replaced by each hang-up

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the fake provider is not listening yet (await nursery.start)")
        return f"http://{self.host}:{self.port}"

    def add(self, *turns: Turn) -> None:
        self.turns.extend(turns)

    def release(self) -> None:
        """Let one stream that a `hold` turn keeps (or will keep) waiting go on."""
        self._releases += 1
        self._released.set()
        self._released = trio.Event()

    async def _take_release(self, conn: h11.Connection, stream: trio.SocketStream) -> None:
        """Wait for a release, sending an SSE comment every HOLD_PING seconds meanwhile (as
        providers send pings), so a client's read timeout does not end a held stream."""
        while not self._releases:
            with trio.move_on_after(HOLD_PING):
                await self._released.wait()
                continue
            await stream.send_all(conn.send(h11.Data(data=b": held\n\n")) or b"")
        self._releases -= 1

    @property
    def pending(self) -> int:
        """Turns still waiting (repeating turns included)."""
        return len(self.turns)

    async def serve(
        self, port: int = 0, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on `host:port` (0: a free port) until cancelled; `started` gets the URL."""
        listeners = await trio.open_tcp_listeners(port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.url)
        await trio.serve_listeners(self._connection, listeners)

    def _take(self, request: RecordedRequest) -> Turn | None:
        for index, turn in enumerate(self.turns):
            if turn.matches(request):
                if not turn.repeat:
                    del self.turns[index]
                return turn
        return None

    async def _connection(self, stream: trio.SocketStream) -> None:
        """One client connection. A client that hangs up (mid-stream: a cancelled turn, a
        killed daemon) ends only its own connection: the error must not reach
        `serve_listeners`, which would take the whole server down with it."""
        conn = h11.Connection(h11.SERVER)
        async with stream:
            try:
                await self._requests(conn, stream)
            except _Dropped:
                pass  # a scripted fault closed it
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.hangups += 1
                self._hung_up.set()
                self._hung_up = trio.Event()

    async def wait_hangups(self, count: int) -> int:
        """Block until at least `count` clients have hung up mid-response; how many have."""
        while self.hangups < count:
            await self._hung_up.wait()
        return self.hangups

    async def _requests(self, conn: h11.Connection, stream: trio.SocketStream) -> None:
        while True:
            try:
                head, body = await self._read_request(conn, stream)
            except h11.RemoteProtocolError:
                return
            if head is None:
                return
            await self._respond(conn, stream, head, body)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_request(
        self, conn: h11.Connection, stream: trio.SocketStream
    ) -> tuple[h11.Request | None, bytes]:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)  # b"" is EOF
                continue
            if isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    raise h11.RemoteProtocolError("request body too large")
            elif isinstance(event, h11.EndOfMessage):
                return head, bytes(body)
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""

    async def _respond(
        self, conn: h11.Connection, stream: trio.SocketStream, head: h11.Request, raw: bytes
    ) -> None:
        target = head.target.decode("utf-8", "replace")
        parts = urlsplit(target)
        method = head.method.decode()
        if parts.path == "/_fake/wait":
            await self._wait(conn, stream, parse_qs(parts.query))
            return
        if parts.path.startswith("/_fake/"):
            await self._control(conn, stream, method, parts.path, raw)
            return
        headers: dict[str, str] = {}
        for name, value in head.headers:
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        try:
            body: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        protocol, model = classify(method, parts.path)
        if model is None and isinstance(body, dict) and isinstance(body.get("model"), str):
            model = body["model"]
        request = RecordedRequest(
            number=len(self.requests) + 1,
            method=method,
            path=parts.path,
            query=parse_qs(parts.query),
            headers=headers,
            body=body,
            protocol=protocol,
            model=model,
            last_user_text=last_user_text(protocol, body),
        )
        self.requests.append(request)
        self._arrived.set()
        self._arrived = trio.Event()
        if protocol is None:
            await self._json(conn, stream, 404, {"error": f"no fake endpoint at {method} {target}"})
            return
        turn = self._take(request)
        if turn is None:
            message = (
                f"fake provider: no scripted turn matches request {request.number} "
                f"(model {model!r}, last user text {request.last_user_text[:80]!r})"
            )
            await self._json(conn, stream, 400, error_body(protocol, 400, message))
            return
        request.turn = turn
        if turn.delay:
            await trio.sleep(turn.delay)
        if turn.status >= 400:
            extra = []
            if turn.retry_after is not None:
                extra.append((b"retry-after", f"{turn.retry_after:g}".encode()))
            await self._json(
                conn, stream, turn.status, error_body(protocol, turn.status, turn.message), extra
            )
            return
        events = render(protocol, _answer(turn, request, raw))
        await stream.send_all(
            conn.send(
                h11.Response(
                    status_code=200,
                    headers=[
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                        (b"transfer-encoding", b"chunked"),
                    ],
                )
            )
            or b""
        )
        stamp = turn.stamp.encode()
        for index, event in enumerate(events):
            if turn.fault is not None and index == turn.fault_after:
                await self._fault(conn, stream, turn.fault, event)
                return
            if turn.hold and index == turn.hold:
                await self._take_release(conn, stream)
            if index and turn.chunk_delay:
                await trio.sleep(turn.chunk_delay)
            if stamp:
                event = event.replace(stamp, str(time.monotonic_ns()).encode())
            await stream.send_all(conn.send(h11.Data(data=event)) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")

    async def _fault(
        self, conn: h11.Connection, stream: trio.SocketStream, fault: Fault, event: bytes
    ) -> None:
        """Break a 200 stream as scripted (see "Faults" above)."""
        if fault == "reset":
            # SO_LINGER 0: close sends a reset instead of a FIN.
            stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()
            raise _Dropped
        if fault == "stall":
            while await stream.receive_some(65536):
                pass  # until the client hangs up
            raise _Dropped
        if fault == "truncate":
            await stream.send_all(conn.send(h11.Data(data=event[: len(event) // 2])) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")

    async def _json(
        self,
        conn: h11.Connection,
        stream: trio.SocketStream,
        status: int,
        payload: Any,
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        data = json.dumps(payload).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            *extra,
        ]
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
        await stream.send_all(conn.send(h11.Data(data=data)) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")

    async def wait_requests(self, count: int) -> int:
        """Block until at least `count` requests have been recorded; the number recorded."""
        while len(self.requests) < count:
            await self._arrived.wait()
        return len(self.requests)

    async def _wait(
        self, conn: h11.Connection, stream: trio.SocketStream, query: Mapping[str, list[str]]
    ) -> None:
        try:
            count = int(query.get("requests", ["1"])[0])
            timeout = float(query.get("timeout", ["30"])[0])
        except ValueError:
            await self._json(conn, stream, 400, {"error": "use /_fake/wait?requests=N&timeout=S"})
            return
        with trio.move_on_after(timeout):
            await self._json(conn, stream, 200, {"requests": await self.wait_requests(count)})
            return
        await self._json(
            conn, stream, 408, {"error": f"fewer than {count} requests in {timeout} s"}
        )

    async def _control(
        self, conn: h11.Connection, stream: trio.SocketStream, method: str, path: str, raw: bytes
    ) -> None:
        if method == "GET" and path == "/_fake/requests":
            await self._json(conn, stream, 200, [r.to_json() for r in self.requests])
        elif method == "GET" and path == "/_fake/pending":
            await self._json(conn, stream, 200, {"pending": self.pending})
        elif method == "POST" and path == "/_fake/release":
            self.release()
            await self._json(conn, stream, 200, {"released": True})
        elif method == "POST" and path == "/_fake/turns":
            try:
                turns = load_turns(json.loads(raw))
            except (ValueError, TypeError) as exc:
                await self._json(conn, stream, 400, {"error": str(exc)})
                return
            self.add(*turns)
            await self._json(conn, stream, 200, {"pending": self.pending})
        else:
            await self._json(conn, stream, 404, {"error": f"no control endpoint {method} {path}"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help="JSON file: {'turns': [...]}")
    args = parser.parse_args(argv)
    turns = load_turns(json.loads(args.script.read_text())) if args.script else []
    fake = FakeProvider(turns, host=args.host)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(fake.serve, args.port)
            print(url, flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
