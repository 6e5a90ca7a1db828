"""`anvilctl replay SESSION [--turn N] [--no-tools] [--data-dir DIR]`: re-run a recorded
session's turns against its recorded model responses and report the first divergence.

Each turn is rebuilt from the records: the transcript before it, its prompt, and each model
response (the assistant message the records hold, its canonical form) with the transcript the
request carried (the messages before that response). The agent loop then runs the turn again
with a provider that plays the recorded responses in order and compares each request's
messages with the recorded ones; tools are re-executed in a scratch copy of the session's
workspace (as it is now) and each result compared with the recorded one, or, with
`--no-tools`, the recorded results are fed back. The first difference ends the run with a
unified diff (exit 1); a turn that reproduces prints how many requests it checked. A turn the
replay cannot rebuild (a compaction, a rewind, a clear within it, a response with reasoning
blocks) is reported as such (exit 2). The system prompt and tool definitions are not recorded,
so a request is compared by its messages.
"""

from __future__ import annotations

import argparse
import difflib
import json
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from anvild.agent.events import TurnOutcome
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.tools.base import Tool, ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.stream import (
    Finish,
    FinishReason,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UsageReport,
)
from anvild.llm.types import ChatRequest, Message, Role, Text, ToolCall, ToolResult, converter
from anvild.store import read_journal
from anvild.store.records import (
    Compacted,
    ContextReplaced,
    MessageAppended,
    MessageExtended,
    PromptTaken,
    Record,
    Rewound,
    SessionStarted,
    ToolFinished,
    TurnEnded,
    UsageReported,
)
from anvild.store.reducer import apply


class Unreplayable(Exception):
    """A turn the records do not let the replay rebuild (the message says why)."""


class RecordedEnd(Exception):
    """The turn reached the request the recorded turn ended at without an answer."""


class Divergence(Exception):
    """The re-run differs from the records: `where` and a unified diff."""

    def __init__(self, where: str, diff: str) -> None:
        super().__init__(where)
        self.where = where
        self.diff = diff


@attrs.define
class Response:
    message: Message
    request: tuple[Message, ...]  # the transcript the request carried
    usage: Usage = attrs.Factory(Usage)


@attrs.define
class RecordedTurn:
    number: int
    before: tuple[Message, ...] = ()
    prompt: tuple[Any, ...] = ()  # its content blocks
    responses: list[Response] = attrs.Factory(list)
    results: dict[str, ToolResult] = attrs.Factory(dict)
    outcome: str = ""
    problem: str = ""


def recorded_turns(records: Sequence[Record]) -> tuple[SessionStarted, list[RecordedTurn]]:
    """The session's start and its turns as the records hold them."""
    state = None
    turns: list[RecordedTurn] = []
    current: RecordedTurn | None = None
    usage = Usage()
    started: SessionStarted | None = None
    for record in records:
        before = () if state is None else state.messages
        state = apply(state, record)
        match record:
            case SessionStarted():
                started = record
            case PromptTaken():
                current = RecordedTurn(len(turns) + 1, before=before)
                turns.append(current)
            case MessageAppended(message=message) if current is not None:
                if message.role is Role.USER and not current.prompt:
                    current.before, current.prompt = before, message.content
                elif message.role is Role.ASSISTANT:
                    current.responses.append(Response(message, before, usage))
                    usage = Usage()
            case MessageExtended(blocks=blocks) if current is not None and not current.prompt:
                current.before, current.prompt = before, tuple(blocks)
                current.problem = "its prompt was merged into an earlier message"
            case UsageReported(usage=reported):
                usage = reported
            case ToolFinished(result=result) if current is not None:
                current.results[result.call_id] = result
            case Compacted() | ContextReplaced() | Rewound() if current is not None:
                current.problem = f"the transcript was replaced within it ({record.TAG})"
            case TurnEnded(outcome=outcome) if current is not None:
                current.outcome = outcome
                current = None
    if started is None:
        raise Unreplayable("the records do not start with session_started")
    return started, turns


def _lines(messages: Sequence[Message]) -> list[str]:
    return [json.dumps(converter.unstructure(m), sort_keys=True) for m in messages]


def _diff(expected: list[str], got: list[str], what: str) -> str:
    return "\n".join(
        difflib.unified_diff(expected, got, f"recorded {what}", f"replayed {what}", lineterm="")
    )


def _events(response: Response) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    calls = False
    for index, block in enumerate(response.message.content):
        if isinstance(block, Text):
            events.append(TextDelta(index, block.text))
        elif isinstance(block, ToolCall):
            calls = True
            events.append(ToolCallStart(index, block.id, block.name))
            raw = (
                block.arguments if isinstance(block.arguments, str) else json.dumps(block.arguments)
            )
            events.append(ToolCallDelta(index, raw))
        else:
            raise Unreplayable(f"a response holds a {type(block).__name__} block")
    events.append(UsageReport(response.usage))
    events.append(Finish(FinishReason.TOOL_USE if calls else FinishReason.END_TURN))
    return events


class RecordedProvider:
    """Plays a turn's recorded responses in order; each request must carry the recorded
    messages (else `Divergence`)."""

    def __init__(self, turn: RecordedTurn) -> None:
        self.turn = turn
        self.requests = 0

    @property
    def name(self) -> str:
        return "recorded"

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        step = self.requests + 1
        if self.requests >= len(self.turn.responses):
            if self.turn.outcome not in ("", "done"):
                raise RecordedEnd  # this request failed when it was made: nothing was recorded
            raise Divergence(f"turn {self.turn.number} step {step}: an extra request", "")
        response = self.turn.responses[self.requests]
        self.requests += 1
        expected, got = _lines(response.request), _lines(request.messages)
        if expected != got:
            where = f"turn {self.turn.number} step {step}: the request differs"
            raise Divergence(where, _diff(expected, got, "request"))
        yield _play(_events(response))


async def _play(events: list[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event


class CheckedTools(ToolRegistry):
    """The session's tools, each result compared with the recorded one; or, `feed`, the
    recorded results returned instead of running anything."""

    def __init__(
        self, tools: Sequence[Tool], turn: RecordedTurn, feed: bool, step: Callable[[], int]
    ) -> None:
        super().__init__(tools)
        self.turn = turn
        self.feed = feed
        self.step = step  # the step whose calls run (the requests made so far)

    async def dispatch(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        recorded = self.turn.results.get(call.id)
        if recorded is None:
            where = (
                f"turn {self.turn.number} step {self.step()}: call {call.id} ({call.name}) "
                "has no recorded result"
            )
            raise Divergence(where, "")
        if self.feed:
            return recorded
        result = await super().dispatch(call, ctx)
        if (result.content, result.is_error) != (recorded.content, recorded.is_error):
            where = (
                f"turn {self.turn.number} step {self.step()}: the result of {call.id} "
                f"({call.name}) differs"
            )
            expected = [*recorded.content.splitlines(), f"is_error={recorded.is_error}"]
            got = [*result.content.splitlines(), f"is_error={result.is_error}"]
            raise Divergence(where, _diff(expected, got, "result"))
        return result


def _tools(started: SessionStarted, cwd: Path) -> list[Tool]:
    from anvild.session import roles
    from anvild.session.manager import default_tools
    from anvild.session.settings import SessionSettings, ToolSetup, sandbox_policy

    sandbox_role = roles.sandbox_role(started.role)
    policy = sandbox_policy("", sandbox_role, SessionSettings())
    return default_tools(ToolSetup(cwd, started.role, policy, sandbox_role, session_id=started.id))


async def replay_turn(started: SessionStarted, turn: RecordedTurn, cwd: Path, feed: bool) -> int:
    """Re-run `turn` in `cwd`; the number of requests checked (`Divergence` at the first
    difference, `Unreplayable` when the turn cannot be rebuilt)."""
    if turn.problem:
        raise Unreplayable(f"turn {turn.number}: {turn.problem}")
    if not turn.prompt:
        raise Unreplayable(f"turn {turn.number}: no prompt was recorded")
    provider = RecordedProvider(turn)
    tools = CheckedTools(_tools(started, cwd), turn, feed, lambda: provider.requests)
    steps = max(1, len(turn.responses))
    agent = Agent(
        provider,
        tools,
        AgentConfig(model=started.model, max_steps=steps),
        ToolContext(cwd=cwd),
        messages=turn.before,
    )
    try:
        finished = await agent.run_turn(turn.prompt)
    except RecordedEnd:
        return provider.requests
    except BaseExceptionGroup as group:  # raised in a step's concurrent calls
        found = _divergence_in(group)
        if found is None:
            raise
        raise found from None
    if finished.outcome is TurnOutcome.ERROR and provider.requests < len(turn.responses):
        raise Divergence(f"turn {turn.number}: the replay ended early", finished.detail)
    if provider.requests != len(turn.responses):
        where = f"turn {turn.number}: {provider.requests} requests, {len(turn.responses)} recorded"
        raise Divergence(where, "")
    return provider.requests


def _divergence_in(group: BaseExceptionGroup[BaseException]) -> Divergence | None:
    for exc in group.exceptions:
        if isinstance(exc, Divergence):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (found := _divergence_in(exc)) is not None:
            return found
    return None


def replay(
    path: Path, *, turn: int | None = None, feed: bool = False, out: Any = sys.stdout
) -> int:
    """Replay the session file `path` (one turn, or all); the exit status."""
    started, turns = recorded_turns(read_journal(path).records)
    chosen = [t for t in turns if turn is None or t.number == turn]
    if not chosen:
        print(f"session {started.id} has no turn {turn} (it has {len(turns)})", file=out)
        return 2
    with tempfile.TemporaryDirectory(prefix="anvil-replay-") as scratch:
        cwd = Path(scratch) / "workspace"
        if not feed:
            shutil.copytree(started.cwd, cwd, symlinks=True)
        else:
            cwd.mkdir()
        for one in chosen:
            try:
                checked = trio.run(replay_turn, started, one, cwd.resolve(), feed)
            except Divergence as exc:
                print(f"DIVERGED {exc.where}", file=out)
                if exc.diff:
                    print(exc.diff, file=out)
                return 1
            except Unreplayable as exc:
                print(f"cannot replay: {exc}", file=out)
                return 2
            print(f"turn {one.number}: {checked} requests reproduced", file=out)
    return 0


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "replay",
        help="re-run a recorded session against its recorded responses; report divergences",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("session", metavar="SESSION", help="a session id")
    parser.add_argument("--turn", type=int, metavar="N", help="only turn N (from 1)")
    parser.add_argument("--no-tools", action="store_true", help="feed the recorded results")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="the daemon's data dir")


def run(args: argparse.Namespace) -> int:
    from anvild.config import user_data_dir
    from anvild.store import StoreError

    path = (args.data_dir or user_data_dir()) / "sessions" / f"{args.session}.jsonl"
    try:
        return replay(path, turn=args.turn, feed=args.no_tools)
    except (StoreError, OSError, Unreplayable) as exc:
        print(f"anvilctl replay: {exc}", file=sys.stderr)
        return 2


__all__ = ["Divergence", "RecordedTurn", "Unreplayable", "recorded_turns", "replay", "run"]
