"""What a running turn tells the world: typed `AgentEvent`s and the `TurnOutcome` of a turn.

    AgentEvent = StepStarted | TextDelta | ReasoningDelta | ToolCallStarted | ToolCallFinished
               | Usage | StepFailed | Retrying | TodosUpdated | Lagged | TurnFinished
               | ApprovalRequested | ApprovalAnswered | CompactionStarted | CompactionFinished
               | HookReported

Every turn emits exactly one `TurnFinished`, last, its `outcome` the turn's end as a value.
Not from the loop: `Lagged` (the event channel, where it dropped events), `ApprovalRequested`/
`ApprovalAnswered` (the session, when its `approval` wait starts and ends). JSON goes through the
one `event_converter`, each object tagged with its class's stable `TAG`:
    {"type":"turn_finished","outcome":"done","steps":2,"usage":{"input":12,...},"detail":""}
Token counts are `Usage` values: `None` (unreported) is never printed or summed as zero.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from typing import ClassVar, Final, TypeAlias

import attrs
import cattrs

from anvild.lines.jsonl import TaggedJson
from anvild.llm import stream
from anvild.llm.types import Json

__all__ = [
    "AgentEvent",
    "ApprovalAnswered",
    "ApprovalRequested",
    "CompactionFinished",
    "CompactionStarted",
    "HookReported",
    "Lagged",
    "ReasoningDelta",
    "Retrying",
    "StepFailed",
    "StepStarted",
    "TextDelta",
    "Todo",
    "TodoStatus",
    "TodosUpdated",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnFinished",
    "TurnOutcome",
    "Usage",
    "event_converter",
    "event_json",
    "from_json",
    "to_json",
]


class TurnOutcome(enum.StrEnum):
    """How a turn ended. Only `DONE` means the model finished its answer."""

    DONE = "done"
    MAX_STEPS = "max_steps"  # the step limit ran out with the model still calling tools
    MAX_TOKENS = "max_tokens"  # the response was cut at the output-token limit
    REFUSED = "refused"  # the provider refused to answer
    CANCELLED = "cancelled"  # the turn's cancel scope (or an enclosing one) was cancelled
    PROTOCOL_STOPPED = "protocol_stopped"  # a stop this harness does not continue (pause_turn)
    BUDGET_EXCEEDED = "budget_exceeded"  # the turn's token budget is spent (or unknowable)
    ERROR = "error"  # a provider, stream or transcript error; `detail` says which


class TodoStatus(enum.StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


@attrs.frozen
class Todo:
    """One item of the session's todo list (written by the todo_write tool)."""

    content: str
    status: TodoStatus = attrs.field(converter=TodoStatus)


@attrs.frozen
class StepStarted:
    TAG: ClassVar[str] = "step_started"
    step: int


@attrs.frozen
class TextDelta:
    """Answer text as it streams. Adjacent deltas may arrive coalesced into one."""

    TAG: ClassVar[str] = "text_delta"
    step: int
    text: str


@attrs.frozen
class ReasoningDelta:
    TAG: ClassVar[str] = "reasoning_delta"
    step: int
    text: str


@attrs.frozen
class ToolCallStarted:
    """The model asked for a call and the loop is about to decide on it and run it."""

    TAG: ClassVar[str] = "tool_call_started"
    step: int
    id: str
    name: str
    arguments: Json


@attrs.frozen
class ToolCallFinished:
    """A call's result went into the transcript; `preview` is its first few lines."""

    TAG: ClassVar[str] = "tool_call_finished"
    step: int
    id: str
    name: str
    is_error: bool
    preview: str


@attrs.frozen
class Usage:
    """Tokens reported for one request (`step`), and the turn's running total."""

    TAG: ClassVar[str] = "usage"
    step: int
    usage: stream.Usage
    turn: stream.Usage


@attrs.frozen
class StepFailed:
    """A step could not complete: the provider failed, the stream broke its protocol, or the
    transcript would have become invalid. `error_type` names the error class."""

    TAG: ClassVar[str] = "step_failed"
    step: int
    error_type: str
    message: str
    retryable: bool = False


@attrs.frozen
class Retrying:
    """A request of step `step` failed with a retryable error (`reason`); attempt `attempt` (2
    is the first retry) of at most `max_attempts` starts after `delay` seconds."""

    TAG: ClassVar[str] = "retrying"
    step: int
    attempt: int
    max_attempts: int
    delay: float
    reason: str


def _to_todos(todos: Iterable[Todo]) -> tuple[Todo, ...]:
    return tuple(todos)


@attrs.frozen
class TodosUpdated:
    TAG: ClassVar[str] = "todos_updated"
    todos: tuple[Todo, ...] = attrs.field(converter=_to_todos)


@attrs.frozen
class Lagged:
    """The consumer fell behind and `dropped` events were dropped at this point."""

    TAG: ClassVar[str] = "lagged"
    dropped: int


@attrs.frozen
class TurnFinished:
    """The last event of every turn. `steps` counts model requests made; `usage` is the turn's
    total (fields unknown when any request did not report them)."""

    TAG: ClassVar[str] = "turn_finished"
    outcome: TurnOutcome = attrs.field(converter=TurnOutcome)
    steps: int
    usage: stream.Usage
    detail: str = ""


@attrs.frozen
class ApprovalRequested:
    """The session waits for an answer on its `approval` file (state await_approval), for what
    the file shows: `kind` "tool" (a call: `call_id`, `tool`, `arguments`, `reason`, and what
    `always` would add, `always_adds`) or "result" (its result: `asked_by`, `summary`, and
    `approver`, the session that may answer it besides a person, or `user`). A
    headless session refuses such a call at once: it never waits, and never emits this."""

    TAG: ClassVar[str] = "approval_requested"
    kind: str
    call_id: str = ""
    tool: str = ""
    arguments: Json = None
    reason: str = ""
    always_adds: tuple[str, ...] = ()
    asked_by: str = ""
    summary: str = ""
    approver: str = ""


@attrs.frozen
class ApprovalAnswered:
    """The wait announced by `ApprovalRequested` ended: `verdict` approve, always, reject (with
    the `reason`), or cancelled (a cancel, stop, kill or shutdown: nothing was approved). `by`
    names who answered a result approval."""

    TAG: ClassVar[str] = "approval_answered"
    kind: str
    verdict: str
    reason: str = ""
    call_id: str = ""
    by: str = ""


@attrs.frozen
class CompactionStarted:
    """A summary is being written to replace the history. `trigger`: auto (the window reached
    `[context] auto_compact`), overflow (the provider refused the request as too long) or
    manual (`compact` on ctl); `tokens` the request's estimated size before."""

    TAG: ClassVar[str] = "compaction_started"
    trigger: str
    tokens: int
    focus: str = ""


@attrs.frozen
class CompactionFinished:
    """How the compaction ended: `ok` with the size `before` and `after` and the messages it
    replaced (`dropped`), or not (`detail` says why; the history is unchanged)."""

    TAG: ClassVar[str] = "compaction_finished"
    trigger: str
    ok: bool
    before: int
    after: int = 0
    dropped: int = 0
    detail: str = ""


@attrs.frozen
class HookReported:
    """A user hook (`anvild.hooks`) that did more than go on: `outcome` is `blocked` (exit 2,
    or output that blocks, denies or continues), `error` (another exit, output that is not
    what its event takes, a command that could not start: never blocks) or `timeout` (its
    process group was killed); `detail` is what it wrote or why."""

    TAG: ClassVar[str] = "hook"
    name: str
    event: str
    outcome: str
    detail: str = ""


AgentEvent: TypeAlias = (
    StepStarted
    | TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallFinished
    | Usage
    | StepFailed
    | Retrying
    | TodosUpdated
    | Lagged
    | TurnFinished
    | ApprovalRequested
    | ApprovalAnswered
    | CompactionStarted
    | CompactionFinished
    | HookReported
)


event_json: Final = TaggedJson[AgentEvent](AgentEvent)
"""The JSON form of agent events: tagged by `TAG`, token counts as plain objects."""
EVENT_TYPES: Final = event_json.types
event_converter: Final[cattrs.Converter] = event_json.converter


def to_json(event: AgentEvent) -> str:
    """One event as one compact JSON line (no newline)."""
    return event_json.line(event)


def from_json(line: str) -> AgentEvent:
    """Parse one line written by `to_json`. Raises ValueError for anything else."""
    try:
        return event_json.structure(json.loads(line))
    except (ValueError, KeyError, TypeError, cattrs.BaseValidationError) as exc:
        raise ValueError(f"not an agent event: {line[:200]!r} ({exc!r})") from exc
