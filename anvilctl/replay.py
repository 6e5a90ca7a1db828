"""`anvilctl replay-stream --provider KIND FILE`: replay a captured provider stream offline.

    anvilctl replay-stream --provider anthropic capture.sse
    anvilctl replay-stream --provider openai-responses turn.chunks.jsonl

The bytes take a live response's path without HTTP: `SseDecoder`, the adapter's `StreamState`,
then `MessageBuilder`. Success prints the Completion as JSON (`message`, `finish`,
`finish_detail`, `usage`, `invalid_arguments`), exit 0; a stream ending in an error prints
`{"error": {"type": ..., "message": ..., "kind": ...}}` (and a line on stderr), exit 1; an
unreadable file exits 2. FILE is a raw `text/event-stream` body, or for `.chunks.jsonl` one
`data:` payload per line (fixtures/recorded/MANIFEST.md), given `event: <type>` when the payload
has a string `type`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from anvilctl import add_command
from anvild.llm.builder import Completion, MessageBuilder
from anvild.llm.errors import ApiError, HttpError, LlmError
from anvild.llm.kinds import KIND_TABLE, KINDS
from anvild.llm.providers._events import WireState
from anvild.llm.sse import SseDecoder
from anvild.llm.types import converter

CHUNKS_SUFFIX = ".chunks.jsonl"


def sse_body(data: bytes, name: str) -> bytes:
    """The file as a `text/event-stream` body: chunk files are wrapped, raw SSE is as is."""
    if not name.endswith(CHUNKS_SUFFIX):
        return data
    out: list[str] = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            payload = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}:{number}: not a JSON chunk: {exc}") from exc
        if isinstance(payload, dict) and isinstance(payload.get("type"), str):
            out.append(f"event: {payload['type']}\n")
        out.append(f"data: {line}\n\n")
    return "".join(out).encode("utf-8")


def replay(body: bytes, state: WireState) -> Completion:
    """The Completion a stream body collects to, or the LlmError it ends in."""
    builder = MessageBuilder()
    decoder = SseDecoder()
    for sse in decoder.push(body):
        for event in state.on_sse(sse):
            builder.push(event)
    decoder.finish()
    for event in state.on_end():
        builder.push(event)
    return builder.finish()


def completion_json(completion: Completion) -> dict[str, Any]:
    usage = completion.usage
    return {
        "message": converter.unstructure(completion.message),
        "finish": completion.finish.value,
        "finish_detail": completion.finish_detail,
        "usage": {
            "input": usage.input,
            "output": usage.output,
            "cache_read": usage.cache_read,
            "cache_write": usage.cache_write,
        },
        "invalid_arguments": dict(completion.invalid_arguments),
    }


def error_json(error: LlmError) -> dict[str, Any]:
    detail: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, ApiError):
        detail["kind"] = error.kind
    if isinstance(error, HttpError):
        detail["status"] = error.status
    return {"error": detail}


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        sub,
        "replay-stream",
        __doc__,
        help="replay a captured provider stream and print the canonical Completion as JSON",
    )
    parser.add_argument("--provider", required=True, choices=KINDS, metavar="KIND")
    parser.add_argument("file", type=Path, metavar="FILE")


def run(args: argparse.Namespace) -> int:
    path: Path = args.file
    try:
        body = sse_body(path.read_bytes(), path.name)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        print(f"anvilctl replay-stream: {path}: {exc}", file=sys.stderr)
        return 2
    try:
        completion = replay(body, KIND_TABLE[args.provider].new_state())
    except LlmError as error:
        print(json.dumps(error_json(error), ensure_ascii=False, indent=2))
        print(f"anvilctl replay-stream: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(completion_json(completion), ensure_ascii=False, indent=2))
    return 0
