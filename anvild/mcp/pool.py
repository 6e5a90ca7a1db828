"""The daemon's MCP servers: one `Server` per (server config, cwd, sandbox), shared by the
sessions that match, started lazily, stopped with the daemon.

`McpPool.run` is a daemon child: its nursery runs every server's supervisor (`Server.run`),
and cancelling it (`stop`, the daemon's shutdown step) stops them all, each transport's exit
killing and reaping its process; a server no live session has used for `idle_after` seconds
is stopped the same way. A session's `SessionMcp` handle (`anvild.mcp.tools.session_mcp`,
registered here for its `mcp` file) asks `servers(cwd)` which servers apply at each turn start,
so a project server appears once its `.anvil/config.toml` is granted. `report(session_id,
server, error)` hears of a server a session could not get, once per session and failure.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog
import trio

from anvild.mcp.config import ServerSpec
from anvild.mcp.server import Placement, Server, State

if TYPE_CHECKING:
    from anvild.mcp.tools import SessionMcp

log = structlog.get_logger(__name__)

IDLE_AFTER: Final = 600.0
REAP_EVERY: Final = 30.0
Servers = Callable[[Path], tuple[ServerSpec, ...]]
Report = Callable[[str, str, str], None]


def _no_report(session_id: str, server: str, error: str) -> None:
    return None


class McpPool:
    """See the module docstring."""

    def __init__(
        self,
        servers: Servers,
        *,
        env: Mapping[str, str] | None = None,
        report: Report = _no_report,
        idle_after: float = IDLE_AFTER,
        reap_every: float = REAP_EVERY,
    ) -> None:
        self.servers = servers
        self.report = report
        self._idle_after = idle_after
        self._reap_every = reap_every
        self._unused_since: dict[tuple[object, ...], float] = {}
        self._env = os.environ if env is None else env
        self._running: dict[tuple[object, ...], Server] = {}
        self._nursery: trio.Nursery | None = None
        self._done = trio.Event()
        self._sessions: weakref.WeakValueDictionary[str, SessionMcp] = weakref.WeakValueDictionary()

    # -- the daemon child ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await trio.sleep(self._reap_every)
                    self.reap_idle()
        finally:
            self._nursery = None
            for server in self._running.values():
                server.state = State.STOPPED
            self._done.set()

    async def stop(self) -> None:
        """Stop every server (the daemon's shutdown step)."""
        nursery = self._nursery
        if nursery is None:
            return
        nursery.cancel_scope.cancel()
        await self._done.wait()
        log.info("mcp.stopped", servers=len(self._running))

    # -- servers ---------------------------------------------------------------------------------

    def server(self, spec: ServerSpec, placement: Placement) -> Server:
        """The server for `spec` at `placement`, started if it is not running yet."""
        key = (spec.name, *placement.key(spec))
        server = self._running.get(key)
        if server is not None:
            return server
        server = Server(spec, placement, self._env)
        if self._nursery is None:
            server.state = State.FAILED
            server.last_error = "the daemon's MCP pool is not running (stopping, or not started)"
            server.first_attempt.set()
            return server
        self._running[key] = server
        self._nursery.start_soon(server.run)
        return server

    def reap_idle(self) -> None:
        """Stop the servers no live session has used for `idle_after` seconds (a session holds
        its handle, and the handle its servers, until the session is gone)."""
        used = {id(s) for handle in list(self._sessions.values()) for s in handle.servers()}
        now = trio.current_time()
        for key, server in list(self._running.items()):
            if id(server) in used:
                self._unused_since.pop(key, None)
                continue
            since = self._unused_since.setdefault(key, now)
            if now - since >= self._idle_after:
                log.info("mcp.server_idle", server=server.name)
                server.stop()
                del self._running[key], self._unused_since[key]

    def running(self) -> list[Server]:
        return list(self._running.values())

    def register(self, session_id: str, handle: SessionMcp) -> None:
        self._sessions[session_id] = handle

    def handle(self, session_id: str) -> SessionMcp | None:
        """The session's handle (the last one built for it), while the session holds it."""
        return self._sessions.get(session_id)


__all__ = ["McpPool", "Report", "Servers"]
