"""Request bodies of the board's actions: one JSON object, at most `MAX_BODY` bytes; `perform`
answers an action: `{"ok": true}`, 400 for a body it cannot take, a refusal verbatim."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["MAX_BODY", "BadBody", "perform", "read_field"]

MAX_BODY: Final = 1 << 20


class BadBody(Exception):
    """A request body that is not the JSON object the route takes; the message says which."""


async def read_field(request: Request, name: str) -> str:
    """The string `name` of the request's JSON object body."""
    body = await request.body()
    if len(body) > MAX_BODY:
        raise BadBody(f"the request is over {MAX_BODY} bytes")
    try:
        value = json.loads(body).get(name)
    except (ValueError, AttributeError):
        value = None
    if not isinstance(value, str):
        raise BadBody(f'send a JSON object with a string "{name}"')
    return value


async def perform(
    request: Request,
    field: str,
    run: Callable[[str], Awaitable[object]],
    refusals: tuple[type[Exception], ...],
    *,
    status: Callable[[Exception], int] = lambda exc: 409,
    prefix: str = "",
) -> JSONResponse:
    """`run(the string field)`: `{"ok": true}`; a bad body 400, a refusal (one of `refusals`)
    `{"error": prefix + its message}` with `status(exc)` (409 unless told)."""
    try:
        value = await read_field(request, field)
    except BadBody as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    try:
        await run(value)
    except refusals as exc:
        return JSONResponse({"error": prefix + str(exc)}, status_code=status(exc))
    return JSONResponse({"ok": True})
