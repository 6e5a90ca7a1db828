"""Who may use the board: the token once, then a signed cookie; CSRF and Host checks; headers.

Every request needs the daemon's token (`agent.token`, the TCP attach token). It is given once
in the URL (`/?token=T`): the answer is a redirect to the same path without it, setting the
cookie `anvil_board` = `NONCE.MAC` (HttpOnly, SameSite=Strict, Path=/), MAC = HMAC-SHA256 of
the nonce under the token, so rotating the token logs every browser out. Anything else without
a valid cookie is 401 with a fixed body: no session id, no path, nothing of the daemon's.
A state-changing request (any method but GET and HEAD) must also carry the header
`X-Anvil-CSRF` equal to HMAC(token, "csrf:" + nonce), which only a page of the board can read
(it is in the page's `<meta name="csrf">`), and an `Origin` that is the board's own; a
`Sec-Fetch-Site` other than same-origin is refused. On a loopback listener the Host header must
name the listener (a DNS-rebound name is refused). Every answer carries a strict CSP.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlencode

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["COOKIE", "CSP", "CSRF_HEADER", "Guard", "Guarded"]

COOKIE: Final = "anvil_board"
CSRF_HEADER: Final = "x-anvil-csrf"
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = (
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
)
UNAUTHORIZED: Final = (
    "401: the board needs the daemon's token: open /?token=TOKEN with the token from "
    "agent.token (next to the daemon's socket)\n"
)
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


class Guard:
    """The checks of the module docstring, for one token. `hosts`: the Host values accepted
    (None: any, for a listener that was allowed to be remote)."""

    def __init__(self, token: str, hosts: Iterable[str] | None = None) -> None:
        if not token:
            raise ValueError("the board needs a non-empty token")
        self._key = token.encode()
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)

    def _mac(self, purpose: str, nonce: str) -> str:
        return hmac.new(self._key, f"{purpose}:{nonce}".encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self._key)

    def new_cookie(self) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._mac('cookie', nonce)}"

    def nonce_of(self, cookie: str | None) -> str | None:
        """The nonce of a cookie this guard signed, else None."""
        if not cookie or "." not in cookie:
            return None
        nonce, _, mac = cookie.partition(".")
        return nonce if hmac.compare_digest(mac, self._mac("cookie", nonce)) else None

    def csrf_for(self, nonce: str) -> str:
        return self._mac("csrf", nonce)

    def refusal(self, request: Request) -> Response | None:
        """The answer that refuses `request`, or None when it may go on."""
        host = request.headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:
            return PlainTextResponse(
                "421: this board answers only to "
                + ", ".join(sorted(self.hosts))
                + " (open it by that address)\n",
                status_code=421,
            )
        given = request.query_params.get("token")
        if given is not None and request.method in SAFE_METHODS:
            if not self.token_ok(given):
                return PlainTextResponse(UNAUTHORIZED, status_code=401)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            path = "/" + request.url.path.lstrip("/")  # never `//host`: no open redirect
            target = path + (f"?{urlencode(rest)}" if rest else "")
            redirect = RedirectResponse(target, status_code=303)
            redirect.set_cookie(
                COOKIE, self.new_cookie(), httponly=True, samesite="strict", path="/"
            )
            return redirect
        nonce = self.nonce_of(request.cookies.get(COOKIE))
        if nonce is None:
            return PlainTextResponse(UNAUTHORIZED, status_code=401)
        if request.method in SAFE_METHODS:
            return None
        origin = request.headers.get("origin")
        site = request.headers.get("sec-fetch-site", "same-origin")
        if origin != f"{request.url.scheme}://{host}" or site != "same-origin":
            return PlainTextResponse(
                "403: a cross-site request cannot change anything on the board\n",
                status_code=403,
            )
        if not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, "").encode(), self.csrf_for(nonce).encode()
        ):
            return PlainTextResponse(
                f"403: missing or wrong {CSRF_HEADER} header: reload the page and try again\n",
                status_code=403,
            )
        return None


class Guarded:
    """An ASGI app behind a `Guard`, every answer with `SECURITY_HEADERS`."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self._app = app
        self._guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS:
                    headers[name] = value
            await send(message)

        refusal = self._guard.refusal(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, secured)
            return
        await self._app(scope, receive, secured)
