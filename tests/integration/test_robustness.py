"""The daemon survives hostile and careless clients, and leaves nothing behind.

The daemon runs in-process (the test's trio loop) on a real Unix socket, so each case can count
what it holds: trio tasks (walking the task tree from the root task), open file descriptors
(`/proc/self/fd`), the server's fids, handles and in-flight requests, stream readers, and live
per-open objects (stream cursors, found with `gc`). After every case a fresh client lists the root
and every count is back at its baseline.

The fuzz test feeds 10^5 frames (random but mostly well-formed messages in all three dialects,
plus garbage) through the server over in-memory streams, in batches, one trio run per hypothesis
example, and checks the same invariants.
"""

from __future__ import annotations

import gc
import os
import random
import resource
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvild.daemon.app import Daemon, DaemonConfig, Endpoints
from anvild.fs import Directory, SnapshotFile
from anvild.fs.stream import Cursor
from anvild.ninep import messages as m
from anvild.ninep.constants import NOFID, NOTAG, ORDWR, OREAD, Dialect
from anvild.ninep.framing import FrameReader
from anvild.ninep.server import Server
from anvild.tree.root import RootTree

MSIZE = 8192
ROOT_NAMES = ["ctl", "list", "version", "events", "big"]
BIG = 10_000


@pytest.fixture(autouse=True, scope="module")
def _enough_file_descriptors() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 16384) if hard != resource.RLIM_INFINITY else 16384
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < 4096:
        pytest.fail(f"RLIMIT_NOFILE hard limit {hard} is too low for 1000 connections")


# --- a small async 9P client ---------------------------------------------------------------


class Client:
    """One 9P connection, one request at a time (plus raw access for the hostile cases)."""

    def __init__(self, stream: trio.abc.Stream, dialect: Dialect = Dialect.P9P2000) -> None:
        self.stream = stream
        self.dialect = dialect
        self.reader = FrameReader(1 << 20)

    async def send(self, msg: m.Message) -> None:
        await self.stream.send_all(m.encode(msg, self.dialect))

    async def recv(self) -> m.Message | None:
        while (frame := self.reader.next_frame()) is None:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.reader.feed(data)
        return m.decode(frame, self.dialect)

    async def rpc(self, msg: m.Message) -> m.Message:
        await self.send(msg)
        reply = await self.recv()
        assert reply is not None, f"connection closed instead of answering {msg!r}"
        return reply

    async def handshake(self, aname: str = "") -> None:
        reply = await self.rpc(m.Tversion(NOTAG, MSIZE, self.dialect.value))
        assert isinstance(reply, m.Rversion), reply
        reply = await self.rpc(m.Tattach(0, 0, NOFID, "me", aname, os.getuid()))
        assert isinstance(reply, m.Rattach), reply

    async def read_file(self, name: str, fid: int = 1) -> bytes:
        assert isinstance(await self.rpc(m.Twalk(0, 0, fid, (name,))), m.Rwalk)
        assert isinstance(await self.rpc(m.Topen(0, fid, OREAD)), m.Ropen)
        out = b""
        while True:
            reply = await self.rpc(m.Tread(0, fid, len(out), 4096))
            assert isinstance(reply, m.Rread), reply
            if not reply.data:
                break
            out += reply.data
        assert isinstance(await self.rpc(m.Tclunk(0, fid)), m.Rclunk)
        return out

    async def list_dir(self, path: tuple[str, ...] = (), fid: int = 1) -> list[str]:
        """A 9P2000 directory read: whole stat entries per Rread, until an empty one."""
        assert isinstance(await self.rpc(m.Twalk(0, 0, fid, path)), m.Rwalk)
        assert isinstance(await self.rpc(m.Topen(0, fid, OREAD)), m.Ropen)
        names: list[str] = []
        offset = 0
        while True:
            reply = await self.rpc(m.Tread(0, fid, offset, MSIZE - 24))
            assert isinstance(reply, m.Rread), reply
            if not reply.data:
                break
            names += [s.name for s in m.decode_stats(reply.data, self.dialect)]
            offset += len(reply.data)
        assert isinstance(await self.rpc(m.Tclunk(0, fid)), m.Rclunk)
        return names

    async def aclose(self) -> None:
        await self.stream.aclose()


# --- the daemon under test and what it holds ----------------------------------------------


def count_tasks() -> int:
    count = 0
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


def count_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@attrs.frozen
class Holdings:
    tasks: int
    fds: int
    connections: int
    fids: int
    handles: int
    requests: int
    stream_readers: int
    cursors: int


@attrs.define
class Harness:
    daemon: Daemon
    endpoints: Endpoints
    baseline: Holdings | None = None

    def holdings(self) -> Holdings:
        gc.collect()
        stats = self.daemon.server.statistics()
        return Holdings(
            tasks=count_tasks(),
            fds=count_fds(),
            connections=stats.connections_open,
            fids=stats.fids,
            handles=stats.open_handles,
            requests=stats.requests_in_flight,
            stream_readers=self.daemon.tree.events.statistics().readers,
            cursors=sum(isinstance(o, Cursor) for o in gc.get_objects()),
        )

    async def connect(self, dialect: Dialect = Dialect.P9P2000) -> Client:
        stream = await trio.open_unix_socket(str(self.endpoints.socket_path))
        return Client(stream, dialect)

    async def check_clean(self) -> None:
        """A fresh client lists the root, then everything is back at the baseline."""
        client = await self.connect()
        await client.handshake()
        assert await client.list_dir() == ROOT_NAMES
        await client.aclose()
        assert self.baseline is not None
        with trio.fail_after(10):
            while True:
                now = self.holdings()
                if now == self.baseline:
                    return
                await trio.sleep(0.02)  # the server notices EOF asynchronously


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    tree = RootTree()
    tree.root.add(Directory("big", [SnapshotFile(f"f{i:05}", lambda: "") for i in range(BIG)]))
    daemon = Daemon(DaemonConfig(namespace=tmp_path / "ns"), tree=tree)
    async with trio.open_nursery() as nursery:
        endpoints = await nursery.start(daemon.run)
        h = Harness(daemon, endpoints)
        warm = await h.connect()  # the first connection may set things up lazily
        await warm.handshake()
        assert await warm.list_dir() == ROOT_NAMES
        await warm.aclose()
        with trio.fail_after(10):
            while daemon.server.statistics().connections_open:  # noqa: ASYNC110 - polling stats
                await trio.sleep(0.01)
        h.baseline = h.holdings()
        yield h
        nursery.cancel_scope.cancel()


# --- the cases -----------------------------------------------------------------------------


async def test_a_thousand_concurrent_connections(harness: Harness) -> None:
    done = 0

    async def one() -> None:
        nonlocal done
        client = await harness.connect()
        await client.handshake()
        assert await client.read_file("version") == b"anvild 0.1.0\n"
        await client.aclose()
        done += 1

    with trio.fail_after(50):
        async with trio.open_nursery() as nursery:
            for _ in range(1000):
                nursery.start_soon(one)
    assert done == 1000
    await harness.check_clean()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\xff" * 64, id="garbage-size"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
        pytest.param(struct.pack("<IBH", 3, 100, 0), id="size-below-header"),
        pytest.param(struct.pack("<IBH", 100, 100, 0) + b"abc", id="truncated-then-eof"),
        pytest.param(b"\x13\x00", id="truncated-header"),
        pytest.param(m.encode(m.Tversion(NOTAG, MSIZE, "9P2000"), Dialect.P9P2000)[:-3], id="cut"),
        pytest.param(struct.pack("<IBH", 11, 100, 0) + b"\xff\xff\xff\xff", id="bad-body"),
    ],
)
async def test_garbage_and_truncated_frames(harness: Harness, payload: bytes) -> None:
    client = await harness.connect()
    await client.stream.send_all(payload)
    with trio.move_on_after(0.2):
        while await client.stream.receive_some(65536):
            pass  # whatever the server says (an error, or nothing) it must then hang up
    await client.aclose()
    await harness.check_clean()


async def test_garbage_after_a_handshake_keeps_other_connections_alive(harness: Harness) -> None:
    bystander = await harness.connect()
    await bystander.handshake()
    hostile = await harness.connect()
    await hostile.handshake()
    await hostile.stream.send_all(os.urandom(4096))
    assert await bystander.read_file("version") == b"anvild 0.1.0\n"
    await hostile.aclose()
    await bystander.aclose()
    await harness.check_clean()


async def test_a_size_field_larger_than_msize_closes_the_connection(harness: Harness) -> None:
    client = await harness.connect()
    await client.handshake()
    await client.stream.send_all(struct.pack("<IBH", MSIZE + 1, 116, 0) + b"\0" * 16)
    with trio.fail_after(5):
        assert await client.recv() is None  # no reply: the frame cannot be trusted
    await client.aclose()
    await harness.check_clean()


async def test_a_read_larger_than_msize_is_clamped(harness: Harness) -> None:
    client = await harness.connect()
    await client.handshake()
    await client.rpc(m.Twalk(0, 0, 1, ("big",)))
    await client.rpc(m.Topen(0, 1, OREAD))
    reply = await client.rpc(m.Tread(0, 1, 0, 1 << 30))
    assert isinstance(reply, m.Rread)
    assert 0 < len(reply.data) <= MSIZE - 11
    await client.aclose()
    await harness.check_clean()


@pytest.mark.parametrize("how", ["disconnect", "flush-then-disconnect", "clunk-other-tag"])
async def test_a_client_that_goes_away_while_its_read_is_blocked(
    harness: Harness, how: str
) -> None:
    clients = []
    for _ in range(20):
        client = await harness.connect()
        await client.handshake()
        await client.rpc(m.Twalk(0, 0, 1, ("events",)))
        await client.rpc(m.Topen(0, 1, OREAD))
        backlog = await client.rpc(m.Tread(0, 1, 0, 4096))  # daemon_started
        assert isinstance(backlog, m.Rread)
        assert backlog.data
        await client.send(m.Tread(1, 1, 0, 4096))  # blocks: nothing new
        clients.append(client)
    await trio.testing.wait_all_tasks_blocked(0.05)
    during = harness.holdings()
    assert harness.baseline is not None
    assert during.stream_readers == harness.baseline.stream_readers + 20
    assert during.requests == 20
    for client in clients:
        if how == "flush-then-disconnect":
            reply = await client.rpc(m.Tflush(2, 1))
            assert isinstance(reply, m.Rflush)  # and no Rread for tag 1 before it
        elif how == "clunk-other-tag":
            reply = await client.rpc(m.Tclunk(2, 1))
            assert isinstance(reply, m.Rclunk)
        await client.aclose()
    await harness.check_clean()


async def test_stat_and_read_of_a_directory_with_ten_thousand_entries(harness: Harness) -> None:
    client = await harness.connect()
    await client.handshake()
    await client.rpc(m.Twalk(0, 0, 2, ("big",)))
    reply = await client.rpc(m.Tstat(0, 2))
    assert isinstance(reply, m.Rstat)
    assert reply.stat.name == "big"
    assert reply.stat.mode & 0x80000000
    with trio.fail_after(20):
        names = await client.list_dir(("big",))
    assert names == [f"f{i:05}" for i in range(BIG)]
    await client.aclose()

    # 9P2000.L: Treaddir with offsets that resume where the previous reply ended
    client = await harness.connect(Dialect.P9P2000_L)
    await client.handshake()
    await client.rpc(m.Twalk(0, 0, 1, ("big",)))
    assert isinstance(await client.rpc(m.Tlopen(0, 1, 0)), m.Rlopen)
    seen: list[str] = []
    offset = 0
    with trio.fail_after(20):
        while True:
            rd = await client.rpc(m.Treaddir(0, 1, offset, MSIZE - 24))
            assert isinstance(rd, m.Rreaddir), rd
            entries = m.decode_dirents(rd.data)
            if not entries:
                break
            seen += [e.name for e in entries]
            offset = entries[-1].offset
    assert seen == [".", "..", *(f"f{i:05}" for i in range(BIG))]
    await client.aclose()
    await harness.check_clean()


# --- fuzz ----------------------------------------------------------------------------------

FRAMES_PER_EXAMPLE = 1000
EXAMPLES = 100  # 10^5 frames in all
FRAMES_PER_CONNECTION = 250
NAMES = ["ctl", "list", "version", "events", "big", "nope", ".", "..", "", "f00001", "a/b"]


def random_message(rnd: random.Random, dialect: Dialect) -> m.Message:
    tag = rnd.choice([0, 1, 2, rnd.randrange(0xFFFF)])
    fid = rnd.choice([0, 1, 2, 3, rnd.randrange(1 << 32)])
    newfid = rnd.choice([1, 2, 3, 4, fid])
    kind = rnd.randrange(16)
    if kind == 0:
        return m.Twalk(tag, fid, newfid, tuple(rnd.choices(NAMES, k=rnd.randrange(4))))
    if kind == 1:
        return m.Topen(tag, fid, rnd.choice([OREAD, ORDWR, 1, 0x10 | 1, rnd.randrange(256)]))
    if kind == 2:
        return m.Tread(
            tag, fid, rnd.choice([0, 1, 100, rnd.randrange(1 << 40)]), rnd.randrange(MSIZE * 2)
        )
    if kind == 3:
        data = rnd.choice([b"ping\n", b"ping", b"frob\n", b"", rnd.randbytes(rnd.randrange(64))])
        return m.Twrite(tag, fid, rnd.randrange(1 << 20), data)
    if kind == 4:
        return m.Tclunk(tag, fid)
    if kind == 5:
        return m.Tstat(tag, fid)
    if kind == 6:
        return m.Tflush(tag, rnd.choice([0, 1, 2, tag]))
    if kind == 7:
        return m.Tattach(tag, fid, NOFID, "u", rnd.choice(["", "x"]), rnd.randrange(1 << 32))
    if kind == 8:
        return m.Tauth(tag, fid, "u", "", rnd.randrange(1 << 32))
    if kind == 9:
        return m.Tremove(tag, fid)
    if kind == 10:
        return m.Tcreate(tag, fid, rnd.choice(NAMES), rnd.randrange(1 << 32), rnd.randrange(256))
    if dialect is Dialect.P9P2000_L:
        if kind == 11:
            return m.Tlopen(tag, fid, rnd.choice([0, 1, 2, 0o1001, rnd.randrange(1 << 32)]))
        if kind == 12:
            return m.Treaddir(
                tag, fid, rnd.choice([0, 1, 2, rnd.randrange(1 << 40)]), rnd.randrange(MSIZE)
            )
        if kind == 13:
            return m.Tgetattr(tag, fid, rnd.randrange(1 << 14))
    return m.Tread(tag, fid, 0, 4096)


def random_frames(rnd: random.Random, garbage: bytes) -> list[list[bytes]]:
    """Connections' worth of frames: a Tversion, an attach, random messages, maybe garbage."""
    connections: list[list[bytes]] = []
    total = 0
    while total < FRAMES_PER_EXAMPLE:
        dialect = rnd.choice(list(Dialect))
        frames = [
            m.encode(m.Tversion(NOTAG, MSIZE, dialect.value), dialect),
            m.encode(m.Tattach(0, 0, NOFID, "u", "", os.getuid()), dialect),
        ]
        unknown = [t for t in range(256) if t not in m.MESSAGE_TYPES[dialect]]
        while len(frames) < FRAMES_PER_CONNECTION - 1:
            if rnd.random() < 0.3:
                # Well framed, of a type this dialect does not define, random body: the server
                # must answer with an error on that tag and keep the connection.
                body = rnd.randbytes(rnd.randrange(32))
                frames.append(
                    struct.pack("<IBH", 7 + len(body), rnd.choice(unknown), rnd.randrange(1 << 16))
                    + body
                )
            else:
                frames.append(m.encode(random_message(rnd, dialect), dialect))
        # The last frame may be hostile; it usually ends the connection, so it goes last.
        last = rnd.random()
        if garbage and last < 0.4:
            frames.append(garbage)
        elif last < 0.8:
            frame = bytearray(m.encode(random_message(rnd, dialect), dialect))
            frame[rnd.randrange(7, len(frame))] ^= 1 + rnd.randrange(255)  # size field intact
            frames.append(bytes(frame))
        connections.append(frames)
        total += len(frames)
    return connections


async def _feed_one_example(connections: list[list[bytes]]) -> int:
    tree = RootTree()
    tree.root.add(Directory("big", [SnapshotFile(f"f{i:05}", lambda: "") for i in range(3)]))
    server = Server(lambda request: tree.root, max_msize=MSIZE)
    sent = 0
    async with trio.open_nursery() as nursery:
        for frames in connections:
            client_end, server_end = trio.testing.memory_stream_pair()
            nursery.start_soon(server.serve, server_end)
            await client_end.send_all(b"".join(frames))
            sent += len(frames)
            await trio.testing.wait_all_tasks_blocked()  # the server did all it could
            await client_end.aclose()
        await trio.testing.wait_all_tasks_blocked()
        # the server survived: a fresh client lists the root
        client_end, server_end = trio.testing.memory_stream_pair()
        nursery.start_soon(server.serve, server_end)
        client = Client(client_end)
        await client.handshake()
        assert await client.list_dir() == ROOT_NAMES
        await client.aclose()
        await trio.testing.wait_all_tasks_blocked()
    stats = server.statistics()
    assert (stats.connections_open, stats.fids, stats.open_handles, stats.requests_in_flight) == (
        0,
        0,
        0,
        0,
    )
    assert tree.events.statistics().readers == 0
    return sent


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(seed=st.integers(0, 2**64 - 1), garbage=st.binary(max_size=48))
def test_fuzz_the_server_survives_random_frames(seed: int, garbage: bytes) -> None:
    # Hypothesis picks the seed (and the garbage); a seeded generator expands it into a
    # thousand frames cheaply, so 10^5 frames take seconds, and a failure replays exactly.
    connections = random_frames(random.Random(seed), garbage)
    assert trio.run(_feed_one_example, connections) >= FRAMES_PER_EXAMPLE
