"""Request bodies of the board's actions: one JSON object, at most `MAX_BODY` bytes."""

from __future__ import annotations

import json
from typing import Final

from starlette.requests import Request

__all__ = ["MAX_BODY", "BadBody", "read_field"]

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
