"""The harness's own cost of context management on a long transcript (no model time).

    .venv/bin/python bench/compaction.py [--messages 500] [--repeat 50]

A 500-message transcript of tool work (reads of 2-6 KiB files, bash runs, edits, answers), as a
session that lived for days holds. Measured, best and median of `--repeat` runs:

- size: estimating the request (system, tool definitions, every message), done before every
  request;
- clear: `ContextWindow.for_request` when the request is past `clear_at` (stubs old results);
- plan + rebuild: everything a compaction does around the model's summary: the plan, the facts,
  the history rendered for the summariser, the summary request, the new transcript and its
  size. The target is under 20 ms for this part.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from anvild.agent.context import ContextSettings, ContextWindow
from anvild.agent.context.compaction import (
    facts,
    plan,
    rebuild,
    render_history,
    summary_block,
    summary_request,
)
from anvild.agent.tools.base import Effects
from anvild.llm.integrity import validate_transcript
from anvild.llm.types import ContentBlock, Message, Role, Text, ToolCall, ToolResult, ToolSpec

SPECS = tuple(
    ToolSpec(f"tool{i}", "A tool. " * 40, {"type": "object", "properties": {}}) for i in range(10)
)
SYSTEM = "You are a coding agent. " * 300


def transcript(size: int) -> tuple[Message, ...]:
    messages: list[Message] = []
    i = 0
    while len(messages) < size - 1:
        blocks: list[ContentBlock] = []
        if i:
            blocks.append(ToolResult(f"c{i - 1}", "y" * (2048 + i % 4096)))
        if i % 10 == 0:
            blocks.append(Text(f"step {i}: fix the module {i} and run its tests"))
        messages.append(Message(Role.USER, blocks))
        call = (
            ToolCall(f"c{i}", "read_file", {"file_path": f"src/m{i}.py"})
            if i % 3
            else ToolCall(f"c{i}", "bash", {"command": f"pytest tests/test_m{i}.py"})
        )
        messages.append(Message(Role.ASSISTANT, (Text("Looking."), call)))
        i += 1
    messages.append(Message(Role.USER, (ToolResult(f"c{i - 1}", "ok"),)))
    return tuple(messages)


def effects(call: ToolCall) -> Effects:
    path = call.arguments.get("file_path")
    return Effects.read(path) if isinstance(path, str) else Effects(subprocess=True)


def timed(repeat: int, work: Callable[[], object]) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        runs.append((time.perf_counter() - start) * 1000)
    return min(runs), statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    messages = transcript(args.messages)
    validate_transcript(messages)
    window = ContextWindow(ContextSettings(window=200_000, clear_at=0.3))
    todos = [("write the changelog", "pending")]

    def compaction() -> int:
        chosen = plan(messages, turn_start=None, keep_user_bytes=window.keep_user_bytes())
        found = facts(chosen.dropped, todos, effects)
        summary_request("m", render_history(chosen.dropped), found, max_tokens=4096)
        new = rebuild(summary_block("A summary. " * 200, found, model="m"), chosen)
        return window.size(SYSTEM, SPECS, new)

    rows = [
        ("size (every request)", timed(args.repeat, lambda: window.size(SYSTEM, SPECS, messages))),
        (
            "clear (past clear_at)",
            timed(args.repeat, lambda: window.for_request(SYSTEM, SPECS, messages)),
        ),
        ("plan + rebuild (a compaction)", timed(args.repeat, compaction)),
    ]
    size = window.size(SYSTEM, SPECS, messages)
    print(f"{len(messages)} messages, ~{size} tokens, best / median of {args.repeat}")
    print("| step | best ms | median ms |")
    print("|---|---|---|")
    for name, (best, median) in rows:
        print(f"| {name} | {best:.2f} | {median:.2f} |")


if __name__ == "__main__":
    main()
