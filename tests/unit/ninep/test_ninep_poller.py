"""The shared poller (server.py, `_Poller`): synchronous answers outside the connection's task.

Every test runs the server over a real socket pair (a `trio.SocketStream`: the raw path, where
idle connections park on the poller) and checks a semantic the poller must keep: a blocked read
on one fid never stalls another fid's fast request, Tflush still cancels a blocked read, a node
that needs its task still gets it (and everything pipelined after it stays in order), EOF and
garbage while parked close the connection cleanly, and the poller's task and epoll exist only
while connections do.
"""

from __future__ import annotations

import errno
import select
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from anvild.ninep import messages as m
from anvild.ninep import transport as server_module
from anvild.ninep.backend import LATER, Handle, Later, Node, NodeStat, OpenMode
from anvild.ninep.constants import OREAD, Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import BlockingFile, MemDir, MemFile, RawClient

P = Dialect.P9P2000
POLLER = "anvild.ninep.poller"


class _Handle(Handle):
    read_blocks = False
    clunk_blocks = False

    def __init__(self, file: _SyncFile) -> None:
        self.file = file

    async def read(self, offset: int, count: int) -> bytes:
        self.file.tasks.append(trio.lowlevel.current_task().name)
        return self.file.data[offset : offset + count]

    def read_now(self, offset: int, count: int) -> bytes:
        self.file.tasks.append(trio.lowlevel.current_task().name)
        return self.file.data[offset : offset + count]

    def clunk_now(self) -> None:
        return None


class _SyncFile(Node):
    """A file whose open and reads answer without waiting; records which task read it."""

    open_blocks = False

    def __init__(self, name: str, data: bytes) -> None:
        self.name = name
        self.data = data
        self.tasks: list[str] = []

    def stat(self) -> NodeStat:
        return NodeStat(self.name, 0o444, 700 + len(self.name), length=len(self.data))

    async def open(self, mode: OpenMode) -> Handle:
        return _Handle(self)

    def open_now(self, mode: OpenMode) -> Handle:
        return _Handle(self)


class _SyncDir(MemDir):
    def walk_now(self, name: str) -> Node | Later | None:
        return self.children.get(name)


class _LaterDir(MemDir):
    """A directory whose walks always need the connection's task (LATER)."""

    def walk_now(self, name: str) -> Node | Later | None:
        return LATER


def _tasks() -> list[str]:
    names = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return names


@asynccontextmanager
async def served(
    root: Node, *, msize: int = 8192, sndbuf: int | None = None
) -> AsyncIterator[tuple[RawClient, trio.SocketStream, Server]]:
    a, b = trio.socket.socketpair()
    if sndbuf is not None:
        b.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_SNDBUF, sndbuf)
    server = Server(lambda req: root, max_msize=msize)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: server.serve(trio.SocketStream(b), peer="sock"))
            stream = trio.SocketStream(a)
            client = RawClient(stream, P)
            await client.handshake(msize=msize)
            yield client, stream, server
            await stream.aclose()
        assert server.statistics().connections_open == 0
        assert server.statistics().fids == 0
        assert server.statistics().open_handles == 0


async def _small_op(c: RawClient, tag: int, fid: int, name: str) -> bytes:
    assert isinstance(await c.rpc(m.Twalk(tag, 0, fid, (name,))), m.Rwalk)
    assert isinstance(await c.rpc(m.Topen(tag, fid, OREAD)), m.Ropen)
    reply = await c.rpc(m.Tread(tag, fid, 0, 100))
    assert isinstance(reply, m.Rread), reply
    assert await c.rpc(m.Tclunk(tag, fid)) == m.Rclunk(tag)
    return reply.data


async def test_fast_requests_are_answered_by_the_poller_while_another_fid_blocks() -> None:
    quick = _SyncFile("quick", b"fast\n")
    events = BlockingFile("events")
    async with served(_SyncDir("/", [quick, events])) as (c, _, server):
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, ("events",))), m.Rwalk)
        assert isinstance(await c.rpc(m.Topen(0, 1, OREAD)), m.Ropen)
        await c.send(m.Tread(1, 1, 0, 100))  # blocks: a task of its own
        await trio.testing.wait_all_tasks_blocked()
        assert server.statistics().requests_in_flight == 1
        for _ in range(3):
            assert await _small_op(c, 2, 5, "quick") == b"fast\n"
        assert quick.tasks == [POLLER] * 3  # the connection's task stayed parked
        assert server.statistics().requests_in_flight == 1
        # Tflush of the blocked read still works: Rflush, and never an Rread for tag 1.
        assert await c.rpc(m.Tflush(3, 1)) == m.Rflush(3)
        assert events.cancelled_reads == 1
        assert server.statistics().requests_in_flight == 0
        events.push(b"late\n")
        assert await c.rpc(m.Tread(1, 1, 0, 100)) == m.Rread(1, b"late\n")
        assert await _small_op(c, 2, 5, "quick") == b"fast\n"


async def test_a_declined_frame_and_everything_after_it_go_to_the_task_in_order() -> None:
    quick = _SyncFile("quick", b"q\n")
    slow = MemFile("slow", b"slow\n", mode=0o444)  # no *_now calls; its reads checkpoint
    later = _LaterDir("later", [MemFile("inner", b"inner\n", mode=0o444)])
    root = _SyncDir("/", [quick, slow, later])
    async with served(root) as (c, _, server):
        assert await _small_op(c, 1, 1, "quick") == b"q\n"  # the connection is parked now
        frames = [
            m.Twalk(10, 0, 2, ("quick",)),  # answered by the poller
            m.Tstat(11, 0),  # not a poller request: handed to the task from here on
            m.Twalk(12, 0, 3, ("later", "inner")),  # a node that answers LATER
            m.Topen(13, 3, OREAD),
            m.Twalk(14, 0, 4, ("slow",)),
            m.Topen(15, 4, OREAD),
            m.Tclunk(16, 2),
            m.Tclunk(17, 3),
        ]
        await c.send_raw(b"".join(m.encode(f, P) for f in frames))
        replies = [await c.receive() for _ in frames]
        assert [r.tag for r in replies] == [f.tag for f in frames]
        assert [type(r) for r in replies] == [
            m.Rwalk, m.Rstat, m.Rwalk, m.Ropen, m.Rwalk, m.Ropen, m.Rclunk, m.Rclunk,
        ]  # fmt: skip
        assert isinstance(replies[2], m.Rwalk)
        assert len(replies[2].qids) == 2
        assert await c.rpc(m.Tread(20, 4, 0, 100)) == m.Rread(20, b"slow\n")  # a task's read
        assert await c.rpc(m.Tclunk(21, 4)) == m.Rclunk(21)
        assert server.statistics().requests_in_flight == 0
        # Back with the poller afterwards.
        assert await _small_op(c, 1, 1, "quick") == b"q\n"
        assert quick.tasks[-1] == POLLER


async def test_a_frame_split_across_receives_is_answered_by_the_poller() -> None:
    quick = _SyncFile("quick", b"q\n")
    async with served(_SyncDir("/", [quick])) as (c, stream, _):
        assert await _small_op(c, 1, 1, "quick") == b"q\n"
        frame = m.encode(m.Twalk(2, 0, 2, ("quick",)), P) + m.encode(m.Topen(3, 2, OREAD), P)
        await stream.send_all(frame[:5])
        await trio.testing.wait_all_tasks_blocked()
        await stream.send_all(frame[5:20])
        await trio.testing.wait_all_tasks_blocked()
        await stream.send_all(frame[20:])
        assert isinstance(await c.receive(), m.Rwalk)
        assert isinstance(await c.receive(), m.Ropen)
        assert await c.rpc(m.Tread(4, 2, 0, 10)) == m.Rread(4, b"q\n")
        assert quick.tasks[-1] == POLLER


async def test_replies_that_do_not_fit_the_socket_go_out_in_order() -> None:
    data = bytes(range(256)) * 1024  # 256 KiB
    big = _SyncFile("big", data)
    msize = 65536
    async with served(_SyncDir("/", [big]), msize=msize, sndbuf=4096) as (c, _, server):
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, ("big",))), m.Rwalk)
        assert isinstance(await c.rpc(m.Topen(0, 1, OREAD)), m.Ropen)
        step = msize - 24
        offsets = list(range(0, len(data), step))
        await c.send_raw(
            b"".join(m.encode(m.Tread(i, 1, off, step), P) for i, off in enumerate(offsets))
        )
        got = [await c.receive() for _ in offsets]
        assert [r.tag for r in got] == list(range(len(offsets)))  # inline answers: in order
        assert b"".join(r.data for r in got if isinstance(r, m.Rread)) == data
        assert await c.rpc(m.Tclunk(0, 1)) == m.Rclunk(0)
        assert server.statistics().requests_in_flight == 0


async def test_garbage_while_parked_closes_the_connection() -> None:
    quick = _SyncFile("quick", b"q\n")
    async with served(_SyncDir("/", [quick])) as (c, _, server):
        assert await _small_op(c, 1, 1, "quick") == b"q\n"
        assert isinstance(await c.rpc(m.Twalk(1, 0, 7, ("quick",))), m.Rwalk)  # a fid to drop
        # A size field larger than msize, answered at the poller: the connection closes.
        await c.send_raw(struct.pack("<IBH", 1 << 20, m.Tread.TYPE, 1) + b"\0" * 16)
        assert await c.at_eof()
        with trio.fail_after(5):
            while server.statistics().connections_open:  # noqa: ASYNC110 - polling stats
                await trio.sleep(0.01)


async def test_eof_while_parked_and_the_poller_lives_only_with_its_connections() -> None:
    quick = _SyncFile("quick", b"q\n")
    root = _SyncDir("/", [quick])
    for _ in range(2):  # the second connection gets a new poller task
        async with served(root) as (c, _stream, _):
            assert await _small_op(c, 1, 1, "quick") == b"q\n"
            assert isinstance(await c.rpc(m.Twalk(1, 0, 7, ("quick",))), m.Rwalk)
            assert isinstance(await c.rpc(m.Topen(1, 7, OREAD)), m.Ropen)  # open at EOF
            assert _tasks().count(POLLER) == 1
            assert quick.tasks[-1] == POLLER
        # `served` checked that the connection ended with no fids or handles left.
        await trio.testing.wait_all_tasks_blocked()
        assert POLLER not in _tasks()


async def test_several_connections_share_one_poller() -> None:
    quick = _SyncFile("quick", b"q\n")
    root = _SyncDir("/", [quick])
    async with served(root) as (c1, _, server):
        async with served(root) as (c2, _, _):
            for _ in range(3):
                assert await _small_op(c1, 1, 1, "quick") == b"q\n"
                assert await _small_op(c2, 1, 1, "quick") == b"q\n"
            assert _tasks().count(POLLER) == 1
        assert await _small_op(c1, 1, 1, "quick") == b"q\n"  # the other one's end changed nothing
        assert _tasks().count(POLLER) == 1
        assert server.statistics().connections_open == 1
    await trio.testing.wait_all_tasks_blocked()
    assert POLLER not in _tasks()


async def test_a_connection_the_poller_cannot_watch_waits_on_its_own(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class FullEpoll:
        """An epoll whose watch list is full (fs.epoll.max_user_watches)."""

        def __init__(self) -> None:
            self._epoll = select.epoll()

        def register(self, fd: int, events: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name: str) -> Any:
            return getattr(self._epoll, name)

    class FakeSelect:
        epoll = FullEpoll
        EPOLLIN = select.EPOLLIN

    monkeypatch.setattr(server_module, "select", FakeSelect)
    quick = _SyncFile("quick", b"q\n")
    async with served(_SyncDir("/", [quick])) as (c, _, server):
        for _ in range(3):
            assert await _small_op(c, 1, 1, "quick") == b"q\n"
        assert POLLER not in quick.tasks  # answered in the connection's own task
        assert server.statistics().requests_in_flight == 0
    assert "the poller cannot watch this connection" in caplog.text
