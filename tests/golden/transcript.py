"""Golden transcripts: what the model saw, as text, compared with a committed file.

`render(requests, redact)` writes each `ChatRequest` as plain text: the system prompt (in full
the first time it appears, then by reference), the tool names, every message block (tool calls
with their JSON arguments, tool results with their error flag). `redact` maps volatile strings
(temp paths, session ids) to stable placeholders.
`check(name, text)` compares with `tests/golden/transcripts/NAME.txt` and fails with a unified
diff; with `ANVIL_UPDATE_GOLDEN=1` in the environment it rewrites the file instead.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from anvild.llm.types import ChatRequest, Image, Reasoning, Text, ToolCall, ToolResult

GOLDEN_DIR = Path(__file__).resolve().parent / "transcripts"
UPDATE_ENV = "ANVIL_UPDATE_GOLDEN"


class GoldenMismatch(AssertionError):
    """The rendered transcript differs from the committed one; the message is the diff."""


def render(requests: Sequence[ChatRequest], redact: Mapping[str, str]) -> str:
    lines: list[str] = []
    shown: dict[str, int] = {}  # system prompt -> the request that showed it first
    for number, request in enumerate(requests, start=1):
        lines.append(f"=== request {number}: model {request.model}")
        if request.system in shown:
            lines.append(f"--- system: as in request {shown[request.system]}")
        else:
            shown[request.system] = number
            lines.append("--- system")
            lines.extend(request.system.splitlines())
        lines.append("--- tools: " + ", ".join(spec.name for spec in request.tools))
        for message in request.messages:
            lines.append(f"--- {message.role.value}")
            for block in message.content:
                lines.extend(_block(block))
    text = "\n".join(lines) + "\n"
    # Longest first: a temp path contains shorter redacted strings.
    for raw in sorted(redact, key=len, reverse=True):
        text = text.replace(raw, redact[raw])
    return text


def _block(block: object) -> list[str]:
    match block:
        case Text(text=text):
            return text.splitlines() or [""]
        case Reasoning(text=text):
            return ["[reasoning]", *text.splitlines()]
        case ToolCall(id=call_id, name=name, arguments=arguments):
            return [f"[tool_call {call_id} {name}] {json.dumps(arguments, sort_keys=True)}"]
        case ToolResult(call_id=call_id, content=content, is_error=is_error):
            flag = " error" if is_error else ""
            return [f"[tool_result {call_id}{flag}]", *content.splitlines()]
        case Image(media_type=media_type):
            return [f"[image {media_type}]"]
    raise TypeError(f"no rendering for a {type(block).__name__} block")


def diff(name: str, expected: str, actual: str) -> str:
    return "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"golden/{name}.txt",
            tofile=f"{name} (this run)",
        )
    )


def check(name: str, actual: str, *, golden_dir: Path = GOLDEN_DIR) -> None:
    path = golden_dir / f"{name}.txt"
    if os.environ.get(UPDATE_ENV) == "1":
        path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        raise GoldenMismatch(
            f"{path} does not exist; run with {UPDATE_ENV}=1 to write it, then review and commit it"
        )
    expected = path.read_text(encoding="utf-8")
    if expected != actual:
        raise GoldenMismatch(
            f"the requests of {name!r} differ from {path} "
            f"(if the change is intended: {UPDATE_ENV}=1, review the diff, commit):\n"
            + diff(name, expected, actual)
        )
