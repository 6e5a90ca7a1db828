"""User hooks, compatible with Claude Code's hooks contract (README, "Hooks").

- `spec`: the `[hooks.NAME]` tables as `HookSpec`s by event, with their matchers;
- `process`: running one hook on the host, bounded in time, its process group killed;
- `points`: `SessionHooks`, the hooks of one session at the agent loop's points
  (`anvild.agent.hookpoints.TurnHooks`), at the session's (prompt, start, end) and in front of
  its approver.

Hooks come only from the user config and granted project files (`anvild.config.trust`).
"""

from anvild.hooks.points import HookTables, PromptBlocked, SessionHooks
from anvild.hooks.process import HookRun, run_hook
from anvild.hooks.spec import Event, HookSet, HookSpec

__all__ = [
    "Event",
    "HookRun",
    "HookSet",
    "HookSpec",
    "HookTables",
    "PromptBlocked",
    "SessionHooks",
    "run_hook",
]
