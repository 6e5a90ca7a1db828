"""Tools the agent can call: the protocol and context (`base`), the registry (`registry`), and
the native tools. Every native file tool goes through `anvild.sandbox.files.FileAccess`."""

from anvild.agent.tools.base import (
    Cancellation,
    Cancelled,
    Effects,
    Failed,
    FileTracker,
    InvalidArgs,
    SessionState,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
)
from anvild.agent.tools.registry import ToolRegistry, truncate_middle

__all__ = [
    "Cancellation",
    "Cancelled",
    "Effects",
    "Failed",
    "FileTracker",
    "InvalidArgs",
    "SessionState",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "truncate_middle",
]
