"""Session records: the versioned `Record` union, its JSON converter, and the schema upgrade.

Every line of a journal is one record in an envelope with its sequence number (1, 2, 3, ... no
gaps) and the record's stable `type` tag:

    {"seq":1,"type":"session_started","schema":4,"id":"s1","alias":null,"role":"developer",...}
    {"seq":3,"type":"tool_started","call_id":"c1","name":"bash"}

Tags are each class's `TAG` (never a class name) and never change: every later version reads
today's files. Messages go through `anvild.llm.types.converter`, so provider meta round-trips.
The header carries `schema` (`SCHEMA_VERSION`); `upgrade_lines` turns schemas 0-3 into the
current one. A version is raised with each new tag, so an older anvild refuses a newer file
untouched. Pure: the journal does the I/O. Schema history: docs/decisions.md, "Module notes".
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final, TypeAlias, get_args

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from anvild.lines.jsonl import TaggedJson, dumps
from anvild.llm import stream
from anvild.llm.types import ContentBlock, Json, Message, ToolResult
from anvild.llm.types import converter as llm_converter
from anvild.store.errors import RecordError

SCHEMA_VERSION: Final = 5
"""The schema this version writes. Files with a lower version are upgraded, higher refused."""

OLDEST_SCHEMA: Final = 0


class SessionStatus(enum.StrEnum):
    """The lifecycle states of DESIGN section 4, as recorded. The supervisor owns the transition
    table; the store only persists its decisions and knows which states a crash interrupts."""

    STARTING = "starting"
    IDLE = "idle"
    RUNNING = "running"
    AWAIT = "await"
    AWAIT_APPROVAL = "await_approval"
    STOPPED = "stopped"
    EXITED = "exited"
    ERROR = "error"

    @property
    def active(self) -> bool:
        """Whether a turn (or the start of one) was under way: what a crash interrupts."""
        return self in (SessionStatus.STARTING, SessionStatus.RUNNING, SessionStatus.AWAIT_APPROVAL)


class ReplaceReason(enum.StrEnum):
    CLEAR = "clear"  # `clear` on ctl: an empty context
    RESTART = "restart"  # `restart`: same id, alias and role, fresh context
    COMPACTION = "compaction"  # a summary replaced the history
    HANDOFF = "handoff"  # `model NAME` could not replay the history; a text handoff replaced it
    FORK = "fork"  # `new from=ID`: another session's transcript, the new session's first context


class Verdict(enum.StrEnum):
    APPROVE = "approve"
    ALWAYS = "always"  # approve, and do not ask again for this tool in this session
    REJECT = "reject"
    # Nobody answered: cancel, stop, kill, daemon shutdown or a crash. Never an approval.
    CANCELLED = "cancelled"


def _non_empty(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must not be empty")


def _aware(instance: object, attribute: attrs.Attribute[dt.datetime], value: dt.datetime) -> None:
    if value.tzinfo is None:
        raise ValueError(f"{attribute.name} must carry a time zone (use UTC)")


def _to_blocks(blocks: Iterable[ContentBlock]) -> tuple[ContentBlock, ...]:
    return tuple(blocks)


def _to_messages(messages: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(messages)


def _to_strs(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class TodoItem:
    """One todo item as recorded. `status` is the agent's vocabulary (pending, in_progress,
    completed), kept as text: the store persists the list, the agent validates it."""

    content: str
    status: str


def _to_todos(todos: Iterable[TodoItem]) -> tuple[TodoItem, ...]:
    return tuple(todos)


@attrs.frozen
class SessionStarted:
    """The first record of every file, and only there. `schema` is the file's schema version."""

    TAG: ClassVar[str] = "session_started"
    id: str = attrs.field(validator=_non_empty)
    alias: str | None
    role: str
    model: str
    cwd: str
    sandbox: str
    created_at: dt.datetime = attrs.field(validator=_aware)
    ephemeral: bool = False
    context: str = ""  # the session's `context` file at creation
    schema: int = SCHEMA_VERSION
    # Per-session limits given to `new` (None: the daemon's settings apply). Added after schema
    # 1 was first written, with defaults, so files without them load unchanged.
    max_steps: int | None = None
    permission: str | None = None  # a permission mode (`anvild.agent.permissions.policy.Mode`)
    token_budget: int | None = None  # tokens per turn
    headless: bool = False  # nobody answers approvals: a call that needs one is refused at once
    # Who may answer the session's result gate besides a person: an approver session's id
    # (`new approver=ID`), fixed at creation. None: only a person (`user`).
    approver: str | None = None
    # The session that started this one with its `task` tool (a subagent), fixed at creation.
    parent: str | None = None


@attrs.frozen
class MessageAppended:
    """A message added at the end of the transcript (roles alternate)."""

    TAG: ClassVar[str] = "message_appended"
    message: Message


@attrs.frozen
class MessageExtended:
    """Blocks appended to the last message: a prompt merged into a trailing user message of tool
    results or of a cancelled turn (`anvild.agent.loop`), or a recovery note."""

    TAG: ClassVar[str] = "message_extended"
    blocks: tuple[ContentBlock, ...] = attrs.field(converter=_to_blocks)


@attrs.frozen
class ContextReplaced:
    """The whole transcript replaced: clear (empty), restart (empty), compaction (a summary),
    handoff (a text summary for another provider), fork (another session's transcript, right
    after `SessionStarted`: `new from=ID`). Resets the usage baseline."""

    TAG: ClassVar[str] = "context_replaced"
    messages: tuple[Message, ...] = attrs.field(converter=_to_messages)
    reason: ReplaceReason = attrs.field(converter=ReplaceReason)


@attrs.frozen
class ModelChanged:
    """`model NAME`. The usage baseline belongs to the old model and is reset."""

    TAG: ClassVar[str] = "model_changed"
    model: str


@attrs.frozen
class StateChanged:
    TAG: ClassVar[str] = "state_changed"
    status: SessionStatus = attrs.field(converter=SessionStatus)
    detail: str = ""  # why, for error and stopped (shown on `state` readers' events and in the log)


@attrs.frozen
class TodosChanged:
    TAG: ClassVar[str] = "todos_changed"
    todos: tuple[TodoItem, ...] = attrs.field(converter=_to_todos)


@attrs.frozen
class ToolStarted:
    """A call of the last (assistant) message is about to run. Synced before the side effect."""

    TAG: ClassVar[str] = "tool_started"
    call_id: str = attrs.field(validator=_non_empty)
    name: str


@attrs.frozen
class ToolFinished:
    """A started call produced its result. Synced after the side effect: until the result is in
    the transcript, this record is the only trace of what the call did."""

    TAG: ClassVar[str] = "tool_finished"
    result: ToolResult


@attrs.frozen
class UsageReported:
    """Tokens reported for one model request (tag `usage`). `None` fields are unknown.
    `request` identifies the request (`anvild.llm.identity`: a sha256 over its canonical form),
    `head` its part without the messages (system prompt, tool definitions, parameters), and
    `head_body` is that part itself, written only with the first request of the file that has
    it (as far as its writer knows). `at` is when the response finished (UTC, whole seconds),
    written right after `usage` so a scan finds it there. All four are optional and written
    only when set: records written before them load with none."""

    TAG: ClassVar[str] = "usage"
    usage: stream.Usage
    at: dt.datetime | None = attrs.field(
        default=None, kw_only=True, validator=attrs.validators.optional(_aware)
    )
    request: str = ""
    head: str = ""
    head_body: Json = None


@attrs.frozen
class TurnEnded:
    """How a turn ended: the agent's outcome (done, cancelled, error, ...) and its detail, so
    `out` can show the reason of an abnormal end after a restart. `interrupted`: the turn was
    cut by a crash and ended by recovery at the next start (schema 3; written only when set)."""

    TAG: ClassVar[str] = "turn_ended"
    outcome: str
    detail: str = ""
    interrupted: bool = False


@attrs.frozen
class ContextFileChanged:
    """The session's `context` text (a prompt layer), applied from the next turn."""

    TAG: ClassVar[str] = "context_file_changed"
    text: str


@attrs.frozen
class RoleChanged:
    TAG: ClassVar[str] = "role_changed"
    role: str


@attrs.frozen
class AliasChanged:
    TAG: ClassVar[str] = "alias_changed"
    alias: str | None


@attrs.frozen
class PromptQueued:
    """A prompt accepted on `in` while a turn runs. Queued prompts survive a restart: the client
    was told its write succeeded, and `wait` promises to wait for it."""

    TAG: ClassVar[str] = "prompt_queued"
    prompt_id: str = attrs.field(validator=_non_empty)
    text: str


@attrs.frozen
class PromptTaken:
    """The queued prompt left the queue to run (its message record follows)."""

    TAG: ClassVar[str] = "prompt_taken"
    prompt_id: str


@attrs.frozen
class PromptDropped:
    """`drop` on `queue`: these queued prompts are discarded."""

    TAG: ClassVar[str] = "prompt_dropped"
    prompt_ids: tuple[str, ...] = attrs.field(converter=_to_strs)


@attrs.frozen
class ApprovalRequested:
    """A call of the last message waits on `approval`."""

    TAG: ClassVar[str] = "approval_requested"
    call_id: str
    tool: str
    arguments: Json
    reason: str


@attrs.frozen
class ApprovalAnswered:
    TAG: ClassVar[str] = "approval_answered"
    call_id: str
    verdict: Verdict = attrs.field(converter=Verdict)
    reason: str = ""  # a rejection's reason goes back to the model as the call's result


@attrs.frozen
class PermissionsRemembered:
    """What an `always` answer added to the session's permissions, for the rest of the session
    (a daemon restart included): allow rules as canonical rule strings
    (`anvild.agent.permissions.rules`, e.g. `write_file(src/a.py)`), and escalation grants
    (canonical absolute roots, network, full access). Written right after the
    `ApprovalAnswered` with verdict `always` that caused it; the store only keeps the strings,
    the supervisor parses them back into its policy."""

    TAG: ClassVar[str] = "permissions_remembered"
    rules: tuple[str, ...] = attrs.field(default=(), converter=_to_strs)
    read_roots: tuple[str, ...] = attrs.field(default=(), converter=_to_strs)
    write_roots: tuple[str, ...] = attrs.field(default=(), converter=_to_strs)
    network: bool = False
    full_access: bool = False


@attrs.frozen
class ResultApprovalRequested:
    """`request_approval` (ctl, the model's tool, or an API caller such as a bead): the
    session's result waits on `approval` (state await_approval, written right after) until
    `approve` (idle) or `reject REASON` (stopped). `asked_by` says who asked (`ctl`, `model`,
    `bead <id>`, ...); `ref` is the asker's own name for this request (a bead's approval round,
    so a decision is never applied to a later round of the same bead; "" when none).
    `approver` is the session that may answer it besides a person (the session's approver, or
    for a bead's gate the bead's); "" (and in records written before it existed): only a person."""

    TAG: ClassVar[str] = "result_approval_requested"
    summary: str
    asked_by: str = ""
    ref: str = ""
    approver: str = ""


@attrs.frozen
class ResultApprovalAnswered:
    """The pending result approval was answered: approve, reject (with the reason), or
    cancelled (stop, restart, kill: nobody decided). Never `always`. `by` is who answered
    (`user` for a write to the session's files, a session id for an approver session; "" for
    cancelled, and in records written before it existed)."""

    TAG: ClassVar[str] = "result_approval_answered"
    verdict: Verdict = attrs.field(converter=Verdict)
    reason: str = ""
    by: str = ""


@attrs.frozen
class Note:
    """A human-readable line for the session's `log` (e.g. an unknown tool outcome)."""

    TAG: ClassVar[str] = "note"
    text: str


@attrs.frozen
class FileSeen:
    """The file tools saw `path` (a canonical path) with content hashing to `sha256`: read it,
    or wrote it. Appended after the call's `ToolFinished`, so it stands for a result that is in
    the transcript; on restore it refills the freshness tracker (`anvild.agent.tools.base`),
    which still refuses an edit when the file on disk no longer hashes to it. Schema 2."""

    TAG: ClassVar[str] = "file_seen"
    path: str = attrs.field(validator=_non_empty)
    sha256: str = attrs.field(validator=_non_empty)


@attrs.frozen
class TextStreamed:
    """More of the answer the model is streaming in the current step, appended at a bounded
    cadence while it streams (`anvild.session.checkpoint`), so a crash does not lose what
    `out` and `events` showed. For display only: it is never part of the transcript, so no
    provider ever sees it; the step's text reaches the transcript only in the assistant
    message committed when its stream finished (which supersedes these records). Schema 3."""

    TAG: ClassVar[str] = "text_streamed"
    text: str = attrs.field(validator=_non_empty)


@attrs.frozen
class Compacted:
    """A compaction: `messages` (a summary, the kept user messages, the unfinished step)
    replaced the transcript, in this one record, so a crash leaves the whole old or the whole
    new one. `summary` is the model's text, `dropped` how many messages it replaced, `before`
    and `after` the estimated request sizes in tokens, `model` who wrote it, `trigger` auto,
    overflow or manual, `focus` what `compact FOCUS` asked for, `usage` what the summary
    requests cost. The records before it keep the full history. Schema 4."""

    TAG: ClassVar[str] = "compacted"
    messages: tuple[Message, ...] = attrs.field(converter=_to_messages)
    summary: str
    dropped: int
    before: int
    after: int
    model: str
    trigger: str
    at: dt.datetime = attrs.field(validator=_aware)
    focus: str = ""
    usage: stream.Usage = attrs.field(factory=lambda: stream.Usage(0, 0, 0, 0))


@attrs.frozen
class Rewound:
    """`rewind N conversation`: the transcript cut back to what it was before turn `turn`
    (`messages`: a prefix of it, whose last message may have fewer blocks, since a prompt can be
    merged into a trailing user message), in this one record, written after the files were
    rewound. Resets the usage baseline as `ContextReplaced` does. Schema 5."""

    TAG: ClassVar[str] = "rewound"
    turn: int
    messages: tuple[Message, ...] = attrs.field(converter=_to_messages)


@attrs.frozen
class SessionEnded:
    """`kill`, an ephemeral session exiting after its turn, or a `task` child ended at a restart:
    the last record of a file."""

    TAG: ClassVar[str] = "session_ended"
    reason: str = ""


Record: TypeAlias = (
    SessionStarted
    | MessageAppended
    | MessageExtended
    | ContextReplaced
    | ModelChanged
    | StateChanged
    | TodosChanged
    | ToolStarted
    | ToolFinished
    | UsageReported
    | TurnEnded
    | ContextFileChanged
    | RoleChanged
    | AliasChanged
    | PromptQueued
    | PromptTaken
    | PromptDropped
    | ApprovalRequested
    | ApprovalAnswered
    | PermissionsRemembered
    | ResultApprovalRequested
    | ResultApprovalAnswered
    | Note
    | FileSeen
    | TextStreamed
    | Compacted
    | Rewound
    | SessionEnded
)

RECORD_TYPES: Final[tuple[type[Record], ...]] = get_args(Record)

RECORD_TAGS: Final[Mapping[type[Record], str]] = {cls: cls.TAG for cls in RECORD_TYPES}


_LATER_FIELDS: Final[Mapping[type[Record], tuple[str, ...]]] = {
    SessionStarted: ("max_steps", "permission", "token_budget", "headless", "approver", "parent"),
    ResultApprovalRequested: ("ref", "approver"),
    ResultApprovalAnswered: ("by",),
    TurnEnded: ("interrupted",),
    UsageReported: ("at", "request", "head", "head_body"),
}
"""The fields added to a record type after its first writers: written only when set, so a file
that does not use them is byte-identical to what the older writers produced."""


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    # Messages and blocks go through the llm layer's own converter, so they are written exactly
    # as everywhere else (stable block tags, provider meta omitted when absent).
    for llm_type in (Message, ContentBlock, ToolResult):
        conv.register_unstructure_hook(llm_type, _llm_unstructure(llm_type))
        conv.register_structure_hook(llm_type, _llm_structure)
    conv.register_unstructure_hook(dt.datetime, lambda value: value.isoformat())
    conv.register_structure_hook(dt.datetime, _structure_datetime)
    omit = override(omit_if_default=True)
    for record_type, fields in _LATER_FIELDS.items():
        overrides: dict[str, Any] = dict.fromkeys(fields, omit)  # field names, no `_cattrs_` option
        unstructure = make_dict_unstructure_fn(record_type, conv, **overrides)
        conv.register_unstructure_hook(record_type, unstructure)
    return conv


def _llm_unstructure(llm_type: Any) -> Any:
    return lambda value: llm_converter.unstructure(value, llm_type)


def _llm_structure(value: Any, llm_type: Any) -> Any:
    return llm_converter.structure(value, llm_type)


def _structure_datetime(value: Any, _: type) -> dt.datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected an ISO 8601 time, not {value!r}")
    return dt.datetime.fromisoformat(value)


record_json: Final = TaggedJson[Record](Record, _make_converter())
"""The JSON form of records (the `Record` union; messages and blocks by the llm converter)."""
record_converter: Final[cattrs.Converter] = record_json.converter


def encode(seq: int, record: Record) -> bytes:
    """One record as one JSONL line, newline included: `{"seq":N,"type":TAG,...}`."""
    line = {"seq": seq, **record_json.fields(record)}
    try:
        return dumps(line).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (from a provider's JSON): escape it instead
        return json.dumps(line, separators=(",", ":")).encode("ascii") + b"\n"


def decode(obj: Json) -> tuple[int, Record]:
    """(seq, record) from one decoded JSON line of the current schema.

    Raises `RecordError` naming what is wrong (the journal adds the file and line)."""
    if not isinstance(obj, dict):
        raise RecordError(f"a record is a JSON object, not {type(obj).__name__}")
    seq = obj.get("seq")
    if type(seq) is not int or seq < 1:
        raise RecordError(f"the record has no valid seq ({seq!r})")
    body = {key: value for key, value in obj.items() if key != "seq"}
    try:
        record = record_json.structure(body)
    except (cattrs.BaseValidationError, KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"not a valid record of type {obj.get('type')!r}: {exc!r}") from exc
    return seq, record


def schema_of(first: Json) -> int:
    """The schema version a file's first decoded line declares (0: the prototype's `meta`)."""
    if isinstance(first, dict):
        schema = first.get("schema")
        if type(schema) is int and schema >= 0:
            return schema
        if schema is None and first.get("type") == "meta":
            return 0
    raise RecordError("the first record declares no schema version (not a session record file)")


def upgrade_lines(lines: list[Json], schema: int) -> list[Json]:
    """Decoded lines of a `schema` file as current-schema lines (`OLDEST_SCHEMA <= schema <=
    SCHEMA_VERSION`, which the caller checks). Pure; raises `RecordError` for a line that does
    not have its version's shape."""
    if not OLDEST_SCHEMA <= schema <= SCHEMA_VERSION:
        raise ValueError(f"no upgrade from record schema {schema}")
    if schema == 0:
        lines = [_upgrade_0_to_1(index, line) for index, line in enumerate(lines)]
    if schema < SCHEMA_VERSION and lines:
        # 1 -> ... -> 5 only added record types and optional fields: the header's number changes
        lines = [_renumbered(lines[0]), *lines[1:]]
    return lines


def _renumbered(header: Json) -> Json:
    if not isinstance(header, dict) or header.get("type") != SessionStarted.TAG:
        raise RecordError("the first record is not session_started")
    return {**header, "schema": SCHEMA_VERSION}


_V0_DEFAULTS: Final = {"alias": None, "role": "developer", "sandbox": "workspace-write"}


def _upgrade_0_to_1(index: int, line: Json) -> Json:
    if not isinstance(line, dict) or "seq" in line:
        raise RecordError("not a schema 0 record (an object without seq)")
    kind = line.get("type")
    if (index == 0) != (kind == "meta"):
        raise RecordError("a schema 0 file has one meta record, first")
    new: dict[str, Json] = {"seq": index + 1}
    if kind == "meta":
        created = line.get("created_at")
        if not isinstance(created, int | float) or isinstance(created, bool):
            raise RecordError(f"meta.created_at is not unix seconds: {created!r}")
        stamp = dt.datetime.fromtimestamp(created, dt.UTC)
        new |= {"type": SessionStarted.TAG, **_V0_DEFAULTS}
        new |= {key: line.get(key) for key in ("id", "model", "cwd")}
        new |= {"created_at": stamp.isoformat(), "ephemeral": False, "context": ""}
        new["schema"] = 1
    elif kind == "tool_finished":
        fields = ("call_id", "content", "is_error")
        new |= {"type": kind, "result": {key: line.get(key) for key in fields}}
    elif kind == "context_replaced":
        new |= {**line, "reason": ReplaceReason.COMPACTION.value}
    else:
        new |= line
    return new
