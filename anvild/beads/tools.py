"""The bead tools a model uses, bound to its own session: list_ready, claim, complete, fail.

`bead_tools(store)` is a tools factory: each session gets its own instances, bound to its
`ToolSetup.session_id` and role. A model can claim only for itself and complete or fail only
beads it holds (`only_session`); there is no tool to approve, reject, release or create, so an
agent cannot pass its own gate or take another session's work. Each change is one commit
`... (by session <id>)`; no tool has file or process effects (`Effects.none()`).
`claim` answers with the worker's brief: the description, the results of its dependencies, and
its convoy's goal and context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Final

from anvild.agent.tools import Cancellation, Failed, Tool, ToolContext, ToolOutput
from anvild.agent.tools.base import Args, ServiceTool, object_schema
from anvild.beads.errors import BeadError, BeadNotFound, BeadStoreError
from anvild.beads.model import Bead, BeadStatus
from anvild.beads.store import BeadStore
from anvild.session.session import ToolSetup, ToolsFactory

__all__ = ["Claim", "Complete", "Fail", "ListReady", "bead_tools"]

MAX_RESULT_CHARS: Final = 64 * 1024
MAX_SHOWN_CHARS: Final = 2000

LIST_DESCRIPTION: Final = """\
List the beads (durable work items shared by all agent sessions) you can claim now: pending \
beads whose dependencies are all completed. Each line: id, role, title, then the description. \
scope "my_role" (the usual choice) shows the beads meant for your role; "all" shows every \
role's. The answer also lists the beads you already hold. To work on one, call claim with its \
id; do not start work on a bead you have not claimed.
"""

CLAIM_DESCRIPTION: Final = """\
Claim one bead for yourself, so no other session works on it. Only a ready bead (see \
list_ready) can be claimed; if another session was faster you are told who holds it: pick \
another one. The answer is your brief: the bead's description, the results of the beads it \
depends on, and the goal and shared context of its convoy, if any. When the work is done call \
complete with the result; if you cannot do it, call fail with the reason.
"""

COMPLETE_DESCRIPTION: Final = """\
Mark a bead you claimed as done, with its result: what you produced and where (a summary, file \
paths, a commit id), written for the person or session that uses it next. Only call it when \
the work is really finished and checked. Some beads need a person's approval: they then wait \
in pending_approval, and you are told so.
"""

FAIL_DESCRIPTION: Final = """\
Give up a bead you claimed because it cannot be done as asked, with the reason: what you tried, \
what blocked you, what would unblock it. The bead becomes failed; a person or the coordinator \
decides what happens next. Do not use it for a bead you merely have not finished.
"""

_ID: Final[Mapping[str, Any]] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "description": "The bead id, e.g. research-auth-001 (from list_ready).",
}


def _text(description: str) -> dict[str, Any]:
    """A required free-text argument of up to `MAX_RESULT_CHARS` (a result, a reason)."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_RESULT_CHARS,
        "description": description,
    }


LIST_SCHEMA: Final = object_schema(
    {
        "scope": {
            "type": "string",
            "enum": ["my_role", "all"],
            "description": 'Beads for your role ("my_role") or for every role ("all").',
        }
    },
    required=("scope",),
)
CLAIM_SCHEMA: Final = object_schema({"bead_id": _ID}, required=("bead_id",))
COMPLETE_SCHEMA: Final = object_schema(
    {
        "bead_id": _ID,
        "result": _text("What you produced and where, for whoever uses it next."),
    },
    required=("bead_id", "result"),
)
FAIL_SCHEMA: Final = object_schema(
    {"bead_id": _ID, "reason": _text("Why it cannot be done, and what would unblock it.")},
    required=("bead_id", "reason"),
)


def _clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more]"


def _failed(exc: BeadError) -> Failed:
    if isinstance(exc, BeadNotFound):
        return Failed(f"{exc}. Call list_ready for the beads you can claim.")
    if isinstance(exc, BeadStoreError):
        return Failed(f"The bead store could not record it: {exc}. Nothing changed.")
    return Failed(f"{exc}.")


class _BeadTool(ServiceTool[BeadStore]):
    def __init__(self, store: BeadStore, session_id: str, role: str) -> None:
        super().__init__(store, session_id)
        self._role = role

    @property
    def _by(self) -> str:
        return f"session {self._me}"

    async def _apply(self, change: Awaitable[Bead]) -> Bead:
        """The store's change; a refusal is what the model is told (`_failed`)."""
        try:
            return await change
        except BeadError as exc:
            raise _failed(exc) from exc


class ListReady(_BeadTool):
    name: Final = "list_ready"
    description: Final = LIST_DESCRIPTION
    summary: Final = (
        'List the beads (shared work items) you can claim now; scope "my_role" or "all".'
    )
    input_schema: Final = LIST_SCHEMA
    cancellation: Final = Cancellation.SAFE_TO_ABANDON

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        role = None if args["scope"] == "all" else self._role
        ready = self._service.ready(role)
        lines: list[str] = []
        if ready:
            for bead in ready:
                lines.append(f"{bead.id}\t{bead.role}\t{bead.title}")
                if bead.description.strip():
                    lines.append(f"  {_clip(bead.description, 500)}")
        else:
            whose = "for any role" if role is None else f"for role {role}"
            lines.append(f"No bead is ready {whose}.")
            if role is not None:
                lines.append('(Call list_ready with scope "all" to see the other roles\' beads.)')
        held = self._service.assigned(self._me)
        if held:
            lines.append("You hold: " + ", ".join(f"{b.id} ({b.status.value})" for b in held))
        return ToolOutput("\n".join(lines))


class Claim(_BeadTool):
    name: Final = "claim"
    description: Final = CLAIM_DESCRIPTION
    summary: Final = (
        "Claim a ready bead before working on it; the answer is its brief. End with complete "
        "or fail."
    )
    input_schema: Final = CLAIM_SCHEMA
    cancellation: Final = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        bead = await self._apply(self._service.claim(args["bead_id"], self._me, by=self._by))
        return ToolOutput(self._brief(bead))

    def _brief(self, bead: Bead) -> str:
        parts = [f"You hold bead {bead.id}: {bead.title} (role {bead.role})."]
        if bead.description.strip():
            parts.append(f"Description:\n{_clip(bead.description, 8000)}")
        board = self._service.board
        for dep in bead.depends_on:
            done = board.beads.get(dep)
            if done is not None:
                parts.append(f"Result of {dep} ({done.title}):\n{_clip(done.result) or '(none)'}")
        if bead.reason.strip():
            parts.append(f"An earlier attempt failed or was rejected: {_clip(bead.reason)}")
        if bead.convoy is not None and bead.convoy in board.convoys:
            convoy = board.convoys[bead.convoy]
            parts.append(f"It is part of convoy {convoy.id}: {convoy.title}.")
            if convoy.goal.strip():
                parts.append(f"Convoy goal: {convoy.goal.strip()}")
            if convoy.context.strip():
                parts.append(f"Convoy context:\n{_clip(convoy.context, 8000)}")
        if bead.requires_approval:
            parts.append("Its completion needs a person's approval.")
        parts.append("Call complete with the result when done, or fail with the reason.")
        return "\n\n".join(parts)


class Complete(_BeadTool):
    name: Final = "complete"
    description: Final = COMPLETE_DESCRIPTION
    summary: Final = "Mark a bead you claimed as done, with its result."
    input_schema: Final = COMPLETE_SCHEMA
    cancellation: Final = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        change = self._service.complete(
            args["bead_id"], args["result"], by=self._by, only_session=self._me
        )
        bead = await self._apply(change)
        if bead.status is BeadStatus.PENDING_APPROVAL:
            return ToolOutput(
                f"Bead {bead.id} is done and waits for approval (pending_approval); a person "
                "approves or rejects it. When this turn ends your session (unless ephemeral) waits "
                "for that decision: end your turn now with a short summary."
            )
        text = f"Bead {bead.id} is completed."
        if bead.convoy is not None:
            progress = self._service.progress(bead.convoy)
            text += f" Convoy {bead.convoy}: {progress.done}/{progress.total} beads completed."
        return ToolOutput(text)


class Fail(_BeadTool):
    name: Final = "fail"
    description: Final = FAIL_DESCRIPTION
    summary: Final = "Give up a bead you claimed that cannot be done, with the reason."
    input_schema: Final = FAIL_SCHEMA
    cancellation: Final = Cancellation.ATOMIC

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        change = self._service.fail(
            args["bead_id"], args["reason"], by=self._by, only_session=self._me
        )
        bead = await self._apply(change)
        return ToolOutput(f"Bead {bead.id} is failed; the reason is recorded.")


def bead_tools(store: BeadStore) -> ToolsFactory:
    """A tools factory: the four bead tools, bound to each session's id and role."""

    def build(setup: ToolSetup) -> list[Tool]:
        me, role = setup.session_id, setup.role
        return [
            ListReady(store, me, role),
            Claim(store, me, role),
            Complete(store, me, role),
            Fail(store, me, role),
        ]

    return build
