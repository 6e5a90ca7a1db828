"""`Output`: what a session shows of its turns: the `log` and `events` streams, and `out`.

`log` (human-readable lines: USER:, ASSISTANT:, TOOL:, RESULT:, ERROR:, RETRY:, TURN:, STATE:,
NOTE:)
and `events` (stream-json agent events) are `LineBroadcast`s: per-reader cursors, a bounded
backlog, lag markers. `on_event` translates each agent event: the transcript synced to the
records first (`Recorder.sync`), then what the event records (usage, todos, the turn's end, a
hook's `updatedInput` as a `Note`: what ran, beside the model's call), its log lines (a hook's
`systemMessage` a NOTE), and the event itself on `events`. Besides the loop's events, `events`
carries the session's own (`show`: `approval_requested`, `approval_answered`). The answer being
streamed is kept for `out` and handed to the recorder's checkpoint. At a turn's end `out` is
the final answer, or the partial text and `[turn ended: OUTCOME: DETAIL]`; after a daemon
restart it is rebuilt from the records (`restored_out`, `[interrupted]` when a crash cut the
answer). A restored session's log starts with its past (`log_transcript`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs
import trio

from anvild.agent import events as ev
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult
from anvild.session.recorder import Recorder
from anvild.session.stream import (
    BroadcastLimits,
    LineBroadcast,
    coalesce_text_deltas,
    event_line,
    is_turn_finished,
)
from anvild.store import Note, SessionState, TodoItem, TodosChanged, TurnEnded

PREVIEW_CHARS: Final = 200
INTERRUPTED_MARK: Final = "[interrupted]"
"""In a restored `out`, after what was shown of an answer that a crash cut."""


class Output:
    """The streams and `out` of one session. `notify` is the session's change signal (called
    after `show`); `out` is where a restored session's `out` starts; `turn_deadline` (seconds)
    names the deadline in the end of a turn that it cut."""

    def __init__(
        self,
        limits: BroadcastLimits,
        recorder: Recorder,
        *,
        notify: Callable[[], None],
        out: str = "",
        turn_deadline: float | None = None,
    ) -> None:
        self.log = LineBroadcast(limits)
        self.events = LineBroadcast(
            limits, coalesce=coalesce_text_deltas, terminal=is_turn_finished
        )
        self._recorder = recorder
        self._notify = notify
        self._out = out
        self._turn_deadline = turn_deadline
        self._deadline = math.inf  # when the running turn's deadline passes (trio time)
        self._finished: ev.TurnFinished | None = None
        self._step_text: list[str] = []  # the current step's answer text, for `out`
        self._logged = 0  # how much of it is in the log already

    @property
    def out(self) -> str:
        """The last final answer, or the partial text and the reason after an abnormal end."""
        return self._out

    def log_lines(self, lines: list[str]) -> None:
        """Each line on `log`; a text with line breaks in it (a provider's pretty-printed error
        in a turn's detail) goes on as an indented continuation, never as a broken line."""
        for line in lines:
            first, *rest = line.splitlines() or [""]
            self.log.publish(first)
            for more in rest:
                self.log.publish(f"  {more}")

    def show(self, event: ev.AgentEvent) -> None:
        """An event of the session itself (not of the loop) on its `events` stream."""
        self.events.publish(event_line(event))
        self._notify()

    def close(self) -> None:
        """End both streams (their readers get EOF): the session has ended."""
        self.log.close()
        self.events.close()

    def log_transcript(self, messages: Iterable[Message]) -> None:
        for message in messages:
            for block in message.content:
                match block:
                    case Text(text=text) if text.strip():
                        who = "USER:" if message.role is Role.USER else "ASSISTANT:"
                        self.log_lines(indented(who, text.strip()))
                    case ToolCall(name=name, arguments=arguments):
                        args = json.dumps(arguments, ensure_ascii=False)
                        self.log_lines([f"TOOL: {name} {first_line(args)}"])
                    case ToolResult(content=content, is_error=is_error):
                        label = "ERROR:" if is_error else "RESULT:"
                        self.log_lines([f"{label} {first_line(content)}"])

    # -- a turn ------------------------------------------------------------------------------

    def start_turn(self, text: str, deadline: float) -> None:
        """A turn on prompt `text` starts; its cancel scope's deadline is `deadline`."""
        self._finished = None
        self._step_text, self._logged = [], 0
        self._deadline = deadline
        self.log_lines(indented("USER:", text))

    def on_event(self, event: ev.AgentEvent) -> ev.AgentEvent:
        """Record, log and publish one agent event; returns it as shown (the end of a turn its
        deadline cut says so)."""
        recorder = self._recorder
        recorder.sync()
        match event:
            case ev.StepStarted():
                self._flush_text()
                self._step_text, self._logged = [], 0
            case ev.TextDelta(text=text):
                self._step_text.append(text)
                recorder.checkpoint.add(text)
            case ev.ToolCallStarted(name=name, arguments=arguments):
                self._flush_text()
                args = json.dumps(arguments, ensure_ascii=False)
                self.log_lines([f"TOOL: {name} {first_line(args)}"])
            case ev.ToolCallFinished(is_error=is_error, preview=preview):
                self.log_lines(indented("ERROR:" if is_error else "RESULT:", preview))
            case ev.Usage(usage=usage):
                recorder.append(recorder.requests.usage_record(usage))
            case ev.TodosUpdated(todos=todos):
                items = tuple(TodoItem(t.content, t.status.value) for t in todos)
                recorder.append(TodosChanged(items))
            case ev.StepFailed(error_type=kind, message=message):
                self.log_lines(indented("ERROR:", f"{kind}: {message}"))
            case ev.Retrying(attempt=attempt, max_attempts=most, delay=delay, reason=reason):
                self.log_lines(
                    [f"RETRY: attempt {attempt} of {most} in {delay:g} s: {first_line(reason)}"]
                )
            case ev.CompactionStarted(trigger=trigger, tokens=tokens):
                self._flush_text()
                self.log_lines([f"COMPACTING: {trigger}, about {tokens} tokens"])
            case ev.CompactionFinished(ok=True, before=before, after=after, dropped=dropped):
                self.log_lines(
                    [f"COMPACTED: {before} -> {after} tokens, {dropped} messages summarised"]
                )
            case ev.CompactionFinished(detail=detail):
                self.log_lines([f"NOTE: not compacted: {detail}"])
            case ev.HookReported(name=name, event=hook_event, outcome="message", detail=detail):
                self.log_lines(indented("NOTE:", f"{hook_event} hook {name}: {detail}"))
            case ev.HookReported(name=name, event=hook_event, outcome="updated", detail=detail):
                note = f"{hook_event} hook {name} {detail}"
                recorder.append(Note(note))  # synced with the call's ToolStarted, before it runs
                self.log_lines([f"NOTE: {first_line(note)}"])
            case ev.TurnFinished(outcome=outcome, detail=detail):
                if outcome is ev.TurnOutcome.CANCELLED and trio.current_time() >= self._deadline:
                    detail = f"the turn's deadline of {self._turn_deadline:g} s passed"
                    event = attrs.evolve(event, detail=detail)
                self._flush_text()
                self._finished = event
                recorder.checkpoint.flush()  # an answer the turn did not commit: all of it shown
                recorder.append(TurnEnded(outcome.value, detail))
                self.log_lines([f"TURN: {outcome.value}" + (f" ({detail})" if detail else "")])
                return event  # its line waits for `publish_end`
        self.events.publish(event_line(event))
        return event

    def publish_end(self) -> None:
        """Publish the turn's `turn_finished` line, once `out` is set and the session has left
        running (`Session._finish_turn`): a client that acts on the line (reads `out`, which
        moves await to idle; reads `state`) finds the turn over."""
        if self._finished is not None:
            self.events.publish(event_line(self._finished))

    def end_turn(self, messages: Sequence[Message]) -> ev.TurnFinished | None:
        """Set `out` from how the turn ended (`messages`: the agent's transcript now); returns
        the end the agent reported (None: it reported none)."""
        self._deadline = math.inf
        finished = self._finished
        last = messages[-1] if messages else None
        answer = last.text() if last is not None and last.role is Role.ASSISTANT else ""
        if finished is not None and finished.outcome is ev.TurnOutcome.DONE:
            self._out = answer if answer.endswith("\n") or not answer else answer + "\n"
        else:
            partial = "".join(self._step_text) or answer
            outcome = finished.outcome.value if finished else "error"
            detail = finished.detail if finished else "the turn ended without a report"
            reason = f"[turn ended: {outcome}" + (f": {detail}]" if detail else "]")
            self._out = (partial.rstrip("\n") + "\n\n" if partial.strip() else "") + reason + "\n"
        return finished

    def _flush_text(self) -> None:
        """Log the step's text not logged yet (it stays in `_step_text` for `out`)."""
        text = "".join(self._step_text[self._logged :]).strip()
        self._logged = len(self._step_text)
        if text:
            self.log_lines(indented("ASSISTANT:", text))


def restored_out(state: SessionState) -> str:
    """`out` after a daemon restart: the last answer, or what was shown of the unfinished
    one (recorded as it streamed), [interrupted] when a crash cut it, and the recorded end
    of the turn."""
    last = state.messages[-1] if state.messages else None
    answer = last.text() if last is not None and last.role is Role.ASSISTANT else ""
    turn = state.last_turn
    if turn is None or turn.outcome == ev.TurnOutcome.DONE.value:
        return answer + ("\n" if answer and not answer.endswith("\n") else "")
    shown = state.streamed or answer
    partial = shown.rstrip("\n") if shown.strip() else ""
    if turn.interrupted:
        partial = (partial + "\n" if partial else "") + INTERRUPTED_MARK
    reason = f"[turn ended: {turn.outcome}" + (f": {turn.detail}]" if turn.detail else "]")
    return (partial + "\n\n" if partial else "") + reason + "\n"


def first_line(text: str, limit: int = PREVIEW_CHARS) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def indented(prefix: str, text: str) -> list[str]:
    lines = text.rstrip("\n").splitlines() or [""]
    return [f"{prefix} {lines[0]}", *(f"  {line}" for line in lines[1:])]
