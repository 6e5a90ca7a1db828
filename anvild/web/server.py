"""`WebBoard`: the board as a daemon child, served by hypercorn's trio worker.

`parse_web_address("127.0.0.1:8080")` checks a listen address: HOST:PORT (an IPv6 host in
brackets), loopback only unless `allow_remote`; port 0 picks a free port. `WebBoard.run` is a
daemon child: it reads the token (`token()`, the same `agent.token` as TCP 9P), starts the
`EventHub`, binds, sets `url`, then reports started; cancellation stops it. Hypercorn logs go to
the daemon's log (never to stdout or stderr).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

import attrs
import structlog
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from anvild.config import Config
from anvild.lines.broadcast import Broadcast
from anvild.mail import PostOffice
from anvild.session import SessionError, SessionManager
from anvild.web.app import Answered, CtlLine, board_app
from anvild.web.auth import Guard, Guarded
from anvild.web.beads import BeadActions
from anvild.web.hub import EventHub

__all__ = [
    "WebAddress",
    "WebAddressError",
    "WebBoard",
    "WebSettings",
    "parse_web_address",
    "web_settings",
]

log = structlog.get_logger("anvild.web")


class WebAddressError(Exception):
    """A board address that cannot or must not be used; the message says why."""


@attrs.frozen
class WebAddress:
    host: str
    port: int

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def bind(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_web_address(text: str, *, allow_remote: bool = False) -> WebAddress:
    """`HOST:PORT` (`[::1]:PORT` for IPv6); a host that is not loopback needs `allow_remote`."""
    host, colon, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise WebAddressError(
            f"bad web board address {text!r}: write HOST:PORT, e.g. 127.0.0.1:8080"
        )
    address = WebAddress(host, int(port_text))
    if not address.is_loopback and not allow_remote:
        raise WebAddressError(
            f"the web board address {text!r} is not a loopback address: other machines could "
            "reach it; use 127.0.0.1:PORT, or add --allow-remote (or [web] allow_remote = true) "
            "if you mean it"
        )
    return address


def _hosts(address: WebAddress, port: int) -> list[str]:
    """The Host header values a loopback board on `port` accepts."""
    names = {address.host, "localhost", "127.0.0.1", "[::1]"}
    return [f"{n if ':' not in n or n.startswith('[') else f'[{n}]'}:{port}" for n in names]


@attrs.define
class WebBoard:
    """The board of one daemon (module docstring). `url` is set once it listens."""

    address: WebAddress
    manager: SessionManager
    events: Broadcast
    token: Callable[[], str]
    answered: Answered | None = None
    beads: BeadActions | None = None
    mail: PostOffice | None = None
    root_ctl: CtlLine | None = None
    url: str | None = None

    def _session_events(self, session_id: str) -> Broadcast | None:
        try:
            return self.manager.get(session_id).events
        except SessionError:
            return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        hub = EventHub(
            self.events,
            self._session_events,
            lambda: [s.id for s in self.manager.sessions()],
        )
        config = HypercornConfig()
        config.bind = [self.address.bind]
        config.accesslog = None
        config.errorlog = logging.getLogger("anvild.web.hypercorn")
        config.graceful_timeout = 1.0
        # Loopback: no Host is accepted until the port is known (then only the listener's).
        guard = Guard(self.token(), None if not self.address.is_loopback else ())
        routes = board_app(
            self.manager,
            hub,
            guard,
            answered=self.answered,
            beads=self.beads,
            mail=self.mail,
            root_ctl=self.root_ctl,
        )
        app = Guarded(routes, guard)
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            binds: list[str] = await nursery.start(serve, app, config)
            port = int(binds[0].rpartition(":")[2])
            if self.address.is_loopback:
                guard.hosts = frozenset(_hosts(self.address, port))
            self.url = f"http://{self.address.bind.rpartition(':')[0]}:{port}/"
            log.info("web.serving", url=self.url)
            task_status.started()


@attrs.frozen
class WebSettings:
    """`[web]` of the user config: `listen` (HOST:PORT, None: off) and `allow_remote`."""

    listen: str | None = None
    allow_remote: bool = False


def web_settings(config: Config) -> WebSettings:
    """`[web]` as the config's layers set it (the daemon loads no project file: user only)."""
    values: dict[str, object] = {}
    for layer, _source in config.layers:
        for key, value in layer.items():
            if key[:1] == ("web",) and len(key) == 2:
                values[key[1]] = value
    listen = values.get("listen")
    return WebSettings(
        listen=listen if isinstance(listen, str) else None,
        allow_remote=values.get("allow_remote") is True,
    )
