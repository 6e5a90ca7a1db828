"""A third-party client against our server: PyPI `python-9p` (import name `py9p`, plan9port's
C codec) over a real Unix socket and over TCP.

Covers walk, open, read, write, stat, clunk, directory reads, error replies, and a Tflush of a
blocked read: the read is never answered and the Rflush arrives.
"""

from __future__ import annotations

import itertools
import pathlib
import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
from py9p import client as p9client
from py9p import messages as p9
from py9p.constants import OREAD, OTRUNC, OWRITE

from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import BlockingFile, MemDir, MemFile


class Tree:
    def __init__(self) -> None:
        self.ctl = MemFile("ctl", mode=0o666, append_only=True)
        self.version = MemFile("version", b"anvild 0.1\n", mode=0o444)
        self.events = BlockingFile("events")
        self.root = MemDir("/", [self.ctl, self.version, self.events])


Connect = Callable[[], p9client.Client]


@asynccontextmanager
async def serving(kind: str, tmp_path: pathlib.Path) -> AsyncIterator[tuple[Connect, Tree, Server]]:
    tree = Tree()
    server = Server(lambda req: tree.root)

    async def handle(stream: trio.SocketStream) -> None:
        await server.serve(stream, peer=kind)

    async with trio.open_nursery() as nursery:
        if kind == "unix":
            path = str(tmp_path / "agent")
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            await sock.bind(path)
            sock.listen(16)
            listeners: list[trio.SocketListener] = [trio.SocketListener(sock)]

            def connect() -> p9client.Client:
                return p9client.Client.connect_unix(path)
        else:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]

            def connect() -> p9client.Client:
                return p9client.Client.connect_tcp("127.0.0.1", port, timeout=10)

        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield connect, tree, server
        nursery.cancel_scope.cancel()


async def eventually(predicate: Callable[[], bool]) -> None:
    """Poll a condition that another thread (the blocking py9p client) brings about."""
    with trio.fail_after(5):
        for _ in itertools.count():
            if predicate():
                return
            await trio.sleep(0.01)


def session(connect: Connect) -> p9client.Client:
    client = connect()
    client.negotiate()
    client.attach(0, uname="tester")
    return client


@pytest.mark.parametrize("kind", ["unix", "tcp"])
async def test_walk_open_read_write_stat_clunk(kind: str, tmp_path: pathlib.Path) -> None:
    async with serving(kind, tmp_path) as (connect, tree, server):

        def scenario() -> None:
            with session(connect) as c:
                assert c.msize == 8192
                qids = c.walk(0, 1, "version")
                assert len(qids) == 1
                assert qids[0].path == tree.version.stat().qid_path
                st = c.stat(1)
                assert (st.name, st.length, st.mode, st.uid) == ("version", 11, 0o444, "anvil")
                _qid, iounit = c.open(1, OREAD)
                assert iounit == 8192 - 24
                assert c.read(1, 4096, 0) == b"anvild 0.1\n"
                assert c.read(1, 4096, 11) == b""
                c.clunk(1)

                c.walk(0, 2, "ctl")
                c.open(2, OWRITE | OTRUNC)
                assert c.write(2, b"ping\n", 0) == 5
                assert c.write(2, b"", 5) == 0
                c.clunk(2)

                # A directory read returns whole stat entries that plan9port's codec accepts.
                c.walk(0, 3, ())
                c.open(3, OREAD)
                data = c.read(3, 8168, 0)
                names = [e.name for e in m.decode_stats(data, Dialect.P9P2000)]
                assert names == ["ctl", "version", "events"]
                assert c.read(3, 8168, len(data)) == b""
                c.clunk(3)

                # Errors are Rerror with a message a person can act on; the connection lives on.
                with pytest.raises(p9client.RemoteError, match="nope: file does not exist"):
                    c.walk(0, 4, "nope")
                c.walk(0, 4, "version")
                with pytest.raises(p9client.RemoteError, match="read-only"):
                    c.open(4, OWRITE)
                with pytest.raises(p9client.RemoteError, match="unknown fid 77"):
                    c.clunk(77)
                c.clunk(4)
                assert c.stat(0).name == "/"

        await trio.to_thread.run_sync(scenario)
        assert tree.ctl.data == bytearray(b"ping\n")
        assert tree.ctl.clunks == 1
        # The client closed without clunking its root fid: the server dropped it.
        await eventually(lambda: server.statistics().connections_open == 0)
        assert server.statistics().fids == 0


@pytest.mark.parametrize("kind", ["unix", "tcp"])
async def test_flush_of_a_blocked_read(kind: str, tmp_path: pathlib.Path) -> None:
    async with serving(kind, tmp_path) as (connect, tree, server):
        c = await trio.to_thread.run_sync(session, connect)
        await trio.to_thread.run_sync(c.walk, 0, 1, "events")
        await trio.to_thread.run_sync(c.open, 1, OREAD)
        outcome: list[object] = []

        def blocked_read() -> None:
            try:
                outcome.append(c.rpc(p9.Tread(fid=1, offset=0, count=100), tag=5))
            except Exception as exc:
                outcome.append(exc)

        reader = threading.Thread(target=blocked_read, daemon=True)
        reader.start()
        await eventually(lambda: server.statistics().requests_in_flight >= 1)

        reply = await trio.to_thread.run_sync(lambda: c.rpc(p9.Tflush(oldtag=5), p9.Rflush, tag=6))
        assert isinstance(reply, p9.Rflush)
        assert tree.events.cancelled_reads == 1
        # The connection keeps working; the flushed tag 5 never gets a reply.
        assert (await trio.to_thread.run_sync(c.stat, 1)).name == "events"
        tree.events.push(b"later\n")
        await trio.to_thread.run_sync(c.walk, 0, 2, "events")
        await trio.to_thread.run_sync(c.open, 2, OREAD)
        assert await trio.to_thread.run_sync(c.read, 2, 100, 0) == b"later\n"
        assert outcome == []
        assert reader.is_alive()
        # Hang up: the thread still waiting for tag 5 fails instead of receiving an answer.
        c.transport.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        await trio.to_thread.run_sync(reader.join, 5)
        assert len(outcome) == 1
        assert isinstance(outcome[0], Exception)
        c.close()
        await eventually(lambda: server.statistics().connections_open == 0)
        stats = server.statistics()
        assert (stats.fids, stats.open_handles, stats.requests_in_flight) == (0, 0, 0)
