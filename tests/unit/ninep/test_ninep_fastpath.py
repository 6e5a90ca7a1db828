"""The server's fast path: inline answers vs. tasks, and raw socket I/O (see server.py)."""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from anvild.ninep import messages as m
from anvild.ninep import server as server_module
from anvild.ninep.backend import LATER, Handle, Later, Node, NodeStat, OpenMode
from anvild.ninep.constants import OREAD, OWRITE, Dialect
from anvild.ninep.errors import FsError
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


# --- the hot path (Twalk, Topen/Tlopen, Tread, Tclunk from bytes to bytes) ---------------------

# An error text larger than the script's msize (8192): every path must cut it to fit.
LONG_ERROR = "long: unknown value '" + "z" * 16_000 + "'"


class _QuickHandle(Handle):
    read_blocks = False
    clunk_blocks = False

    def __init__(self, file: _QuickFile) -> None:
        self.file = file

    async def read(self, offset: int, count: int) -> bytes:
        if self.file.behaviour == "broken":
            raise RuntimeError("a bug in the node")
        if self.file.behaviour == "long":
            raise FsError(LONG_ERROR, errno.EINVAL)
        if self.file.behaviour == "too much":
            return b"y" * (count + 1)
        if self.file.behaviour == "text":
            return "not bytes"  # type: ignore[return-value]  # a buggy node
        return self.file.data[offset : offset + count]

    async def clunk(self) -> None:
        if self.file.behaviour == "reject":
            raise FsError("rejected at clunk", errno.EINVAL)

    # The same answers without waiting (the poller's path), when the file is "sync".

    def read_now(self, offset: int, count: int) -> bytes | Later:
        if not self.file.sync:
            return LATER
        if self.file.behaviour == "broken":
            raise RuntimeError("a bug in the node")
        if self.file.behaviour == "long":
            raise FsError(LONG_ERROR, errno.EINVAL)
        if self.file.behaviour == "too much":
            return b"y" * (count + 1)
        if self.file.behaviour == "text":
            return "not bytes"  # type: ignore[return-value]  # a buggy node
        return self.file.data[offset : offset + count]

    def clunk_now(self) -> Later | None:
        if not self.file.sync:
            return LATER
        if self.file.behaviour == "reject":
            raise FsError("rejected at clunk", errno.EINVAL)
        return None


class _QuickFile(Node):
    """A file whose open, read and clunk never block (the hot path's kind)."""

    open_blocks = False

    def __init__(self, name: str, path: int, behaviour: str = "") -> None:
        self.name = name
        self.path = path
        self.behaviour = behaviour
        self.data = b"0123456789" * 1000  # more than one read at msize 8192
        self.sync = False

    def stat(self) -> NodeStat:
        return NodeStat(self.name, 0o444, self.path, length=len(self.data))

    async def open(self, mode: OpenMode) -> Handle:
        return _QuickHandle(self)

    def open_now(self, mode: OpenMode) -> Handle | Later:
        return _QuickHandle(self) if self.sync else LATER


class _SyncDir(MemDir):
    """A MemDir that can answer walks without waiting when ``sync`` is set."""

    sync = False

    def walk_now(self, name: str) -> Node | Later | None:
        return self.children.get(name) if self.sync else LATER


def _hot_script(d: Dialect) -> list[m.Message | bytes | None]:
    """Requests exercising every hot-path branch; None means "send without waiting"."""

    def opener(fid: int, write: bool = False, bad: bool = False) -> m.Message:
        if d is Dialect.P9P2000_L:
            return m.Tlopen(1, fid, 3 if bad else (1 if write else 0))
        return m.Topen(1, fid, 0x40 if bad else (OWRITE if write else OREAD))

    walk = m.Twalk
    return [
        walk(1, 0, 1, ("quick",)),
        walk(1, 0, 1, ("quick",)),  # newfid in use
        walk(1, 0, 2, ("nope",)),  # no such file
        walk(1, 0, 2, ("quick", "deeper")),  # partial walk: Rwalk with one qid
        walk(1, 99, 3, ()),  # unknown fid
        walk(1, 0, 3, ()),  # clone
        walk(1, 3, 3, ("quick",)),  # in place
        m.Tread(1, 1, 0, 10),  # not open
        opener(1),
        opener(1),  # already open
        walk(1, 1, 7, ()),  # walk from an open fid (.L allows it, 9P2000 refuses)
        m.Tread(1, 1, 0, 100_000),  # clamped to iounit
        m.Tread(1, 1, 3, 4),
        m.Tread(1, 1, 10_000, 4),  # end of file
        m.Tclunk(1, 1),
        m.Tclunk(1, 1),  # unknown fid now
        walk(1, 0, 4, ("broken",)),
        opener(4, bad=True),
        opener(4, write=True),  # read-only file
        opener(4),
        m.Tread(1, 4, 0, 10),  # the node raises: EIO, the connection goes on
        walk(1, 0, 5, ("reject",)),
        opener(5),
        m.Tclunk(1, 5),  # FsError from clunk: the fid is released anyway
        m.Tclunk(1, 5),
        walk(1, 0, 6, ("too much",)),
        opener(6),
        m.Tread(1, 6, 0, 10),  # a handle that returns too much: EIO
        walk(1, 0, 11, ("text",)),
        opener(11),
        m.Tread(1, 11, 0, 20),  # a handle that returns text, not bytes: EIO
        walk(1, 0, 12, ("long",)),
        opener(12),
        m.Tread(1, 12, 0, 20),  # an error text larger than msize: cut to fit
        walk(1, 0, 8, ("events",)),
        opener(8),
        None,  # the next request blocks (tag 9): it stays outstanding
        m.Tread(9, 8, 0, 10),
        m.Tread(9, 6, 0, 10),  # tag 9 is in use: refused by the generic path
        m.Tclunk(9, 6),
        m.Tflush(10, 9),
        m.Tclunk(0xFFFF, 3),  # NOTAG
        m.Tread(1, 3, 0, 10),
        # A walk name that is not UTF-8: a codec error, the connection closes.
        struct.pack("<IBHIIHH5s", 24, m.Twalk.TYPE, 1, 0, 11, 1, 5, b"AB\xffCD"),
    ]


def _hot_tree() -> _SyncDir:
    return _SyncDir(
        "/",
        [
            _QuickFile("quick", 901),
            _QuickFile("broken", 902, "broken"),
            _QuickFile("reject", 903, "reject"),
            _QuickFile("too much", 904, "too much"),
            _QuickFile("text", 905, "text"),
            _QuickFile("long", 906, "long"),
            BlockingFile("events"),
        ],
    )


async def _run_script(
    root: Node, d: Dialect, script: list[m.Message | bytes | None]
) -> list[bytes]:
    a, b = trio.socket.socketpair()
    server = Server(lambda req: root, max_msize=8192)
    replies: list[bytes] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: server.serve(trio.SocketStream(b), peer="sock"))
            stream = trio.SocketStream(a)
            client = RawClient(stream, d)
            await client.handshake(msize=8192)
            wait = True
            for item in script:
                if item is None:
                    wait = False
                    continue
                frame = item if isinstance(item, bytes) else m.encode(item, d)
                await client.send_raw(frame)
                if wait:
                    while (reply := client.reader.next_frame()) is None:
                        data = await stream.receive_some(65536)
                        if not data:
                            replies.append(b"EOF")
                            break
                        client.reader.feed(data)
                    if reply is not None:
                        replies.append(reply)
                wait = True
            await stream.aclose()
    assert server.statistics().fids == 0
    return replies


def _set_sync(root: _SyncDir, sync: bool) -> None:
    root.sync = sync
    for child in root.children.values():
        if isinstance(child, _QuickFile):
            child.sync = sync


@pytest.mark.parametrize("dialect", [Dialect.P9P2000, Dialect.P9P2000_L], ids=["9P2000", "L"])
async def test_the_hot_path_answers_byte_for_byte_like_the_generic_path(
    dialect: Dialect, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _hot_script(dialect)
    dispatched: list[int] = []
    generic_dispatch = server_module._Connection._dispatch

    async def counting(self: Any, frame: bytes) -> None:
        dispatched.append(frame[4])
        await generic_dispatch(self, frame)

    answered_now: list[str] = []
    answer_now = server_module._Connection.answer_now

    def counting_now(self: Any, frame: bytes) -> bool:
        answered = answer_now(self, frame)
        if answered:
            answered_now.append(trio.lowlevel.current_task().name)
        return answered

    monkeypatch.setattr(server_module._Connection, "_dispatch", counting)
    monkeypatch.setattr(server_module._Connection, "answer_now", counting_now)
    root = _hot_tree()  # one tree for all runs: the same qids
    # 1. The nodes answer without waiting: the poller (and the task's sync try) answer them.
    _set_sync(root, True)
    sync = await _run_script(root, dialect, script)
    sync_dispatched = len(dispatched)
    poller_answers = answered_now.count("anvild.ninep.poller")
    dispatched.clear()
    answered_now.clear()
    # 2. The nodes answer LATER: the async hot path in the connection's task.
    _set_sync(root, False)
    hot = await _run_script(root, dialect, script)
    hot_dispatched = len(dispatched)
    # (Refusals found before a node is called, e.g. a newfid in use, need no node: still sync.)
    assert len(answered_now) < poller_answers - 10
    dispatched.clear()
    # 3. Neither: every frame through `_dispatch`.
    monkeypatch.setattr(server_module._Connection, "_hot_table", lambda self, d: {})
    generic = await _run_script(root, dialect, script)
    assert sync == hot == generic
    assert hot[-1] == b"EOF"
    # Sanity: the fast paths really answered most of the script, and errors went every way.
    assert hot_dispatched < len(dispatched) - 15
    assert sync_dispatched < len(dispatched) - 15
    assert poller_answers >= 15
    decoded = [m.decode(r, dialect) for r in hot[:-1]]
    error = m.Rlerror if dialect is Dialect.P9P2000_L else m.Rerror
    assert sum(isinstance(r, error) for r in decoded) >= 14
    assert max(len(r) for r in hot) <= 8192  # the long error too, on every path
    if dialect is not Dialect.P9P2000_L:
        (cut,) = [r for r in decoded if isinstance(r, m.Rerror) and r.ename.startswith("long:")]
        assert cut.ename.endswith(m.TRUNCATED)
    assert m.Rread(1, b"3456") in decoded
