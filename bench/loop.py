"""Benchmark: the agent loop's own cost per step, without model or tool latency.

    .venv/bin/python bench/loop.py [--steps 100 1000] [--repeat 7] [--hooks] [--mcp 3]

For each `--steps` count (default 100 and 1,000, reported side by side), one turn of that many
steps: the ScriptedProvider answers each request with one call of a no-op
tool (and a short text delta, as models do), then a final text; the tool returns at once. Every
step therefore goes through the whole harness: build the request (tool specs, the growing
transcript), stream and fold the events, forward the deltas, commit with validation, decide,
classify effects, dispatch through the registry, commit the results, validate again. Events go
into a real EventChannel drained by a concurrent reader, as a session would.

Reported: milliseconds per step (best and median of --repeat turns), and the time per step spent
in transcript validation, measured separately on the same transcripts: as the loop does it (one
`TranscriptCheck` that checks what each commit appends) and, for comparison, as it was done before
(`validate_transcript` over the whole transcript at each commit and each request). The target is
0.5 ms per step, the same at 1,000 steps as at 100. The figure includes the scripted provider's
own cost, so it overstates the harness slightly. The benchmark process's CPU time per step is
reported too: on a shared machine it moves less with the load than wall time does.

`--hooks` adds 8 no-op hooks that match every step's call (4 PreToolUse, 4 PostToolUse, each
`cat > /dev/null`); `--mcp N` gives the session N stdio MCP servers (tests/support/mcp_server.py,
started before the clock runs: their tools are in every request). With hooks, the time the hook
processes themselves take (the union of their runs, measured around each) is reported and
subtracted: what is left is the harness, hook machinery included, against the same 3 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio

from anvild.agent.channel import EventChannel
from anvild.agent.hookpoints import NO_HOOKS, TurnHooks
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.tools.base import Args, Cancellation, Effects, ToolContext, ToolOutput
from anvild.agent.tools.registry import ToolRegistry
from anvild.hooks import HookRun, HookSpec, SessionHooks
from anvild.hooks.process import run_hook
from anvild.llm.integrity import TranscriptCheck, validate_transcript
from anvild.llm.stream import Usage
from anvild.llm.testing import ScriptedProvider, Step, script
from anvild.llm.types import Message, Role
from anvild.mcp import McpPool, McpRegistry, McpSetup, Placement, ServerSpec, session_mcp
from anvild.sandbox import WorkspaceWrite
from anvild.sandbox.roles import load_role

USAGE: Final = Usage(input=1200, output=40, cache_read=0, cache_write=0)
ROOT: Final = Path(__file__).resolve().parents[1]
HOOKS: Final = {
    f"{event.lower()}-{i}": {"event": event, "matcher": matcher, "command": "cat > /dev/null"}
    for event in ("PreToolUse", "PostToolUse")
    for i, matcher in enumerate(("noop", "no.*", "*", "noop|other"))
}
"""8 hooks that match every call of the turn and do nothing."""


class HookClock:
    """Wraps the hooks' process runner: the time hook processes ran (overlaps counted once)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    async def run(self, spec: HookSpec, payload: Mapping[str, Any], **kw: Any) -> HookRun:
        start = time.perf_counter()
        try:
            return await run_hook(spec, payload, **kw)
        finally:
            self.spans.append((start, time.perf_counter()))

    def total(self) -> float:
        busy, end = 0.0, float("-inf")
        for start, stop in sorted(self.spans):
            if stop > end:
                busy += stop - max(start, end)
                end = stop
        return busy


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


@asynccontextmanager
async def mcp_agent(
    servers: int, cwd: str, steps: int, channel: EventChannel, hooks: TurnHooks
) -> AsyncIterator[Agent]:
    """An agent whose session has `servers` MCP servers, started before the clock runs."""
    specs = tuple(
        ServerSpec(
            f"bench{i}",
            argv=(sys.executable, "-m", "tests.support.mcp_server"),
            env={"PYTHONPATH": str(ROOT)},
            sandbox=False,
        )
        for i in range(servers)
    )
    pool = McpPool(lambda _: specs)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        place = Placement(Path(cwd), WorkspaceWrite(), load_role("developer"))
        mcp = session_mcp(pool, McpSetup("bench", "developer", place))
        await mcp.ensure_started()
        yield Agent(
            ScriptedProvider(make_scripts(steps)),
            McpRegistry([Noop()], mcp),
            AgentConfig(model="bench", max_steps=steps),
            ToolContext(cwd=cwd),
            emit=channel.send_nowait,
            hooks=hooks,
        )
        await pool.stop()


@asynccontextmanager
async def plain_agent(
    servers: int, cwd: str, steps: int, channel: EventChannel, hooks: TurnHooks
) -> AsyncIterator[Agent]:
    yield Agent(
        ScriptedProvider(make_scripts(steps)),
        ToolRegistry([Noop()]),
        AgentConfig(model="bench", max_steps=steps),
        ToolContext(cwd=cwd),
        emit=channel.send_nowait,
        hooks=hooks,
    )


async def one_turn(
    steps: int, cwd: str, with_hooks: bool = False, servers: int = 0
) -> tuple[float, float, Agent, float]:
    """One turn: (its wall time, the hook processes' own time within it, the agent, this
    process's CPU time during it)."""
    channel = EventChannel()
    clock = HookClock()
    hooks: TurnHooks = NO_HOOKS
    if with_hooks:
        hooks = SessionHooks(
            lambda: HOOKS,
            session_id="bench",
            cwd=Path(cwd),
            role=lambda: "developer",
            mode=lambda: "default",
            emit=channel.send_nowait,
            runner=clock.run,
        )
    make = mcp_agent if servers else plain_agent
    async with make(servers, cwd, steps, channel, hooks) as agent:
        cpu = time.process_time()
        elapsed = await timed_turn(agent, channel)
        cpu = time.process_time() - cpu
    return elapsed, clock.total(), agent, cpu


async def timed_turn(agent: Agent, channel: EventChannel) -> float:

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
    assert finished.steps == agent.config.max_steps
    return elapsed


def validation_time(agent: Agent) -> tuple[float, float]:
    """Seconds validating the turn's transcripts as the loop does (one `TranscriptCheck`: each
    commit appends a message, each request checks the transcript as committed) and as a
    whole-transcript `validate_transcript` at each commit and each request would."""
    messages = agent.messages
    checker = TranscriptCheck()
    start = time.perf_counter()
    done: tuple[Message, ...] = ()
    for message in messages:
        pending = message.role is Role.ASSISTANT  # the calls' results come in the next commit
        done = checker.append(done, (message,), allow_pending_tail=pending)
        if not pending:
            checker.check(done)  # the next step's request
    incremental = time.perf_counter() - start
    start = time.perf_counter()
    for end in range(1, len(messages) + 1):
        pending = messages[end - 1].role is Role.ASSISTANT
        validate_transcript(messages[:end], allow_pending_tail=pending)
        if not pending:
            validate_transcript(messages[:end])
    return incremental, time.perf_counter() - start


def measure(steps: int, repeat: int, with_hooks: bool, servers: int) -> dict[str, float]:
    """One column of the report: per-step milliseconds for a turn of `steps` steps."""
    with tempfile.TemporaryDirectory() as cwd:
        trio.run(one_turn, steps, cwd, with_hooks, servers)  # warm-up: imports, caches
        runs = [trio.run(one_turn, steps, cwd, with_hooks, servers) for _ in range(repeat)]
    per_step = [(elapsed - hooks) / steps * 1000 for elapsed, hooks, _, _ in runs]
    incremental, whole = validation_time(runs[0][2])
    return {
        "wall": statistics.median(elapsed / steps * 1000 for elapsed, _, _, _ in runs),
        "hooks": statistics.median(hooks / steps * 1000 for _, hooks, _, _ in runs),
        "best": min(per_step),
        "median": statistics.median(per_step),
        "cpu": statistics.median(cpu / steps * 1000 for _, _, _, cpu in runs),
        "validation": incremental / steps * 1000,
        "whole": whole / steps * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--hooks", action="store_true", help="8 no-op hooks on every call")
    parser.add_argument("--mcp", type=int, default=0, help="this many stdio MCP servers")
    args = parser.parse_args()
    columns = [measure(steps, args.repeat, args.hooks, args.mcp) for steps in args.steps]

    def row(label: str, key: str) -> None:
        cells = "".join(f"{column[key]:>10.3f}" for column in columns)
        print(f"{label:<44}{cells}")

    print(f"{'steps per turn':<44}" + "".join(f"{steps:>10}" for steps in args.steps))
    if args.hooks or args.mcp:
        print(f"hooks, MCP servers: {len(HOOKS) if args.hooks else 0}, {args.mcp}")
    if args.hooks:
        row("per step, wall, ms (median)", "wall")
        row("  hooks' own run time (subtracted below)", "hooks")
    row(f"per step, best of {args.repeat}, ms", "best")
    row(f"per step, median of {args.repeat}, ms", "median")
    row("  this process's CPU per step (median), ms", "cpu")
    row("  of which validation (TranscriptCheck), ms", "validation")
    row("  whole-transcript validation would be, ms", "whole")
    print("target: <= 0.5 ms per step, the same at 1,000 steps as at 100")


if __name__ == "__main__":
    main()
