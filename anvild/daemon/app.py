"""`Daemon`: the namespace, the listeners, the 9P server and the root tree under one nursery.

`await nursery.start(daemon.run)` reports the bound `Endpoints`. In order it claims the service
(`ServiceFiles.claim`: a second daemon is refused before touching anything); binds the Unix
socket and any TCP addresses (the token file only with a TCP listener); starts its `children`
before accepting any connection (no client sees a half-started tree); serves each connection
with the one 9P `Server` after checking the peer: Unix by SO_PEERCRED uid, TCP by the token as
attach name (constant-time) and, where the dialect has one, a uid of ours or root.
On `request_shutdown` or cancellation: stop accepting; publish `daemon_stopping`; run
`shutdown_steps` in order, shielded, within `shutdown_grace` (a failing step is logged and the
next runs); close the event stream and cancel the nursery; remove the socket and pid file.
Refusals are logged and published as `client_refused`.
"""

from __future__ import annotations

import errno
import hmac
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeAlias

import attrs
import structlog
import trio

from anvild import __version__
from anvild.daemon.listeners import (
    TcpAddress,
    open_tcp_listeners,
    open_unix_listener,
    peer_credentials,
)
from anvild.daemon.llama import LlamaServer
from anvild.daemon.namespace import SERVICE, ServiceFiles, prepare_namespace, read_or_create_token
from anvild.ninep.backend import AttachRequest, Node
from anvild.ninep.errors import FsError
from anvild.ninep.server import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_FIDS,
    DEFAULT_MAX_OUTSTANDING,
    Server,
)
from anvild.tree.events import ClientRefused, DaemonStarted, DaemonStopping
from anvild.tree.root import RootTree

__all__ = ["Child", "Daemon", "DaemonConfig", "Endpoints", "ShutdownStep"]

log = structlog.get_logger("anvild.daemon")

_Handler: TypeAlias = Callable[[trio.SocketStream], Awaitable[None]]

ShutdownStep: TypeAlias = Callable[[], Awaitable[None]]
"""One step of the shutdown sequence: an async function of no arguments."""

Child: TypeAlias = Callable[..., Awaitable[object]]
"""A long-lived service of the daemon, started with `nursery.start(child)`: it takes
`task_status` and calls `task_status.started()` once it is up; cancellation stops it."""


@attrs.frozen
class DaemonConfig:
    namespace: Path
    listen: tuple[TcpAddress, ...] = ()
    service: str = SERVICE
    max_msize: int = 1 << 20
    shutdown_grace: float = 10.0  # seconds for the whole shutdown sequence
    # The 9P server's limits (`[server]` in the config; `anvild.ninep.server.Server`).
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_fids: int = DEFAULT_MAX_FIDS
    max_outstanding: int = DEFAULT_MAX_OUTSTANDING


@attrs.frozen
class Endpoints:
    """Where a started daemon can be reached."""

    socket_path: Path
    tcp: tuple[tuple[str, int], ...] = ()  # bound (host, port) pairs
    token_path: Path | None = None

    @property
    def tcp_addresses(self) -> tuple[str, ...]:
        return tuple(f"tcp!{host}!{port}" for host, port in self.tcp)


def _sockname(listener: trio.SocketListener) -> tuple[str, int]:
    host, port, *_ = listener.socket.getsockname()
    return str(host), int(port)


class Daemon:
    """One anvild instance. `tree` and `server` exist from construction, for tests to inspect."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        tree: RootTree | None = None,
        peer_uid: int | None = None,
        children: Sequence[Child] = (),
        local_model: LlamaServer | None = None,
    ) -> None:
        """`peer_uid` is the uid Unix peers must have (default: ours; tests change it).
        `children` are started in the daemon's nursery after the listeners are bound and
        before the first connection is accepted.
        `local_model` is the embedded llama-server when it is the default model: a child too,
        and where the session layer finds its base URL (`await local_model.wait_ready()`)."""
        self.config = config
        self.tree = tree or RootTree(version=__version__)
        self.server = Server(
            self._root,
            max_msize=config.max_msize,
            handshake_timeout=config.handshake_timeout,
            max_connections=config.max_connections,
            max_fids=config.max_fids,
            max_outstanding=config.max_outstanding,
        )
        self.local_model = local_model
        extra = () if local_model is None else (local_model.run,)
        self.children: tuple[Child, ...] = (*children, *extra)
        self.shutdown_steps: list[tuple[str, ShutdownStep]] = []
        """The shutdown sequence, run in order after the listeners close and before the
        daemon's nursery is cancelled (see the module docstring, step 5c). The session layer
        adds its steps here with `add_shutdown_step`: end running turns (never approving a
        pending call), flush and sync each session's records, reap tool processes."""
        self._uid = os.getuid() if peer_uid is None else peer_uid
        self._token: str | None = None
        self._token_path: Path | None = None
        self._stop = trio.Event()
        self._stop_reason = "shutdown"

    def add_shutdown_step(self, name: str, step: ShutdownStep) -> None:
        """Append `step` to the shutdown sequence; `name` is what the log calls it."""
        self.shutdown_steps.append((name, step))

    @property
    def stopping(self) -> bool:
        """True once `request_shutdown` was called."""
        return self._stop.is_set()

    def request_shutdown(self, reason: str = "shutdown") -> None:
        """Begin an orderly stop (idempotent): `run` winds down and returns."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    def _root(self, request: AttachRequest) -> Node:
        return self.tree.root

    async def run(
        self, *, task_status: trio.TaskStatus[Endpoints] = trio.TASK_STATUS_IGNORED
    ) -> None:
        namespace = prepare_namespace(self.config.namespace)
        files = ServiceFiles(namespace, self.config.service)
        files.claim()
        listeners: list[trio.SocketListener] = []
        try:
            unix = await open_unix_listener(files.socket_path)
            listeners.append(unix)
            tcp: list[trio.SocketListener] = []
            for address in self.config.listen:
                tcp.extend(await open_tcp_listeners(address))
            listeners.extend(tcp)
            if tcp:
                self._token = read_or_create_token(files.token_path)
                self._token_path = files.token_path
            endpoints = Endpoints(
                socket_path=files.socket_path,
                tcp=tuple(_sockname(listener) for listener in tcp),
                token_path=self._token_path,
            )
            async with trio.open_nursery() as nursery:
                accepting: list[trio.CancelScope] = []

                async def accept(group: list[trio.SocketListener], handler: _Handler) -> None:
                    with trio.CancelScope() as scope:
                        accepting.append(scope)
                        await trio.serve_listeners(handler, group, handler_nursery=nursery)

                for child in self.children:
                    await nursery.start(child)
                nursery.start_soon(accept, [unix], self._handle_unix)
                if tcp:
                    nursery.start_soon(accept, tcp, self._handle_tcp)
                self.tree.publish(DaemonStarted(version=self.tree.version, pid=os.getpid()))
                log.info("daemon.serving", socket=str(files.socket_path))
                for bound in endpoints.tcp_addresses:
                    log.info("daemon.serving", tcp=bound, token_file=str(files.token_path))
                task_status.started(endpoints)
                try:
                    await self._stop.wait()
                finally:
                    log.info("daemon.stopping", reason=self._stop_reason)
                    for scope in accepting:
                        scope.cancel()
                    with trio.CancelScope(shield=True):
                        for listener in listeners:
                            await trio.aclose_forcefully(listener)
                    self.tree.publish(DaemonStopping(reason=self._stop_reason))
                    await self._run_shutdown_steps()
                    self.tree.events.close()
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await trio.aclose_forcefully(listener)
            files.release()
            log.info("daemon.stopped", removed=str(files.socket_path))

    async def _run_shutdown_steps(self) -> None:
        """The shutdown sequence: each step in order, shielded from the cancellation that may
        have started it, all within `shutdown_grace` seconds."""
        current = ""
        with trio.move_on_after(self.config.shutdown_grace, shield=True) as deadline:
            for current, step in self.shutdown_steps:
                try:
                    await step()
                except Exception:
                    log.exception("daemon.shutdown_step_failed", step=current)
        if deadline.cancelled_caught:
            log.error(
                "daemon.shutdown_step_cut", step=current, grace_seconds=self.config.shutdown_grace
            )

    # --- per-connection checks ------------------------------------------------------------------

    async def _handle_unix(self, stream: trio.SocketStream) -> None:
        try:
            creds = peer_credentials(stream.socket)
        except OSError as exc:
            log.warning("unix.no_credentials", error=str(exc))
            await trio.aclose_forcefully(stream)
            return
        peer = f"unix!pid={creds.pid}!uid={creds.uid}"
        if creds.uid != self._uid:
            reason = f"peer uid {creds.uid} is not the daemon's uid {self._uid}"
            log.warning("unix.refused", pid=creds.pid, reason=reason)
            self.tree.publish(ClientRefused(transport="unix", peer=peer, reason=reason))
            await trio.aclose_forcefully(stream)
            return
        log.debug("unix.connection", pid=creds.pid)
        await self.server.serve(stream, peer=peer)

    async def _handle_tcp(self, stream: trio.SocketStream) -> None:
        try:
            host, port, *_ = stream.socket.getpeername()
        except OSError:
            await trio.aclose_forcefully(stream)
            return
        peer = f"tcp!{host}!{port}"
        log.debug("tcp.connection", peer=peer)

        def check(request: AttachRequest) -> None:
            self._check_tcp_attach(request, peer)

        await self.server.serve(stream, check_attach=check, peer=peer)

    def _check_tcp_attach(self, request: AttachRequest, peer: str) -> None:
        assert self._token is not None
        # What the peer reads names no path and no user (it has not authenticated yet); the
        # log says where the token is and which uid is served.
        if not hmac.compare_digest(request.aname.encode(), self._token.encode()):
            what = "no attach name" if not request.aname else "an attach name that is not the token"
            self._refuse(peer, f"{what} was given")
            raise FsError(
                "attach refused: over TCP the attach name must be the daemon's token (the "
                "daemon says where it is when it starts; diod tools: -a TOKEN; v9fs: "
                "-o aname=TOKEN; anvilctl: -A TOKEN)",
                errno.EACCES,
            )
        if request.n_uname is not None and request.n_uname not in (self._uid, 0):
            self._refuse(peer, f"attach as uid {request.n_uname}; this daemon serves {self._uid}")
            raise FsError(
                "attach refused: attach as the user who runs the daemon, or as root "
                "(diod tools: -u UID)",
                errno.EACCES,
            )

    def _refuse(self, peer: str, reason: str) -> None:
        log.warning("tcp.refused", peer=peer, reason=reason, token_file=str(self._token_path))
        self.tree.publish(ClientRefused(transport="tcp", peer=peer, reason=reason))
