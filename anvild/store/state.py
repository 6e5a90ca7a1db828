"""`SessionState`: everything a session's records say, as one frozen value.

The reducer (`anvild.store.reducer.apply`) is the only producer of new states; the supervisor
reads them (its files render from them) and never builds one by hand. Values only, no I/O, no
methods that save or serialise.
"""

from __future__ import annotations

import datetime as dt

import attrs

from anvild.llm import stream
from anvild.llm.types import Json, Message, Role, ToolCall, ToolResult
from anvild.store.records import SessionStatus, TodoItem, TurnEnded


@attrs.frozen
class ToolRun:
    """A call that started (`ToolStarted`) and whose result is not in the transcript yet.
    `result` is set once its `ToolFinished` is recorded."""

    call_id: str
    name: str
    result: ToolResult | None = None


@attrs.frozen
class QueuedPrompt:
    prompt_id: str
    text: str


@attrs.frozen
class PendingApproval:
    """The call waiting on the session's `approval` file."""

    call_id: str
    tool: str
    arguments: Json
    reason: str


@attrs.frozen
class PendingResult:
    """A result waiting on the session's `approval` file (`ResultApprovalRequested`)."""

    summary: str
    asked_by: str
    ref: str = ""
    approver: str = ""  # the session that may answer it besides a person ("": only a person)


@attrs.frozen
class DecidedResult:
    """How the last result gate of one asker ended (`ResultApprovalAnswered`): `verdict`
    approve, reject or cancelled, the reject `reason`, who answered (`by`), and the request's
    `ref`. Kept per `asked_by` (the newest only), so an asker such as a bead can learn the
    decision from the records after a daemon restart."""

    asked_by: str
    ref: str
    verdict: str
    reason: str = ""
    by: str = ""


@attrs.frozen
class UsageBaseline:
    """The last request's reported usage, and how many messages the transcript had when it was
    recorded: the `usage` file adds an estimate for what was appended since. Reset (None) by a
    model change and by any context replacement (clear, restart, compaction, handoff)."""

    usage: stream.Usage
    messages: int


ZERO_USAGE = stream.Usage(0, 0, 0, 0)


RECENT_TURNS = 20
"""How many finished turns' usage the state keeps (`SessionState.turns`)."""


@attrs.frozen
class TurnUsage:
    """What one turn's requests reported: the turn's number (1 for the first prompt taken)."""

    turn: int
    usage: stream.Usage


@attrs.frozen
class CompactionInfo:
    """One compaction as `agent/ID/compactions` lists it (`Compacted`, without the texts)."""

    at: dt.datetime
    before: int
    after: int
    trigger: str
    model: str
    dropped: int


def _merged(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*old, *new)))


@attrs.frozen
class Remembered:
    """Everything `always` answers added to the session's permissions (in the order given,
    without repeats): allow rule strings and escalation grants. It outlives clear, restart and
    daemon restarts: an `always` is "for the rest of this session"."""

    rules: tuple[str, ...] = ()
    read_roots: tuple[str, ...] = ()
    write_roots: tuple[str, ...] = ()
    network: bool = False
    full_access: bool = False

    def plus(self, other: Remembered) -> Remembered:
        return Remembered(
            _merged(self.rules, other.rules),
            _merged(self.read_roots, other.read_roots),
            _merged(self.write_roots, other.write_roots),
            self.network or other.network,
            self.full_access or other.full_access,
        )


@attrs.frozen
class SessionState:
    """One session as its records built it.

    `status` is the recorded lifecycle state; `usage` sums every request of the session (a field
    is None once any request left it unreported: unknown is never zero); `tools` are the calls
    in flight (started, result not yet in the transcript), in start order; `queue` the prompts
    waiting, in order; `notes` the log lines recorded with `Note`; `ended` the reason of a
    `SessionEnded` (None while the session lives); `files_seen` the sha256 of what the file
    tools last read or wrote per canonical path (`FileSeen`: kept across clear and restart,
    as the live tracker is). `streamed` is the answer text streamed in the current step and
    not in the transcript (`TextStreamed`; display only, never sent to a provider): cleared
    when the step's assistant message is appended, a prompt is taken or the context replaced,
    so after a crash (or a cancel) it is what `out` showed of the unfinished answer.
    `compactions` lists every `Compacted`, oldest first; `turns` the usage of the recent
    finished turns (a turn is a prompt taken, ended by its `TurnEnded`).
    """

    id: str
    alias: str | None
    role: str
    model: str
    cwd: str
    sandbox: str
    created_at: dt.datetime
    ephemeral: bool
    context: str
    max_steps: int | None = None
    permission: str | None = None
    token_budget: int | None = None
    headless: bool = False
    approver: str | None = None  # the approver session of its own result gates (None: user)
    parent: str | None = None  # the session whose `task` call started this one (a subagent)
    messages: tuple[Message, ...] = ()
    status: SessionStatus = SessionStatus.STARTING
    status_detail: str = ""
    todos: tuple[TodoItem, ...] = ()
    usage: stream.Usage = ZERO_USAGE
    baseline: UsageBaseline | None = None
    tools: tuple[ToolRun, ...] = ()
    queue: tuple[QueuedPrompt, ...] = ()
    approval: PendingApproval | None = None
    result_approval: PendingResult | None = None  # a result gate (request_approval)
    result_decisions: tuple[DecidedResult, ...] = ()  # the last decision per asked_by
    always_allowed: tuple[str, ...] = ()  # tools answered `always`, sorted
    remembered: Remembered = Remembered()  # what those answers added (PermissionsRemembered)
    last_turn: TurnEnded | None = None
    first_prompt: str | None = None  # the first user text, for `anvilctl sessions`
    notes: tuple[str, ...] = ()
    ended: str | None = None
    files_seen: tuple[tuple[str, str], ...] = ()  # (canonical path, sha256), sorted by path
    streamed: str = ""
    compactions: tuple[CompactionInfo, ...] = ()
    turn_count: int = 0  # prompts taken so far: the running or last turn's number
    turn_usage: stream.Usage = ZERO_USAGE  # the running (or last) turn's requests
    turns: tuple[TurnUsage, ...] = ()  # the last RECENT_TURNS finished turns

    def seen_files(self) -> dict[str, str]:
        """What the file tools last saw per canonical path (`FileSeen`): its sha256."""
        return dict(self.files_seen)

    @property
    def pending_calls(self) -> tuple[ToolCall, ...]:
        """The calls of a trailing assistant message: they have no results yet."""
        if self.messages and self.messages[-1].role is Role.ASSISTANT:
            return tuple(self.messages[-1].tool_calls())
        return ()

    def result_decision(self, asked_by: str) -> DecidedResult | None:
        """How the last result gate asked by `asked_by` ended (None: none has ended since its
        last request)."""
        return next((d for d in self.result_decisions if d.asked_by == asked_by), None)

    def run(self, call_id: str) -> ToolRun | None:
        return next((run for run in self.tools if run.call_id == call_id), None)
