"""`WebBoard`: the board as a daemon child, served by hypercorn's trio worker.

`parse_web_address("127.0.0.1:8080")` checks a listen address: HOST:PORT (an IPv6 host in
brackets), loopback only unless `allow_remote`; port 0 picks a free port. `WebBoard.run` is a
daemon child: it reads the token (`token()`, the same `agent.token` as TCP 9P), starts the
`EventHub`, binds, sets `url`, then reports started; cancellation stops it. Hypercorn logs go to
the daemon's log (never to stdout or stderr).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import structlog
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from anvild.lines.broadcast import Broadcast
from anvild.mail import PostOffice
from anvild.session import Session, SessionManager, SessionStatus
from anvild.web.address import WebAddress
from anvild.web.app import Answered, CtlLine, board_app
from anvild.web.auth import Guard, Guarded
from anvild.web.beads import BeadActions
from anvild.web.hub import EventHub
from anvild.web.spend import PricingOf

__all__ = ["WebBoard"]

log = structlog.get_logger("anvild.web")
_RESTING = frozenset({SessionStatus.IDLE, SessionStatus.AWAIT})


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
    pricing_of: PricingOf | None = None
    url: str | None = None

    def _session(self, session_id: str) -> Session | None:
        """The session if it is built: the hub never builds one, nor counts as a use."""
        session = self.manager.peek(session_id)
        return session if isinstance(session, Session) else None

    def _session_events(self, session_id: str) -> Broadcast | None:
        session = self._session(session_id)
        return None if session is None else session.events

    def _at_rest(self, session_id: str) -> bool:
        """Whether the hub may let go of the session's stream (so it may unload): at rest."""
        session = self._session(session_id)
        return session is not None and session.status in _RESTING and session.pending_result is None

    def hub(self) -> EventHub:
        """The board's feed: it follows built sessions only, and lets go of those at rest
        (`unloaded` must hear the manager's unloads: `run` does that)."""
        return EventHub(
            self.events,
            self._session_events,
            lambda: [s.id for s in self.manager.built_sessions()],
            queued=self._session,
            at_rest=self._at_rest,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        hub = self.hub()
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
            pricing_of=self.pricing_of,
        )
        app = Guarded(routes, guard)
        self.manager.unload_listeners.append(hub.unloaded)  # lets go of an unloaded stream
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(hub.run)
                binds: list[str] = await nursery.start(serve, app, config)
                port = int(binds[0].rpartition(":")[2])
                if self.address.is_loopback:
                    guard.hosts = frozenset(_hosts(self.address, port))
                self.url = f"http://{self.address.bind.rpartition(':')[0]}:{port}/"
                log.info("web.serving", url=self.url)
                task_status.started()
        finally:
            self.manager.unload_listeners.remove(hub.unloaded)
