"""Hook specs: the `[hooks.NAME]` tables of the config that applies, ready to match.

`HookSet.of(tables)` takes the config's `hooks` mapping (checked by `anvild.config.schema`;
only the user's and granted project files reach it) and keeps each hook under its event. A
matcher is a regular expression matched against the whole subject (a tool name, a compaction
trigger, a session start's source), ignoring case so Claude Code's `Bash|Write` fits `bash`;
no matcher, "" or "*" match everything. Hooks keep the config's order (by name).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_MAX_BLOCKS: Final = 3


class Event(enum.StrEnum):
    SESSION_START = "SessionStart"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    STOP = "Stop"
    PRE_COMPACT = "PreCompact"
    SESSION_END = "SessionEnd"
    NOTIFICATION = "Notification"


@attrs.frozen
class HookSpec:
    """One hook: `command` is a string run with `sh -c`, or an argv."""

    name: str
    event: Event
    command: str | tuple[str, ...]
    matcher: re.Pattern[str] | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_blocks: int = DEFAULT_MAX_BLOCKS

    @classmethod
    def of(cls, name: str, table: Mapping[str, Any]) -> HookSpec:
        command = table["command"]
        pattern = str(table.get("matcher", ""))
        return cls(
            name=name,
            event=Event(table["event"]),
            command=command if isinstance(command, str) else tuple(command),
            matcher=None if pattern in ("", "*") else re.compile(pattern, re.IGNORECASE),
            timeout=float(table.get("timeout", DEFAULT_TIMEOUT)),
            max_blocks=int(table.get("max_blocks", DEFAULT_MAX_BLOCKS)),
        )

    @property
    def argv(self) -> tuple[str, ...]:
        if isinstance(self.command, str):
            return ("sh", "-c", self.command)
        return self.command

    def matches(self, subject: str) -> bool:
        return self.matcher is None or self.matcher.fullmatch(subject) is not None


@attrs.frozen
class HookSet:
    by_event: Mapping[Event, tuple[HookSpec, ...]] = attrs.field(factory=dict)

    @classmethod
    def of(cls, tables: Mapping[str, Mapping[str, Any]]) -> HookSet:
        grouped: dict[Event, list[HookSpec]] = {}
        for name in sorted(tables):
            spec = HookSpec.of(name, tables[name])
            grouped.setdefault(spec.event, []).append(spec)
        return cls({event: tuple(specs) for event, specs in grouped.items()})

    def matching(self, event: Event, subject: str = "") -> Sequence[HookSpec]:
        return [h for h in self.by_event.get(event, ()) if h.matches(subject)]

    def __bool__(self) -> bool:
        return bool(self.by_event)


__all__ = ["DEFAULT_MAX_BLOCKS", "DEFAULT_TIMEOUT", "Event", "HookSet", "HookSpec"]
