"""The board's mail: the person's mailbox (`agent/user/`), read and written as its files are.

    GET  /api/mail               unread (what `agent/user/inbox` shows), the latest received and
                                 sent messages, and the feed's position
    POST /api/mail/read          {"ids": "ID ..."}: mark them read (what reading `inbox` does)
    POST /api/mail/send          {"draft": JSON TEXT}: what a write of `agent/user/outbox` does

A refusal comes back verbatim as `{"error": MESSAGE}` (409): a draft that does not parse, a
recipient that is no live session.
"""

from __future__ import annotations

import json
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from anvild.mail import (
    USER,
    Box,
    MailError,
    Message,
    PostOffice,
    UnknownMailbox,
    parse_draft,
)
from anvild.mail.message import encode
from anvild.web.body import perform
from anvild.web.hub import EventHub

__all__ = ["mail_routes"]

RECENT: Final = 50


def _message(message: Message) -> Any:
    return json.loads(encode(message))  # the JSON a file shows, metadata included


def mail_routes(office: PostOffice, hub: EventHub) -> list[Route]:
    """The routes of the module docstring over `office`, for the mailbox `user`."""

    async def listing(request: Request) -> Response:
        position = hub.position()
        try:
            unread = await office.unread(USER)
            received = await office.archived(USER, Box.RECEIVED)
            sent = await office.archived(USER, Box.SENT)
        except MailError as exc:
            return JSONResponse({"error": f"inbox: {exc}"}, status_code=409)
        return JSONResponse(
            {
                "seq": position,
                "unread": [_message(m) for m in unread],
                "received": [_message(m) for m in received[-RECENT:]],
                "sent": [_message(m) for m in sent[-RECENT:]],
            }
        )

    async def mark_read(request: Request) -> Response:
        async def mark(ids: str) -> None:
            await office.mark_read(USER, ids.split())

        return await perform(request, "ids", mark, (MailError,), prefix="inbox: ")

    async def send(request: Request) -> Response:
        async def deliver(text: str) -> None:
            draft = parse_draft(text.encode())
            if office.resolve(draft.to) is None:
                raise UnknownMailbox(
                    f"no live session has the id or alias {draft.to!r} (it never existed or it "
                    "has exited): nothing was sent; read agent/list for the live sessions"
                )
            await office.send(USER, draft)

        return await perform(request, "draft", deliver, (MailError,), prefix="outbox: ")

    return [
        Route("/api/mail", listing),
        Route("/api/mail/read", mark_read, methods=["POST"]),
        Route("/api/mail/send", send, methods=["POST"]),
    ]
