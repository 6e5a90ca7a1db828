"""A session's `log`/`events` handle says a read would block only when nothing is buffered, so
the 9P server answers a reader that is behind inline (no task per read); over 9P the reads are
the same either way, and a read that waits still ends with its clunk."""

from __future__ import annotations

import trio
import trio.testing

from anvild.fs import Directory, FsNode
from anvild.ninep import messages as m
from anvild.ninep.backend import Handle, OpenMode
from anvild.ninep.constants import Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import RawClient
from anvild.session.stream import LineBroadcast
from anvild.tree.sessions import _ReaderHandle


async def test_a_read_blocks_only_when_nothing_is_buffered() -> None:
    lines = LineBroadcast()
    handle = _ReaderHandle(lines.open_reader())
    assert handle.read_blocks
    lines.publish("one")
    assert not handle.read_blocks
    assert await handle.read(0, 100) == b"one\n"
    assert handle.read_blocks
    lines.close()
    assert not handle.read_blocks  # end of file comes at once
    assert await handle.read(0, 100) == b""


async def test_over_9p_a_reader_behind_and_a_reader_waiting() -> None:
    lines = LineBroadcast()

    class Events(FsNode):
        async def open(self, mode: OpenMode) -> Handle:
            return _ReaderHandle(lines.open_reader(backlog=False))

    tree = Directory("/", [Events("events", 0o444)])
    server = Server(lambda request: tree)
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve, server_stream)
        raw = RawClient(client_stream, Dialect.P9P2000)
        await raw.handshake()
        assert isinstance(await raw.rpc(m.Twalk(0, 0, 1, ("events",))), m.Rwalk)
        assert isinstance(await raw.rpc(m.Topen(0, 1, 0)), m.Ropen)
        for text in ("a", "b", "c"):
            lines.publish(text)
        with trio.fail_after(5):
            assert await raw.rpc(m.Tread(0, 1, 0, 4096)) == m.Rread(0, b"a\nb\nc\n")

            async def publish_later() -> None:
                await trio.sleep(0.01)
                lines.publish("d")

            nursery.start_soon(publish_later)
            assert await raw.rpc(m.Tread(0, 1, 0, 4096)) == m.Rread(0, b"d\n")
            await raw.send(m.Tread(1, 1, 0, 4096))  # waits: nothing is buffered
            await trio.testing.wait_all_tasks_blocked()
            await raw.send(m.Tclunk(2, 1))
            replies = {reply.tag: reply for reply in [await raw.receive(), await raw.receive()]}
        assert replies[2] == m.Rclunk(2)
        assert replies[1] == m.Rread(1, b"")  # the clunk ended the waiting read
        nursery.cancel_scope.cancel()
