"""What a tool is: the protocol every native (and MCP) tool implements, and its context.

A tool has a `name`, a `description` (the model reads it), an `input_schema` (JSON Schema
2020-12, top-level object), a `cancellation` behaviour, per-call `effects(args)`, and
`call(args, ctx)`. `ToolRegistry.dispatch` validates arguments before `effects` or `call` see
them, so both may index required keys. Effects are per call, never a static flag; the loop runs a
batch concurrently only when every call is `read_only` or its tool has `parallel_safe = True`
(an optional attribute: its work happens elsewhere under its own checks, as `task`'s child).

    ToolError                   -> an error tool result for the model
     ├── InvalidArgs   the arguments are wrong; names the field and how to fix it
     ├── Failed        the tool ran and could not do what was asked
     └── Cancelled     the tool stopped before finishing because it was asked to

Any other exception is a bug (still an error result). trio's `Cancelled` is never caught here.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Generic, Protocol, TypeVar, runtime_checkable

import attrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from anvild.sandbox import ReadOnly, SandboxPolicy
from anvild.sandbox.files import FileAccess

Args = Mapping[str, Any]
S = TypeVar("S")  # the daemon service a `ServiceTool` asks

TOOL_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""The strictest common provider rule for tool (function) names."""


class ToolError(Exception):
    """Root of the errors a tool reports to the model. The message is what the model reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgs(ToolError):
    """The arguments do not fit the schema or the tool's own rules."""


class Failed(ToolError):
    """The tool ran and could not do what was asked."""


class Cancelled(ToolError):
    """The tool stopped early because it was cancelled; its effects may be partial (see
    `Tool.cancellation`)."""

    def __init__(self, message: str = "The tool call was cancelled before it finished.") -> None:
        super().__init__(message)


class Cancellation(enum.Enum):
    """What cancelling a running call (a trio cancel scope around `call`) leaves behind."""

    SAFE_TO_ABANDON = "safe_to_abandon"
    """No side effects: cancel at any point, nothing changed."""

    ATOMIC = "atomic"
    """One all-or-nothing change (temp file + rename). A cancel waits for the change to finish
    or stops before it starts, so the effect happened entirely or not at all; the caller cannot
    tell which without looking."""

    KILLS_CHILDREN = "kills_children"
    """Cancelling kills the process group it started. Effects of the partial run remain, and
    descendants that left the group (setsid, daemonising) are not reached."""

    UNKNOWN = "unknown"
    """The outcome of a cancelled call is unknown (a remote call: the server may finish it)."""


def _to_paths(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(paths)


@attrs.frozen
class Effects:
    """What one call with given arguments may do. Paths are as the model gave them, resolved
    against the context's cwd by whoever needs canonical resources (the permission policy)."""

    reads: bool = False
    writes: bool = False
    network: bool = False
    subprocess: bool = False
    unknown: bool = False
    read_paths: tuple[str, ...] = attrs.field(default=(), converter=_to_paths)
    write_paths: tuple[str, ...] = attrs.field(default=(), converter=_to_paths)

    def __attrs_post_init__(self) -> None:
        if self.read_paths and not self.reads:
            raise ValueError("read_paths given without reads")
        if self.write_paths and not self.writes:
            raise ValueError("write_paths given without writes")

    @property
    def read_only(self) -> bool:
        """True when the call changes nothing and reaches nothing outside: safe to run
        concurrently with other read-only calls."""
        return not (self.writes or self.network or self.subprocess or self.unknown)

    @classmethod
    def read(cls, *paths: str) -> Effects:
        return cls(reads=True, read_paths=paths)

    @classmethod
    def write(cls, *paths: str) -> Effects:
        """A write of `paths` (which also reads them: freshness, edits)."""
        return cls(reads=True, writes=True, read_paths=paths, write_paths=paths)

    @classmethod
    def none(cls) -> Effects:
        """Touches nothing outside the session (todo_write)."""
        return cls()

    @classmethod
    def unknown_effects(cls) -> Effects:
        """Anything may happen: treat as a write of unknown resources."""
        return cls(unknown=True)

    @classmethod
    def union(cls, effects: Iterable[Effects]) -> Effects:
        result = cls()
        for e in effects:
            result = cls(
                reads=result.reads or e.reads,
                writes=result.writes or e.writes,
                network=result.network or e.network,
                subprocess=result.subprocess or e.subprocess,
                unknown=result.unknown or e.unknown,
                read_paths=result.read_paths + e.read_paths,
                write_paths=result.write_paths + e.write_paths,
            )
        return result


@attrs.frozen
class ToolOutput:
    """What a call produced. `is_error` marks a result the model should treat as a failure
    without it being an exception (e.g. a reported but unsuccessful operation)."""

    content: str
    is_error: bool = False


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileTracker:
    """Freshness by content: the sha256 of what the agent last saw or wrote, per canonical path.

    A write or edit of an existing file needs the file's current bytes to hash to the recorded
    value: the agent has read it (`record`) and nobody changed it since. After the agent's own
    write the tracker is refreshed with the new content, so a second agent edit works while an
    intervening user edit fails. Hashes, not mtimes: mtime granularity and clock changes make it
    a heuristic.

    The tracker is shared by the file tools of one session; trio runs them on one thread, and
    blocking file work happens in worker threads that only hand results back, so a dict is enough.
    """

    def __init__(self) -> None:
        self._seen: dict[Path, str] = {}

    def record(self, canonical: Path, content: bytes) -> None:
        self._seen[canonical] = _hash(content)

    def digest(self, canonical: Path) -> str | None:
        """The sha256 (hex) recorded for `canonical`, or None."""
        return self._seen.get(canonical)

    def restore(self, seen: Mapping[Path, str]) -> None:
        """Take back digests kept elsewhere (a session's records, after a daemon restart). Safe
        by construction: a digest only lets a write through while the file still hashes to it,
        so a file changed meanwhile is refused as stale."""
        self._seen.update(seen)

    def forget(self, canonical: Path) -> None:
        self._seen.pop(canonical, None)

    def has_seen(self, canonical: Path) -> bool:
        return canonical in self._seen

    def check_fresh(self, canonical: Path, current: bytes) -> None:
        """Raise `Failed` unless `current` is what the agent last read or wrote at `canonical`."""
        seen = self._seen.get(canonical)
        if seen is None:
            raise Failed("You must read_file before editing it.")
        if seen != _hash(current):
            raise Failed("File changed on disk since you last read it. Read it again.")


@attrs.define
class SessionState:
    """Per-session state that tools keep between calls. `todos` belongs to todo_write
    (anvild.agent.tools.todo), which replaces the whole tuple on each valid write."""

    todos: tuple[Any, ...] = ()


def _discard(event: Any) -> None:
    return None


@attrs.define
class ToolContext:
    """What a call may use. Construct one per session (tests: `ToolContext(cwd=tmp_path)`).

    - `cwd`: where relative paths start and where bash runs.
    - `files`: the file-access boundary; by default the cwd is the only readable and writable
      root.
    - `tracker`: freshness of files the agent has read, shared by the file tools.
    - `sandbox`: how subprocesses may run. The default is `ReadOnly()`, never `FullAccess`:
      nothing defaults to unsandboxed execution.
    - `state`: session state kept across calls (todos).
    - `emit`: a synchronous callback for events a tool announces (the loop's AgentEvents, e.g.
      todos changed). It must not block; the loop's channel is bounded and coalescing.
    - `temp_tag`: the tag of the temporary files this call writes through (`FileAccess.update`),
      set per call by a session from its id and the call's, so that recovery after a crash
      knows their names (`anvild.session.leftovers`); None: a random tag.
    """

    cwd: Path = attrs.field(converter=Path)
    files: FileAccess = attrs.field()
    tracker: FileTracker = attrs.field(factory=FileTracker)
    sandbox: SandboxPolicy = attrs.field(factory=ReadOnly)
    state: SessionState = attrs.field(factory=SessionState)
    emit: Callable[[Any], None] = _discard
    temp_tag: str | None = None

    @files.default
    def _workspace_files(self) -> FileAccess:
        return FileAccess.workspace(self.cwd)


@runtime_checkable
class Tool(Protocol):
    """A tool the model may call. Implementations are stateless between calls: anything that
    must persist lives in the `ToolContext`."""

    @property
    def name(self) -> str:
        """Matches `^[a-zA-Z0-9_-]{1,64}$`."""
        ...

    @property
    def description(self) -> str:
        """A prompt: when to use the tool, what it returns, its rules and limits. A tool may
        also have a `summary` attribute, the one or two sentences a small-window model reads
        instead (`brief_description`)."""
        ...

    @property
    def input_schema(self) -> Mapping[str, Any]:
        """JSON Schema (draft 2020-12) of the arguments; top-level `"type": "object"`."""
        ...

    @property
    def cancellation(self) -> Cancellation:
        """What a cancel during `call` leaves behind."""
        ...

    def effects(self, args: Args) -> Effects:
        """What this call, with these (valid) arguments, may do."""
        ...

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        """Run the call. `args` have been validated against `input_schema`. Raise a
        `ToolError` for a failure the model should read."""
        ...


class ServiceTool(Generic[S]):
    """The base of a tool bound to one session (`_me`: the daemon's identity for it, never an
    argument) that asks one daemon service (`_service`: the bead store, the post office, ...)
    and touches no file or process, only the daemon's own records."""

    def __init__(self, service: S, session_id: str) -> None:
        self._service = service
        self._me = session_id

    def effects(self, args: Args) -> Effects:
        return Effects.none()


COMPACT_TOOLS_WINDOW: Final = 16_384
"""Models whose context window is at most this many tokens get compact tool definitions
(`brief_description`, `compact_schema`): the full ones take about 4,000 tokens, half of an
8,192-token window before the first prompt; the compact ones about 2,000."""

_SENTENCE_END: Final = re.compile(r"[.!?](?=\s+[A-Z\"'`(])")
_ABBREVIATIONS: Final = ("e.g.", "i.e.", "etc.", "vs.", "cf.")


def first_sentence(text: str) -> str:
    """The first sentence of `text`'s first paragraph (all of the paragraph if it has one);
    "e.g." and the like do not end a sentence."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    for end in _SENTENCE_END.finditer(paragraph):
        sentence = paragraph[: end.end()]
        if not sentence.lower().endswith(_ABBREVIATIONS):
            return sentence
    return paragraph


def brief_description(tool: Tool) -> str:
    """What a model with a small window reads about `tool`: its `summary` (a short class
    attribute every native tool has: the purpose and the rules a call must follow), else the
    first sentence of its description (tools from elsewhere, such as MCP servers)."""
    summary = getattr(tool, "summary", None)
    if isinstance(summary, str) and summary.strip():
        return " ".join(summary.split())
    return first_sentence(tool.description)


def object_schema(properties: Mapping[str, Any], *, required: Sequence[str] = ()) -> dict[str, Any]:
    """A tool's input schema: an object of these `properties` and no others, `required` among
    them (JSON Schema keys in the order every tool writes them)."""
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


_SCHEMA_VALUES: Final = frozenset({"const", "default", "enum", "examples"})
"""Keywords whose values are instance data, not schemas: copied as they are."""

_SCHEMA_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
"""Keywords whose values map names (which may be any word, "description" too) to schemas."""


def compact_schema(schema: Any) -> Any:
    """`schema` without its `description` annotations (a tool's `summary` says what a small
    model needs); nothing else changes, so it accepts exactly the arguments `schema` does."""
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    compact: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            compact[key] = {name: compact_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_VALUES:
            compact[key] = value
        else:
            compact[key] = compact_schema(value)
    return compact


def _field_path(error: jsonschema.exceptions.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required" and isinstance(error.validator_value, list):
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        missing = [k for k in error.validator_value if k not in instance]
        if missing:
            parts.append(str(missing[0]))
    elif error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        schema_props = (
            error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
        )
        extra = [k for k in error.instance if k not in schema_props]
        if extra:
            parts.append(str(extra[0]))
    return ".".join(parts)


class ArgsValidator:
    """A compiled argument schema. Raises `ValueError` at construction for a schema that is not
    valid JSON Schema, so a broken tool fails at registration, not at the first call."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            canonical = json.dumps(schema, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid input_schema: not JSON ({exc})") from exc
        _check_schema_once(cls, canonical)
        self._validator = cls(schema)

    def validate(self, args: Any) -> None:
        """Raise `InvalidArgs` naming the offending field when `args` does not fit."""
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(args))
        if error is None:
            return
        field = _field_path(error)
        where = f"`{field}`" if field else "the arguments"
        raise InvalidArgs(f"Invalid value for {where}: {error.message}.")


@functools.lru_cache(maxsize=512)
def _check_schema_once(cls: Any, canonical: str) -> None:
    """Check a schema against its metaschema once per process: every session builds its tool
    registry, and the metaschema check was most of the cost of `new` (tens of ms). The key is
    the schema's canonical JSON, so a changed schema is checked again; a bad one raises each
    time (exceptions are not cached)."""
    try:
        cls.check_schema(json.loads(canonical))
    except jsonschema.exceptions.SchemaError as exc:
        raise ValueError(f"invalid input_schema: {exc.message}") from exc


def validate_args(schema: Mapping[str, Any], args: Any) -> None:
    """One-off validation (tests, direct calls); the registry keeps compiled validators."""
    ArgsValidator(schema).validate(args)
