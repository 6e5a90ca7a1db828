"""The session layer inside the daemon: registry, settings, manager, tree, events, shutdown.

    sessions = Sessions.build(config, root, env=env, data_dir=data_dir, redactor=redactor, ...)
    daemon = Daemon(DaemonConfig(...), tree=root, children=[sessions.run], ...)
    sessions.attach(daemon)

`build` turns the loaded (trusted) configuration into what `anvild.session` needs and wires
every part that sits on it: the provider `Registry` (one shared HTTP client; `local` through a
`LocalModelProvider` that waits for llama-server), the tools chain (default, conductor, mail,
beads, task), `ProjectConfigs`, the `SessionExtension`s (config, outcome, family, mcp,
introspection, compaction, turns), `SessionSettings` (with the daemon's `McpPool` and the
checkpoints' `Workspaces`), the `SessionTree`,
mail, the bead store and tree, `BeadGates` and `SessionApprovals`. `run` (a daemon child) opens
the bead store before any session is restored, then runs the MCP pool and the manager; the
shutdown step `sessions` cancels them (the MCP servers stop) and waits until every turn ended
(no pending call approved) and every journal is closed. More: docs/decisions.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import httpx
import platformdirs
import structlog
import trio

from anvild.agent.permissions.policy import Mode
from anvild.agent.permissions.rules import RuleSet
from anvild.beads import BeadError, BeadStore
from anvild.beads.events import BeadEvent, encode_event
from anvild.beads.tools import bead_tools
from anvild.budget import Budgets, Ledger
from anvild.checkpoints import Workspaces
from anvild.config import Config
from anvild.coord.approvers import SessionApprovals
from anvild.coord.bead_gates import BeadGates
from anvild.coord.conductor_tools import ConductorTools
from anvild.coord.remotes import remotes_of
from anvild.coord.subagents import SubagentTools
from anvild.daemon.app import Daemon
from anvild.daemon.gcpolicy import GcPolicy
from anvild.daemon.llama import LOCAL, LlamaServer, LlamaUnavailable, with_local_model
from anvild.llm.errors import TransportError
from anvild.llm.provider import Provider
from anvild.llm.registry import (
    AdapterArgs,
    Kind,
    ProviderFactory,
    ResolvedModel,
    adapter_factory,
)
from anvild.llm.stream import StreamEvent
from anvild.llm.transport import LeanTransport, proxy_configured
from anvild.llm.types import ChatRequest
from anvild.mail import AutoMail, MailStore, PostOffice, mail_tools
from anvild.mcp import McpPool, servers_of
from anvild.sandbox.bwrap import SandboxSettings
from anvild.sandbox.roles import user_roles_dir
from anvild.sandbox.secrets import Redactor
from anvild.session import (
    Session,
    SessionManager,
    SessionNotFound,
    SessionSettings,
    SessionStatus,
    chain_tools,
    default_tools,
)
from anvild.session.compaction import ContextPolicy
from anvild.session.events import SessionEvent, SessionStateChanged
from anvild.session.project_config import ProjectConfigs
from anvild.session.roles import user_text_dir
from anvild.skills import SkillCatalog
from anvild.store import SessionStore
from anvild.tree.beads import BeadsTree
from anvild.tree.budget import budget_file
from anvild.tree.compaction import compaction_files
from anvild.tree.config import config_file
from anvild.tree.family import family_files
from anvild.tree.introspection import introspection_files
from anvild.tree.load import load_file
from anvild.tree.mail import (
    MailTree,
    SessionPeers,
    SessionPrompter,
    SessionResultGate,
    forward_mail_events,
)
from anvild.tree.mcp import mcp_file, mcp_reporter
from anvild.tree.outcome import outcome_file
from anvild.tree.root import RootTree
from anvild.tree.sessions import ModelLine, SessionExtension, SessionTree, forward_events
from anvild.tree.skills import skills_file
from anvild.tree.turns import turn_files

__all__ = ["LocalModelProvider", "Sessions", "local_factory"]

if TYPE_CHECKING:
    from anvild.telemetry.traces import Telemetry

log = structlog.get_logger("anvild.daemon.wiring")

LOCAL_HOST_URL = "http://127.0.0.1"
"""Where the embedded server listens, before its port is known: what the registry's
capability table sees for `local` (a loopback openai-chat server)."""


class LocalModelProvider:
    """The `local` provider: waits for the embedded llama-server, then talks to it."""

    def __init__(
        self, server: LlamaServer, kind: Kind, args: AdapterArgs, factory: ProviderFactory
    ) -> None:
        self._server = server
        self._kind = kind
        self._args = args
        self._factory = factory

    @property
    def name(self) -> str:
        return self._args.name

    async def _adapter(self) -> Provider:
        try:
            base_url = await self._server.wait_ready()
        except LlamaUnavailable as exc:
            raise TransportError(
                f"{exc}; see {self._server.log_file} (build it with `make llama-server`, or "
                "`anvil-llama-server setup` where anvild is installed), or configure a hosted "
                "provider (README, Configuration)",
                retryable=False,
            ) from exc
        return self._factory(self._kind, attrs.evolve(self._args, base_url=f"{base_url}/v1"))

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        adapter = await self._adapter()
        async with adapter.stream(request) as events:
            yield events


def local_factory(
    server: LlamaServer, factory: ProviderFactory = adapter_factory
) -> ProviderFactory:
    """A registry factory that puts `LocalModelProvider` behind the provider `local`."""

    def build(kind: Kind, args: AdapterArgs) -> Provider:
        if args.name == LOCAL:
            return LocalModelProvider(server, kind, args, factory)
        return factory(kind, args)

    return build


def _model_lines(config: Config, env: Mapping[str, str]) -> list[ModelLine]:
    lines = []
    for alias, spec in sorted(config.models.items()):
        provider = config.providers[spec.provider]
        key = provider.api_key_env
        lines.append(
            ModelLine(
                alias=alias,
                provider=spec.provider,
                model=spec.model,
                window=spec.limits.context_window,
                key_present=key is None or bool(env.get(key, "").strip()),
            )
        )
    return lines


def _resolver(manager: SessionManager) -> Callable[[str], str | None]:
    """The id of the live session with this id or alias, or None."""

    def resolve(name: str) -> str | None:
        found = manager.peek(name)  # building none: a session at rest may be unbuilt
        now = found[0] if isinstance(found, tuple) else found
        return None if now is None or now.status is SessionStatus.EXITED else now.id

    return resolve


def _checkpoints(config: Config, data_dir: Path) -> Workspaces | None:
    """`[checkpoints]`: the shadow repositories under `<data_dir>/checkpoints`, or None (off)."""
    limits = config.checkpoints
    if not limits.enabled:
        return None
    return Workspaces(data_dir / "checkpoints", max_file_bytes=limits.max_file_bytes)


def _lookup(manager: SessionManager) -> Callable[[str], Session | None]:
    """The session with this id or alias (exited ones included while listed), or None."""

    def lookup(name: str) -> Session | None:
        try:
            return manager.get(name)
        except SessionNotFound:
            return None

    return lookup


def _liveness(manager: SessionManager) -> Callable[[str], bool]:
    resolve = _resolver(manager)
    return lambda session_id: resolve(session_id) == session_id


def provider_client(env: Mapping[str, str]) -> tuple[httpx.AsyncClient, LeanTransport | None]:
    """The HTTP client every provider adapter shares, and its `LeanTransport` if it has one.
    Deadlines are the llm layer's own (`timeout=None`, see `anvild.llm.registry`). It streams
    over `LeanTransport` (HTTP/1.1 on trio sockets, read without httpx's per-chunk layers:
    `anvild.llm.transport`), unless a proxy variable is set: then over httpx's own transport,
    which honours it."""
    if proxy_configured(env):
        return httpx.AsyncClient(timeout=None), None
    transport = LeanTransport()
    return httpx.AsyncClient(transport=transport, timeout=None), transport


def _telemetry(
    config: Config, env: Mapping[str, str], redactor: Redactor | None
) -> Telemetry | None:
    """OpenTelemetry when `[telemetry] otlp_endpoint` is set (`anvild.telemetry`); bad
    headers are logged and telemetry stays off (the sessions run regardless)."""
    if config.telemetry.otlp_endpoint is None:
        return None
    from anvild.telemetry.traces import Telemetry  # the SDK loads only when configured

    try:
        return Telemetry(config.telemetry, redact=redactor.redact if redactor else None, env=env)
    except ValueError as exc:
        log.error("telemetry.off", error=str(exc))
        return None


@attrs.define
class Sessions:
    """The daemon's session layer: build it, `attach` it to the daemon, run it as a child."""

    manager: SessionManager
    tree: SessionTree
    root: RootTree
    client: httpx.AsyncClient
    mail: MailTree | None = None
    beads: BeadsTree | None = None
    gates: BeadGates | None = None
    transport: LeanTransport | None = None  # its idle watch runs beside the manager
    gc_policy: GcPolicy | None = None  # the daemon command's (anvild.daemon.gcpolicy)
    approvals: SessionApprovals | None = None  # tells approver sessions of their gates
    mcp: McpPool | None = None  # the MCP servers of every session, run beside the manager
    prompter: SessionPrompter | None = None  # mail's auto-prompts of sessions not built
    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    _done: trio.Event = attrs.field(factory=trio.Event)
    _started: bool = False

    @classmethod
    def build(
        cls,
        config: Config,
        root: RootTree,
        *,
        env: Mapping[str, str],
        data_dir: Path,
        redactor: Redactor | None = None,
        local_model: LlamaServer | None = None,
        default_cwd: Path | None = None,
        beads_repo: Path | None = None,
        gc_policy: GcPolicy | None = None,
    ) -> Sessions:
        """`beads_repo` is the bead store's repository (default: the config's `[beads] repo`,
        else `<data_dir>/beads`)."""
        client, transport = provider_client(env)

        def resolver(merged: Config) -> Callable[[str | None], ResolvedModel]:
            if local_model is None:
                return merged.registry(client, env=env).resolve
            merged = with_local_model(merged, LOCAL_HOST_URL)
            return merged.registry(client, env=env, factory=local_factory(local_model)).resolve

        base, resolve = config, resolver(config)
        if local_model is not None:
            config = with_local_model(config, LOCAL_HOST_URL)
        perms, limits = config.permissions, config.sessions
        configs = ProjectConfigs(
            base, resolve=resolve, registry=resolver, max_mode=Mode(perms.max_mode)
        )
        store = BeadStore(
            beads_repo or config.beads_repo or data_dir / "beads",
            remote=config.beads_remote,
            host=config.beads_host,
        )
        pool = McpPool(lambda cwd: servers_of(configs.current(cwd).config), env=env)
        # The user's role texts, sandbox roles and skills, resolved once: asking platformdirs
        # at every `new` was 3% of its CPU. The user config dir itself stays unset (None: no
        # user AGENTS.md in the prompt, as before).
        text_dir, sandbox_dir = user_text_dir(), user_roles_dir()
        skills = SkillCatalog(config_dir=platformdirs.user_config_path("anvil"), role_dir=text_dir)
        beads = BeadsTree(store)
        gates = BeadGates(store)
        settings = SessionSettings(
            rules=RuleSet.parse(allow=perms.allow, ask=perms.ask, deny=perms.deny),
            mode=Mode(perms.mode),
            max_mode=Mode(perms.max_mode),
            full_access_granted_by=(
                f"permissions.full_access in {config.user_file}" if perms.full_access else None
            ),
            role_text_dir=text_dir,
            sandbox_role_dir=sandbox_dir,
            max_steps=limits.max_steps,
            token_budget=limits.token_budget,
            turn_deadline=limits.turn_deadline,
            reap_delay=limits.reap_delay,
            idle_unload=limits.idle_unload,
            concurrency={LOCAL: 1},
            sandbox_settings=SandboxSettings(
                passthrough=tuple(config.env_passthrough),
                quarantine=data_dir / "quarantine",
                litter_dir=data_dir / "sandbox-mounts",
            ),
            redact=redactor.redact if redactor else None,
            extra_context=configs.extra_context(store.context_for),
            hooks=lambda cwd: configs.current(cwd).config.hooks,
            bead_of=lambda sid: " ".join(b.id for b in store.assigned(sid)),
            context=ContextPolicy(
                auto_compact=config.context.auto_compact,
                clear_at=config.context.clear_at,
                compaction_model=config.context.compaction_model,
                keep_tool_results=config.context.keep_tool_results,
            ),
            mcp=pool,
            checkpoints=_checkpoints(config, data_dir),
            skills=skills,
            budgets=Budgets(config.budget, Ledger(data_dir / "budget"))
            if config.budget.any
            else None,
            convoys_of=lambda sid: tuple(
                sorted({b.convoy for b in store.assigned(sid) if b.convoy})
            ),
            telemetry=_telemetry(config, env, redactor),
        )
        conductor = ConductorTools(beads=store, remotes=remotes_of(config))
        subagents = SubagentTools(
            max_depth=config.subagents.max_depth,
            max_per_turn=config.subagents.max_per_turn,
            roles=config.subagents.roles,
            user_config_dir=settings.user_config_dir,
        )
        peers, prompter, gate = SessionPeers(), SessionPrompter(), SessionResultGate()
        office = PostOffice(MailStore(data_dir / "mail"), peers, on_event=forward_mail_events(root))
        approvals = SessionApprovals(settle=gates.settle, office=office)
        auto = AutoMail(office, prompter)
        forward = forward_events(root)

        def on_event(event: SessionEvent) -> None:
            forward(event)
            if isinstance(event, SessionStateChanged) and event.state == "idle":
                auto.poke(event.id)
            beads.on_session_event(event)
            gates.on_session_event(event)
            approvals.on_session_event(event)
            if gc_policy is not None:
                gc_policy.on_event(event)

        manager = SessionManager(
            SessionStore(data_dir / "sessions"),
            resolve,
            settings=settings,
            tools=chain_tools(
                default_tools,
                conductor.tools,
                mail_tools(office, gate, approvals),
                bead_tools(store),
                subagents.tools,
            ),
            default_cwd=default_cwd,
            on_event=on_event,
            configs=configs,
        )
        conductor.bind(manager)
        subagents.bind(manager)
        peers.bind(manager)
        prompter.bind(manager)
        gate.bind(manager)
        approvals.bind(manager)
        lines = _model_lines(config, env)
        tree = SessionTree(manager, models=lambda: lines, max_prompt_bytes=limits.max_prompt_bytes)
        tree.extend(SessionExtension(answered=gates.settle))
        tree.extend(config_file(configs))
        tree.extend(compaction_files())
        tree.extend(outcome_file())
        tree.extend(turn_files())
        tree.extend(family_files(manager))
        tree.extend(skills_file(settings.skills))
        tree.extend(mcp_file(pool))
        pool.report = mcp_reporter(root, _lookup(manager))
        tree.extend(introspection_files(settings))
        root.root.add(budget_file(settings.budgets))
        root.root.add(load_file(manager.statuses))
        mail = MailTree(office, auto)
        mail.mount(root, tree)
        tree.mount(root)
        beads.resolve_session = _resolver(manager)
        beads.session_live = _liveness(manager)
        beads.mount(root)
        gates.bind(manager)  # builds a session at rest off the loop (`BeadGates.sync`)
        gates.publish = lambda event: beads.publish(encode_event(event))
        beads.answer = gates.answer
        committed = store.on_event

        def on_bead_event(event: BeadEvent) -> None:
            if committed is not None:
                committed(event)
            gates.on_bead_event(event)

        store.on_event = on_bead_event
        return cls(
            manager,
            tree,
            root,
            client,
            mail,
            beads,
            gates,
            transport,
            gc_policy,
            approvals,
            pool,
            prompter,
        )

    def attach(self, daemon: Daemon) -> None:
        """Add the shutdown step; `daemon` must serve the root given to `build`."""
        if daemon.tree is not self.root:
            raise ValueError("the daemon must serve the root tree the sessions were built on")
        daemon.add_shutdown_step("sessions", self.stop)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Restore every session, report started, host them until `stop` or cancellation."""
        self._started = True
        try:
            async with self.client:
                with self._scope:
                    await self._open_beads()
                    async with trio.open_nursery() as nursery:
                        if self.transport is not None:
                            await nursery.start(self.transport.watch.run)
                        if self.mcp is not None:  # cancelled with the rest: servers stop
                            await nursery.start(self.mcp.run)
                        await nursery.start(self.manager.run)
                        if self.approvals is not None:
                            await nursery.start(self.approvals.run)
                        if self.prompter is not None:
                            await nursery.start(self.prompter.run)
                        if self.gc_policy is not None:  # after the restore: freeze it all
                            self.gc_policy.configure()
                            policy = self.gc_policy  # what an idle unload drops is collected
                            self.manager.unload_listeners.append(lambda _: policy.collect_soon())
                            await nursery.start(self.gc_policy.run)
                        if self.beads is not None:
                            self.beads.announce_orphans("its session was not restored")
                            if self.beads.store.unavailable is None:  # pulls on an interval
                                await nursery.start(self.beads.store.run_sync)
                        if self.gates is not None and self.gates.store.unavailable is None:
                            built = self.manager.built_sessions  # a gated one is built
                            await nursery.start(self.gates.run, lambda: list(built()))
                        task_status.started()
        finally:
            self._done.set()

    async def _open_beads(self) -> None:
        # A broken bead store (git missing, repository unwritable) must not stop the sessions:
        # every bead write then says why (BeadStore.unavailable), and the log has it.
        if self.beads is None:
            return
        try:
            await self.beads.store.open()
        except BeadError as exc:
            log.error("beads.unavailable", repo=str(self.beads.store.root), error=str(exc))

    async def stop(self) -> None:
        """The shutdown step: end every turn, sync and close every journal, release the bead
        repository."""
        self._scope.cancel()
        if self._started:
            await self._done.wait()
        if self.beads is not None:
            self.beads.store.close()
        if self.manager.settings.checkpoints is not None:  # the workspaces' inotify instances
            self.manager.settings.checkpoints.close()
        telemetry = self.manager.settings.telemetry
        if telemetry is not None:  # a receiver that is away costs at most the flush's bound
            await trio.to_thread.run_sync(telemetry.shutdown, 2.0, abandon_on_cancel=True)
        log.info("sessions.stopped", sessions=self.manager.statistics().sessions)
