"""The `task` tool: a session delegates work to a child session and gets its answer back.

    subagents = SubagentTools(max_depth=2, max_per_turn=8, roles=("developer", ...))
    manager = SessionManager(..., tools=chain_tools(default_tools, ..., subagents.tools))
    subagents.bind(manager)

A child is a real session (`agent/<child>/`, `parent` names its parent, recorded in its
`SessionStarted` so it survives a restart), ephemeral (reaped like any ephemeral session; one
still live at a restart is ended by the manager's restore, as nobody waits for it), in the
parent's cwd. It never has more authority than its parent: a role whose ceiling is within
the parent's (never conductor), at most the parent's sandbox and permission mode, headless when
the parent is; an agent definition (`anvild.coord.agents`) only adds instructions and narrows
the tools. Limits: `max_depth` (a top-level session is depth 0) and `max_per_turn` children per
parent turn. The call waits for the child's turn to end and returns its answer, cut to
`MAX_ANSWER_CHARS`; cancelling it (the parent's turn cancelled) cancels the child's turn. The
tool is `parallel_safe`: several `task` calls of one step run at the same time.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from anvild.agent.loop import Decision, Deny
from anvild.agent.permissions.policy import RoleCeiling
from anvild.agent.tools.base import (
    Args,
    Cancellation,
    Effects,
    Failed,
    InvalidArgs,
    Tool,
    ToolContext,
    ToolOutput,
    object_schema,
)
from anvild.coord.agents import AgentDefinition, discover
from anvild.coord.bound import ManagerBound
from anvild.llm.types import ToolCall
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
from anvild.session.settings import sandbox_wider, wider

__all__ = ["DEFAULT_ROLES", "MAX_ANSWER_CHARS", "TASK", "SubagentTools"]

TASK: Final = "task"
DEFAULT_ROLES: Final = ("developer", "planner", "tester", "conductor")
"""The roles whose sessions get `task` unless `[subagents] roles` says otherwise: not reviewer."""
MAX_ANSWER_CHARS: Final = 20_000
MAX_LISTED_AGENTS: Final = 20
MAX_AGENT_DESCRIPTION: Final = 200
CANCEL_GRACE: Final = 10.0
"""Seconds a cancelled call waits for its child's turn to end."""


def within(child: RoleCeiling, parent: RoleCeiling) -> bool:
    """Whether a role with ceiling `child` can do nothing a `parent` role cannot."""
    if child.file_writes and not parent.file_writes:
        return False
    if child.mutating_git and not parent.mutating_git:
        return False
    if parent.write_patterns and child.file_writes:
        return bool(child.write_patterns) and set(child.write_patterns) <= set(
            parent.write_patterns
        )
    return True


class SubagentTools(ManagerBound):
    """The tools factory that gives `task` to sessions of the allowed roles."""

    label = "the task tool"

    def __init__(
        self,
        *,
        max_depth: int = 2,
        max_per_turn: int = 8,
        roles: Sequence[str] = DEFAULT_ROLES,
        user_config_dir: Path | None = None,
    ) -> None:
        self.max_depth = max_depth
        self.max_per_turn = max_per_turn
        self.roles = tuple(roles)
        self.user_config_dir = user_config_dir
        self._started: dict[str, tuple[int, int]] = {}  # parent -> (its turn number, children)

    def tools(self, setup: ToolSetup) -> list[Tool]:
        if setup.role not in self.roles:
            return []
        return [TaskTool(self, setup.session_id, setup.cwd)]

    def count(self, parent: Session) -> None:
        """Count one more child in the parent's running turn; `Failed` past the limit."""
        turn = parent.record.turn_count
        seen, started = self._started.get(parent.id, (turn, 0))
        started = started if seen == turn else 0
        if started >= self.max_per_turn:
            raise Failed(
                f"task refused: this turn already started {started} child sessions, the most "
                f"one turn may ([subagents] max_per_turn = {self.max_per_turn}). Use the "
                "answers you have, or do the rest yourself."
            )
        self._started[parent.id] = (turn, started + 1)


def _agents_text(cwd: Path, user_config_dir: Path | None) -> str:
    found = sorted(discover(cwd, user_config_dir).by_name.values(), key=lambda d: d.name)
    if not found:
        return ""
    lines = []
    for definition in found[:MAX_LISTED_AGENTS]:
        text = definition.description or "(no description)"
        if len(text) > MAX_AGENT_DESCRIPTION:
            text = text[: MAX_AGENT_DESCRIPTION - 3] + "..."
        role = f" [{definition.role}]" if definition.role else ""
        lines.append(f"- {definition.name}{role}: {text}")
    if len(found) > MAX_LISTED_AGENTS:
        lines.append(f"- ... and {len(found) - MAX_LISTED_AGENTS} more (name them with agent=)")
    return "\n\nAgents you may name with `agent`:\n" + "\n".join(lines)


class TaskTool:
    """`task(prompt, role?, model?, agent?)` for one session; see the module docstring."""

    name: Final = TASK
    cancellation: Final = Cancellation.UNKNOWN
    parallel_safe: Final = True
    input_schema: Final[Mapping[str, Any]] = object_schema(
        {
            "prompt": {
                "type": "string",
                "minLength": 1,
                "description": "Everything the child needs: it does not see your conversation.",
            },
            "role": {
                "type": "string",
                "enum": ["developer", "reviewer", "planner", "tester"],
                "description": "The child's role (default: the agent's, else yours).",
            },
            "model": {"type": "string", "description": "A model alias (default: yours)."},
            "agent": {"type": "string", "description": "An agent definition's name."},
        },
        required=("prompt",),
    )
    summary: Final = (
        "Delegate a self-contained piece of work to a child session and get its final answer."
    )

    def __init__(self, factory: SubagentTools, session_id: str, cwd: Path) -> None:
        self.factory = factory
        self.session_id = session_id
        self.cwd = cwd

    @functools.cached_property
    def description(self) -> str:
        """Made when the first request lists the tools, not at `new`: it reads the agent
        definitions (a scan of directories, a quarter of `new`'s time)."""
        factory = self.factory
        return (
            "Delegate a self-contained piece of work (research, a review, a focused change) to "
            "a child session, which runs it to the end of its turn; returns the child's final "
            "answer. The child starts with an empty conversation: put everything it needs in "
            "`prompt`. It works in your workspace with at most your authority: `role` may be "
            "yours or a narrower one (a reviewer or planner writes no files), never a wider "
            "one. Several task calls in one step run at the same time. "
            f"At most {factory.max_per_turn} children per turn, nested at most "
            f"{factory.max_depth} deep." + _agents_text(self.cwd, factory.user_config_dir)
        )

    def effects(self, args: Args) -> Effects:
        return Effects(subprocess=True)  # another agent runs, under its own checks

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        factory = self.factory
        manager = factory.manager
        try:
            parent = manager.get(self.session_id)
        except SessionNotFound as exc:
            raise Failed(f"task: your session is not live: {exc}") from exc
        depth = manager.depth(parent.id) + 1
        if depth > factory.max_depth:
            raise Failed(
                f"task refused: a child of this session would be {depth} deep, deeper than "
                f"[subagents] max_depth = {factory.max_depth} allows (a session started by the "
                "user is depth 0). Do this work yourself."
            )
        definition = self._definition(args.get("agent"))
        role = self._role(args.get("role"), definition, parent)
        factory.count(parent)
        request = NewSession(
            model=self._model(args.get("model"), definition, parent),
            cwd=parent.cwd,
            role=role,
            sandbox=self._sandbox(role, parent),
            ephemeral=True,
            permission=self._mode(parent),
            headless=parent.headless,
            max_steps=parent.record.max_steps,
            budget=parent.record.token_budget,
            parent=parent.id,
        )
        try:
            child = await manager.create(request)
        except SessionError as exc:
            raise Failed(f"task: the child session was not started: {exc}") from exc
        if definition is not None and definition.tools is not None:
            _narrow(child, definition)
        prompt = str(args["prompt"])
        if definition is not None and definition.instructions:
            prompt = f"{definition.instructions}\n\n{prompt}"
        return await self._run(manager, child, prompt)

    async def _run(self, manager: SessionManager, child: Session, prompt: str) -> ToolOutput:
        finished = False
        try:
            seq = child.submit(prompt)
            await child.wait_handled(seq)
            finished = True
        except SessionError as exc:
            raise Failed(f"task: child session {child.id} refused the prompt: {exc}") from exc
        finally:
            if not finished:
                with trio.CancelScope(shield=True):
                    await _stop(manager, child)
        turn = child.record.last_turn
        outcome = turn.outcome if turn is not None else "error"
        out = child.out.strip()
        if child.status is SessionStatus.ERROR:  # an ephemeral session in error is not reaped
            detail = child.status_detail
            with trio.CancelScope(shield=True):
                await _stop(manager, child)
            out = f"{out}\n[the child failed: {detail}]".strip()
        if len(out) > MAX_ANSWER_CHARS:
            out = (
                out[:MAX_ANSWER_CHARS]
                + f"\n[... {len(out) - MAX_ANSWER_CHARS} more characters: read the full answer "
                f"in agent/{child.id}/out]"
            )
        head = f"[child session {child.id} ({child.role}) ended: {outcome}]"
        tail = f"[the full answer is in agent/{child.id}/out until the child is reaped]"
        return ToolOutput(f"{head}\n{out or '(no answer)'}\n{tail}", is_error=outcome != "done")

    def _definition(self, name: Any) -> AgentDefinition | None:
        if name is None:
            return None
        found = discover(self.cwd, self.factory.user_config_dir)
        definition = found.by_name.get(str(name))
        if definition is None:
            known = ", ".join(sorted(found.by_name)) or "none"
            skipped = "".join(f"\nskipped: {problem}" for problem in found.problems[:5])
            raise InvalidArgs(
                f"agent {name!r} is not defined (.anvil/agents/NAME.md, .claude/agents/NAME.md "
                f"or the user's agents/NAME.md); the defined ones: {known}{skipped}"
            )
        return definition

    def _role(self, asked: Any, definition: AgentDefinition | None, parent: Session) -> str:
        if asked is not None:
            role = str(asked)
        elif definition is not None and definition.role is not None:
            role = definition.role
        elif parent.role == "conductor":
            role = "planner"
        else:
            role = parent.role
        if role == "conductor":
            raise InvalidArgs(
                "task cannot start a conductor: name developer, reviewer, planner or tester"
            )
        try:
            mine, theirs = session_roles.ceiling(parent.role), session_roles.ceiling(role)
        except SessionError as exc:
            raise InvalidArgs(f"task: {exc}") from exc
        if not within(theirs, mine):
            raise Failed(
                f"task refused: role {role} may do more than your role {parent.role} (a child "
                f"never has more authority than its parent); choose {parent.role} or a "
                "narrower role (reviewer and planner write no files)"
            )
        return role

    def _sandbox(self, role: str, parent: Session) -> str | None:
        """The child's sandbox: its role's default unless that is wider than the parent's."""
        user_dir = self.factory.manager.settings.sandbox_role_dir
        try:
            theirs = session_roles.sandbox_role(role, user_dir=user_dir)
            mine = session_roles.sandbox_role(parent.role, user_dir=user_dir)
        except SessionError as exc:
            raise Failed(f"task: {exc}") from exc
        if theirs.network and not mine.network:
            raise Failed(f"task refused: role {role} has network access and {parent.role} not")
        default = "workspace-write" if theirs.read_write else "read-only"
        if sandbox_wider(default, parent.sandbox):
            return "read-only"
        return None

    def _mode(self, parent: Session) -> str:
        """The parent's permission mode, within the daemon's ceiling (a child asks for it)."""
        ceiling = self.factory.manager.settings.max_mode
        return (ceiling if wider(parent.mode, ceiling) else parent.mode).value

    @staticmethod
    def _model(asked: Any, definition: AgentDefinition | None, parent: Session) -> str:
        if asked is not None:
            return str(asked)
        if definition is not None and definition.model is not None:
            return definition.model
        return parent.model


def _narrow(child: Session, definition: AgentDefinition) -> None:
    """The child may call only the definition's tools (its own checks still apply)."""
    allowed = frozenset(definition.tools or ())
    inner = child.agent.decide
    listed = ", ".join(sorted(allowed)) or "none"

    async def decide(call: ToolCall) -> Decision:
        if call.name not in allowed:
            return Deny(f"agent {definition.name} may use only these tools: {listed}")
        return await inner(call)

    child.agent.decide = decide


async def _stop(manager: SessionManager, child: Session) -> None:
    """End a child whose parent no longer waits: drop its prompt if not taken, cancel its turn
    (it then exits, ephemeral, and is reaped), or kill it when no turn runs."""
    with trio.move_on_after(CANCEL_GRACE):
        if child.status is SessionStatus.EXITED:
            return
        with contextlib.suppress(SessionError):
            child.drop_queue()
        try:
            await child.cancel()
            return
        except SessionError:
            pass  # no turn runs: it never took its prompt
        with contextlib.suppress(SessionError):
            await manager.kill(child.id)
