"""The board's beads and convoys: a read of the bead store, and the person's bead verbs.

    GET  /api/beads              every bead, every convoy with its progress, and the feed's seq
    POST /api/beads/ID/ctl       {"command"}: claim SESSION|user, release, approve, reject REASON

Each verb calls what a write of the same line to `agent/beads/ID/ctl` calls (`by` the user;
`approve`/`reject` through `answer`, which the daemon makes `BeadGates.answer`), and a refusal
comes back verbatim as `{"error": MESSAGE}` (409).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from anvild.beads import BeadError, BeadStore
from anvild.beads.model import USER, Bead, Convoy
from anvild.web.body import perform
from anvild.web.hub import EventHub

__all__ = ["BeadActions", "bead_routes"]

Answer = Callable[[str, str, str], Awaitable[object]]
"""`answer(bead_id, "approve" | "reject", reason)`: the tree's `BeadsTree.answer`."""


@attrs.frozen
class BeadActions:
    """What the bead routes need: the store, how a person answers a bead's approval, and how
    a session name (id or alias) resolves to a live session's id."""

    store: BeadStore
    answer: Answer
    resolve_session: Callable[[str], str | None]


def _bead(bead: Bead) -> dict[str, Any]:
    return {
        "id": bead.id,
        "title": bead.title,
        "role": bead.role,
        "status": bead.status.value,
        "assigned_to": bead.assigned_to,
        "depends_on": list(bead.depends_on),
        "convoy": bead.convoy,
        "requires_approval": bead.requires_approval,
        "approver": bead.approver,
        "reason": bead.reason,
        "result": bead.result,
    }


def _convoy(store: BeadStore, convoy: Convoy) -> dict[str, Any]:
    progress = store.progress(convoy.id)
    return {
        "id": convoy.id,
        "title": convoy.title,
        "goal": convoy.goal,
        "status": convoy.status.value,
        "coordinator": convoy.coordinator,
        "beads": list(convoy.beads),
        "done": progress.done,
        "total": progress.total,
        "percent": progress.percent,
    }


class _Refused(Exception):
    pass


def bead_routes(actions: BeadActions, hub: EventHub) -> list[Route]:
    """The routes of the module docstring."""
    store = actions.store

    async def listing(request: Request) -> Response:
        seq = hub.position()
        return JSONResponse(
            {
                "seq": seq,
                "beads": [_bead(b) for b in store.beads()],
                "convoys": [_convoy(store, c) for c in store.convoys()],
                "unavailable": store.unavailable,
            }
        )

    async def run(bead_id: str, command: str) -> None:
        verb, _, rest = command.strip().partition(" ")
        rest = rest.strip()
        if verb == "claim":
            session = USER if rest == USER else actions.resolve_session(rest)
            if session is None:
                raise _Refused(
                    f"no live session {rest!r}: claim names the session that will work on the "
                    f"bead (read agent/list), or {USER} for work you take yourself"
                )
            await store.claim(bead_id, session, by=USER)
        elif verb == "release" and not rest:
            await store.release(bead_id, by=USER)
        elif verb == "approve" and not rest:
            await actions.answer(bead_id, "approve", "")
        elif verb == "reject" and rest:
            await actions.answer(bead_id, "reject", rest)
        else:
            raise _Refused(
                f"unknown bead command {command.strip()!r}: write claim SESSION|user, release, "
                "approve or reject REASON"
            )

    async def ctl(request: Request) -> Response:
        bead_id = request.path_params["id"]
        return await perform(request, "command", lambda c: run(bead_id, c), (BeadError, _Refused))

    return [
        Route("/api/beads", listing),
        Route("/api/beads/{id}/ctl", ctl, methods=["POST"]),
    ]
