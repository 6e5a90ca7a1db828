"""The conductor's tools: an LLM session with role `conductor` starts and drives worker sessions.

    conductor = ConductorTools(max_sessions=16, beads=bead_store)
    manager = SessionManager(..., tools=chain_tools(default_tools, conductor.tools))
    conductor.bind(manager)          # the tools need the manager, which needs the tools factory

Only `conductor` sessions get tools (start_session, send_prompt, wait_sessions, read_out,
kill_session, my_sessions, and with a `BeadStore` the bead tools), bound to the session's id.
A conductor never gains authority through its workers (DESIGN section 7): roles developer,
reviewer, planner, tester only; never `full-access`, at most the role's own sandbox; cwd inside
its workspace; at most `max_sessions` live; approver only "me" or `user`. It drives only the
sessions it started, named `<name>.<conductor id>` (ownership survives restarts), on this
daemon or, with `start_session` `host`, on a `[remotes.NAME]` daemon (`anvild.coord.remotes`),
reached over 9P: that daemon enforces its own roles and sandboxes there.
start_session, send_prompt and kill_session declare `subprocess` effects (never batched, asked
unless allowed); the others change nothing outside the daemon's own records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs
import trio

from anvild.agent.tools import Cancellation, Effects, Failed, InvalidArgs, Tool, ToolOutput
from anvild.agent.tools.base import Args, ToolContext, object_schema
from anvild.beads import BeadError, BeadStore, NewBead, NewConvoy
from anvild.beads.model import Bead
from anvild.coord.bound import ManagerBound
from anvild.coord.remotes import RemoteDaemon, RemoteSession
from anvild.llm.registry import ResolvedModel
from anvild.ninep.client import RemoteError
from anvild.session import (
    NewSession,
    Session,
    SessionError,
    SessionManager,
    SessionNotFound,
    SessionStatus,
    ToolSetup,
)
from anvild.session import roles as session_roles
from anvild.session.settings import sandbox_name, sandbox_wider
from anvild.store import SessionSummary

__all__ = ["BEAD_TOOL_NAMES", "CONDUCTOR_TOOL_NAMES", "WORKER_ROLES", "ConductorTools"]

CONDUCTOR_ROLE: Final = "conductor"
WORKER_ROLES: Final = ("developer", "reviewer", "planner", "tester")
CONDUCTOR_TOOL_NAMES: Final = (
    "start_session",
    "send_prompt",
    "wait_sessions",
    "read_out",
    "kill_session",
    "my_sessions",
)
BEAD_TOOL_NAMES: Final = (
    "create_convoy",
    "create_bead",
    "assign_bead",
    "complete_bead",
    "read_beads",
)
NAME_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
DEFAULT_WAIT: Final = 900.0
MAX_WAIT: Final = 3600.0
MAX_OUT_CHARS: Final = 100_000
ENDED: Final = frozenset({SessionStatus.EXITED})

T = TypeVar("T")


class ConductorTools(ManagerBound):
    """The tools factory for conductor sessions; see the module docstring."""

    label = "the conductor tools"

    def __init__(
        self,
        *,
        max_sessions: int = 16,
        beads: BeadStore | None = None,
        remotes: Mapping[str, RemoteDaemon] | None = None,
    ) -> None:
        self.max_sessions = max_sessions
        self.beads = beads
        self.remotes = dict(remotes or {})
        self.remote_sessions: dict[str, dict[str, RemoteSession]] = {}
        """Per conductor id, the sessions it started on remotes, by alias (a cache: after a
        restart they are found again by alias in the remotes' agent/list)."""

    def tools(self, setup: ToolSetup) -> list[Tool]:
        """The conductor's tools for a conductor session, nothing for any other role."""
        if setup.role != CONDUCTOR_ROLE:
            return []
        me = _Conductor(self, setup.session_id, setup.cwd)
        tools: list[Tool] = [
            StartSession(me),
            SendPrompt(me),
            WaitSessions(me),
            ReadOut(me),
            KillSession(me),
            MySessions(me),
        ]
        if self.beads is not None:
            tools += [
                CreateConvoy(me, self.beads),
                CreateBead(me, self.beads),
                AssignBead(me, self.beads),
                CompleteBead(me, self.beads),
                ReadBeads(me, self.beads),
            ]
        return tools


@attrs.frozen
class _Seen:
    """A session of this daemon as `my_sessions` shows it, read without building it."""

    id: str
    alias: str | None
    role: str
    status: SessionStatus
    model: str

    @classmethod
    def of(cls, found: Session | tuple[SessionSummary, ResolvedModel]) -> _Seen:
        if isinstance(found, Session):
            return cls(found.id, found.alias, found.role, found.status, found.model)
        summary, target = found
        return cls(summary.id, summary.alias, summary.role, summary.status, target.name)


@attrs.frozen
class _Conductor:
    """One conductor session's view: its id, its workspace, and the sessions it owns."""

    factory: ConductorTools
    session_id: str
    cwd: Path

    @property
    def manager(self) -> SessionManager:
        return self.factory.manager

    @property
    def suffix(self) -> str:
        return f".{self.session_id}"

    def owns(self, alias: str | None) -> bool:
        return alias is not None and alias.endswith(self.suffix)

    def children(self) -> list[_Seen]:
        """My live sessions on this daemon, in creation order, building none."""
        manager = self.manager
        found = [_Seen.of(f) for key in manager.ids() if (f := manager.peek(key)) is not None]
        return [seen for seen in found if self.owns(seen.alias) and seen.status not in ENDED]

    def find(self, key: str) -> str:
        """The id of one of my sessions by id, alias or short name, building none; `Failed`
        saying why otherwise."""
        candidates = [key] if key.endswith(self.suffix) else [key, key + self.suffix]
        for candidate in candidates:
            found = self.manager.peek(candidate)
            if found is None:
                continue
            seen = _Seen.of(found)
            if seen.id == self.session_id:
                raise Failed("That is you, the conductor; name one of the sessions you started.")
            if not self.owns(seen.alias):
                raise Failed(
                    f"Session {key!r} was not started by you: a conductor drives only the "
                    "sessions it started (see my_sessions)."
                )
            return seen.id
        raise Failed(f"You have no session {key!r}; my_sessions lists the ones you started.")

    async def get(self, key: str) -> Session:
        """One of my sessions (`find`), built: one at rest has its records replayed in a
        worker thread (`SessionManager.load`)."""
        session_id = self.find(key)
        try:
            return await self.manager.load(session_id)
        except SessionNotFound as exc:
            raise Failed(f"Session {key!r} is no longer live: {exc}") from exc

    def describe(self, session: _Seen) -> str:
        return (
            f"{session.id}\talias={session.alias}\trole={session.role}\t"
            f"state={session.status.value}\tmodel={session.model}"
        )

    # -- sessions on remote daemons --

    @property
    def remote(self) -> dict[str, RemoteSession]:
        return self.factory.remote_sessions.setdefault(self.session_id, {})

    def remote_daemon(self, host: str) -> RemoteDaemon:
        found = self.factory.remotes.get(host)
        if found is None:
            known = ", ".join(sorted(self.factory.remotes)) or "none is configured"
            raise InvalidArgs(
                f"host {host!r} is not a configured remote daemon ({known}); the user adds one "
                "as [remotes.NAME] address and token_file in the user config."
            )
        return found

    async def resolve(self, key: str) -> Session | RemoteSession:
        """One of my sessions, here or on a remote, by id, alias or short name."""
        alias = key if key.endswith(self.suffix) else key + self.suffix
        for ref in self.remote.values():
            if key in (ref.id, ref.alias) or ref.alias == alias:
                return ref
        try:
            return await self.get(key)
        except Failed:
            if not self.factory.remotes:
                raise
            for ref in await self.remote_listing():
                if key in (ref.id, ref.alias) or ref.alias == alias:
                    return ref
            raise

    async def remote_listing(self, problems: list[str] | None = None) -> list[RemoteSession]:
        """My live sessions on every remote (each remote's agent/list); the remotes that did
        not answer go to `problems`."""
        found = []
        for daemon in self.factory.remotes.values():
            try:
                async with await daemon.connect() as conn:
                    listing = await conn.read("list")
            except RemoteError as exc:
                if problems is not None:
                    problems.append(f"host {daemon.name}: not reachable: {exc}")
                continue
            for line in listing.splitlines():
                fields = line.split("\t")
                if len(fields) > 3 and fields[1].endswith(self.suffix) and fields[2] != "exited":
                    ref = RemoteSession(daemon.name, fields[0], fields[1], fields[3])
                    self.remote[ref.alias] = ref
                    found.append(ref)
        return found

    async def on_remote(self, ref: RemoteSession, path: str, text: str | None = None) -> str:
        """Read (or write `text` to) a file of the remote daemon of `ref`; `Failed` saying why."""
        try:
            async with await self.remote_daemon(ref.host).connect() as conn:
                if text is None:
                    return await conn.read(path)
                return await conn.write(path, text)
        except RemoteError as exc:
            raise Failed(f"Session {ref.where}: {exc}") from exc


_APPROVER_ARG: Final[Mapping[str, Any]] = {
    "type": "string",
    "enum": ["me", "user"],
    "description": 'Who approves its results: "me" (you, with answer_approval) or "user" '
    "(a person; the default).",
}


def _approver(args: Args, me: str) -> str:
    """The approver a conductor may name: itself ("me") or a person ("user")."""
    asked = str(args.get("approver", "user"))
    if asked not in ("me", "user"):
        raise InvalidArgs(
            f'approver {asked!r} is refused: a conductor names only itself ("me") or a person '
            '("user") as approver.'
        )
    return me if asked == "me" else "user"


def _session_arg(description: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "description": description}


_WHICH = "The session: its id, its alias, or the name you gave it."
# The arguments of a tool that acts on one of the conductor's sessions (read_out, kill_session).
_ONE_SESSION: Final[Mapping[str, Any]] = object_schema(
    {"session": _session_arg(_WHICH)}, required=("session",)
)


class _Base:
    cancellation: Cancellation = Cancellation.SAFE_TO_ABANDON

    def __init__(self, me: _Conductor) -> None:
        self.me = me

    def effects(self, args: Args) -> Effects:
        return Effects.none()  # reads the daemon's own state only


class _DrivesAgent(_Base):
    """A tool that makes another agent act (start, prompt, kill): a subprocess effect, so it is
    never batched and is asked unless allowed; it happens entirely or not at all."""

    cancellation: Cancellation = Cancellation.ATOMIC

    def effects(self, args: Args) -> Effects:
        return Effects(subprocess=True)


class StartSession(_DrivesAgent):
    name: Final = "start_session"
    description: Final = f"""\
Start a worker session that you then drive with send_prompt, wait_sessions and read_out. \
`role` is one of {", ".join(WORKER_ROLES)}; the session has that role's own limits (a reviewer \
or planner cannot write files). Give it a short `name` (letters, digits, '-' or '_') to refer \
to it later; its alias becomes <name>.<your id>. `model` is a model alias (default: the \
daemon's default). `cwd` is your workspace or a directory inside it (default: your workspace). \
`sandbox` may be read-only, or the role's default (omit it); full-access is never available to \
you, and you cannot widen a role's sandbox. `approver` "me" makes you the approver of its \
results (when it asks for approval, it waits for your answer_approval); default "user" (a \
person). `host` names a remote daemon the user configured ([remotes.NAME]) to start the \
session there instead (its cwd must exist there; approver "me" works only here). Returns the \
new session's id and alias."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "role": {"type": "string", "enum": [*WORKER_ROLES]},
            "name": {"type": "string", "description": "A short name for the session."},
            "model": {"type": "string", "description": "A model alias."},
            "cwd": {"type": "string", "description": "Working directory inside your workspace."},
            "sandbox": {"type": "string", "description": "read-only, or omit for the default."},
            "ephemeral": {
                "type": "boolean",
                "description": "Run one prompt, then exit (default false).",
            },
            "approver": _APPROVER_ARG,
            "host": {"type": "string", "description": "A configured remote daemon's name."},
        },
        required=("role",),
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        me = self.me
        manager = me.manager
        role = str(args["role"])
        if role not in WORKER_ROLES:
            raise InvalidArgs(
                f"role {role!r} cannot be started by a conductor: start one of "
                f"{', '.join(WORKER_ROLES)}."
            )
        sandbox = args.get("sandbox")
        policy_name = self._check_sandbox(role, None if sandbox is None else str(sandbox))
        cwd = self._check_cwd(args.get("cwd"))
        live = len(me.children()) + len(me.remote)
        if live >= me.factory.max_sessions:
            raise Failed(
                f"You already run {live} sessions, the most a conductor may run "
                f"({me.factory.max_sessions}); kill_session the ones you are done with."
            )
        name = args.get("name")
        if name is None:
            taken = {alias for _, alias, _, _ in manager.briefs()} | set(me.remote)
            n = 1
            while f"{role}{n}{me.suffix}" in taken:
                n += 1
            name = f"{role}{n}"
        name = str(name)
        if not NAME_RE.fullmatch(name):
            raise InvalidArgs(
                f"name {name!r} is not usable: 1-40 letters, digits, '-' or '_', starting with "
                "a letter."
            )
        if args.get("host") is not None:
            return await self._start_remote(args, str(args["host"]), role, name, policy_name)
        request = NewSession(
            model=None if args.get("model") is None else str(args["model"]),
            cwd=str(cwd),
            role=role,
            alias=f"{name}{me.suffix}",
            sandbox=policy_name,
            ephemeral=bool(args.get("ephemeral", False)),
            approver=_approver(args, me.session_id),
        )
        try:
            session = await manager.create(request)
        except SessionError as exc:
            raise Failed(f"The session was not started: {exc}") from exc
        return ToolOutput(
            f"Started session {session.id} (alias {session.alias}, role {session.role}, "
            f"model {session.model}, sandbox {session.sandbox}, cwd {session.cwd}, "
            f"approver {'you' if session.approver == me.session_id else session.approver})."
        )

    async def _start_remote(
        self, args: Args, host: str, role: str, name: str, sandbox: str | None
    ) -> ToolOutput:
        """`new` on the remote's agent/ctl; the remote checks the model, cwd and role."""
        me = self.me
        daemon = me.remote_daemon(host)
        if args.get("approver", "user") != "user":
            raise InvalidArgs(
                f'approver "me" works only for sessions on your own daemon; on {host} the '
                'approver is "user" (omit approver).'
            )
        cwd = self._remote_cwd(args.get("cwd"))
        alias = f"{name}{me.suffix}"
        words = [f"role={role}", f"cwd={cwd}", f"alias={alias}"]
        if args.get("model") is not None:
            words.append(f"model={args['model']}")
        if sandbox is not None:
            words.append(f"sandbox={sandbox}")
        if args.get("ephemeral"):
            words.append("ephemeral")
        if any(ch.isspace() for word in words for ch in word):
            raise InvalidArgs("model and cwd must not contain blanks for a remote session.")
        try:
            async with await daemon.connect() as conn:
                answer = await conn.write("ctl", "new " + " ".join(words) + "\n", answer=True)
        except RemoteError as exc:
            raise Failed(f"The session was not started on {host}: {exc}") from exc
        session_id = answer.strip()
        if not session_id:
            raise Failed(f"The session was not started on {host}: its agent/ctl gave no id.")
        me.remote[alias] = RemoteSession(host, session_id, alias, role)
        return ToolOutput(
            f"Started session {session_id} (alias {alias}, role {role}) on host {host}, "
            f"cwd {cwd}, approver user."
        )

    def _remote_cwd(self, asked: Any) -> str:
        """Your workspace or a directory inside it, by path alone (it is on the remote)."""
        home = Path(os.path.realpath(self.me.cwd))
        path = home if asked is None else Path(os.path.normpath(home / str(asked)))
        if path != home and not path.is_relative_to(home):
            raise Failed(
                f"cwd {asked} is outside your workspace {home}: a conductor starts sessions only "
                "in its own workspace or a directory inside it (the same path on the remote)."
            )
        return str(path)

    def _check_sandbox(self, role: str, asked: str | None) -> str | None:
        manager = self.me.manager
        if asked is None:
            return None
        if asked == "full-access":
            raise Failed(
                "sandbox=full-access is refused: a conductor can never start a session without "
                "a sandbox. Only the user grants full access (user config or the daemon's "
                "command line) to a session the user starts. Omit sandbox to use the role's "
                "default, or ask for read-only."
            )
        if asked not in ("read-only", "workspace-write"):
            raise InvalidArgs(
                f"sandbox {asked!r} is unknown: use read-only, or omit it for the role's default."
            )
        try:
            sandbox_role = session_roles.sandbox_role(
                role, user_dir=manager.settings.sandbox_role_dir
            )
        except SessionError as exc:
            raise Failed(str(exc)) from exc
        default = sandbox_role.default_policy()
        if sandbox_wider(asked, sandbox_name(default)):
            raise Failed(
                f"sandbox={asked} is refused: the {role} role runs {sandbox_name(default)}, and "
                "a conductor cannot give a session more than its role allows. Omit sandbox or "
                "ask for read-only."
            )
        return asked

    def _check_cwd(self, asked: Any) -> Path:
        home = Path(os.path.realpath(self.me.cwd))
        if asked is None:
            return home
        path = Path(str(asked))
        if not path.is_absolute():
            path = home / path
        real = Path(os.path.realpath(path))
        if real != home and not real.is_relative_to(home):
            raise Failed(
                f"cwd {asked} is outside your workspace {home}: a conductor starts sessions only "
                "in its own workspace or a directory inside it."
            )
        return real


class SendPrompt(_DrivesAgent):
    name: Final = "send_prompt"
    description: Final = """\
Send a prompt to one of your sessions. It is queued when the session is busy, and handled in \
order. Returns at once: use wait_sessions to block until the answer is ready, then read_out."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "session": _session_arg(_WHICH),
            "prompt": {"type": "string", "minLength": 1, "description": "The prompt text."},
        },
        required=("session", "prompt"),
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        session = await self.me.resolve(str(args["session"]))
        if isinstance(session, RemoteSession):
            await self.me.on_remote(session, f"{session.id}/in", str(args["prompt"]))
            return ToolOutput(
                f"Prompt accepted by {session.where}; call wait_sessions then read_out for "
                "the answer."
            )
        try:
            seq = session.submit(str(args["prompt"]))
        except SessionError as exc:
            raise Failed(f"Session {session.id} refused the prompt: {exc}") from exc
        return ToolOutput(
            f"Prompt #{seq} accepted by {session.id} ({session.alias}); "
            f"call wait_sessions then read_out for the answer."
        )


class WaitSessions(_Base):
    name: Final = "wait_sessions"
    description: Final = """\
Block until each of the given sessions has handled every prompt sent to it so far and is not \
running (fan-in: give all of them at once), or until `timeout_seconds` (default 900, at most \
3600). Returns each session's state: await (an answer is ready: read_out), idle, \
await_approval (its result, or a tool call, waits for approval: when the line says it waits \
for you, check the work and call answer_approval; otherwise a person answers), stopped, error \
or exited."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "sessions": {
                "type": "array",
                "items": _session_arg(_WHICH),
                "minItems": 1,
                "maxItems": 64,
            },
            "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT},
        },
        required=("sessions",),
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        found = [await self.me.resolve(str(key)) for key in args["sessions"]]
        sessions = [s for s in found if isinstance(s, Session)]
        remote = [s for s in found if isinstance(s, RemoteSession)]
        timeout = float(args.get("timeout_seconds", DEFAULT_WAIT))
        done: dict[str, str] = {}

        async def wait_one(session: Session, seq: int) -> None:
            state = await session.wait_handled(seq)
            done[session.id] = state.value

        async def wait_remote(ref: RemoteSession) -> None:
            # the remote's `wait` file: the prompts accepted before this open, then the state
            try:
                async with await self.me.remote_daemon(ref.host).connect() as conn:
                    state = await conn.read(f"{ref.id}/wait", blocking=True)
            except RemoteError as exc:
                state = f"not reachable ({exc})"
            done[ref.where] = state.strip()

        with trio.move_on_after(timeout):
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(wait_one, session, session.accepted_seq())
                for ref in remote:
                    nursery.start_soon(wait_remote, ref)
        lines = [
            f"{ref.where}: {done.get(ref.where, f'still working after {timeout:g} s')}"
            for ref in remote
        ]
        for session in sessions:
            state = done.get(session.id)
            if state is None:
                lines.append(
                    f"{session.id} ({session.alias}): still {session.status.value} after "
                    f"{timeout:g} s"
                )
            else:
                lines.append(f"{session.id} ({session.alias}): {state}{self._gate(session)}")
        return ToolOutput("\n".join(lines))

    def _gate(self, session: Session) -> str:
        """What its open result gate asks of the conductor, if anything."""
        gate = session.pending_result
        if gate is None:
            return ""
        who = "you (answer_approval)" if gate.approver == self.me.session_id else "a person"
        return f", its result ({gate.asked_by}) waits for approval by {who}"


class ReadOut(_Base):
    name: Final = "read_out"
    description: Final = """\
Read the last answer of one of your sessions (its `out`). Reading it marks it read (the \
session goes from await to idle). Wait for the session first (wait_sessions)."""
    input_schema: Final = _ONE_SESSION

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        session = await self.me.resolve(str(args["session"]))
        if isinstance(session, RemoteSession):
            out = await self.me.on_remote(session, f"{session.id}/out")  # marks it read there
            empty = f"{session.where} has no answer yet"
        else:
            out = session.out
            session.mark_out_read()
            empty = (
                f"{session.id} ({session.alias}) has no answer yet (state {session.status.value})"
            )
        if not out.strip():
            return ToolOutput(f"{empty}; wait_sessions first.")
        if len(out) > MAX_OUT_CHARS:
            out = out[:MAX_OUT_CHARS] + f"\n[... cut: {len(out) - MAX_OUT_CHARS} more chars]"
        return ToolOutput(out)


class KillSession(_DrivesAgent):
    name: Final = "kill_session"
    description: Final = """\
End one of your sessions (its running turn is cancelled; its records stay on disk). Do it when \
its work is done, so it stops counting against your session limit."""
    input_schema: Final = _ONE_SESSION

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        session = await self.me.resolve(str(args["session"]))
        if isinstance(session, RemoteSession):
            await self.me.on_remote(session, "ctl", f"kill {session.id}\n")
            self.me.remote.pop(session.alias, None)
            return ToolOutput(f"Killed {session.where}.")
        try:
            await self.me.manager.kill(session.id)
        except SessionError as exc:
            raise Failed(f"Session {session.id} was not killed: {exc}") from exc
        return ToolOutput(f"Killed {session.id} ({session.alias}).")


class MySessions(_Base):
    name: Final = "my_sessions"
    description: Final = """\
List the sessions you started and that still run: id, alias, role, state, model."""
    input_schema: Final[Mapping[str, Any]] = object_schema({})

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        lines = [self.me.describe(s) for s in self.me.children()]
        if self.me.factory.remotes:
            problems: list[str] = []
            self.me.remote.clear()
            for ref in await self.me.remote_listing(problems):
                lines.append(f"{ref.id}\talias={ref.alias}\trole={ref.role}\thost={ref.host}")
            lines += problems
        if not lines:
            return ToolOutput("You have no sessions; start_session starts one.")
        return ToolOutput("\n".join(lines))


# -- beads and convoys -------------------------------------------------------------------------


def _bead_text(bead: Bead) -> str:
    lines = [
        f"{bead.id}\tstatus={bead.status.value}\trole={bead.role}\t"
        f"assigned_to={bead.assigned_to or '-'}\tconvoy={bead.convoy or '-'}",
        f"  title: {bead.title}",
    ]
    if bead.depends_on:
        lines.append(f"  depends_on: {' '.join(bead.depends_on)}")
    if bead.reason:
        lines.append(f"  reason: {bead.reason}")
    if bead.result:
        lines.append("  result:")
        lines += [f"    {line}" for line in bead.result[:MAX_OUT_CHARS].splitlines()]
    return "\n".join(lines)


class _BeadTool(_Base):
    def __init__(self, me: _Conductor, store: BeadStore) -> None:
        super().__init__(me)
        self.store = store

    @property
    def by(self) -> str:
        return f"session {self.me.session_id}"

    def mine(self, bead_id: str) -> Bead:
        """A bead assigned to one of my sessions (or to me)."""
        bead = self._bead(bead_id)
        holder = bead.assigned_to
        if holder != self.me.session_id:
            found = self.me.manager.peek(holder) if holder else None  # building none
            if found is None or not self.me.owns(_Seen.of(found).alias):
                raise Failed(
                    f"Bead {bead.id} is assigned to {holder or 'nobody'}, not to one of your "
                    "sessions: assign_bead it first, or leave it to its holder."
                )
        return bead

    def _bead(self, bead_id: str) -> Bead:
        try:
            return self.store.bead(bead_id)
        except BeadError as exc:
            raise Failed(str(exc)) from exc

    async def _change(self, change: Awaitable[T], refused: str) -> T:
        """The store's change; a refusal is what the model is told, `refused: why`."""
        try:
            return await change
        except BeadError as exc:
            raise Failed(f"{refused}: {exc}") from exc


class CreateConvoy(_BeadTool):
    name: Final = "create_convoy"
    description: Final = """\
Create a convoy: a group of beads toward one goal, coordinated by you. `context` is shared text \
added to the system prompt of every session working on one of its beads (constraints, the \
target, conventions). It completes by itself when its last bead completes. Returns its id."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "goal": {"type": "string", "description": "What success looks like."},
            "context": {"type": "string", "description": "Shared context for its workers."},
        },
        required=("title",),
    )
    cancellation: Cancellation = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        spec = NewConvoy(
            title=str(args["title"]),
            goal=str(args.get("goal", "")),
            coordinator=self.me.session_id,
            context=str(args.get("context", "")),
        )
        convoy = await self._change(
            self.store.create_convoy(spec, by=self.by), "The convoy was not created"
        )
        return ToolOutput(f"Created convoy {convoy.id} ({convoy.title}).")


class CreateBead(_BeadTool):
    name: Final = "create_bead"
    description: Final = """\
Create a bead: one durable unit of work for a role (developer, reviewer, planner, tester), with \
a description of exactly what to do and how it will be checked. `depends_on` lists bead ids \
that must complete first (a cycle is refused); `convoy` adds it to a convoy; \
`requires_approval` makes its completion wait for approval: by a person, or with `approver` \
"me" by you (answer_approval on the session that completed it). Returns its id."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "role": {"type": "string", "minLength": 1},
            "description": {"type": "string"},
            "depends_on": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "convoy": {"type": "string", "minLength": 1},
            "requires_approval": {"type": "boolean"},
            "approver": _APPROVER_ARG,
        },
        required=("title", "role"),
    )
    cancellation: Cancellation = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        spec = NewBead(
            title=str(args["title"]),
            role=str(args["role"]),
            description=str(args.get("description", "")),
            depends_on=tuple(str(d) for d in args.get("depends_on", ())),
            requires_approval=bool(args.get("requires_approval", False)),
            convoy=None if args.get("convoy") is None else str(args["convoy"]),
            approver=_approver(args, self.me.session_id),
        )
        bead = await self._change(self.store.create(spec, by=self.by), "The bead was not created")
        return ToolOutput(f"Created bead {bead.id} ({bead.title}), status {bead.status.value}.")


class AssignBead(_BeadTool):
    name: Final = "assign_bead"
    description: Final = """\
Claim a pending bead for one of your sessions (or for yourself, with session "me"). Refused \
while its dependencies are open or when someone already holds it. Then send the session its \
prompt; complete_bead records the result when it is done."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "bead": {"type": "string", "minLength": 1},
            "session": _session_arg(_WHICH + ' Or "me".'),
        },
        required=("bead", "session"),
    )
    cancellation: Cancellation = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        key = str(args["session"])
        session_id = self.me.session_id if key == "me" else self.me.find(key)
        claim = self.store.claim(str(args["bead"]), session_id, by=self.by)
        bead = await self._change(claim, "The bead was not assigned")
        return ToolOutput(f"Bead {bead.id} is in progress, assigned to {session_id}.")


class CompleteBead(_BeadTool):
    name: Final = "complete_bead"
    description: Final = """\
Record the end of a bead assigned to one of your sessions (or to you): `result` is its outcome \
(paste the relevant answer or a summary). With `failed` set to a reason, the bead fails instead \
(it can be released and tried again)."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "bead": {"type": "string", "minLength": 1},
            "result": {"type": "string"},
            "failed": {"type": "string", "minLength": 1, "description": "The failure reason."},
        },
        required=("bead",),
    )
    cancellation: Cancellation = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        bead = self.mine(str(args["bead"]))
        if args.get("failed") is not None:
            change = self.store.fail(bead.id, str(args["failed"]), by=self.by)
        else:
            result = None if args.get("result") is None else str(args["result"])
            change = self.store.complete(bead.id, result, by=self.by)
        done = await self._change(change, f"Bead {bead.id} did not change")
        return ToolOutput(f"Bead {done.id} is {done.status.value}.")


class ReadBeads(_BeadTool):
    name: Final = "read_beads"
    description: Final = """\
Read beads: the given `beads` (ids), or every bead of a `convoy`, or, with neither, the ready \
ones (pending, dependencies completed). Each: id, status, role, assignee, convoy, title, \
dependencies, the last failure reason and the result."""
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "beads": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "convoy": {"type": "string", "minLength": 1},
        }
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        try:
            if args.get("beads"):
                beads = [self.store.bead(str(b)) for b in args["beads"]]
            elif args.get("convoy") is not None:
                members = self.store.convoy(str(args["convoy"])).beads
                beads = [self.store.bead(b) for b in members]
            else:
                beads = list(self.store.ready())
        except BeadError as exc:
            raise Failed(str(exc)) from exc
        if not beads:
            return ToolOutput("No beads.")
        return ToolOutput("\n".join(_bead_text(b) for b in beads))
