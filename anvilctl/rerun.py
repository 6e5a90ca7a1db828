"""`anvilctl replay SESSION [--turn N] [--no-tools] [--data-dir DIR]`: re-run a recorded
session's turns against its recorded model responses and report the first divergence.

Each turn is rebuilt from the records: the transcript before it, its prompt, each model
response (the assistant message, its canonical form) with the identity of the request it
answered (`anvild.llm.identity`), and the request's head (system prompt, parameters). The agent
loop runs the turn again, with the recorded system prompt and parameters and the code's tools,
against a provider that plays the recorded responses and checks each request's digest: a
request that is not byte for byte the recorded one is reported with a unified diff of the part
that differs (head, messages). Tools re-run in a scratch copy of the workspace (as it is now),
each result compared, or with `--no-tools` the recorded results are fed back. The first
difference ends the run (exit 1); a turn that reproduces says how many requests it checked.
Requests recorded without a digest (older records), or that carried tool results a context
window had cleared (not in the records), are compared by their messages, and it says so.
A turn the replay cannot rebuild (a compaction, rewind or clear within it, reasoning blocks) is
reported as such (exit 2).
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

from anvilctl import add_command, add_data_dir, data_dir
from anvild.agent.events import TurnOutcome
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.tools.base import (
    Args,
    Cancellation,
    Effects,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
)
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.identity import RequestHasher, digest_of, message_digest
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
    digest: str = ""  # the request's identity ("": not recorded)
    head: str = ""  # the digest of its head


@attrs.define
class _Usage:
    """The latest `UsageReported`: what the next assistant message answered."""

    usage: Usage = attrs.Factory(Usage)
    digest: str = ""
    head: str = ""


@attrs.define
class RecordedTurn:
    number: int
    before: tuple[Message, ...] = ()
    prompt: tuple[Any, ...] = ()  # its content blocks
    responses: list[Response] = attrs.Factory(list)
    results: dict[str, ToolResult] = attrs.Factory(dict)
    outcome: str = ""
    problem: str = ""
    heads: dict[str, Any] = attrs.Factory(dict)  # head digest -> head, from the whole file
    stand_ins: frozenset[str] = frozenset()  # its tools the replay could not build
    by_messages: int = 0  # requests compared by their messages: what was sent was not recorded

    @property
    def hashed(self) -> bool:
        """Whether every response has its request's digest (else: compared by messages)."""
        return all(r.digest for r in self.responses)


def recorded_turns(records: Sequence[Record]) -> tuple[SessionStarted, list[RecordedTurn]]:
    """The session's start and its turns as the records hold them."""
    state = None
    turns: list[RecordedTurn] = []
    current: RecordedTurn | None = None
    usage = _Usage()
    heads: dict[str, Any] = {}
    started: SessionStarted | None = None
    for record in records:
        before = () if state is None else state.messages
        state = apply(state, record)
        match record:
            case SessionStarted():
                started = record
            case PromptTaken():
                current = RecordedTurn(len(turns) + 1, before=before, heads=heads)
                turns.append(current)
            case MessageAppended(message=message) if current is not None:
                if message.role is Role.USER and not current.prompt:
                    current.before, current.prompt = before, message.content
                elif message.role is Role.ASSISTANT:
                    current.responses.append(
                        Response(message, before, usage.usage, usage.digest, usage.head)
                    )
                    usage = _Usage()
            case MessageExtended(blocks=blocks) if current is not None and not current.prompt:
                current.before, current.prompt = before, tuple(blocks)
                current.problem = "its prompt was merged into an earlier message"
            case UsageReported(usage=reported, request=digest, head=head, head_body=body):
                usage = _Usage(reported, digest, head)
                if head and body is not None:
                    heads.setdefault(head, body)
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


def _head_lines(head: Any) -> list[str]:
    """A request's head as lines to diff: each parameter, the system prompt, each tool."""
    if not isinstance(head, dict):
        return [json.dumps(head, sort_keys=True)]
    lines: list[str] = []
    for key in sorted(head):
        value = head[key]
        if key == "system" and isinstance(value, str):
            lines += ["system:", *(f"  {line}" for line in value.splitlines())]
        elif key == "tools" and isinstance(value, list):
            for tool in value:
                name = tool.get("name") if isinstance(tool, dict) else None
                text = json.dumps(tool, sort_keys=True, indent=1, ensure_ascii=False)
                lines += [f"tool {name}:", *(f"  {line}" for line in text.splitlines())]
        else:
            lines.append(f"{key}: {json.dumps(value, sort_keys=True, ensure_ascii=False)}")
    return lines


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
        self._hasher = RequestHasher()

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
        where = f"turn {self.turn.number} step {step}: the request differs"
        expected, got = _lines(response.request), _lines(request.messages)
        if not response.digest:  # recorded before requests had an identity: their messages
            if expected != got:
                raise Divergence(where, _diff(expected, got, "messages"))
        elif (found := self._hasher.identify(request)).digest != response.digest:
            if found.head == response.head and expected == got and not _carried(response):
                # The recorded request did not carry the transcript the records hold (the
                # session's context window had cleared old tool results): by its messages.
                self.turn.by_messages += 1
                yield _play(_events(response))
                return
            diffs: list[str] = []
            if found.head != response.head:
                recorded = self.turn.heads.get(response.head)
                if recorded is None:
                    diffs.append(f"(the head {response.head[:12]} is not in the records)")
                else:
                    diffs.append(_diff(_head_lines(recorded), _head_lines(found.head_body), "head"))
            if expected != got:
                diffs.append(_diff(expected, got, "messages"))
            if not diffs:
                diffs.append("(the canonical forms differ; their parts as shown do not)")
            raise Divergence(where, "\n".join(diffs))
        yield _play(_events(response))


def _carried(response: Response) -> bool:
    """Whether the recorded request carried the recorded transcript before its response."""
    return digest_of(response.head, [message_digest(m) for m in response.request]) == (
        response.digest
    )


async def _play(events: list[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event


class CheckedTools(ToolRegistry):
    """The session's tools, each result compared with the recorded one; or, `feed`, the
    recorded results returned instead of running anything."""

    def __init__(
        self,
        tools: Sequence[Tool],
        turn: RecordedTurn,
        feed: bool,
        step: Callable[[], int],
        stand_ins: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(tools)
        self.turn = turn
        self.feed = feed
        self.step = step  # the step whose calls run (the requests made so far)
        self.stand_ins = stand_ins  # tools the replay cannot build: their results are fed

    async def dispatch(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        recorded = self.turn.results.get(call.id)
        if recorded is None:
            where = (
                f"turn {self.turn.number} step {self.step()}: call {call.id} ({call.name}) "
                "has no recorded result"
            )
            raise Divergence(where, "")
        if self.feed or call.name in self.stand_ins:
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


@attrs.frozen
class RecordedTool:
    """A tool the replay cannot build (MCP, skills, the daemon's own): the definition the
    request recorded; its calls are fed their recorded results."""

    spec: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def description(self) -> str:
        return str(self.spec.get("description", ""))

    @property
    def summary(self) -> str:
        """As recorded: compact definitions keep it (`brief_description`)."""
        return self.description

    @property
    def input_schema(self) -> dict[str, Any]:
        schema = self.spec.get("input_schema")
        return schema if isinstance(schema, dict) else {"type": "object"}

    @property
    def cancellation(self) -> Cancellation:
        return Cancellation.SAFE_TO_ABANDON

    def effects(self, args: Args) -> Effects:
        return Effects.none()

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        raise ToolError(f"{self.name} is not run by the replay (its result is fed)")


def _first_head(turn: RecordedTurn) -> dict[str, Any] | None:
    """The head of the turn's first request whose head the records hold."""
    head = next((turn.heads[r.head] for r in turn.responses if r.head in turn.heads), None)
    return head if isinstance(head, dict) else None


def _replay_tools(
    started: SessionStarted, turn: RecordedTurn, cwd: Path
) -> tuple[list[Tool], frozenset[str]]:
    """The tools the turn's requests offered: each one the replay can build from the code (its
    definition compared, its calls re-run), the others as recorded (`RecordedTool`); without a
    recorded head, the session's native tools."""
    native = {tool.name: tool for tool in _tools(started, cwd)}
    head = _first_head(turn)
    if head is None or not isinstance(head.get("tools"), list):
        return list(native.values()), frozenset()
    tools: list[Tool] = []
    stand_ins: set[str] = set()
    for spec in head["tools"]:
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(name, str):
            raise Unreplayable(f"turn {turn.number}: a recorded tool definition has no name")
        if name in native:
            tools.append(native[name])
        else:
            tools.append(RecordedTool(spec))
            stand_ins.add(name)
    return tools, frozenset(stand_ins)


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
    built, turn.stand_ins = _replay_tools(started, turn, cwd)
    tools = CheckedTools(built, turn, feed, lambda: provider.requests, turn.stand_ins)
    steps = max(1, len(turn.responses))
    agent = Agent(
        provider,
        tools,
        _config(started, turn, tools, steps),
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


def _config(
    started: SessionStarted, turn: RecordedTurn, tools: ToolRegistry, steps: int
) -> AgentConfig:
    """The loop's config as the turn's first request recorded it (system prompt, parameters),
    else only the session's model."""
    head = _first_head(turn)
    if head is None:
        return AgentConfig(model=started.model, max_steps=steps)
    return AgentConfig(
        model=head.get("model", started.model),
        system=head.get("system", ""),
        max_steps=steps,
        max_tokens=head.get("max_tokens", AgentConfig.max_tokens),
        temperature=head.get("temperature"),
        compact_tools=_compact(head, tools),
        cache_key=head.get("cache_key", ""),
    )


def _compact(head: dict[str, Any], tools: ToolRegistry) -> bool:
    """Whether the recorded requests carried compact tool definitions (a small-window model):
    the form that more of the code's own tools match as recorded."""
    recorded = {
        spec.get("name"): spec for spec in head.get("tools") or () if isinstance(spec, dict)
    }
    votes = 0
    for compact in (True, False):
        for spec in converter.unstructure(tools.specs(compact=compact)):
            if spec["name"] not in getattr(tools, "stand_ins", ()):
                votes += (1 if compact else -1) * (recorded.get(spec["name"]) == spec)
    return votes > 0


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
            print(f"turn {one.number}: {checked} requests reproduced{_how(one, checked)}", file=out)
    return 0


def _how(turn: RecordedTurn, checked: int) -> str:
    """How a reproduced turn's requests were compared."""
    if not checked:
        return ""
    if not turn.hashed:
        return " (by their messages: the records hold no request hash)"
    how = "every request byte for byte"
    if turn.by_messages:
        how = (
            f"{checked - turn.by_messages} byte for byte, {turn.by_messages} by their messages: "
            "the session's context window had cleared old tool results from what was sent"
        )
    if turn.stand_ins:
        how += f"; recorded definitions and results: {', '.join(sorted(turn.stand_ins))}"
    return f" ({how})"


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        sub,
        "replay",
        __doc__,
        help="re-run a recorded session against its recorded responses; report divergences",
    )
    parser.add_argument("session", metavar="SESSION", help="a session id")
    parser.add_argument("--turn", type=int, metavar="N", help="only turn N (from 1)")
    parser.add_argument("--no-tools", action="store_true", help="feed the recorded results")
    add_data_dir(parser)


def run(args: argparse.Namespace) -> int:
    from anvild.store import StoreError

    path = data_dir(args.data_dir) / "sessions" / f"{args.session}.jsonl"
    try:
        return replay(path, turn=args.turn, feed=args.no_tools)
    except (StoreError, OSError, Unreplayable) as exc:
        print(f"anvilctl replay: {exc}", file=sys.stderr)
        return 2


__all__ = ["Divergence", "RecordedTurn", "Unreplayable", "recorded_turns", "replay", "run"]
