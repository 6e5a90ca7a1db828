"""The server's fast path: inline answers vs. tasks, and raw socket I/O (see server.py)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from anvild.ninep import messages as m
from anvild.ninep.backend import Handle, Node, NodeStat, OpenMode
from anvild.ninep.constants import OREAD, Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import BlockingFile, MemDir, MemFile, RawClient

P = Dialect.P9P2000


class _TaskRecorder(Node):
    """Records which trio task ran each read, with a handle that blocks or not."""

    def __init__(self, name: str, *, blocks: bool) -> None:
        self.name = name
        self.blocks = blocks
        self.tasks: list[str] = []

    def stat(self) -> NodeStat:
        return NodeStat(self.name, 0o444, 500 + len(self.name))

    async def open(self, mode: OpenMode) -> Handle:
        node = self

        class H(Handle):
            read_blocks = node.blocks

            async def read(self, offset: int, count: int) -> bytes:
                node.tasks.append(trio.lowlevel.current_task().name)
                return b"x"[offset : offset + count]

        return H()


@asynccontextmanager
async def over_socket(
    root: Node, *, msize: int = 8192, sndbuf: int | None = None
) -> AsyncIterator[tuple[RawClient, Server]]:
    """The server on one end of a real socket pair (a `trio.SocketStream`, the raw path)."""
    a, b = trio.socket.socketpair()
    if sndbuf is not None:
        b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    server = Server(lambda req: root, max_msize=msize)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: server.serve(trio.SocketStream(b), peer="sock"))
        client_stream = trio.SocketStream(a)
        client = RawClient(client_stream, P)
        await client.handshake(msize=msize)
        yield client, server
        await client_stream.aclose()
    assert server.statistics().connections_open == 0
    assert server.statistics().fids == 0


async def test_nonblocking_reads_are_inline_and_blocking_ones_get_a_task() -> None:
    quick = _TaskRecorder("quick", blocks=False)
    slow = _TaskRecorder("slow", blocks=True)
    async with over_socket(MemDir("/", [quick, slow])) as (c, server):
        for fid, name in ((1, "quick"), (2, "slow")):
            assert isinstance(await c.rpc(m.Twalk(0, 0, fid, (name,))), m.Rwalk)
            assert isinstance(await c.rpc(m.Topen(0, fid, OREAD)), m.Ropen)
            assert await c.rpc(m.Tread(0, fid, 0, 10)) == m.Rread(0, b"x")
        assert not quick.tasks[0].endswith("_run_request")
        assert slow.tasks[0].endswith("_run_request")
        assert server.statistics().requests_in_flight == 0


async def test_a_blocked_read_is_flushed_while_other_requests_proceed() -> None:
    events = BlockingFile("events")
    version = MemFile("version", b"anvild 0.1\n", mode=0o444)
    async with over_socket(MemDir("/", [events, version])) as (c, server):
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, ("events",))), m.Rwalk)
        assert isinstance(await c.rpc(m.Topen(0, 1, OREAD)), m.Ropen)
        await c.send(m.Tread(1, 1, 0, 100))
        await trio.testing.wait_all_tasks_blocked()
        assert server.statistics().requests_in_flight == 1
        for _ in range(3):  # the connection keeps serving other tags meanwhile
            assert isinstance(await c.rpc(m.Twalk(2, 0, 5, ("version",))), m.Rwalk)
            assert isinstance(await c.rpc(m.Topen(2, 5, OREAD)), m.Ropen)
            assert await c.rpc(m.Tread(2, 5, 0, 100)) == m.Rread(2, b"anvild 0.1\n")
            assert await c.rpc(m.Tclunk(2, 5)) == m.Rclunk(2)
            assert isinstance(await c.rpc(m.Tstat(3, 0)), m.Rstat)
        assert server.statistics().requests_in_flight == 1
        assert await c.rpc(m.Tflush(4, 1)) == m.Rflush(4)  # and never an Rread for tag 1
        assert events.cancelled_reads == 1
        assert server.statistics().requests_in_flight == 0
        events.push(b"late\n")
        assert await c.rpc(m.Tread(1, 1, 0, 100)) == m.Rread(1, b"late\n")  # the tag is free


async def test_a_flush_of_an_inline_request_follows_its_reply() -> None:
    version = MemFile("version", b"v\n", mode=0o444)
    async with over_socket(MemDir("/", [version])) as (c, _):
        # Both in one write: the walk is answered before the Tflush is decoded (flush(5)).
        frames = [m.Twalk(1, 0, 1, ("version",)), m.Tflush(2, 1)]
        await c.send_raw(b"".join(m.encode(f, P) for f in frames))
        assert isinstance(await c.receive(), m.Rwalk)
        assert await c.receive() == m.Rflush(2)


async def test_pipelined_large_reads_survive_a_small_send_buffer() -> None:
    data = bytes(range(256)) * 1024  # 256 KiB
    big = MemFile("big", data, mode=0o444)
    msize = 65536
    async with over_socket(MemDir("/", [big]), msize=msize, sndbuf=4096) as (c, _):
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, ("big",))), m.Rwalk)
        assert isinstance(await c.rpc(m.Topen(0, 1, OREAD)), m.Ropen)
        step = msize - 24
        offsets = list(range(0, len(data), step))
        await c.send_raw(
            b"".join(m.encode(m.Tread(i, 1, off, step), P) for i, off in enumerate(offsets))
        )
        got = sorted([await c.receive() for _ in offsets], key=lambda r: r.tag)  # tasks: any order
        assert [r.tag for r in got] == list(range(len(offsets)))
        assert b"".join(r.data for r in got if isinstance(r, m.Rread)) == data


async def test_a_large_pipelined_batch_is_answered_in_order() -> None:
    version = MemFile("version", b"v\n", mode=0o444)
    async with over_socket(MemDir("/", [version])) as (c, server):
        # More frames in one write than the receive loop answers before it yields.
        await c.send_raw(b"".join(m.encode(m.Tstat(i, 0), P) for i in range(600)))
        tags = []
        for _ in range(600):
            reply = await c.receive()
            assert isinstance(reply, m.Rstat)
            tags.append(reply.tag)
        assert tags == list(range(600))
        assert server.statistics().requests_in_flight == 0
