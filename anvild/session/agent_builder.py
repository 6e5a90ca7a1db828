"""The agent a session runs, built from its records, its settings and its collaborators.

`build_agent` assembles the agent loop of one session: its tools (the manager's factory, for
the session's cwd, role, sandbox and id) wrapped so each call is recorded (`ToolStarted`
synced before it runs, `ToolFinished` after; a tool whose start could not be recorded is not
run), its permission gate (the policy from the session's mode, the daemon's rules and grants,
and what `always` answers added, from the records), the file tools' freshness tracker
restored from the records (`FileSeen`: a file read before a daemon restart can be edited after
it, and one changed meanwhile is still refused as stale), and the model's config. With the
daemon's MCP pool (`SessionSettings.mcp`) the registry adds the session's MCP tools and the
agent starts its servers before each turn (`anvild.mcp.tools`). Requests are admitted against
`budgets` first (`anvild.budget`); with `telemetry` events make traces (`anvild.telemetry`).
The session makes its hooks (`session_hooks`) and finds its skills at its start
(`session_skills`) and hands them in: the gate's approver is wrapped (a hook's allow answers only
what the gate would ask a person); the skills add the `skill` tool, and their folders outside
the workspace become read-only roots of the file tools (granted reads, never writes); a skipped
skill is reported (daemon log, session log, `config_invalid` event).
`load_layers` and `current_layers` give the system prompt's layers (`anvild.session.prompt`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import attrs
import structlog

from anvild.agent import events as ev
from anvild.agent.context import Compaction
from anvild.agent.hookpoints import NO_HOOKS
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.permissions.gate import PermissionGate
from anvild.agent.permissions.policy import Grants, Policy
from anvild.agent.tools.base import FileTracker, Tool, ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.agent.tools.skill import SkillTool
from anvild.budget import BudgetedProvider, Scope
from anvild.hooks import SessionHooks
from anvild.llm.provider import Provider
from anvild.llm.registry import ResolvedModel
from anvild.llm.types import Message, ToolCall, ToolResult
from anvild.mcp import McpRegistry, McpSetup, Placement, SessionMcp, session_mcp
from anvild.session import leftovers, roles
from anvild.session.approvals import parse_remembered
from anvild.session.compaction import window_for
from anvild.session.errors import SessionError
from anvild.session.events import ConfigInvalid
from anvild.session.prompt import PromptLayers, discover_instructions
from anvild.session.recorder import Recorder
from anvild.session.settings import (
    Services,
    SessionSettings,
    ToolSetup,
    compact_tools,
    sandbox_policy,
)
from anvild.skills import SkillSet
from anvild.store import FileSeen, ToolFinished, ToolStarted
from anvild.telemetry import Who

if TYPE_CHECKING:
    from anvild.session.session import Session

log = structlog.get_logger(__name__)

GateFactory = Callable[[Policy, ToolRegistry, ToolContext], PermissionGate]
"""Makes the permission gate for a policy, the session's tools and their context."""


def build_agent(
    session: Session,
    messages: Iterable[Message],
    *,
    services: Services,
    recorder: Recorder,
    gate: GateFactory,
    system: str,
    emit: Callable[[ev.AgentEvent], None],
    hooks: SessionHooks | None,
    skills: SkillSet,
    on_compaction: Callable[[Compaction], Awaitable[bool]],
) -> Agent:
    """The agent of `session` (read through its public properties and records), starting
    from `messages`, with the system prompt `system`, its events sent to `emit` (`observed`),
    the session's `hooks` (`session_hooks`) and the `skills` it found (`session_skills`)."""
    settings = services.settings
    cwd = Path(session.cwd)
    state = session.record
    sandbox_role = roles.sandbox_role(session.role, user_dir=settings.sandbox_role_dir)
    policy = sandbox_policy(session.sandbox, sandbox_role, settings)
    ceiling = roles.ceiling(session.role)
    sandbox = settings.sandbox_settings
    skill_roots = tuple(p for p in skills.read_roots() if not p.is_relative_to(cwd.resolve()))
    files = roles.file_access(
        session.role,
        cwd,
        protected=(
            settings.user_config_dir,
            settings.role_text_dir,
            settings.sandbox_role_dir,
            None if sandbox.quarantine is None else sandbox.quarantine.parent,  # the data dir
        ),
        read_only=skill_roots,
    )
    context = ToolContext(cwd=cwd, files=files, sandbox=policy)
    mcp = (
        None
        if settings.mcp is None
        else session_mcp(
            settings.mcp,
            McpSetup(session.id, session.role, Placement(cwd, policy, sandbox_role, sandbox)),
        )
    )
    # Freshness survives a daemon restart: what the file tools saw, from the records.
    context.tracker.restore({Path(p): h for p, h in state.files_seen})
    tools = _RecordingRegistry(
        [
            *services.tools(
                ToolSetup(
                    cwd,
                    session.role,
                    policy,
                    sandbox_role,
                    settings.sandbox_settings,
                    session_id=session.id,
                )
            ),
            *_skill_tool(session, settings, skills),
        ],
        session,
        recorder,
        mcp,
    )
    remembered = state.remembered
    permission = Policy(
        workspace=PurePosixPath(cwd.resolve()),
        mode=session.mode,
        rules=settings.rules,
        session_rules=parse_remembered(session.id, remembered.rules),
        grants=settings.grants.plus(
            Grants(
                remembered.network,
                remembered.full_access,
                remembered.read_roots,
                remembered.write_roots,
            )
        ).plus(Grants(read_roots=[PurePosixPath(p) for p in skill_roots])),
        ceiling=ceiling,
        sandbox=policy,
        home=PurePosixPath(settings.home.resolve()),
    )
    decide = gate(permission, tools, context)
    if hooks is not None:  # a hook's allow answers only what the gate would ask
        decide.approver = hooks.approver(decide.approver)
    target = session.target
    summariser = _summariser(session.id, services)
    config = AgentConfig(
        model=target.model,
        system=system,
        max_steps=session.max_steps,
        max_tokens=target.limits.max_output_tokens,
        token_budget=session.token_budget,
        compact_tools=compact_tools(target),
        cache_key=session.id,
        compaction_model="" if summariser is None else summariser.model,
    )
    agent = Agent(
        session_provider(session, services, recorder, target),
        tools,
        config,
        context,
        emit=emit,
        decide=decide,
        redact=settings.redact,
        messages=messages,
        window=window_for(target, settings.context),
        on_compaction=on_compaction,
        summariser=None if summariser is None else _provider(session, services, summariser),
        hooks=NO_HOOKS if hooks is None else hooks,
        snapshots=session.turns.snapshots,
    )
    return agent


def observed(
    session: Session,
    settings: SessionSettings,
    emit: Callable[[ev.AgentEvent], None],
    transcript: Callable[[], Sequence[Message]],
) -> Callable[[ev.AgentEvent], None]:
    """`emit`, and with telemetry on, each event also to the session's traces and metrics."""
    telemetry = settings.telemetry
    if telemetry is None:
        return emit
    bead_of, convoys_of = settings.bead_of, settings.convoys_of

    def who() -> Who:
        bead = "" if bead_of is None else bead_of(session.id)
        convoys = () if convoys_of is None else convoys_of(session.id)
        return Who(session.id, session.role, bead, " ".join(convoys))

    target = session.target
    observe = telemetry.observer(
        who, target.provider_name, target.model, target.pricing, transcript
    )

    def both(event: ev.AgentEvent) -> None:
        emit(event)
        observe(event)

    return both


def session_provider(
    session: Session, services: Services, recorder: Recorder, target: ResolvedModel
) -> Provider:
    """`target`'s provider as every request of `session` reaches it: budgeted (`_provider`)
    and logged with its request's identity (the recorder's `requests`). The agent's provider
    is always one of these: at its build, at a `model` switch, at a project's retarget."""
    return recorder.requests.provider(_provider(session, services, target))


def _provider(session: Session, services: Services, target: ResolvedModel) -> Provider:
    """`target`'s provider for `session`: behind its concurrency cap, and with the daemon's
    budgets, each request admitted against them first (charged to the session, its role and
    its beads' convoys as they are at the request)."""
    provider = services.provider_for(target)
    budgets, convoys_of = services.settings.budgets, services.settings.convoys_of
    if budgets is None:
        return provider

    def scope() -> Scope:
        convoys = () if convoys_of is None else convoys_of(session.id)
        return Scope(session.id, session.role, convoys)

    return BudgetedProvider(provider, budgets, scope, target.pricing)


def session_hooks(
    session: Session,
    settings: SessionSettings,
    emit: Callable[[ev.AgentEvent], None],
    mode: Callable[[], str],
) -> SessionHooks | None:
    """The session's hooks (`anvild.hooks`), run on the host in its cwd; None without any.
    `mode` gives the permission mode a hook is told (the gate's, as it is when the hook runs)."""
    source, bead_of = settings.hooks, settings.bead_of
    if source is None:
        return None
    cwd = Path(session.cwd)
    return SessionHooks(
        lambda: source(cwd),
        session_id=session.id,
        cwd=cwd,
        role=lambda: session.role,
        mode=mode,
        emit=emit,
        bead=(lambda: bead_of(session.id)) if bead_of is not None else lambda: "",
        transcript=session.records_path,
    )


def session_skills(session: Session, services: Services, *, report: bool = True) -> SkillSet:
    """The session's skills as found now (none without a catalog); with `report`, each
    skipped one is reported. The prompt's list (`load_layers`) and the agent's skill roots
    (`build_agent`) use them."""
    catalog = services.settings.skills
    if catalog is None:
        return SkillSet()
    found = catalog.for_session(session.cwd, session.role)
    for skipped in found.skipped if report else ():
        log.warning("session.skill_skipped", session=session.id, reason=skipped.reason)
        session.log.publish(f"NOTE: skill skipped: {skipped.reason}")
        services.publish(
            ConfigInvalid(
                session.id,
                f"skill skipped: {skipped.reason}",
                "the session's other skills (its skills file lists them)",
            )
        )
    return found


def _skill_tool(session: Session, settings: SessionSettings, found: SkillSet) -> list[Tool]:
    """The `skill` tool when the session has skills: it finds them again at each call."""
    if settings.skills is None or not found.skills:
        return []
    return [SkillTool(settings.skills.live(session.cwd, session.role))]


def _summariser(session_id: str, services: Services) -> ResolvedModel | None:
    """`[context] compaction_model` resolved, or None (the session's own model writes the
    summaries); a name that no longer resolves is logged and falls back to the session's."""
    name = services.settings.context.compaction_model
    if not name:
        return None
    try:
        return services.resolve(name)
    except SessionError as exc:
        log.warning("session.compaction_model_unknown", session=session_id, error=str(exc))
        return None


def load_layers(
    cwd: str, role: str, context: str, settings: SessionSettings, skills: SkillSet
) -> PromptLayers:
    """The prompt layers of a session in `cwd` with `role`, the `context` file's text and
    the `skills` it found."""
    return PromptLayers(
        instructions=discover_instructions(Path(cwd), settings.user_config_dir),
        role=role,
        role_text=roles.role_text(role, user_dir=settings.role_text_dir),
        skills=skills.prompt_block(),
        context=context,
    )


def current_layers(
    layers: PromptLayers, session_id: str, settings: SessionSettings
) -> PromptLayers:
    """`layers` with the extra context (`SessionSettings.extra_context`) as it is now."""
    hook = settings.extra_context
    if hook is None:
        return layers
    try:
        extra = hook(session_id)
    except Exception:  # a broken hook must not stop the session: keep the last text
        log.exception("session.extra_context_failed", session=session_id)
        return layers
    if extra == layers.extra:
        return layers
    return attrs.evolve(layers, extra=extra)


class _RecordingRegistry(McpRegistry):
    """The session's tools (its MCP servers' included), with `ToolStarted` synced before each
    call runs and `ToolFinished` synced after (the store's durability policy)."""

    def __init__(
        self,
        tools: Iterable[Tool],
        session: Session,
        recorder: Recorder,
        mcp: SessionMcp | None = None,
    ) -> None:
        super().__init__(tools, mcp)
        self._session = session
        self._recorder = recorder

    async def dispatch(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        session, recorder = self._session, self._recorder
        if not await recorder.append_synced(ToolStarted(call.id, call.name)):
            return ToolResult(
                call.id,
                f"Not run: the session's record could not be written ({session.status_detail}); "
                "the session is in error.",
                is_error=True,
            )
        seen = _CallTracker(ctx.tracker)
        # A temp-file tag derived from the ids: recovery can find what a crash mid-write left.
        call_ctx = attrs.evolve(ctx, tracker=seen, temp_tag=leftovers.tag(session.id, call.id))
        result = await super().dispatch(call, call_ctx)
        if await recorder.append_synced(ToolFinished(recorder.redacted(result))):
            # What this call's file tools saw, now that its result is durably in the transcript
            # (a crash before this leaves the file to be read again: never the other way).
            for path, digest in seen.recorded.items():
                recorder.append(FileSeen(str(path), digest))
        return result


class _CallTracker(FileTracker):
    """One call's view of the session's freshness tracker: everything goes to the shared one,
    and what this call `record`s is also kept here (`recorded`), so the session can write it to
    its records once the call finished (concurrent read-only calls each get their own)."""

    def __init__(self, shared: FileTracker) -> None:
        super().__init__()
        self._shared = shared
        self.recorded: dict[Path, str] = {}

    def record(self, canonical: Path, content: bytes) -> None:
        self._shared.record(canonical, content)
        digest = self._shared.digest(canonical)
        if digest is not None:
            self.recorded[canonical] = digest

    def forget(self, canonical: Path) -> None:
        self._shared.forget(canonical)
        self.recorded.pop(canonical, None)

    def has_seen(self, canonical: Path) -> bool:
        return self._shared.has_seen(canonical)

    def check_fresh(self, canonical: Path, current: bytes) -> None:
        self._shared.check_fresh(canonical, current)

    def digest(self, canonical: Path) -> str | None:
        return self._shared.digest(canonical)

    def restore(self, seen: Mapping[Path, str]) -> None:
        self._shared.restore(seen)
