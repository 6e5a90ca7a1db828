"""The permission gate: the agent loop's per-call `decide` hook (`Agent(decide=gate)`).

Per call, before anything runs: validate as dispatch will (invalid -> deny with the message);
classify (`Tool.effects`, `permission_subject`) and resolve resources in a worker thread;
`Policy.decide` (Allow and Deny are final); Ask goes to the `Approver`: once -> allow, always ->
allow and remember in `gate.policy` (and `on_remember`, so it survives restarts), reject -> deny
with the feedback, unavailable -> deny with its reason; a cancelled wait raises.
An allowed call reaching granted outside paths runs with `FileAccess.granting` those paths, so
the boundary and the policy agree. A denied call never runs: the model gets `Permission denied
for TOOL: REASON`. A mode switch replaces `gate.policy` (`attrs.evolve`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from anvild.agent.loop import Allow as LoopAllow
from anvild.agent.loop import Deny as LoopDeny
from anvild.agent.permissions.approval import (
    ApprovalRequest,
    ApproveAlways,
    ApproveOnce,
    Approver,
    Reject,
    Unavailable,
)
from anvild.agent.permissions.policy import (
    Allow,
    Ask,
    Decision,
    Deny,
    PermissionRequest,
    Policy,
    Remember,
    resolve_request,
)
from anvild.agent.tools.base import ArgsValidator, Effects, InvalidArgs, Tool, ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.types import ToolCall


@attrs.define(eq=False)
class PermissionGate:
    """Decides each call of one session; see the module docstring."""

    policy: Policy
    approver: Approver
    tools: ToolRegistry
    context: ToolContext
    _on_decision: Callable[[ToolCall, Decision], None] | None = attrs.field(
        default=None, kw_only=True
    )
    _on_remember: Callable[[Remember], None] | None = attrs.field(default=None, kw_only=True)
    _validators: dict[str, ArgsValidator] = attrs.field(factory=dict, init=False)

    async def __call__(self, call: ToolCall) -> LoopAllow | LoopDeny:
        request = await self.request_for(call)
        decision = self.policy.decide(request)
        if self._on_decision is not None:
            self._on_decision(call, decision)
        match decision:
            case Allow():
                return self._allow(request)
            case Deny(reason=reason):
                return LoopDeny(reason)
            case Ask():
                answer = await self._ask(call, decision)
                return self._allow(request) if isinstance(answer, LoopAllow) else answer

    def _allow(self, request: PermissionRequest) -> LoopAllow:
        """An allowed call; one that reaches paths outside the workspace (granted: the policy
        asked, or a grant covered them) runs with a file boundary that admits exactly those
        paths. Commands are left to their sandbox."""
        if request.shell is not None:
            return LoopAllow()
        workspace = self.policy.workspace
        reads = [Path(p) for p in request.reads if not p.is_relative_to(workspace)]
        writes = [Path(p) for p in request.writes if not p.is_relative_to(workspace)]
        if not reads and not writes:
            return LoopAllow()
        files = self.context.files.granting(reads=reads, writes=writes)
        return LoopAllow(attrs.evolve(self.context, files=files))

    async def request_for(self, call: ToolCall) -> PermissionRequest:
        """The call validated, classified and resolved (a `problem` when it is invalid)."""
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(self.tools.names()) or "(none)"
            return _invalid(call, f"Unknown tool {call.name!r}. Available tools: {known}.")
        args = call.arguments
        if not isinstance(args, dict):
            return _invalid(call, f"The arguments of {call.name} must be a JSON object.")
        try:
            self._validator(tool).validate(args)
        except InvalidArgs as exc:
            return _invalid(call, exc.message)
        try:
            effects = tool.effects(args)
        except Exception:
            effects = Effects.unknown_effects()
        text = _subject_text(tool, args)
        cwd = Path(self.context.cwd)
        policy = self.policy
        return await trio.to_thread.run_sync(
            lambda: resolve_request(
                call.name,
                args,
                effects,
                cwd=cwd,
                home=policy.home,
                text=text,
                shell_tools=policy.shell_tools,
            )
        )

    def _validator(self, tool: Tool) -> ArgsValidator:
        validator = self._validators.get(tool.name)
        if validator is None:
            validator = self._validators[tool.name] = ArgsValidator(tool.input_schema)
        return validator

    async def _ask(self, call: ToolCall, ask: Ask) -> LoopAllow | LoopDeny:
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        request = ApprovalRequest(
            call.id, call.name, arguments, ask.reason, ask.remember.describe()
        )
        answer = await self.approver.request_approval(request)
        match answer:
            case ApproveOnce():
                return LoopAllow()
            case ApproveAlways():
                if ask.remember:
                    self.policy = self.policy.remember(ask.remember)
                    if self._on_remember is not None:
                        self._on_remember(ask.remember)
                return LoopAllow()
            case Reject(feedback=feedback) if feedback.strip():
                return LoopDeny(f"the user rejected this call and said: {feedback.strip()}")
            case Reject():
                return LoopDeny(
                    "the user rejected this call. Do not retry it as it is; ask the user how to "
                    "proceed if the next step is unclear."
                )
            case Unavailable(reason=reason):
                return LoopDeny(reason)


def _invalid(call: ToolCall, problem: str) -> PermissionRequest:
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    return PermissionRequest(call.name, arguments, Effects.none(), problem=problem)


def _subject_text(tool: Tool, args: dict[str, Any]) -> str | None:
    subject = getattr(tool, "permission_subject", None)
    if not callable(subject):
        return None
    try:
        value = subject(args)
    except Exception:
        return None
    return value if isinstance(value, str) else None


__all__ = ["PermissionGate"]
