"""Benchmark: the agent loop's own cost per step, without model or tool latency.

    .venv/bin/python bench/loop.py [--steps 100] [--repeat 7]

One turn of `--steps` steps: the ScriptedProvider answers each request with one call of a no-op
tool (and a short text delta, as models do), then a final text; the tool returns at once. Every
step therefore goes through the whole harness: build the request (tool specs, the growing
transcript), stream and fold the events, forward the deltas, commit with validation, decide,
classify effects, dispatch through the registry, commit the results, validate again. Events go
into a real EventChannel drained by a concurrent reader, as a session would.

Reported: milliseconds per step (best and median of --repeat turns), and the share of the time
spent in transcript validation (measured separately by timing validate_transcript on the same
transcripts). The target is under 3 ms per step. The figure includes the scripted provider's own
cost, so it overstates the harness slightly.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Mapping
from typing import Any, Final

import trio

from anvild.agent.channel import EventChannel
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.tools.base import Args, Cancellation, Effects, ToolContext, ToolOutput
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.integrity import validate_transcript
from anvild.llm.stream import Usage
from anvild.llm.testing import ScriptedProvider, Step, script

USAGE: Final = Usage(input=1200, output=40, cache_read=0, cache_write=0)


class Noop:
    name = "noop"
    description = "Does nothing and says so."
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["path"],
    }
    cancellation = Cancellation.SAFE_TO_ABANDON

    def effects(self, args: Args) -> Effects:
        return Effects.read(str(args["path"]))

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        return ToolOutput(f"ok {args['path']}")


def make_scripts(steps: int) -> list[list[Step]]:
    scripts = [
        script.tool_call(
            f"call_{i}",
            "noop",
            {"path": f"src/file_{i}.py", "n": i},
            text="Let me look.",
            usage=USAGE,
        )
        for i in range(steps - 1)
    ]
    scripts.append(script.text("All done.", usage=USAGE))
    return scripts


async def one_turn(steps: int, cwd: str) -> tuple[float, Agent]:
    channel = EventChannel()
    agent = Agent(
        ScriptedProvider(make_scripts(steps)),
        ToolRegistry([Noop()]),
        AgentConfig(model="bench", max_steps=steps),
        ToolContext(cwd=cwd),
        emit=channel.send_nowait,
    )

    async def reader() -> None:
        async for _ in channel:
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        start = time.perf_counter()
        finished = await agent.run_turn("Look at every file.")
        elapsed = time.perf_counter() - start
        channel.close()
    assert finished.outcome == "done", finished
    assert finished.steps == steps
    return elapsed, agent


def validation_time(agent: Agent) -> float:
    """validate_transcript as the loop calls it: before each request, after each commit."""
    messages = agent.messages
    start = time.perf_counter()
    for end in range(1, len(messages) + 1):
        validate_transcript(messages[:end], allow_pending_tail=True)
        if end % 2:
            validate_transcript(messages[:end])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        trio.run(one_turn, args.steps, cwd)  # warm-up: imports, caches
        runs = [trio.run(one_turn, args.steps, cwd) for _ in range(args.repeat)]
    per_step = [elapsed / args.steps * 1000 for elapsed, _ in runs]
    validation = validation_time(runs[0][1]) / args.steps * 1000
    print(f"steps per turn:        {args.steps}")
    print(f"per step, best:        {min(per_step):.3f} ms")
    print(f"per step, median:      {statistics.median(per_step):.3f} ms")
    share = validation / statistics.median(per_step)
    print(f"  of which validation: {validation:.3f} ms ({share:.0%} of the median)")
    print("target:                < 3 ms per step")


if __name__ == "__main__":
    main()
