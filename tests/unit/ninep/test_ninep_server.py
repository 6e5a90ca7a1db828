"""The trio 9P server over in-memory streams: negotiation, validation, flush, teardown."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from anvild.ninep import messages as m
from anvild.ninep.backend import AttachRequest, Handle, Node, NodeStat, OpenMode
from anvild.ninep.constants import (
    AT_REMOVEDIR,
    DMDIR,
    GETATTR_ALL,
    L_O_DIRECTORY,
    L_O_RDONLY,
    L_O_RDWR,
    L_O_TRUNC,
    L_O_WRONLY,
    NOFID,
    NOTAG,
    ORDWR,
    OREAD,
    OTRUNC,
    OWRITE,
    S_IFDIR,
    S_IFREG,
    SETATTR_CTIME,
    SETATTR_MTIME,
    SETATTR_SIZE,
    Dialect,
)
from anvild.ninep.errors import FsError
from anvild.ninep.server import Server
from anvild.ninep.testing import BlockingFile, MemDir, MemFile, RawClient

L = Dialect.P9P2000_L
U = Dialect.P9P2000_U
P = Dialect.P9P2000


class Tree:
    def __init__(self) -> None:
        self.ctl = MemFile("ctl", mode=0o666, truncatable=True, append_only=True)
        self.version = MemFile("version", b"anvild 0.1\n", mode=0o444)
        self.events = BlockingFile("events")
        self.sub = MemDir("sub", [MemFile(f"f{i:02}", b"x" * i) for i in range(30)])
        self.root = MemDir("/", [self.ctl, self.version, self.events, self.sub])


@asynccontextmanager
async def serving(
    dialect: Dialect = P,
    *,
    check: Callable[[AttachRequest], None] | None = None,
    server: Server | None = None,
    tree: Tree | None = None,
    handshake: bool = True,
    msize: int = 8192,
) -> AsyncIterator[tuple[RawClient, Tree, Server]]:
    tree = tree or Tree()
    root = tree.root
    server = server or Server(lambda req: root)
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: server.serve(server_stream, check_attach=check, peer="test"))
        client = RawClient(client_stream, dialect)
        if handshake:
            await client.handshake(msize=msize)
        yield client, tree, server
        await client_stream.aclose()
    assert server.statistics().connections_open == 0


async def walk_open(c: RawClient, names: tuple[str, ...], mode: int, fid: int = 1) -> m.Message:
    reply = await c.rpc(m.Twalk(0, 0, fid, names))
    assert isinstance(reply, m.Rwalk), reply
    if c.dialect is L:
        return await c.rpc(m.Tlopen(0, fid, mode))
    return await c.rpc(m.Topen(0, fid, mode))


def assert_error(reply: m.Message, dialect: Dialect, text: str, code: int) -> None:
    if dialect is L:
        assert reply == m.Rlerror(reply.tag, code)
    else:
        assert isinstance(reply, m.Rerror), reply
        assert text in reply.ename
        assert reply.errno == (code if dialect is U else 0)


# --- version, auth, attach -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "answered"),
    [("9P2000", "9P2000"), ("9P2000.u", "9P2000.u"), ("9P2000.L", "9P2000.L"),
     ("9P2000.x", "9P2000"), ("9P1999", "unknown"), ("", "unknown")],
)  # fmt: skip
async def test_version_negotiation(asked: str, answered: str) -> None:
    async with serving(handshake=False, server=Server(lambda r: Tree().root, max_msize=65536)) as (
        c, _, _,
    ):  # fmt: skip
        reply = await c.rpc(m.Tversion(NOTAG, 1 << 30, asked))
        assert reply == m.Rversion(NOTAG, 65536, answered)


async def test_msize_too_small_and_requests_before_version() -> None:
    async with serving(handshake=False) as (c, _, _):
        reply = await c.rpc(m.Tattach(0, 0, NOFID, "u", ""))
        assert isinstance(reply, m.Rerror)
        assert "first message must be Tversion" in reply.ename
        reply = await c.rpc(m.Tversion(NOTAG, 100, "9P2000"))
        assert isinstance(reply, m.Rerror)
        assert "msize 100 is too small" in reply.ename
        assert await c.rpc(m.Tversion(NOTAG, 512, "9P2000")) == m.Rversion(NOTAG, 512, "9P2000")


@pytest.mark.parametrize("dialect", [P, U, L])
async def test_auth_is_refused_in_each_dialect(dialect: Dialect) -> None:
    async with serving(dialect, handshake=False) as (c, _, _):
        await c.rpc(m.Tversion(NOTAG, 8192, dialect.value))
        reply = await c.rpc(m.Tauth(0, 0, "u", ""))
        assert_error(reply, dialect, "authentication not required", errno.ENOENT)
        # diod's tools need exactly Rlerror ENOENT.
        if dialect is L:
            assert reply == m.Rlerror(0, errno.ENOENT)
        reply = await c.rpc(m.Tattach(0, 0, 5, "u", ""))
        assert_error(reply, dialect, "authentication not required", errno.EINVAL)


async def test_attach_check_and_fid_reuse() -> None:
    seen: list[AttachRequest] = []

    def check(req: AttachRequest) -> None:
        seen.append(req)
        if req.aname != "token":
            raise FsError("attach refused: give the token as the attach name", errno.EACCES)

    async with serving(U, check=check, handshake=False) as (c, _, _):
        await c.rpc(m.Tversion(NOTAG, 8192, "9P2000.u"))
        reply = await c.rpc(m.Tattach(0, 0, NOFID, "me", "wrong", 1000))
        assert reply == m.Rerror(0, "attach refused: give the token as the attach name", 13)
        assert isinstance(await c.rpc(m.Tattach(0, 0, NOFID, "me", "token", 1000)), m.Rattach)
        assert seen[-1] == AttachRequest("me", "token", 1000, "9P2000.u", "test")
        reply = await c.rpc(m.Tattach(0, 0, NOFID, "me", "token", 1000))
        assert_error(reply, U, "fid 0 is already in use", errno.EBADF)


async def test_second_version_resets_the_connection() -> None:
    async with serving() as (c, tree, server):
        await walk_open(c, ("events",), OREAD)
        await c.send(m.Tread(7, 1, 0, 100))
        await trio.testing.wait_all_tasks_blocked()
        assert server.statistics().requests_in_flight == 1
        reply = await c.rpc(m.Tversion(NOTAG, 8192, "9P2000"))
        assert reply == m.Rversion(NOTAG, 8192, "9P2000")  # the blocked read got no reply
        assert tree.events.cancelled_reads == 1
        assert tree.events.aborts == 1
        stats = server.statistics()
        assert (stats.fids, stats.open_handles, stats.requests_in_flight) == (0, 0, 0)
        assert_error(await c.rpc(m.Tstat(0, 0)), P, "unknown fid 0", errno.EBADF)


# --- walk, open, read, write ---------------------------------------------------------------------


async def test_plan9port_read_sequence() -> None:
    async with serving() as (c, _, _):
        reply = await walk_open(c, ("version",), OREAD)
        assert isinstance(reply, m.Ropen)
        assert reply.iounit == 8192 - 24
        assert await c.rpc(m.Tread(0, 1, 0, 4096)) == m.Rread(0, b"anvild 0.1\n")
        assert await c.rpc(m.Tread(0, 1, 11, 4096)) == m.Rread(0, b"")
        assert await c.rpc(m.Tclunk(0, 1)) == m.Rclunk(0)


async def test_walk_errors_and_partial_walks() -> None:
    async with serving() as (c, _, _):
        assert_error(await c.rpc(m.Twalk(0, 9, 1, ())), P, "unknown fid 9", errno.EBADF)
        assert_error(await c.rpc(m.Twalk(0, 0, 0, ("nope",))), P, "nope: file does not exist",
                     errno.ENOENT)  # fmt: skip
        # walk(5): a later failure returns the qids so far and leaves newfid unused.
        reply = await c.rpc(m.Twalk(0, 0, 1, ("sub", "nope")))
        assert isinstance(reply, m.Rwalk)
        assert len(reply.qids) == 1
        assert_error(await c.rpc(m.Tstat(0, 1)), P, "unknown fid 1", errno.EBADF)
        reply = await c.rpc(m.Twalk(0, 0, 1, ("version", "x")))
        assert isinstance(reply, m.Rwalk)
        assert len(reply.qids) == 1
        await c.rpc(m.Twalk(0, 0, 1, ("version",)))
        assert_error(await c.rpc(m.Twalk(0, 1, 2, ("x",))), P, "version is not a directory",
                     errno.ENOTDIR)  # fmt: skip
        assert_error(await c.rpc(m.Twalk(0, 0, 1, ())), P, "newfid 1 is already in use",
                     errno.EBADF)  # fmt: skip
        # ".." of the root is the root; ".." from sub goes back up.
        reply = await c.rpc(m.Twalk(0, 0, 2, ("..", "sub", "..", "ctl")))
        assert isinstance(reply, m.Rwalk)
        assert len(reply.qids) == 4
        stat = await c.rpc(m.Tstat(0, 2))
        assert isinstance(stat, m.Rstat)
        assert stat.stat.name == "ctl"
        # Walking a fid onto itself.
        await c.rpc(m.Tclunk(0, 2))
        await c.rpc(m.Twalk(0, 0, 2, ("sub",)))
        assert isinstance(await c.rpc(m.Twalk(0, 2, 2, ("..",))), m.Rwalk)
        stat = await c.rpc(m.Tstat(0, 2))
        assert isinstance(stat, m.Rstat)
        assert stat.stat.name == "/"


@pytest.mark.parametrize("dialect", [P, U])
async def test_walk_from_an_open_fid_is_refused(dialect: Dialect) -> None:
    async with serving(dialect) as (c, _, _):
        await walk_open(c, ("sub",), OREAD)
        assert_error(await c.rpc(m.Twalk(0, 1, 2, ("f01",))), dialect, "it is open",
                     errno.EBUSY)  # fmt: skip


async def test_dotl_walks_dot_and_dotdot_from_an_open_directory() -> None:
    async with serving(L) as (c, _, _):
        assert isinstance(await walk_open(c, ("sub",), L_O_RDONLY | L_O_DIRECTORY), m.Rlopen)
        reply = await c.rpc(m.Twalk(0, 1, 2, (".",)))
        assert isinstance(reply, m.Rwalk)
        assert len(reply.qids) == 1
        reply = await c.rpc(m.Twalk(0, 1, 3, ("..",)))
        assert isinstance(reply, m.Rwalk)
        attr = await c.rpc(m.Tgetattr(0, 3, GETATTR_ALL))
        assert isinstance(attr, m.Rgetattr)
        assert attr.mode & S_IFDIR
        assert isinstance(await c.rpc(m.Twalk(0, 1, 4, ("f03",))), m.Rwalk)


async def test_open_mode_checks() -> None:
    async with serving() as (c, tree, _):
        assert_error(await walk_open(c, ("version",), OWRITE), P, "version: permission denied",
                     errno.EACCES)  # fmt: skip
        assert_error(await c.rpc(m.Topen(0, 1, 0x80)), P, "bad open mode 0x80", errno.EINVAL)
        assert_error(await c.rpc(m.Topen(0, 1, OREAD | OTRUNC)), P, "read-only", errno.EACCES)
        await c.rpc(m.Twalk(0, 0, 2, ("sub",)))
        assert_error(await c.rpc(m.Topen(0, 2, ORDWR)), P, "sub is a directory", errno.EISDIR)
        assert isinstance(await c.rpc(m.Topen(0, 1, OREAD)), m.Ropen)
        assert_error(await c.rpc(m.Topen(0, 1, OREAD)), P, "already open", errno.EBUSY)
        assert_error(await c.rpc(m.Twrite(0, 1, 0, b"x")), P, "not open for writing",
                     errno.EBADF)  # fmt: skip
        assert_error(await c.rpc(m.Tread(0, 2, 0, 10)), P, "not open for reading", errno.EBADF)
        await c.rpc(m.Twalk(0, 0, 3, ("ctl",)))
        assert isinstance(await c.rpc(m.Topen(0, 3, OWRITE | OTRUNC)), m.Ropen)
        assert tree.ctl.opens == [OpenMode(read=False, write=True, truncate=True)]
        assert_error(await c.rpc(m.Tread(0, 3, 0, 10)), P, "not open for reading", errno.EBADF)


async def test_writes_and_the_zero_count_rule() -> None:
    async with serving() as (c, tree, _):
        await walk_open(c, ("ctl",), OWRITE | OTRUNC)
        assert await c.rpc(m.Twrite(0, 1, 0, b"ping\n")) == m.Rwrite(0, 5)
        assert await c.rpc(m.Twrite(0, 1, 5, b"")) == m.Rwrite(0, 0)  # empty stdin case
        tree.ctl.take_nothing = True
        # plan9port loops forever on Rwrite count=0 for a non-empty write: never send that.
        assert_error(await c.rpc(m.Twrite(0, 1, 5, b"x")), P, "the write was not accepted",
                     errno.EIO)  # fmt: skip
        assert await c.rpc(m.Twrite(0, 1, 5, b"")) == m.Rwrite(0, 0)
        assert tree.ctl.data == bytearray(b"ping\n")


async def test_read_count_is_clamped_to_msize() -> None:
    tree = Tree()
    tree.version.data = bytearray(b"y" * 10000)
    async with serving(tree=tree) as (c, _, _):
        await walk_open(c, ("version",), OREAD)
        reply = await c.rpc(m.Tread(0, 1, 0, 1 << 20))
        assert isinstance(reply, m.Rread)
        assert len(reply.data) == 8192 - 24


async def test_directory_reads_never_split_entries_and_check_offsets() -> None:
    async with serving(U) as (c, tree, _):
        await walk_open(c, ("sub",), OREAD)
        names: list[str] = []
        offset = 0
        while True:
            reply = await c.rpc(m.Tread(0, 1, offset, 200))
            assert isinstance(reply, m.Rread)
            if not reply.data:
                break
            assert len(reply.data) <= 200
            names += [s.name for s in m.decode_stats(reply.data, U)]
            offset += len(reply.data)
        assert names == [f"f{i:02}" for i in range(30)]
        assert_error(await c.rpc(m.Tread(0, 1, 5, 200)), U, "bad offset 5 in a directory read",
                     errno.EINVAL)  # fmt: skip
        assert_error(await c.rpc(m.Tread(0, 1, 0, 10)), U, "too small for the next directory",
                     errno.EINVAL)  # fmt: skip
        # Offset 0 restarts with a fresh listing.
        del tree.sub.children["f00"]
        reply = await c.rpc(m.Tread(0, 1, 0, 8000))
        assert isinstance(reply, m.Rread)
        assert next(s.name for s in m.decode_stats(reply.data, U)) == "f01"


# --- flush and concurrency -----------------------------------------------------------------------


async def test_flush_of_a_blocked_read_is_never_answered() -> None:
    async with serving() as (c, tree, server):
        await walk_open(c, ("events",), OREAD)
        await c.send(m.Tread(1, 1, 0, 100))
        await trio.testing.wait_all_tasks_blocked()
        # Another tag is served while the read is blocked.
        assert isinstance(await c.rpc(m.Tstat(2, 1)), m.Rstat)
        assert await c.rpc(m.Tflush(3, 1)) == m.Rflush(3)
        assert tree.events.cancelled_reads == 1
        assert server.statistics().requests_in_flight == 0
        # The connection keeps working, and tag 1 is free again.
        tree.events.push(b"hello\n")
        assert await c.rpc(m.Tread(1, 1, 0, 100)) == m.Rread(1, b"hello\n")
        assert await c.rpc(m.Tflush(4, 99)) == m.Rflush(4)  # unknown oldtag: Rflush at once


async def test_flushes_that_name_each_other_do_not_deadlock() -> None:
    async with serving() as (c, tree, server):
        await walk_open(c, ("events",), OREAD)
        await c.send(m.Tread(1, 1, 0, 100))
        await trio.testing.wait_all_tasks_blocked()
        # One write, so all three are registered before any of them runs: 2 and 3 name each
        # other. The first to run cancels the other, which ends without a reply.
        flushes = [m.Tflush(2, 3), m.Tflush(3, 2), m.Tflush(4, 1)]
        await c.send_raw(b"".join(m.encode(f, P) for f in flushes))
        replies = []
        with trio.fail_after(5):
            while m.Rflush(4) not in replies:
                replies.append(await c.receive())
        await trio.testing.wait_all_tasks_blocked()
        assert all(isinstance(r, m.Rflush) for r in replies)
        # Exactly one of the pair is answered: the other was flushed by it (flush(5)).
        with trio.fail_after(5):
            while not [r for r in replies if r.tag in (2, 3)]:
                replies.append(await c.receive())
        assert len([r for r in replies if r.tag in (2, 3)]) == 1
        assert tree.events.cancelled_reads == 1
        assert server.statistics().requests_in_flight == 0
        assert isinstance(await c.rpc(m.Tstat(0, 0)), m.Rstat)


class _Uncancellable(Node):
    """A read that already took effect when the flush arrives (shielded)."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.release = trio.Event()

    def stat(self) -> NodeStat:
        return NodeStat("slow", 0o444, 77)

    async def open(self, mode: OpenMode) -> Handle:
        node = self

        class H(Handle):
            async def read(self, offset: int, count: int) -> bytes:
                node.started.set()
                with trio.CancelScope(shield=True):
                    await node.release.wait()
                return b"done"

        return H()


async def test_a_reply_that_took_effect_precedes_the_rflush() -> None:
    tree = Tree()
    slow = _Uncancellable()
    tree.root.children["slow"] = slow
    async with serving(tree=tree) as (c, _, _):
        await walk_open(c, ("slow",), OREAD)
        await c.send(m.Tread(1, 1, 0, 100))
        await slow.started.wait()
        await c.send(m.Tflush(2, 1))
        await trio.testing.wait_all_tasks_blocked()
        slow.release.set()
        assert await c.receive() == m.Rread(1, b"done")
        assert await c.receive() == m.Rflush(2)


async def test_duplicate_tags_and_the_request_limit() -> None:
    tree = Tree()
    server = Server(lambda r: tree.root, max_outstanding=2)
    async with serving(tree=tree, server=server) as (c, _, _):
        await walk_open(c, ("events",), OREAD)
        await c.rpc(m.Twalk(0, 0, 2, ("events",)))
        await c.rpc(m.Topen(0, 2, OREAD))
        await c.send(m.Tread(5, 1, 0, 10))
        await trio.testing.wait_all_tasks_blocked()
        assert_error(await c.rpc(m.Tread(5, 2, 0, 10)), P, "tag 5 is already in use",
                     errno.EBADMSG)  # fmt: skip
        await c.send(m.Tread(6, 2, 0, 10))
        await trio.testing.wait_all_tasks_blocked()
        assert_error(await c.rpc(m.Tstat(7, 0)), P, "too many outstanding requests",
                     errno.EAGAIN)  # fmt: skip
        tree.events.push(b"ab")
        replies = {await c.receive(), await c.receive()}
        assert replies == {m.Rread(5, b"ab"), m.Rread(6, b"ab")}


# --- clunk, wstat, errors in nodes ---------------------------------------------------------------


async def test_clunk_error_still_releases_the_fid() -> None:
    async with serving() as (c, tree, server):
        await walk_open(c, ("ctl",), OWRITE)
        tree.ctl.reject_at_clunk = "in: empty prompt; write some text first"
        reply = await c.rpc(m.Tclunk(0, 1))
        assert reply == m.Rerror(0, "in: empty prompt; write some text first")
        assert_error(await c.rpc(m.Tclunk(0, 1)), P, "unknown fid 1", errno.EBADF)
        assert server.statistics().open_handles == 0


async def test_wstat_truncation_and_noop() -> None:
    async with serving() as (c, tree, _):
        await walk_open(c, ("ctl",), OWRITE)
        dont = m.Stat.dont_touch()
        assert await c.rpc(m.Twstat(0, 1, dont)) == m.Rwstat(0)
        assert tree.ctl.wstats == []  # nothing to change: the node is not asked
        from attrs import evolve

        assert await c.rpc(m.Twstat(0, 1, evolve(dont, length=0))) == m.Rwstat(0)
        assert len(tree.ctl.wstats) == 1
        assert tree.ctl.wstats[0].is_truncate_only()
        reply = await c.rpc(m.Twstat(0, 1, evolve(dont, name="other")))
        assert_error(reply, P, "only truncation", errno.EPERM)
        reply = await c.rpc(m.Twstat(0, 0, evolve(dont, mode=0o644)))
        assert_error(reply, P, "cannot change whether a file is a directory", errno.EINVAL)


class _Broken(Node):
    def stat(self) -> NodeStat:
        return NodeStat("broken", 0o444, 99)

    async def open(self, mode: OpenMode) -> Handle:
        raise RuntimeError("bug in a node")


async def test_a_buggy_node_gets_eio_and_the_connection_survives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tree = Tree()
    tree.root.children["broken"] = _Broken()
    async with serving(tree=tree) as (c, _, _):
        assert_error(await walk_open(c, ("broken",), OREAD), P, "internal error", errno.EIO)
        assert "bug in a node" in caplog.text
        assert isinstance(await c.rpc(m.Tstat(0, 0)), m.Rstat)


# --- framing errors and teardown -----------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        b"\x03\x00\x00\x00",  # size below the header
        (9000).to_bytes(4, "little") + b"\x76\x00\x00",  # larger than msize 8192
        bytes.fromhex("0f00000064ffff002000000200fffe"),  # invalid UTF-8
        bytes.fromhex("0c0000007c00000100000000"),  # trailing byte
    ],
)
async def test_malformed_frames_close_the_connection(
    frame: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving() as (c, tree, server):
        await walk_open(c, ("events",), OREAD)
        await c.send(m.Tread(1, 1, 0, 10))
        await trio.testing.wait_all_tasks_blocked()
        await c.send_raw(frame)
        assert await c.at_eof()
        await trio.testing.wait_all_tasks_blocked()
        stats = server.statistics()
        assert (stats.connections_open, stats.fids, stats.requests_in_flight) == (0, 0, 0)
        assert tree.events.aborts == 1
    assert "closing the connection" in caplog.text


async def test_unknown_message_type_is_answered_and_the_connection_continues() -> None:
    async with serving() as (c, _, _):
        await c.send_raw(bytes.fromhex("0b0000000c2a0001000000"))  # Tlopen in 9P2000
        reply = await c.receive()
        assert isinstance(reply, m.Rerror)
        assert reply.tag == 42
        assert "not part of 9P2000" in reply.ename
        await c.send(m.Rclunk(3))
        reply = await c.receive()
        assert isinstance(reply, m.Rerror)
        assert "is a reply" in reply.ename
        assert isinstance(await c.rpc(m.Tstat(0, 0)), m.Rstat)


async def test_eof_drops_every_fid_and_aborts_open_handles() -> None:
    tree = Tree()
    server = Server(lambda r: tree.root)
    async with serving(tree=tree, server=server) as (c, _, _):
        await walk_open(c, ("ctl",), OWRITE)
        await c.rpc(m.Twalk(0, 0, 2, ("events",)))
        await c.rpc(m.Topen(0, 2, OREAD))
        await c.send(m.Tread(9, 2, 0, 10))
        await trio.testing.wait_all_tasks_blocked()
        stats = server.statistics()
        assert (stats.fids, stats.open_handles, stats.requests_in_flight) == (3, 2, 1)
    stats = server.statistics()
    assert (stats.connections_open, stats.fids, stats.open_handles, stats.requests_in_flight) == (
        0, 0, 0, 0,
    )  # fmt: skip
    assert tree.ctl.aborts == 1
    assert tree.ctl.clunks == 0
    assert tree.events.aborts == 1


# --- 9P2000.L ------------------------------------------------------------------------------------


async def test_dotl_getattr_statfs_and_lopen() -> None:
    async with serving(L) as (c, tree, _):
        await c.rpc(m.Twalk(0, 0, 1, ("version",)))
        attr = await c.rpc(m.Tgetattr(0, 1, GETATTR_ALL))
        assert isinstance(attr, m.Rgetattr)
        assert attr.mode == S_IFREG | 0o444
        assert attr.size == 11
        assert attr.nlink == 1
        assert attr.qid == tree.version.stat().qid
        reply = await c.rpc(m.Tstatfs(0, 1))
        assert isinstance(reply, m.Rstatfs)
        assert reply.namelen == 255
        assert await c.rpc(m.Tlopen(0, 1, L_O_WRONLY)) == m.Rlerror(0, errno.EACCES)
        assert await c.rpc(m.Tlopen(0, 1, L_O_RDONLY | L_O_DIRECTORY)) == m.Rlerror(
            0, errno.ENOTDIR
        )
        assert isinstance(await c.rpc(m.Tlopen(0, 1, L_O_RDONLY)), m.Rlopen)
        assert await c.rpc(m.Tread(0, 1, 0, 100)) == m.Rread(0, b"anvild 0.1\n")
        assert await c.rpc(m.Txattrwalk(0, 1, 5, "security.selinux")) == m.Rlerror(
            0, errno.EOPNOTSUPP
        )
        assert await c.rpc(m.Treadlink(0, 1)) == m.Rlerror(0, errno.EINVAL)
        assert await c.rpc(m.Tfsync(0, 1, 0)) == m.Rfsync(0)
        assert await c.rpc(m.Tmkdir(0, 0, "new", 0o755, 0)) == m.Rlerror(0, errno.EPERM)
        assert await c.rpc(m.Tsymlink(0, 0, "l", "t", 0)) == m.Rlerror(0, errno.EPERM)
        assert await c.rpc(m.Tunlinkat(0, 0, "ctl", 0)) == m.Rlerror(0, errno.EPERM)
        # unlinkat(2)'s flag is checked before the node is asked: rmdir of a file, unlink of a
        # directory.
        assert await c.rpc(m.Tunlinkat(0, 0, "ctl", AT_REMOVEDIR)) == m.Rlerror(0, errno.ENOTDIR)
        assert await c.rpc(m.Tunlinkat(0, 0, "sub", 0)) == m.Rlerror(0, errno.EISDIR)
        assert await c.rpc(m.Tunlinkat(0, 0, "sub", AT_REMOVEDIR)) == m.Rlerror(0, errno.EPERM)
        assert await c.rpc(m.Tlcreate(0, 0, "x", L_O_RDWR, 0o644, 0)) == m.Rlerror(0, errno.EPERM)


async def test_dotl_setattr_truncate_for_a_shell_redirect() -> None:
    async with serving(L) as (c, tree, _):
        await c.rpc(m.Twalk(0, 0, 1, ("ctl",)))
        # What v9fs sends for `echo ping > ctl`: size 0 plus "now" mtime/ctime.
        valid = SETATTR_SIZE | SETATTR_MTIME | SETATTR_CTIME
        assert await c.rpc(m.Tsetattr(0, 1, valid, 0, 0, 0, 0, 0, 0, 0, 0)) == m.Rsetattr(0)
        assert tree.ctl.wstats[-1].is_truncate_only()
        assert isinstance(await c.rpc(m.Tlopen(0, 1, L_O_WRONLY | L_O_TRUNC)), m.Rlopen)
        assert await c.rpc(m.Twrite(0, 1, 0, b"ping\n")) == m.Rwrite(0, 5)
        await c.rpc(m.Twalk(0, 0, 2, ("version",)))
        reply = await c.rpc(m.Tsetattr(0, 2, SETATTR_SIZE, 0, 0, 0, 0, 0, 0, 0, 0))
        assert reply == m.Rlerror(0, errno.EPERM)


async def test_dotl_readdir_resumes_at_offsets() -> None:
    async with serving(L, msize=65536) as (c, tree, _):
        await walk_open(c, ("sub",), L_O_RDONLY | L_O_DIRECTORY)
        entries: list[m.Dirent] = []
        offset = 0
        while True:
            reply = await c.rpc(m.Treaddir(0, 1, offset, 120))
            assert isinstance(reply, m.Rreaddir)
            assert len(reply.data) <= 120
            batch = m.decode_dirents(reply.data)
            if not batch:
                break
            entries += batch
            offset = batch[-1].offset
        assert [e.name for e in entries] == [".", "..", *(f"f{i:02}" for i in range(30))]
        assert entries[0].qid.type & 0x80
        assert entries[0].qid == tree.sub.stat().qid
        assert entries[1].qid == tree.root.stat().qid
        # Resume in the middle: the entry after offset 10 is the 11th.
        reply = await c.rpc(m.Treaddir(0, 1, 10, 40))
        assert isinstance(reply, m.Rreaddir)
        assert m.decode_dirents(reply.data)[0].name == "f08"
        assert await c.rpc(m.Tread(0, 1, 0, 100)) == m.Rlerror(0, errno.EISDIR)
        await c.rpc(m.Twalk(0, 0, 2, ("sub",)))
        assert await c.rpc(m.Treaddir(0, 2, 0, 100)) == m.Rlerror(0, errno.EBADF)


async def test_dotu_stat_carries_numeric_ids() -> None:
    server = Server(lambda r: Tree().root, uid=1234, gid=99)
    async with serving(U, server=server) as (c, _, _):
        reply = await c.rpc(m.Tstat(0, 0))
        assert isinstance(reply, m.Rstat)
        assert (reply.stat.n_uid, reply.stat.n_gid) == (1234, 99)
        assert reply.stat.mode & DMDIR
        assert reply.stat.uid == "anvil"
