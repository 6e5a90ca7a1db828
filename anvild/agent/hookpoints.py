"""The agent loop's hook points: what user hooks (`anvild.hooks`) may add to a turn.

    before_call(call)            -> None to go on, a `Rewrite` to go on with other arguments,
                                    or why the call is refused (never run)
    after_call(call, result)     -> text for the model after the call's result ("" for none)
    before_stop(continued)       -> None to end the turn, or a message that continues it
    before_compact(trigger, focus)

The loop awaits each point in its step structure; it never imports an implementation. An
implementation reports its own failures (a hook that fails is not the turn's failure) and never
widens a permission: a refusal here is final, and going on still passes the permission gate (a
`Rewrite`'s arguments too, as if the model had sent them). Any point may raise `TurnStopped`:
the turn ends there (`cancelled`, "stopped by" its reason), for the user, never the model.
`continued` counts how often this turn was already continued by `before_stop`.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import attrs

from anvild.llm.types import ToolCall, ToolResult


class TurnStopped(Exception):
    """A hook stopped the turn (Claude Code's `continue: false`). `reason` names the hook and
    says why; it is the turn's detail, shown to the user and never sent to the model."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen
class Rewrite:
    """A hook's new arguments for a call (Claude Code's `updatedInput`), replacing the model's
    whole: the call goes on to the permission gate with them. `by` names the hook."""

    arguments: dict[str, Any]
    by: str


class TurnHooks(Protocol):
    async def before_call(self, call: ToolCall) -> str | Rewrite | None: ...

    async def after_call(self, call: ToolCall, result: ToolResult) -> str: ...

    async def before_stop(self, continued: int) -> str | None: ...

    async def before_compact(self, trigger: str, focus: str) -> None: ...


class NoHooks:
    """No hooks: every point goes on at once."""

    async def before_call(self, call: ToolCall) -> str | Rewrite | None:
        return None

    async def after_call(self, call: ToolCall, result: ToolResult) -> str:
        return ""

    async def before_stop(self, continued: int) -> str | None:
        return None

    async def before_compact(self, trigger: str, focus: str) -> None:
        return None


NO_HOOKS: Final = NoHooks()

__all__ = ["NO_HOOKS", "NoHooks", "Rewrite", "TurnHooks", "TurnStopped"]
