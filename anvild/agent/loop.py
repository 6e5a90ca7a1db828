"""The agent loop: one `Agent` per session, `run_turn` per prompt.

    sample -> commit only a clean completion -> decide -> dispatch -> append results -> validate

up to `max_steps` (`Agent._steps` is the whole algorithm). `run_turn` returns the one
`TurnFinished` it emitted, last. `LlmError`s and transcript violations become `StepFailed` and
the `error` outcome; anything else is a bug, re-raised. Invariants: the transcript only holds
valid states (every change goes through `_commit`; a pending tail only between a step's calls
and their results); a completion is committed only after a clean finish (an abnormal one commits
its text and runs no call). Allowed calls run concurrently only when each is read-only by its
`effects(args)` or `parallel_safe`. On cancellation the transcript stays valid and no unfinished
text is put in the model's mouth. Unknown spend or `BudgetExceeded` ends a turn. Tool results
are redacted before anyone sees them. The `todos` tool's list, when it changed, is a note at
the transcript's end (`TODOS_MARK`), never in the system prompt. The `ContextWindow` clears,
compacts and retries an overflow once; `TurnHooks` run around calls, stop and compaction (a
hook's `Rewrite` runs in the model's call's place; `TurnStopped` ends the turn `cancelled`);
`emit` never blocks. More: docs/decisions.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Final, TypeAlias

import attrs
import trio

from anvild.agent import events as ev
from anvild.agent.admission import BudgetExceeded
from anvild.agent.context import Compaction, ContextWindow, SummaryFailed
from anvild.agent.context.compaction import (
    TODOS_MARK,
    facts,
    is_compacted,
    plan,
    rebuild,
    summary_block,
)
from anvild.agent.context.tokens import request_bytes
from anvild.agent.events import AgentEvent, TurnFinished, TurnOutcome
from anvild.agent.hookpoints import NO_HOOKS, Rewrite, TurnHooks, TurnStopped
from anvild.agent.snapshots import NO_SNAPSHOTS, Snapshots
from anvild.agent.tools.base import Cancellation, ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.agent.tools.todo import render_todos
from anvild.llm import stream
from anvild.llm.builder import Completion, MessageBuilder
from anvild.llm.errors import ContextOverflow, LlmError
from anvild.llm.integrity import TranscriptCheck, TranscriptError, validate_transcript
from anvild.llm.provider import Provider
from anvild.llm.retry import RetryNotice, retry_listener
from anvild.llm.types import (
    ChatRequest,
    ContentBlock,
    Message,
    Role,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
)

PREVIEW_LINES: Final = 3
PREVIEW_CHARS: Final = 240
CANCELLED_NOTE: Final = "[The previous turn was cancelled before the assistant replied.]"
NOT_RECORDED: Final = "the compaction could not be recorded"
"""Why `Agent.compact` did not compact when `on_compaction` refused (the session is in error)."""

_ABNORMAL: Final = {
    stream.FinishReason.MAX_TOKENS: (
        TurnOutcome.MAX_TOKENS,
        "the response was cut off at the output token limit",
    ),
    stream.FinishReason.REFUSAL: (TurnOutcome.REFUSED, "the provider refused to answer"),
    stream.FinishReason.UNSUPPORTED: (
        TurnOutcome.PROTOCOL_STOPPED,
        "the provider stopped in a way this harness does not continue",
    ),
}


@attrs.frozen
class Allow:
    """The call runs; with `context` when the hook gave it one of its own (the permission gate
    widens the file boundary for paths outside the workspace that a person granted)."""

    context: ToolContext | None = None


@attrs.frozen
class Deny:
    reason: str


Decision: TypeAlias = Allow | Deny
Decide: TypeAlias = Callable[[ToolCall], Awaitable[Decision]]
"""The per-call policy hook: awaited before a call runs (it may wait for a human). It sees the
call as the model made it; a `Deny` reason goes back to the model as the call's result."""


async def allow_all(call: ToolCall) -> Decision:
    return Allow()


async def _adopt(compaction: Compaction) -> bool:
    return True


def _discard(event: AgentEvent) -> None:
    return None


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, not {value}")


def _optional_positive(
    instance: object, attribute: attrs.Attribute[int | None], value: int | None
) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attribute.name} must be at least 1 (or None), not {value}")


@attrs.frozen
class AgentConfig:
    model: str
    system: str = ""
    max_steps: int = attrs.field(default=50, validator=_positive)
    max_tokens: int = attrs.field(default=8192, validator=_positive)  # per request
    temperature: float | None = None
    token_budget: int | None = attrs.field(default=None, validator=_optional_positive)
    compact_tools: bool = False  # brief tool definitions, for a small context window
    cache_key: str = ""  # a stable key for the provider's prompt cache (the session's id)
    compaction_model: str = ""  # who writes compaction summaries ("": the session's model)


@attrs.define
class _Batch:
    """The calls of one step while they run: what finished, what started. `calls` are the
    calls as they run (a hook's `Rewrite` replaces one); the transcript keeps the model's.
    `stopped`: a PostToolUse hook stopped the turn (no further call starts)."""

    step: int
    calls: list[ToolCall]
    results: list[ToolResult | None]
    started: list[bool]
    stopped: TurnStopped | None = None

    @classmethod
    def of(cls, step: int, calls: list[ToolCall]) -> _Batch:
        return cls(step, list(calls), [None] * len(calls), [False] * len(calls))


@attrs.define
class _Turn:
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    step: int = 0
    usage: stream.Usage = attrs.Factory(lambda: stream.Usage(0, 0, 0, 0))
    batch: _Batch | None = None  # the calls in flight, until their results are committed
    start: int = 0  # the index of the turn's prompt message in the transcript
    changing: bool = False  # a call that is not read-only was about to run (snapshot taken)

    def finished(self, outcome: TurnOutcome, detail: str = "") -> TurnFinished:
        return TurnFinished(outcome, self.step, self.usage, detail)


def _as_blocks(prompt: str | Sequence[ContentBlock]) -> tuple[ContentBlock, ...]:
    blocks = (Text(prompt),) if isinstance(prompt, str) else tuple(prompt)
    if not blocks or all(isinstance(b, Text) and not b.text.strip() for b in blocks):
        raise ValueError("a prompt needs some content")
    return blocks


def _preview(content: str) -> str:
    lines = content.splitlines()
    shown = "\n".join(line[:PREVIEW_CHARS] for line in lines[:PREVIEW_LINES])[:PREVIEW_CHARS]
    return shown if shown == "\n".join(lines) else shown + "…"


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


class Agent:
    """One conversation with a model and its tools. Session-facing state is public and
    observable: `messages` (the transcript), `todos`, `usage` (session totals), `running`."""

    def __init__(
        self,
        provider: Provider,
        tools: ToolRegistry,
        config: AgentConfig,
        context: ToolContext,
        *,
        emit: Callable[[AgentEvent], None] = _discard,
        decide: Decide = allow_all,
        redact: Callable[[str], str] | None = None,
        messages: Iterable[Message] = (),
        window: ContextWindow | None = None,
        on_compaction: Callable[[Compaction], Awaitable[bool]] = _adopt,
        summariser: Provider | None = None,
        hooks: TurnHooks = NO_HOOKS,
        snapshots: Snapshots = NO_SNAPSHOTS,
    ) -> None:
        self.provider = provider
        self.tools = tools
        self.config = config
        self.context = attrs.evolve(context, emit=emit)  # tools announce through the same path
        self.decide = decide
        self._redact = redact  # e.g. anvild.sandbox.secrets.Redactor.redact
        self._emit = emit
        self.messages: tuple[Message, ...] = ()
        self._checked = TranscriptCheck()  # checks only what each commit adds
        self._commit(*messages)  # a resumed transcript must be valid too
        self.usage = stream.Usage(0, 0, 0, 0)  # every request of the session; None = unknown
        self._turn: _Turn | None = None
        self.window = window  # None: no context management (the window is the provider's)
        self.on_compaction = on_compaction  # records a compaction; False: not adopted
        self.summariser = summariser  # the provider of `compaction_model` ("": `provider`)
        self._compact_asked: str | None = None  # a `compact` asked during a turn: its focus
        # The todo list as the model last saw it; None: as the agent got it (a restored or
        # forked transcript holds it already).
        self._todos_shown: tuple[ev.Todo, ...] | None = None
        self.hooks = hooks
        self.snapshots = snapshots  # the workspace checkpoints, before a turn first changes it

    @property
    def todos(self) -> tuple[ev.Todo, ...]:
        return tuple(self.context.state.todos)

    @property
    def running(self) -> bool:
        return self._turn is not None

    def cancel(self) -> bool:
        """Cancel the running turn (it ends with the cancelled outcome). False if idle."""
        if self._turn is None:
            return False
        self._turn.scope.cancel()
        return True

    def reset(self, messages: Iterable[Message] = ()) -> None:
        """Replace the transcript (clear, restart, compaction). Not while a turn runs."""
        if self._turn is not None:
            raise RuntimeError("cannot replace the transcript while a turn is running")
        self.messages = ()
        self._todos_shown = None
        self._commit(*messages)

    def request_compaction(self, focus: str = "") -> None:
        """Compact before the running turn's next request (a `compact` verb during a turn)."""
        self._compact_asked = focus

    async def compact(self, focus: str = "", trigger: str = "manual") -> str:
        """Compact the history now, between turns. Returns "" when done, else why not."""
        if self._turn is not None:
            raise RuntimeError("a turn is running: use request_compaction")
        return await self._compact(None, trigger, focus)

    async def run_turn(self, prompt: str | Sequence[ContentBlock]) -> TurnFinished:
        """Run one turn for `prompt` and return how it ended (also emitted, last)."""
        blocks = _as_blocks(prompt)
        if self._turn is not None:
            raise RuntimeError("a turn is already running on this agent")
        turn = self._turn = _Turn()
        finished: TurnFinished | None = None
        try:
            with turn.scope:
                finished = await self._guarded(turn, blocks)
            if finished is None:  # our own scope was cancelled
                finished = self._interrupted(turn, TurnOutcome.CANCELLED, "the turn was cancelled")
            return finished
        except BaseException as exc:  # an enclosing cancel, or a bug: report, then propagate
            if _is_cancellation(exc):
                finished = self._interrupted(turn, TurnOutcome.CANCELLED, "the turn was cancelled")
            else:
                finished = self._interrupted(turn, TurnOutcome.ERROR, f"internal error: {exc!r}")
            raise
        finally:
            self._turn = None
            if finished is not None:
                self._emit(finished)

    async def _guarded(self, turn: _Turn, prompt: tuple[ContentBlock, ...]) -> TurnFinished:
        try:
            return turn.finished(*await self._steps(turn, prompt))
        except BudgetExceeded as exc:  # the request was not sent
            return turn.finished(TurnOutcome.BUDGET_EXCEEDED, str(exc))
        except TurnStopped as stop:  # calls not run say so; the reason is not the model's
            return self._interrupted(turn, TurnOutcome.CANCELLED, f"stopped by {stop.reason}")
        except (LlmError, TranscriptError) as exc:
            retryable = isinstance(exc, LlmError) and exc.is_retryable
            self._emit(ev.StepFailed(turn.step, type(exc).__name__, str(exc), retryable))
            return turn.finished(TurnOutcome.ERROR, f"{type(exc).__name__}: {exc}")

    async def _steps(
        self, turn: _Turn, prompt: tuple[ContentBlock, ...]
    ) -> tuple[TurnOutcome, str]:
        await self.tools.prepare()
        if (too_large := self._too_large(prompt)) is not None:
            return TurnOutcome.ERROR, too_large
        self._commit(Message(Role.USER, prompt))
        turn.start = len(self.messages) - 1
        continued = 0  # how often `before_stop` continued this turn
        for step in range(1, self.config.max_steps + 1):
            if (over := self._over_budget(turn)) is not None:
                return TurnOutcome.BUDGET_EXCEEDED, over
            turn.step = step
            self._show_todos()
            self._emit(ev.StepStarted(step))
            self._checked.check(self.messages)
            # Read each step: a tool list that changed (an MCP server's) reaches the next request.
            specs = self.tools.specs(compact=self.config.compact_tools)
            completion = await self._sample_fitting(turn, specs)
            if not completion.executable:
                outcome, why = _ABNORMAL[completion.finish]
                self._commit(Message(Role.ASSISTANT, _text_of(completion.message)))
                return outcome, completion.finish_detail or why
            self._commit(completion.message, pending=True)
            if not completion.tool_calls:
                if (more := await self.hooks.before_stop(continued)) is None:
                    return TurnOutcome.DONE, ""
                continued += 1
                self._commit(Message(Role.USER, (Text(more),)))
                continue
            turn.batch = _Batch.of(step, completion.tool_calls)
            await self._run_batch(turn.batch, completion)
            self._commit_results(turn)
        return TurnOutcome.MAX_STEPS, f"stopped after {self.config.max_steps} steps"

    def _show_todos(self) -> None:
        """At a step's start: the todo list as a note after the last (user) message, when it
        changed since the model last saw it; tool results get cleared, this note does not."""
        todos, shown = self.todos, self._todos_shown
        self._todos_shown = todos
        if shown is None or todos == shown:
            return
        self._commit(Message(Role.USER, (Text(todos_note(todos)),)))

    async def _sample_fitting(self, turn: _Turn, specs: Sequence[ToolSpec]) -> Completion:
        """Sample with the context managed: compact when due, clear old results, and on an
        overflow clear everything clearable, then compact once, then give up saying why."""
        window = self.window
        if window is None:
            return await self._sample(turn, specs, self.messages)
        system = self.config.system
        asked, self._compact_asked = self._compact_asked, None
        if asked is not None:
            await self._compact(turn, "manual", asked)
        elif window.wants_compaction(window.size(system, specs, self.messages)):
            await self._compact(turn, "auto")
        overflow: ContextOverflow | None = None
        for stage in ("", "clear", "compact"):
            if stage == "compact" and await self._compact(turn, "overflow"):
                continue  # it said why it could not compact: nothing new to try
            cleared = window.for_request(system, specs, self.messages, force=stage == "clear")
            if stage == "clear" and not cleared.count:
                continue
            try:
                return await self._sample(turn, specs, cleared.messages)
            except ContextOverflow as exc:
                overflow = exc
        assert overflow is not None
        size = window.size(system, specs, self.messages)
        raise ContextOverflow(
            f"{overflow.message}; still too long after clearing old tool results and compacting "
            f"(about {size} tokens of a {window.settings.window}-token window): write `compact` "
            "or `clear` to the session's ctl, or ask for less at once",
            requested=overflow.requested,
            limit=overflow.limit,
        ) from overflow

    async def _compact(self, turn: _Turn | None, trigger: str, focus: str = "") -> str:
        """Replace the history before the current step by a summary. "" when done, else why
        not (emitted too); the transcript is unchanged then."""
        window = self.window
        if window is None:
            return "this session has no context management"
        system, specs = self.config.system, self.tools.specs(compact=self.config.compact_tools)
        before = window.size(system, specs, self.messages)
        self._emit(ev.CompactionStarted(trigger, before, focus))
        chosen = plan(
            self.messages,
            turn_start=None if turn is None else turn.start,
            keep_user_bytes=window.keep_user_bytes(),
        )
        why = ""
        if not chosen.dropped or all(not m.content for m in chosen.dropped):
            why = "nothing before the current step to summarise"
        if is_compacted(chosen.dropped) and len(chosen.dropped) == 1:
            why = "the history is already one summary"
        if why:
            self._emit(ev.CompactionFinished(trigger, False, before, detail=why))
            return why
        try:
            await self.hooks.before_compact(trigger, focus)
        except TurnStopped as stop:
            why = f"stopped by {stop.reason}"
            self._emit(ev.CompactionFinished(trigger, False, before, detail=why))
            if turn is not None:
                raise
            return why
        todos = [(t.content, t.status.value) for t in self.todos]
        found = facts(chosen.dropped, todos, self.tools.effects)
        model = self.config.compaction_model or self.config.model
        try:
            with self._retries(0 if turn is None else turn.step):
                summary, usage = await window.summarise(
                    self.summariser or self.provider, model, chosen, found, focus
                )
        except (LlmError, SummaryFailed, BudgetExceeded) as exc:
            why = f"the summary could not be written: {type(exc).__name__}: {exc}"
            self._emit(ev.CompactionFinished(trigger, False, before, detail=why))
            return why
        self.usage = self.usage.plus(usage)
        if turn is not None:  # the turn's token budget pays for its summaries too
            turn.usage = turn.usage.plus(usage)
        messages = rebuild(summary_block(summary, found, model=model), chosen)
        validate_transcript(messages)
        after = window.size(system, specs, messages)
        compaction = Compaction(
            messages, summary, len(chosen.dropped), before, after, model, trigger, focus, usage
        )
        if not await self.on_compaction(compaction):
            why = NOT_RECORDED
            self._emit(ev.CompactionFinished(trigger, False, before, detail=why))
            return why
        self.messages = messages
        if turn is not None:
            turn.start = 0
        self._emit(ev.CompactionFinished(trigger, True, before, after, len(chosen.dropped)))
        return ""

    def _too_large(self, prompt: tuple[ContentBlock, ...]) -> str | None:
        """Why `prompt` alone cannot fit the window, or None. (System prompt and tools come on
        top; a prompt that fits only without them overflows later and is recovered then.)"""
        window = self.window
        if window is None:
            return None
        size = window.size("", (), (Message(Role.USER, prompt),))
        if size <= window.settings.window:
            return None
        return (
            f"the prompt is about {size} tokens, more than the model's whole context window of "
            f"{window.settings.window}: split it, or put the text in a file and ask the agent "
            "to read it"
        )

    async def _sample(
        self, turn: _Turn, specs: Sequence[ToolSpec], messages: Sequence[Message]
    ) -> Completion:
        request = ChatRequest(
            model=self.config.model,
            messages=tuple(messages),
            system=self.config.system,
            tools=specs,
            max_tokens=self.config.max_tokens,
            temperature=self.config.temperature,
            cache=True,
            cache_key=self.config.cache_key,
            stable_prefix=1 if is_compacted(messages) else 0,
        )
        builder = MessageBuilder()
        with self._retries(turn.step):
            async with self.provider.stream(request) as events:
                async for event in events:
                    builder.push(event)
                    if isinstance(event, stream.TextDelta) and event.text:
                        self._emit(ev.TextDelta(turn.step, event.text))
                    elif isinstance(event, stream.ReasoningDelta) and event.text:
                        self._emit(ev.ReasoningDelta(turn.step, event.text))
        completion = builder.finish()
        if self.window is not None:
            self.window.meter.measured(
                request_bytes(request.system, specs, messages), completion.usage
            )
        turn.usage = turn.usage.plus(completion.usage)
        self.usage = self.usage.plus(completion.usage)
        self._emit(ev.Usage(turn.step, completion.usage, turn.usage))
        return completion

    def _retries(self, step: int) -> AbstractContextManager[None]:
        """Around a request: each retry the provider starts is emitted as `Retrying`."""

        def retrying(notice: RetryNotice) -> None:
            delay = round(notice.delay, 3)
            attempts = notice.max_attempts
            self._emit(ev.Retrying(step, notice.attempt, attempts, delay, notice.reason))

        return retry_listener(retrying)

    async def _run_batch(self, batch: _Batch, completion: Completion) -> None:
        allowed: list[int] = []
        contexts: dict[int, ToolContext] = {}
        for call in batch.calls:
            self._emit(ev.ToolCallStarted(batch.step, call.id, call.name, call.arguments))
        for index, call in enumerate(batch.calls):
            if call.id in completion.invalid_arguments:
                why = completion.invalid_arguments[call.id]
                message = f"The arguments of {call.name} were not run: {why}. Send one JSON object."
                self._finish_call(batch, index, ToolResult(call.id, message, is_error=True))
            elif isinstance(verdict := await self.hooks.before_call(call), str):
                message = f"Blocked by a hook before {call.name} ran: {verdict}"
                self._finish_call(batch, index, ToolResult(call.id, message, is_error=True))
            else:
                denied = f"Permission denied for {call.name}"
                if isinstance(verdict, Rewrite):  # decided and run as if the model had sent it
                    call = batch.calls[index] = attrs.evolve(call, arguments=verdict.arguments)
                    denied += f" with the input PreToolUse hook {verdict.by} gave it"
                if isinstance(decision := await self._decide(call), Deny):
                    message = f"{denied}: {decision.reason}"
                    self._finish_call(batch, index, ToolResult(call.id, message, is_error=True))
                else:
                    allowed.append(index)
                    contexts[index] = decision.context or self.context
        read_only = {i: self.tools.effects(batch.calls[i]).read_only for i in allowed}
        if not all(read_only.values()):
            await self._before_change()
        if all(read_only[i] or self._parallel_safe(batch.calls[i]) for i in allowed):
            async with trio.open_nursery() as nursery:
                for index in allowed:
                    nursery.start_soon(self._run_call, batch, index, contexts[index])
        else:
            for index in allowed:
                if batch.stopped is not None:
                    break
                await self._run_call(batch, index, contexts[index])
        if batch.stopped is not None:
            raise batch.stopped

    async def _before_change(self) -> None:
        """Once per turn, before its first call that may change something runs."""
        turn = self._turn
        if turn is not None and not turn.changing:
            turn.changing = True
            await self.snapshots.before_change()

    def _parallel_safe(self, call: ToolCall) -> bool:
        """Whether a call that may change something may still run beside the other calls of
        its step: its tool says `parallel_safe` (what it does happens elsewhere, under its own
        checks: `task` runs a child session). A call that only reads always may."""
        return getattr(self.tools.get(call.name), "parallel_safe", False) is True

    async def _decide(self, call: ToolCall) -> Decision:
        try:
            return await self.decide(call)
        except Exception as exc:  # a failing policy never grants anything
            return Deny(f"the permission check failed ({type(exc).__name__}: {exc})")

    async def _run_call(self, batch: _Batch, index: int, context: ToolContext) -> None:
        batch.started[index] = True
        call = batch.calls[index]
        result = await self.tools.dispatch(call, context)
        try:
            note = await self.hooks.after_call(call, result)
        except TurnStopped as stop:  # the result stands; the turn ends after this batch
            note, batch.stopped = "", batch.stopped or stop
        if note:
            result = ToolResult(result.call_id, f"{result.content}\n\n{note}", result.is_error)
        self._finish_call(batch, index, result)

    def _finish_call(self, batch: _Batch, index: int, result: ToolResult) -> None:
        if self._redact is not None:  # before the model, the events or a record see it
            result = ToolResult(result.call_id, self._redact(result.content), result.is_error)
        batch.results[index] = result
        call = batch.calls[index]
        preview = _preview(result.content)
        self._emit(ev.ToolCallFinished(batch.step, call.id, call.name, result.is_error, preview))

    def _commit_results(self, turn: _Turn) -> None:
        assert turn.batch is not None
        results = [r for r in turn.batch.results if r is not None]
        self._commit(Message(Role.USER, results))
        turn.batch = None

    def _commit(self, *messages: Message, pending: bool = False) -> None:
        """Append (merging a user message into a trailing user message), validate, replace."""
        base = self.messages  # not copied: it grows with the session
        added: list[Message] = []
        for message in messages:
            if not message.content:
                continue  # an empty answer adds nothing (and providers reject empty messages)
            last = added[-1] if added else base[-1] if base else None
            if last is not None and message.role is Role.USER and last.role is Role.USER:
                message = Message(Role.USER, (*last.content, *message.content))
                if added:
                    added.pop()
                else:
                    base = base[:-1]
            added.append(message)
        self.messages = self._checked.append(base, added, allow_pending_tail=pending)

    def _over_budget(self, turn: _Turn) -> str | None:
        budget = self.config.token_budget
        if budget is None or turn.step == 0:
            return None
        spent = turn.usage.total
        if spent is None:
            return (
                f"the provider did not report every token count ({turn.usage}), so the turn's "
                f"token budget of {budget} cannot be checked; unknown usage is not zero"
            )
        if spent >= budget:
            return f"{spent} tokens used of a {budget}-token budget"
        return None

    def _interrupted(self, turn: _Turn, outcome: TurnOutcome, detail: str) -> TurnFinished:
        """Leave a valid transcript after a cancel or a bug, synchronously (no checkpoints)."""
        batch = turn.batch
        if batch is not None:
            for index, call in enumerate(batch.calls):
                if batch.results[index] is None:
                    self._finish_call(batch, index, self._unfinished(call, batch.started[index]))
            self._commit_results(turn)
        elif (
            outcome is TurnOutcome.CANCELLED
            and self.messages[-1:]
            and (self.messages[-1].role is Role.USER)
        ):
            self._commit(Message(Role.USER, (Text(CANCELLED_NOTE),)))
        return turn.finished(outcome, detail)

    def _unfinished(self, call: ToolCall, started: bool) -> ToolResult:
        if not started:
            text = f"Not run: the turn was stopped before {call.name} started."
        else:
            tool = self.tools.get(call.name)
            text = f"Interrupted: the turn was stopped while {call.name} was running."
            if self.tools.effects(call).read_only:
                text += " It only reads, so nothing was changed."
            else:
                if tool is not None and tool.cancellation is Cancellation.KILLS_CHILDREN:
                    text += " Its process group was killed."
                text += (
                    " Its effects are uncertain: it may have partly run. Check the current "
                    "state before running it again."
                )
        return ToolResult(call.id, text, is_error=True)


def todos_note(todos: tuple[ev.Todo, ...]) -> str:
    """The note that shows the model its todo list at a step where it changed."""
    if not todos:
        return f"{TODOS_MARK} is now empty.]"
    return f"{TODOS_MARK}, as it is now (todo_write changes it):]\n{render_todos(todos)}"


def _text_of(message: Message) -> tuple[ContentBlock, ...]:
    return tuple(block for block in message.content if isinstance(block, Text))
