"""Benchmark: what recording each model request's identity costs a session's step.

    .venv/bin/python bench/identity.py [--steps 400]

A transcript grows by one read_file call and its 1 KB result per step, with the native tools'
definitions and a 3 KB system prompt; `RequestHasher.identify` (what `RequestLog` runs once per
answered request) is timed at each step (CPU of this thread) and checked against hashing the
whole request. Reported: the mean per step over the first 50 steps and the last 50 (a step
hashes only its new messages, so the two should be close), and one full hash at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from anvild.agent.tools.registry import ToolRegistry  # noqa: E402
from anvild.llm.identity import RequestHasher, identity  # noqa: E402
from anvild.llm.types import ChatRequest, Message, Role, Text, ToolCall, ToolResult  # noqa: E402
from anvild.session import roles  # noqa: E402
from anvild.session.manager import default_tools  # noqa: E402
from anvild.session.settings import SessionSettings, ToolSetup, sandbox_policy  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    role = roles.sandbox_role("developer")
    policy = sandbox_policy("", role, SessionSettings())
    tools = ToolRegistry(
        default_tools(ToolSetup(Path("/tmp"), "developer", policy, role, session_id="bench"))
    )
    messages = [Message(Role.USER, (Text("Read every file."),))]
    hasher = RequestHasher()
    times: list[float] = []
    request = None
    for step in range(args.steps):
        request = ChatRequest(
            model="bench",
            messages=tuple(messages),
            system="x" * 3000,
            tools=tools.specs(),
            max_tokens=8192,
            cache=True,
            cache_key="bench",
        )
        start = time.thread_time()
        found = hasher.identify(request)
        times.append(time.thread_time() - start)
        if step % 100 == 0:
            assert found == identity(request)
        call = ToolCall(f"c{step}", "read_file", {"file_path": f"f{step}.py"})
        messages.append(Message(Role.ASSISTANT, (call,)))
        messages.append(Message(Role.USER, (ToolResult(call.id, "a line of code\n" * 64),)))
    assert request is not None
    start = time.thread_time()
    identity(request)
    full = time.thread_time() - start
    first, last = statistics.mean(times[1:51]), statistics.mean(times[-50:])
    print(f"steps: {args.steps}, messages at the end: {len(request.messages)}")
    print(f"identify per step: first 50 {first * 1000:.3f} ms, last 50 {last * 1000:.3f} ms")
    print(f"the whole last request hashed at once: {full * 1000:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
