"""The tool registry: names, specs for the provider, and dispatch that always answers.

`dispatch(call, ctx)` never raises for anything the model or a tool did: an unknown name, arguments
that are not a JSON object, arguments that break the schema, a `ToolError`, or an unexpected
exception all come back as an error `ToolResult` the model can act on. Only trio's `Cancelled` (a
`BaseException`) passes through, so the caller's cancel scopes keep working.

`specs()` is sorted by name and byte-stable: schemas are copied through JSON at registration, so
later mutation of a tool's dict cannot change the prompt prefix (and the provider cache with it).

Output is truncated in the middle by characters (Python `str` code points, so multi-byte text is
never split): the head and the tail are kept because that is where errors and summaries are, and
the marker counts toward the limit.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any, Final

from anvild.agent.tools.base import (
    TOOL_NAME_RE,
    ArgsValidator,
    Effects,
    InvalidArgs,
    Tool,
    ToolContext,
    ToolError,
    brief_description,
    compact_schema,
)
from anvild.llm.size import SizedSpecs, spec_bytes
from anvild.llm.types import ToolCall, ToolResult, ToolSpec

DEFAULT_MAX_OUTPUT_CHARS: Final = 30_000
MIN_OUTPUT_CHARS: Final = 200
DEFAULT_MORE_HINT: Final = (
    "to see them, read the file with offset/limit or narrow the search or command"
)
_ECHO_LIMIT: Final = 200


def truncate_middle(text: str, max_chars: int, *, hint: str = DEFAULT_MORE_HINT) -> str:
    """`text` cut in the middle so that the result, marker included, has at most `max_chars`
    characters. The marker says how many characters were cut and how to see them."""
    if max_chars < MIN_OUTPUT_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_OUTPUT_CHARS}")
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    while True:
        marker = f"\n[... {cut} characters cut; {hint} ...]\n"
        keep = max_chars - len(marker)
        if keep < 0:
            marker = f"\n[... {cut} characters cut ...]\n"
            keep = max(0, max_chars - len(marker))
        needed = len(text) - keep
        if needed == cut:
            break
        cut = needed
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + marker + (text[len(text) - tail :] if tail else "")


def _echo(value: Any) -> str:
    try:
        shown = value if isinstance(value, str) else json.dumps(value)
    except (TypeError, ValueError):
        shown = repr(value)
    if len(shown) > _ECHO_LIMIT:
        shown = shown[:_ECHO_LIMIT] + f"... ({len(shown) - _ECHO_LIMIT} more characters)"
    return shown


@functools.lru_cache(maxsize=512)
def _validator(name: str, schema_json: str) -> ArgsValidator:
    """The compiled validator of a tool's schema, once per process (validators are immutable):
    every session registers the same tools, and compiling them again was a third of `new`.
    A schema that fails raises each time (exceptions are not cached)."""
    schema = json.loads(schema_json)
    if schema.get("type") != "object":
        raise ValueError(f'tool {name!r}: input_schema must have "type": "object"')
    return ArgsValidator(schema)


@functools.lru_cache(maxsize=512)
def _spec_size(name: str, description: str, schema_json: str) -> int:
    """A definition's `spec_bytes`, once per process: every session registers the same tools."""
    return spec_bytes(ToolSpec(name, description, json.loads(schema_json)))


class _Entry:
    __slots__ = ("brief", "description", "schema_json", "tool", "validator")

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        try:
            self.schema_json = json.dumps(dict(tool.input_schema), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tool {tool.name!r}: input_schema is not JSON") from exc
        self.validator = _validator(tool.name, self.schema_json)
        self.description: str | None = None  # read at the first request (it may cost a scan)
        self.brief: tuple[str, str] | None = None  # (description, schema JSON), on first use

    def json_spec(self, compact: bool) -> tuple[str, str]:
        """The description and the schema's JSON that `specs` sends, each read once, so every
        request carries the same bytes; the compact pair is made when a small-window model
        first asks for it (most sessions never do)."""
        if not compact:
            if self.description is None:
                self.description = self.tool.description
            return self.description, self.schema_json
        if self.brief is None:
            schema = compact_schema(json.loads(self.schema_json))
            self.brief = (brief_description(self.tool), json.dumps(schema, ensure_ascii=False))
        return self.brief


class ToolRegistry:
    """Tools by name, with the output limit applied to every result."""

    def __init__(
        self, tools: Iterable[Tool] = (), *, max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    ) -> None:
        if max_output_chars < MIN_OUTPUT_CHARS:
            raise ValueError(f"max_output_chars must be at least {MIN_OUTPUT_CHARS}")
        self.max_output_chars = max_output_chars
        self._entries: dict[str, _Entry] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool. Rejects names providers refuse and duplicates (ValueError)."""
        name = tool.name
        if not TOOL_NAME_RE.fullmatch(name):
            raise ValueError(f"tool name {name!r} must match {TOOL_NAME_RE.pattern}")
        if name in self._entries:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._entries[name] = _Entry(tool)

    async def prepare(self) -> None:
        """Awaited by the agent loop at the start of each turn, inside it (a cancel stops it):
        a registry whose tools come from elsewhere (MCP servers) gets them ready here."""

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> Tool | None:
        entry = self._entries.get(name)
        return entry.tool if entry else None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def specs(self, *, compact: bool = False) -> tuple[ToolSpec, ...]:
        """Specs sorted by name; every call returns equal values with the same JSON bytes.
        `compact`: each tool's `brief_description` and `compact_schema`, for a model with a
        small context window (the arguments accepted are the same)."""
        specs = []
        size = 0
        for name, entry in sorted(self._entries.items()):
            description, schema_json = entry.json_spec(compact)
            specs.append(ToolSpec(name, description, json.loads(schema_json)))
            size += _spec_size(name, description, schema_json) + 2
        return SizedSpecs(specs, size)

    def effects(self, call: ToolCall) -> Effects:
        """What `call` may do. Calls that will be refused (unknown tool, invalid arguments) do
        nothing; a tool's own `effects` failing is treated as unknown effects."""
        entry = self._entries.get(call.name)
        if entry is None or not isinstance(call.arguments, dict):
            return Effects.none()
        try:
            entry.validator.validate(call.arguments)
        except InvalidArgs:
            return Effects.none()
        try:
            return entry.tool.effects(call.arguments)
        except Exception:
            return Effects.unknown_effects()

    async def dispatch(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run `call` and return its result; every failure becomes an error result."""
        entry = self._entries.get(call.name)
        if entry is None:
            available = ", ".join(self.names()) or "(none)"
            return self._error(call, f"Unknown tool {call.name!r}. Available tools: {available}.")
        args = call.arguments
        if not isinstance(args, dict):
            return self._error(
                call,
                f"Arguments for {call.name} must be a JSON object; received: {_echo(args)}",
            )
        try:
            entry.validator.validate(args)
            output = await entry.tool.call(args, ctx)
        except ToolError as exc:
            return self._error(call, exc.message)
        except Exception as exc:
            return self._error(
                call, f"Tool {call.name} failed unexpectedly: {type(exc).__name__}: {exc}"
            )
        return ToolResult(
            call.id, truncate_middle(output.content, self.max_output_chars), output.is_error
        )

    def _error(self, call: ToolCall, message: str) -> ToolResult:
        return ToolResult(call.id, truncate_middle(message, self.max_output_chars), is_error=True)
