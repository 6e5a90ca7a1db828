"""Tool names as the model sees them: `mcp__SERVER__TOOL`, valid for every provider.

Every provider accepts `^[a-zA-Z0-9_-]{1,64}$` (`anvild.agent.tools.base.TOOL_NAME_RE`). Other
characters become `_`; a name longer than 64 characters keeps its first 55 and ends with `_`
and 8 hex digits of the SHA-256 of the unsanitised `SERVER/TOOL`, so the same tool gets the
same name after a restart, and two long names that share a prefix do not collide.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

PREFIX: Final = "mcp__"
MAX_NAME: Final = 64
_BAD: Final = re.compile(r"[^a-zA-Z0-9_-]")


def sanitise(text: str) -> str:
    return _BAD.sub("_", text) or "_"


def tool_name(server: str, tool: str) -> str:
    """The model-facing name of `server`'s tool `tool`."""
    name = f"{PREFIX}{sanitise(server)}__{sanitise(tool)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def server_prefix(server: str) -> str:
    """What every tool name of `server` starts with (before any truncation)."""
    return f"{PREFIX}{sanitise(server)}__"


__all__ = ["MAX_NAME", "PREFIX", "sanitise", "server_prefix", "tool_name"]
