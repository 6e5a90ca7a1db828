"""Listening sockets and who may connect through them.

- The Unix socket in the namespace directory (`anvild.daemon.namespace`) admits only peers with
  our own uid, checked with SO_PEERCRED on every accepted connection (unix(7)): a socket file's
  permissions are not a reliable check on every system, the kernel's credentials are.
- TCP listeners are off by default. An address is written the plan9port way,
  `tcp!127.0.0.1!5640`; a host that is not a loopback address is refused unless the caller
  explicitly allows remote listening. Who may attach over TCP is decided at Tattach time by the
  token (`anvild.daemon.app`), since TCP carries no peer credentials.

Everything that refuses raises `ListenError` with a message that says what to do.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import attrs
import trio

from anvild.config.hosts import is_loopback_host

__all__ = [
    "ListenError",
    "PeerCredentials",
    "TcpAddress",
    "open_tcp_listeners",
    "open_unix_listener",
    "parse_listen_address",
    "peer_credentials",
]

# Enough for a burst of a thousand simultaneous connects; the kernel caps it at somaxconn.
LISTEN_BACKLOG = 4096


class ListenError(Exception):
    """A listen address that cannot or must not be used; the message says why."""


@attrs.frozen
class TcpAddress:
    """A TCP listen address; `host` "" means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"tcp!{self.host or '*'}!{self.port}"

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)


def parse_listen_address(text: str, *, allow_remote: bool = False) -> TcpAddress:
    """Parse `tcp!HOST!PORT` (HOST `*` = every interface); refuse non-loopback unless allowed."""
    parts = text.split("!")
    if len(parts) != 3 or parts[0] != "tcp":
        raise ListenError(
            f"bad listen address {text!r}: write tcp!HOST!PORT, e.g. tcp!127.0.0.1!5640"
        )
    _, host, port_text = parts
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ListenError(f"bad port {port_text!r} in {text!r}: use a number from 0 to 65535")
    if not host:
        raise ListenError(f"missing host in {text!r}: use tcp!127.0.0.1!{port} for loopback")
    address = TcpAddress("" if host == "*" else host, port)
    if not address.is_loopback and not allow_remote:
        raise ListenError(
            f"refusing to listen on {address}: it is reachable from other machines, and the "
            "attach token travels in clear text. Use a loopback address (tcp!127.0.0.1!PORT), "
            "or pass --allow-remote if you really mean it (then protect the network path)"
        )
    return address


async def open_tcp_listeners(address: TcpAddress) -> list[trio.SocketListener]:
    """Bind `address` (port 0 picks a free port; read it from the listener's socket)."""
    host = "127.0.0.1" if address.host == "localhost" else (address.host or None)
    try:
        return await trio.open_tcp_listeners(address.port, host=host, backlog=LISTEN_BACKLOG)
    except OSError as exc:
        raise ListenError(f"cannot listen on {address}: {exc.strerror or exc}") from exc


async def open_unix_listener(path: Path) -> trio.SocketListener:
    """Bind and listen on the Unix socket `path`, readable and writable by its owner only."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(0o177)  # no window in which the socket is group/world accessible
        try:
            await sock.bind(os.fspath(path))
        finally:
            os.umask(old_umask)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    return trio.SocketListener(sock)


@attrs.frozen
class PeerCredentials:
    pid: int
    uid: int
    gid: int


_UCRED = struct.Struct("3i")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; } (unix(7))


def peer_credentials(sock: trio.socket.SocketType) -> PeerCredentials:
    """The kernel's record of who is at the other end of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid=pid, uid=uid, gid=gid)
