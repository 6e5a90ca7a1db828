"""Bytes in and out of a 9P connection, and the poller shared by a trio run's connections.

`StreamTransport` works over any `trio.abc.Stream`. `SocketTransport` works on a
`trio.SocketStream`'s socket below trio's stream layer: it tries the non-blocking system call
first and waits for readiness only on EAGAIN. When its socket is empty, a connection that allows
it (`Polled.parkable`) parks its task on the run's `Poller`: one system task with a private
level-triggered epoll that, for every ready parked connection, receives and lets the connection
answer what it can without waiting (`Polled.serve_now`), and hands the connection back to its
task with whatever is left, in order.

Invariants: the trio stream keeps owning the file descriptor (a transport detaches before the
stream closes it); the poller calls only plain functions of a connection, so it never reaches a
checkpoint on a connection's behalf; the poller's task and epoll exist only while a connection
is attached; a cancelled parked task unregisters its socket.
"""

from __future__ import annotations

import logging
import select
import socket
from typing import Any, Protocol

import outcome
import trio

__all__ = [
    "FAIRNESS_STREAK",
    "RECEIVE_SIZE",
    "ConnectionLost",
    "Polled",
    "Poller",
    "SocketTransport",
    "StreamTransport",
    "Transport",
    "transport_for",
]

log = logging.getLogger("anvild.ninep")

# Bytes asked of one receive: fixed, since asking for msize (up to 1 MiB) allocates that much.
RECEIVE_SIZE = 65536
# Receives that found data at once in a row before yielding to other tasks; also the poller's
# passes over ready sockets per wake.
FAIRNESS_STREAK = 16


class ConnectionLost(Exception):
    """The peer is gone (reset, broken pipe, closed stream)."""


class Polled(Protocol):
    """What the poller needs of a connection."""

    peer: str

    @property
    def parkable(self) -> bool:
        """True when the poller may serve this connection (its dialect is negotiated)."""

    def serve_now(self, data: bytes, sock: socket.socket) -> tuple[bool, bytes | None]:
        """Answer what ``data`` holds without waiting and send the replies; (True, None) keeps
        the connection parked, else (False, what its task must process, or None)."""


class StreamTransport:
    """Bytes in and out over any `trio.abc.Stream` (in-memory streams in tests, TLS, ...)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    async def receive(self) -> bytes | bytearray | None:
        try:
            return await self.stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionLost(str(exc)) from exc

    async def send(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionLost(str(exc)) from exc

    def detach(self) -> None:
        pass


class SocketTransport:
    """Bytes in and out of a `trio.SocketStream`'s socket (already non-blocking), sharing its
    file descriptor with the stream."""

    def __init__(self, fd: int, conn: Polled) -> None:
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(False)
        self.conn = conn
        self.poller: Poller | None = None
        self._on_its_own = False  # the poller could not watch this socket
        self._streak = 0

    async def receive(self) -> bytes | None:
        """Received bytes (b"" at EOF), or None: the poller answered requests and hands the
        connection back with replies still to send."""
        sock = self.sock
        while True:
            try:
                data = sock.recv(RECEIVE_SIZE)
            except BlockingIOError:
                self._streak = 0
                if self.conn.parkable and not self._on_its_own:
                    if self.poller is None:
                        self.poller = Poller.attach()
                    try:
                        return await self.poller.park(self.conn, sock)
                    except _NotParked:
                        self._on_its_own = True
                        continue
                await trio.lowlevel.wait_readable(sock)
                continue
            except OSError as exc:
                raise ConnectionLost(str(exc)) from exc
            self._streak += 1
            if self._streak >= FAIRNESS_STREAK:
                # A client that keeps the socket full must not starve the other connections.
                self._streak = 0
                await trio.lowlevel.checkpoint()
            return data

    async def send(self, data: bytes) -> None:
        sock = self.sock
        view: memoryview | bytes = data
        while True:
            try:
                sent = sock.send(view)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise ConnectionLost(str(exc)) from exc
            if sent == len(view):
                return
            view = memoryview(view)[sent:]
            await trio.lowlevel.wait_writable(sock)

    def detach(self) -> None:
        if self.poller is not None:
            self.poller.detach()
            self.poller = None
        self.sock.detach()


Transport = StreamTransport | SocketTransport


def transport_for(stream: trio.abc.Stream, conn: Polled) -> Transport:
    """The raw socket transport for a `trio.SocketStream`, the stream transport otherwise."""
    if type(stream) is trio.SocketStream:
        try:
            fd = stream.socket.fileno()
            if fd >= 0:
                return SocketTransport(fd, conn)
        except (OSError, ValueError):  # pragma: no cover - a closed or unusual socket
            pass
    return StreamTransport(stream)


class _NotParked(Exception):
    """The poller could not take the connection; its task waits for readiness itself."""


_POLLER: trio.lowlevel.RunVar[Poller] = trio.lowlevel.RunVar("anvild.ninep.poller")


class Poller:
    """Serves the parked connections of this trio run from one system task.

    A parked task stays parked while the poller serves its connection: a request answered here
    costs no task switch and no EPOLLONESHOT re-arm, and one wake serves every ready connection.
    The poller hands a connection back (unregisters it and reschedules its task) at EOF, on a
    socket error, or when `serve_now` says its task has something to do.
    """

    def __init__(self) -> None:
        self._epoll: select.epoll | None = None
        self._users = 0
        self._running = False
        self._scope: trio.CancelScope | None = None
        self._parked: dict[int, tuple[Polled, socket.socket, trio.lowlevel.Task]] = {}

    @staticmethod
    def attach() -> Poller:
        try:
            poller = _POLLER.get()
        except LookupError:
            poller = Poller()
            _POLLER.set(poller)
        poller._users += 1
        if not poller._running:
            if poller._epoll is None:
                poller._epoll = select.epoll()
            poller._running = True
            trio.lowlevel.spawn_system_task(poller._run, name="anvild.ninep.poller")
        return poller

    def detach(self) -> None:
        self._users -= 1
        if not self._users and self._scope is not None:
            self._scope.cancel()

    async def park(self, conn: Polled, sock: socket.socket) -> bytes | None:
        """Wait until the poller hands this connection back; returns what its task must
        process (as `SocketTransport.receive`)."""
        assert self._epoll is not None
        fd = sock.fileno()
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except OSError as exc:  # e.g. ENOSPC: fs.epoll.max_user_watches
            log.warning(
                "9p %s: the poller cannot watch this connection (%s); it waits on its own",
                conn.peer,
                exc,
            )
            raise _NotParked from exc
        self._parked[fd] = (conn, sock, trio.lowlevel.current_task())

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._unpark(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        result: bytes | None = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def _unpark(self, fd: int) -> None:
        del self._parked[fd]
        if self._epoll is not None:
            self._epoll.unregister(fd)

    def _hand_back(self, fd: int, task: trio.lowlevel.Task, result: outcome.Outcome[Any]) -> None:
        self._unpark(fd)
        trio.lowlevel.reschedule(task, result)

    async def _run(self) -> None:
        epoll = self._epoll
        assert epoll is not None
        parked = self._parked
        restart = False
        try:
            with trio.CancelScope() as self._scope:  # cancelled when the last connection ends
                while True:
                    await trio.lowlevel.wait_readable(epoll)
                    # Look again before going back to trio: the next requests have usually
                    # arrived while these replies were sent (a loopback send runs the client),
                    # and finding them here costs no sleep and no wakeup. Bounded, for fairness.
                    for _ in range(FAIRNESS_STREAK):
                        events = epoll.poll(0)
                        if not events:
                            break
                        for fd, _ in events:
                            entry = parked.get(fd)
                            if entry is not None:
                                self._serve(fd, *entry)
            # No checkpoint from here on: a connection that attached after the cancel (it found
            # this task still running) gets a new task.
            restart = self._users > 0
        finally:
            self._scope = None
            if restart:
                trio.lowlevel.spawn_system_task(self._run, name="anvild.ninep.poller")
            else:
                self._running = False
                self._epoll = None
                epoll.close()

    def _serve(self, fd: int, conn: Polled, sock: socket.socket, task: trio.lowlevel.Task) -> None:
        try:
            data = sock.recv(RECEIVE_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._hand_back(fd, task, outcome.Error(ConnectionLost(str(exc))))
            return
        if not data:
            self._hand_back(fd, task, outcome.Value(b""))
            return
        try:
            keep, rest = conn.serve_now(data, sock)
        except Exception:
            log.exception("9p %s: internal error in the poller; closing the connection", conn.peer)
            self._hand_back(fd, task, outcome.Error(ConnectionLost("internal error")))
            return
        if not keep:
            self._hand_back(fd, task, outcome.Value(rest))
