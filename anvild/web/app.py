"""The board's HTTP side: pages, a JSON API over the session APIs, and one SSE event stream.

    GET  /  /session/ID  /beads  /spend  /mail      the pages; GET /static/NAME their assets
    GET  /api/sessions          every session, those needing a person first, and the position
    GET  /api/sessions/ID       one session: its files' values and its recent events
    GET  /api/sessions/ID/turns[/N/diff]          `turns/`: each turn's changes; one's diff
    GET  /events?after=POS[&session=ID]  SSE after POS (`EPOCH-N`; `Last-Event-ID` wins)
    POST /api/new                   {"args"}      `new ARGS` on agent/ctl: the new session's id
    POST /api/sessions/ID/prompt    {"text"}      what a write of `in` does
    POST /api/sessions/ID/approval  {"answer"}    approve | always | reject REASON
    POST /api/sessions/ID/ctl       {"command"}   a ctl line (cancel, compact, undo, model NAME...)

Beads, spend and mail routes are in their modules. The board keeps no state: every read is a
session's own value at that moment, every action calls the same method as the file it stands
for, and a refusal comes back verbatim as `{"error": MESSAGE}` (404 for an unknown session,
409 for a refusal). `Guarded` checks every request first (`anvild.web.auth`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from importlib import resources
from typing import Final

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from anvild.fs.ctl import CommandError
from anvild.mail import PostOffice
from anvild.ninep.errors import FsError
from anvild.session import (
    Session,
    SessionError,
    SessionManager,
    SessionNotFound,
)
from anvild.store import PendingResult
from anvild.web.auth import COOKIE, Guard
from anvild.web.beads import BeadActions, bead_routes
from anvild.web.body import BadBody, perform, read_field
from anvild.web.cards import Cards, session_info
from anvild.web.hub import EventHub, Gap
from anvild.web.mail import mail_routes
from anvild.web.spend import PricingOf, spend_routes

__all__ = ["Answered", "board_app", "page_html"]

log = structlog.get_logger("anvild.web")

Answered = Callable[[Session, PendingResult], Awaitable[None]]
"""Awaited after an answer settled a result gate (the tree's `SessionExtension.answered`)."""
CtlLine = Callable[[str], Awaitable[str]]
"""Runs one line of `agent/ctl` as a write of it does and returns what a read then gives."""

PAGES: Final = {  # name: its path and what its header says after "anvild"
    "board": ("/", "board"),
    "session": ("/session/{id}", 'session <span id="title"></span>'),
    "beads": ("/beads", "beads and convoys"),
    "spend": ("/spend", "spend"),
    "mail": ("/mail", "mail for user"),
}
NAV: Final = (("/beads", "beads and convoys"), ("/spend", "spend"), ("/mail", "mail"))
STATIC: Final = {
    **{f"{name}.js": "text/javascript" for name in (*PAGES, "common")},
    "style.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
RECENT_EVENTS: Final = 2000


def _asset(name: str) -> str:
    return resources.files("anvild.web").joinpath("static", name).read_text("utf-8")


@functools.cache
def page_html(name: str) -> str:
    """Page `name`: static/NAME.html (its `<main>`) in static/page.html, the head, header and
    scripts every page shares; `{{csrf}}` is left for the request's token."""
    path, heading = PAGES[name]
    nav = " ".join(f'<a href="{where}">{label}</a>' for where, label in NAV if where != path)
    values = {
        "title": name,
        "heading": heading,
        "nav": nav,
        "main": _asset(f"{name}.html").strip(),
        "page": name,
        "csrf": "{{csrf}}",
    }
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m[1]], _asset("page.html"))


def _error(exc: SessionError) -> JSONResponse:
    status = 404 if isinstance(exc, SessionNotFound) else 409
    return JSONResponse({"error": str(exc)}, status_code=status)


def board_app(
    manager: SessionManager,
    hub: EventHub,
    guard: Guard,
    *,
    answered: Answered | None = None,
    beads: BeadActions | None = None,
    mail: PostOffice | None = None,
    root_ctl: CtlLine | None = None,
    pricing_of: PricingOf | None = None,
) -> Starlette:
    """The board's routes (put the result behind `Guarded(app, guard)`); without `pricing_of`
    spend per hour has no USD (every price unknown)."""
    convoys_of = manager.settings.convoys_of or (lambda session_id: ())
    cards = Cards(manager, pricing_of or (lambda model: None), convoys_of)

    def page(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            nonce = guard.nonce_of(request.cookies.get(COOKIE)) or ""
            html = page_html(name).replace("{{csrf}}", guard.csrf_for(nonce))
            return Response(html, media_type="text/html; charset=utf-8")

        return serve

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return Response("404: no such file\n", status_code=404, media_type="text/plain")
        return Response(_asset(name), media_type=f"{STATIC[name]}; charset=utf-8")

    async def sessions(request: Request) -> Response:
        found = await cards.all()  # builds none: a board never keeps a session from unloading
        seq = hub.position()
        infos = [card.info for card in found]
        infos.sort(key=lambda i: (not i["needs_person"], i["created"]), reverse=False)
        return JSONResponse({"seq": seq, "sessions": infos})

    async def one(request: Request) -> Response:
        try:
            s = await manager.load(request.path_params["id"])
        except SessionError as exc:
            return _error(exc)
        seq = hub.position()
        events = [json.loads(i.line) for i in hub.recent(s.id, RECENT_EVENTS)]
        return JSONResponse(
            {
                "seq": seq,
                "session": session_info(s, convoys_of(s.id)),
                "out": s.out,
                "approval": s.approval_text(),
                "queue": s.queue_text(),
                "todos": s.todos_text(),
                "cost": s.cost_text(),
                "events": events,
            }
        )

    async def turns(request: Request) -> Response:
        try:
            s = await manager.load(request.path_params["id"])
        except SessionError as exc:
            return _error(exc)
        steps = [step for step in s.turns.steps() if not step.pending]
        return JSONResponse(
            {
                "turns": [
                    {
                        "kind": step.kind,
                        "number": step.number,
                        "label": step.label,
                        "changes": step.changes,
                        "outcome": step.outcome,
                    }
                    for step in steps
                ]
            }
        )

    async def diff(request: Request) -> Response:
        try:
            s = await manager.load(request.path_params["id"])
        except SessionError as exc:
            return _error(exc)
        number = request.path_params["number"]
        for step in s.turns.steps():
            if not step.pending and str(step.number) == number:
                text = (await s.turns.diff(step)).decode("utf-8", "replace")
                return Response(text, media_type="text/plain; charset=utf-8")
        return JSONResponse({"error": f"session {s.id} has no turn {number}"}, 404)

    def action(
        run: Callable[[Session, str], Awaitable[None]], field: str
    ) -> Callable[[Request], Awaitable[Response]]:
        async def act(request: Request) -> Response:
            try:
                s = await manager.load(request.path_params["id"])
            except SessionError as exc:
                return _error(exc)
            return await perform(request, field, lambda value: run(s, value), (SessionError,))

        return act

    async def prompt(s: Session, text: str) -> None:
        s.submit(await s.screen_prompt(text))

    async def approval(s: Session, answer: str) -> None:
        gate = s.pending_result
        s.answer_approval(answer)
        if answered is not None and gate is not None and s.pending_result is not gate:
            await answered(s, gate)

    async def ctl(s: Session, command: str) -> None:
        verb, _, rest = command.strip().partition(" ")
        if verb in ("approve", "always", "reject"):
            await approval(s, command)
        elif verb == "compact":  # the `compact` verb of `anvild.tree.compaction`
            await s.compaction.compact(rest.strip())
        elif verb == "undo" and rest.strip() in ("", "force"):  # `anvild.tree.turns`
            await s.turns.undo(force=rest.strip() == "force")
        else:
            await s.control(command)

    async def new(request: Request) -> Response:
        if root_ctl is None:
            return JSONResponse({"error": "this board cannot create sessions"}, status_code=404)
        try:
            words = await read_field(request, "args")
            if "\n" in words:
                raise BadBody("one line of new arguments, please")
            session_id = await root_ctl(f"new {words}".strip())
        except BadBody as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except (CommandError, FsError, SessionError) as exc:
            return JSONResponse({"error": getattr(exc, "message", str(exc))}, status_code=409)
        return JSONResponse({"id": session_id})

    async def events(request: Request) -> Response:
        last = request.headers.get("last-event-id") or request.query_params.get("after", "")
        after = hub.resume_point(last) if last else hub.pump()
        session = request.query_params.get("session") or None

        async def stream() -> AsyncIterator[str]:
            yield "retry: 1000\n\n"
            if after is None:  # another run's position: the page reloads its snapshot
                yield f"id: {hub.position()}\nevent: reset\ndata: {{}}\n\n"
                return
            try:
                async with aclosing(hub.feed(after, session)) as feed:
                    async for item in feed:  # None: a heartbeat, so a closed peer is noticed
                        if item is None:
                            yield ": ping\n\n"
                        else:
                            yield f"id: {hub.epoch}-{item.seq}\ndata: {item.data()}\n\n"
            except Gap:
                yield f"id: {hub.position()}\nevent: reset\ndata: {{}}\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    return Starlette(
        routes=[
            *(Route(path, page(name)) for name, (path, _) in PAGES.items()),
            Route("/static/{name}", static),
            Route("/api/sessions", sessions),
            Route("/api/sessions/{id}", one),
            Route("/api/new", new, methods=["POST"]),
            Route("/api/sessions/{id}/turns", turns),
            Route("/api/sessions/{id}/turns/{number}/diff", diff),
            Route("/api/sessions/{id}/prompt", action(prompt, "text"), methods=["POST"]),
            Route("/api/sessions/{id}/approval", action(approval, "answer"), methods=["POST"]),
            Route("/api/sessions/{id}/ctl", action(ctl, "command"), methods=["POST"]),
            Route("/events", events),
            *([] if beads is None else bead_routes(beads, hub)),
            *spend_routes(manager, hub, cards, pricing_of or (lambda model: None)),
            *([] if mail is None else mail_routes(mail, hub)),
        ]
    )
