"""The configuration a session is handed by its manager, and the pure helpers on it.

`SessionSettings` are the daemon-wide settings of every session (built by the daemon from the
trusted config); `Services` is what a session needs from its manager (model resolution, the
providers behind their caps, the tool factory, the daemon's events, the exit and turn hooks);
`ToolSetup` is what one session's tool set is built for. The helpers are pure: the permission
modes' order and the daemon's ceiling on them (`wider`, `check_mode`), the sandbox policy a
name means for a role and back (`sandbox_policy`, `sandbox_name`), and whether a model's window
calls for compact tool definitions (`compact_tools`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from anvild.agent.permissions.policy import Grants, Mode
from anvild.agent.permissions.rules import RuleSet
from anvild.agent.tools.base import COMPACT_TOOLS_WINDOW, Tool
from anvild.budget import Budgets
from anvild.checkpoints import Workspaces
from anvild.llm.provider import Provider
from anvild.llm.registry import ResolvedModel
from anvild.llm.stream import Usage
from anvild.mcp import McpPool
from anvild.sandbox import FullAccess, ReadOnly, SandboxPolicy, WorkspaceWrite
from anvild.sandbox.bwrap import SandboxSettings
from anvild.sandbox.roles import Role as SandboxRole
from anvild.session.checkpoint import INTERVAL
from anvild.session.compaction import ContextPolicy
from anvild.session.errors import InvalidSessionRequest
from anvild.session.events import SessionEvent
from anvild.session.stream import BroadcastLimits
from anvild.skills import SkillCatalog

if TYPE_CHECKING:
    from anvild.session.session import Session
    from anvild.telemetry.traces import Telemetry

SANDBOXES: Final = ("read-only", "workspace-write", "full-access")
"""The sandboxes by name, from the narrowest to the widest."""


@attrs.frozen
class SessionSettings:
    """Daemon-wide settings of every session (the daemon builds them from the trusted config).

    `turn_deadline` is the wall-clock limit of one turn in seconds (None: none), counted from
    the moment the turn starts, waiting for a provider slot included. `reap_delay` is how long
    an ephemeral session stays listed (`exited`, `out` readable) after its turn. `concurrency`
    caps the requests in flight per provider name (`default_concurrency` for the others): a
    local llama-server with one slot is `{"local": 1}`. `full_access_granted_by` names who
    granted `sandbox=full-access` (the user's config or command line); None refuses it.
    `mode` is the permission mode of a session that does not ask for one (`new permission=`);
    `max_mode` the widest one a session may ask for (a wider request is refused, and a
    restored session recorded with a wider one runs with `max_mode`). `max_steps` and
    `token_budget` (tokens per turn, None: none) apply to sessions whose `new` did not set
    them."""

    mode: Mode = Mode.DEFAULT
    max_mode: Mode = Mode.ACCEPT_EDITS
    rules: RuleSet = attrs.field(factory=RuleSet)
    grants: Grants = attrs.field(factory=Grants)
    max_steps: int = 50
    token_budget: int | None = None
    turn_deadline: float | None = 3600.0
    reap_delay: float = 60.0
    idle_unload: float = 600.0  # seconds a session at rest stays built unused (0: never unloaded)
    concurrency: Mapping[str, int] = attrs.field(factory=dict)
    default_concurrency: int = 4
    user_config_dir: Path | None = None  # for AGENTS.md and role overrides (None: platformdirs)
    role_text_dir: Path | None = None  # user overrides of roles/<name>.txt (None: platformdirs)
    sandbox_role_dir: Path | None = None  # user overrides of sandbox-roles/ (None: platformdirs)
    home: Path = attrs.field(factory=Path.home)
    full_access_granted_by: str | None = None
    hooks: Callable[[Path], Mapping[str, Mapping[str, object]]] | None = None
    """The `[hooks.NAME]` tables that apply in a cwd (the user config's and a granted project
    file's; `anvild.hooks`), asked at each hook point. None: no hooks."""
    bead_of: Callable[[str], str] | None = None  # the bead a session works on, for its hooks
    stream_limits: BroadcastLimits = attrs.field(factory=BroadcastLimits)
    sandbox_settings: SandboxSettings = attrs.field(factory=SandboxSettings)
    redact: Callable[[str], str] | None = None
    text_interval: float = INTERVAL  # how far the recorded streamed text may lag (seconds)
    context: ContextPolicy = attrs.field(factory=ContextPolicy)  # `[context]`
    extra_context: Callable[[str], str] | None = None
    """Text for the system prompt of the session with this id, after the role and before the
    session's `context` (the daemon gives its beads' convoy context). Asked at the start of
    every turn; the prompt's bytes change only when the text does."""
    mcp: McpPool | None = None
    """The daemon's MCP servers (`anvild.mcp`): each session's agent gets the tools of those
    that apply to its cwd and role, started at its first turn. None: no MCP servers."""
    checkpoints: Workspaces | None = None
    """The shadow repositories of the workspaces (`anvild.checkpoints`): each turn's changes,
    `agent/ID/turns/`, `undo` and `rewind`. None: no checkpoints."""
    skills: SkillCatalog | None = None
    """Where sessions find skills (`anvild.skills`): the prompt lists them, the `skill` tool
    loads them, the file tools may read their folders. None: no skills."""
    budgets: Budgets | None = None
    """The daemon's spend budgets (`anvild.budget`): every model request of a session is
    admitted against them first. None: no budgets."""
    convoys_of: Callable[[str], tuple[str, ...]] | None = None  # a session's beads' convoys
    telemetry: Telemetry | None = None
    """OpenTelemetry (`anvild.telemetry`): each session's agent events also make its traces and
    metrics. None: off."""


@attrs.frozen
class ToolSetup:
    """What a tool set is built for: one session's cwd, role, sandbox policy and sandbox role,
    and the session's id (`session_id`), which tools acting on the session's behalf (mail,
    beads, the conductor's) are bound to: the identity is the daemon's, never the model's."""

    cwd: Path
    role: str
    sandbox: SandboxPolicy
    sandbox_role: SandboxRole
    sandbox_settings: SandboxSettings = attrs.field(factory=SandboxSettings)
    session_id: str = attrs.field(kw_only=True)


ToolsFactory = Callable[[ToolSetup], Iterable[Tool]]


def _no_hook(session: Session) -> None:
    return None


def _no_children(session_id: str) -> Sequence[tuple[Usage, float | None]]:
    return ()


@attrs.frozen
class Services:
    """What a session needs from its manager. `before_turn` is called at every turn start,
    before the prompt layers are read (the project config: `anvild.session.project_config`)."""

    settings: SessionSettings
    resolve: Callable[[str], ResolvedModel]  # raises InvalidSessionRequest
    provider_for: Callable[[ResolvedModel], Provider]  # the provider behind its concurrency cap
    tools: ToolsFactory
    publish: Callable[[SessionEvent], None]
    on_exit: Callable[[Session, str, bool], None]  # (session, reason, reap later)
    before_turn: Callable[[Session], None] = _no_hook
    children: Callable[[str], Sequence[tuple[Usage, float | None]]] = _no_children
    """Each `task` child's usage and USD cost (None: unknown) by the parent's id: its `cost`."""


MODE_ORDER: Final = (Mode.PLAN, Mode.DEFAULT, Mode.ACCEPT_EDITS, Mode.BYPASS)
"""Permission modes from the narrowest to the widest authority."""


def wider(mode: Mode, than: Mode) -> bool:
    return MODE_ORDER.index(mode) > MODE_ORDER.index(than)


def check_mode(mode: Mode, settings: SessionSettings) -> Mode:
    """`mode` if the daemon's ceiling allows it; `InvalidSessionRequest` saying why otherwise."""
    if wider(mode, settings.max_mode):
        allowed = [m.value for m in MODE_ORDER if not wider(m, settings.max_mode)]
        raise InvalidSessionRequest(
            f"permission={mode.value} is wider than this daemon allows: its ceiling is "
            f"{settings.max_mode.value} (permissions.max_mode in the user config); use one of "
            f'{", ".join(allowed)}, or set permissions.max_mode = "{mode.value}" in the user '
            "config and restart the daemon (only the user can widen it)"
        )
    return mode


def compact_tools(target: ResolvedModel) -> bool:
    """Whether `target`'s window is small enough for compact tool definitions."""
    return target.limits.context_window <= COMPACT_TOOLS_WINDOW


def sandbox_policy(name: str, role: SandboxRole, settings: SessionSettings) -> SandboxPolicy:
    """The sandbox policy `name` means for a role ("" is the role's default)."""
    match name:
        case "":
            return role.default_policy()
        case "read-only":
            return ReadOnly(network=role.network)
        case "workspace-write":
            return WorkspaceWrite(network=role.network)
        case "full-access":
            if settings.full_access_granted_by is None:
                raise InvalidSessionRequest(
                    "sandbox=full-access runs commands with no sandbox at all, and only the user "
                    "can grant it (user config or the daemon's command line); it is not granted"
                )
            return FullAccess(settings.full_access_granted_by)
    raise InvalidSessionRequest(f"unknown sandbox {name!r}: use one of {', '.join(SANDBOXES)}")


def sandbox_wider(name: str, than: str) -> bool:
    """Whether sandbox `name` is wider than `than` in `SANDBOXES`' order ("" or an unknown
    name counts as the narrowest)."""

    def width(sandbox: str) -> int:
        return SANDBOXES.index(sandbox) if sandbox in SANDBOXES else 0

    return width(name) > width(than)


def sandbox_name(policy: SandboxPolicy) -> str:
    match policy:
        case ReadOnly():
            return "read-only"
        case WorkspaceWrite():
            return "workspace-write"
        case FullAccess():
            return "full-access"


__all__ = [
    "MODE_ORDER",
    "SANDBOXES",
    "Services",
    "SessionSettings",
    "ToolSetup",
    "ToolsFactory",
    "check_mode",
    "compact_tools",
    "sandbox_name",
    "sandbox_policy",
    "sandbox_wider",
    "wider",
]
