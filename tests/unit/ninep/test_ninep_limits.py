"""The server's bounds: error replies cut to fit msize, the handshake deadline, and the caps on
connections, fids and outstanding requests. Each refusal names the limit and what to do, and the
connection (or the server) then serves the next request."""

from __future__ import annotations

import errno
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from anvild.ninep import messages as m
from anvild.ninep import server as server_module
from anvild.ninep.backend import AttachRequest, Handle, Node, NodeStat, OpenMode
from anvild.ninep.constants import MIN_MSIZE, NOFID, NOTAG, OREAD, Dialect
from anvild.ninep.errors import FsError
from anvild.ninep.server import Server
from anvild.ninep.testing import BlockingFile, MemDir, MemFile, RawClient

P = Dialect.P9P2000
U = Dialect.P9P2000_U
L = Dialect.P9P2000_L
LONG = "role: unknown role '" + "z" * 16_000 + "': the roles are a, b"


# --- fit_ename: the pure bound ------------------------------------------------------------------


@given(
    ename=st.text(),
    msize=st.integers(MIN_MSIZE, 1 << 17),
    dialect=st.sampled_from([P, U]),
    tag=st.integers(0, 0xFFFF),
)
def test_an_error_text_is_cut_only_when_its_rerror_would_not_fit(
    ename: str, msize: int, dialect: Dialect, tag: int
) -> None:
    fitted = m.fit_ename(ename, msize, dialect)
    frame = m.encode(m.Rerror(tag, fitted, errno.EIO), dialect)
    assert len(frame) <= msize
    assert m.decode(frame, dialect) == m.Rerror(tag, fitted, errno.EIO if dialect is U else 0)
    sendable = ename.encode("utf-8", "replace")
    room = min(msize - 9 - (4 if dialect is U else 0), 0xFFFF)  # for ename's bytes
    if len(sendable) <= room:
        assert fitted == sendable.decode()
    else:
        assert fitted.endswith(m.TRUNCATED)
        assert sendable.decode().startswith(fitted.removesuffix(m.TRUNCATED))
        assert len(fitted.encode()) > room - 4  # as much as fits (a character is <= 4 bytes)


def test_a_huge_error_text_fits_the_9p_string_limit_too() -> None:
    fitted = m.fit_ename("x" * 100_000, 1 << 20, P)
    assert len(fitted.encode()) == 0xFFFF
    assert fitted.endswith(m.TRUNCATED)


# --- a server over in-memory streams ------------------------------------------------------------


class _Failing(Node):
    """A file whose read (in a task, or inline), write and clunk fail with a long message."""

    open_blocks = False

    def __init__(self, name: str, *, blocks: bool) -> None:
        self.name = name
        self.blocks = blocks

    def stat(self) -> NodeStat:
        return NodeStat(self.name, 0o666, 800 + self.blocks)

    async def open(self, mode: OpenMode) -> Handle:
        blocks = self.blocks

        class H(Handle):
            read_blocks = blocks
            write_blocks = False
            clunk_blocks = blocks

            async def read(self, offset: int, count: int) -> bytes:
                raise FsError(LONG, errno.EINVAL)

            async def write(self, offset: int, data: bytes) -> int:
                return len(data)

            async def clunk(self) -> None:
                raise FsError(LONG, errno.EINVAL)

        return H()


def _tree() -> MemDir:
    return MemDir(
        "/",
        [
            MemFile("version", b"v1\n", mode=0o444),
            _Failing("slow", blocks=True),
            _Failing("quick", blocks=False),
        ],
    )


@asynccontextmanager
async def connected(
    server: Server, dialect: Dialect = P, *, check: bool = False
) -> AsyncIterator[RawClient]:
    """One client connection (not yet a handshake) to ``server`` over memory streams."""

    def token(request: AttachRequest) -> None:
        if request.aname != "token":
            raise FsError("attach refused: give the token", errno.EACCES)

    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: server.serve(server_stream, check_attach=token if check else None, peer="t")
        )
        yield RawClient(client_stream, dialect)
        await client_stream.aclose()


async def _read_version(c: RawClient, fid: int = 9) -> None:
    assert isinstance(await c.rpc(m.Twalk(0, 0, fid, ("version",))), m.Rwalk)
    opener = m.Tlopen(0, fid, 0) if c.dialect is L else m.Topen(0, fid, OREAD)
    assert isinstance(await c.rpc(opener), m.Rlopen | m.Ropen)
    assert await c.rpc(m.Tread(0, fid, 0, 100)) == m.Rread(0, b"v1\n")
    assert await c.rpc(m.Tclunk(0, fid)) == m.Rclunk(0)


@pytest.mark.parametrize("dialect", [P, U, L], ids=["9P2000", "u", "L"])
@pytest.mark.parametrize("name", ["slow", "quick"])
async def test_long_errors_are_cut_to_msize_and_logged_in_full_at_warning(
    dialect: Dialect, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="anvild.ninep")
    msize = 512
    async with connected(Server(lambda r: _tree()), dialect) as c:
        await c.handshake(msize=msize)
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, (name,))), m.Rwalk)
        opener = m.Tlopen(0, 1, 2) if dialect is L else m.Topen(0, 1, 2)
        assert isinstance(await c.rpc(opener), m.Rlopen | m.Ropen)
        for request in (m.Tread(3, 1, 0, 10), m.Tclunk(4, 1)):
            await c.send(request)
            frame = None
            while (frame := c.reader.next_frame()) is None:
                c.reader.feed(bytes(await c.stream.receive_some(65536)))
            assert len(frame) <= msize
            reply = m.decode(frame, dialect)
            if dialect is L:
                assert reply == m.Rlerror(request.tag, errno.EINVAL)
            else:
                assert isinstance(reply, m.Rerror)
                assert reply.tag == request.tag
                assert reply.ename.startswith("role: unknown role 'zzz")
                assert reply.ename.endswith(m.TRUNCATED)
                assert reply.errno == (errno.EINVAL if dialect is U else 0)
        await _read_version(c)  # the connection goes on
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    if dialect is not L:
        full = [r for r in caplog.records if LONG in r.getMessage()]
        assert len(full) == 2
        assert {r.levelno for r in full} == {logging.WARNING}


# --- the handshake deadline ---------------------------------------------------------------------


async def test_a_silent_connection_is_closed_after_the_handshake_timeout(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(lambda r: _tree(), handshake_timeout=10)
    async with connected(server) as c:
        start = trio.current_time()
        assert await c.at_eof()
        assert trio.current_time() - start == pytest.approx(10)
    assert server.statistics().handshakes_timed_out == 1
    assert "closed: no Tversion within 10 s" in caplog.text
    async with connected(server) as c:  # the server serves the next one
        await c.handshake()
        await _read_version(c)
    assert server.statistics().connections_open == 0


async def test_with_authentication_only_a_successful_attach_ends_the_handshake(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(lambda r: _tree(), handshake_timeout=10)
    async with connected(server, check=True) as c:
        start = trio.current_time()
        assert isinstance(await c.rpc(m.Tversion(NOTAG, 8192, "9P2000")), m.Rversion)
        await trio.sleep(5)
        reply = await c.rpc(m.Tattach(0, 0, NOFID, "u", "wrong"))
        assert reply == m.Rerror(0, "attach refused: give the token")
        assert await c.at_eof()  # the failed attach did not count
        assert trio.current_time() - start == pytest.approx(10)
    assert "closed: no successful Tattach within 10 s" in caplog.text
    async with connected(server, check=True) as c:
        await c.handshake(aname="token")
        await trio.sleep(3 * 24 * 3600)  # an attached mount idle for days is never timed out
        await _read_version(c)
    assert server.statistics().handshakes_timed_out == 1


async def test_without_authentication_tversion_ends_the_handshake(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Server(lambda r: _tree(), handshake_timeout=10)
    async with connected(server) as c:
        assert isinstance(await c.rpc(m.Tversion(NOTAG, 8192, "9P2000")), m.Rversion)
        await trio.sleep(3600)
        assert isinstance(await c.rpc(m.Tattach(0, 0, NOFID, "u", "")), m.Rattach)
        await _read_version(c)
    assert server.statistics().handshakes_timed_out == 0


# --- the connection cap -----------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [P, U, L], ids=["9P2000", "u", "L"])
async def test_a_connection_over_the_cap_gets_an_error_to_its_tversion(
    dialect: Dialect, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(lambda r: _tree(), max_connections=2)
    async with connected(server) as first, connected(server) as second:
        await first.handshake()
        await second.handshake()
        async with connected(server, dialect) as third:
            reply = await third.rpc(m.Tversion(NOTAG, 8192, dialect.value))
            if dialect is L:
                assert reply == m.Rlerror(NOTAG, errno.EAGAIN)
            else:
                assert isinstance(reply, m.Rerror)
                assert "busy: 2 connections are open, its limit (max_connections)" in reply.ename
                assert "try again later" in reply.ename
            assert await third.at_eof()
        assert "refused: 2 connections are open (max_connections)" in caplog.text
        await _read_version(first)  # nothing lost on the connections being served
        await _read_version(second)
    async with connected(server) as again:  # below the cap again: served
        await again.handshake()
        await _read_version(again)
    assert server.statistics().connections_refused == 1


async def test_a_silent_connection_over_the_cap_is_closed_soon(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = Server(lambda r: _tree(), max_connections=1)
    async with connected(server) as first:
        await first.handshake()
        async with connected(server) as silent:
            start = trio.current_time()
            assert await silent.at_eof()
            assert trio.current_time() - start <= 1
        await _read_version(first)
    assert server.statistics().connections_refused == 1


# --- fids and outstanding requests ------------------------------------------------------------


class _SyncDir(MemDir):
    """Walks answered without waiting: over a socket, the shared poller answers them."""

    def walk_now(self, name: str) -> Node | None:
        return self.children.get(name)


async def test_the_fid_cap_holds_on_the_pollers_path(monkeypatch: pytest.MonkeyPatch) -> None:
    answered: list[str] = []
    answer_now = server_module._Connection.answer_now

    def recording(self: server_module._Connection, frame: bytes) -> bool:
        done = answer_now(self, frame)
        if done:
            answered.append(trio.lowlevel.current_task().name)
        return done

    monkeypatch.setattr(server_module._Connection, "answer_now", recording)
    root = _SyncDir("/", [MemFile("version", b"v1\n", mode=0o444)])
    server = Server(lambda r: root, max_fids=2)
    a, b = trio.socket.socketpair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: server.serve(trio.SocketStream(b), peer="sock"))
        c = RawClient(trio.SocketStream(a), P)
        await c.handshake()
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, ("version",))), m.Rwalk)
        reply = await c.rpc(m.Twalk(0, 0, 2, ("version",)))
        assert isinstance(reply, m.Rerror)
        assert "too many fids on this connection (limit 2, max_fids)" in reply.ename
        assert await c.rpc(m.Tclunk(0, 1)) == m.Rclunk(0)
        assert isinstance(await c.rpc(m.Twalk(0, 0, 2, ("version",))), m.Rwalk)
        await c.stream.aclose()
    assert answered.count("anvild.ninep.poller") >= 3  # the refusal included


@pytest.mark.parametrize("dialect", [P, U, L], ids=["9P2000", "u", "L"])
async def test_the_fid_cap_refuses_a_walk_and_a_clunk_makes_room(dialect: Dialect) -> None:
    server = Server(lambda r: _tree(), max_fids=3)
    async with connected(server, dialect) as c:
        await c.handshake()
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, ())), m.Rwalk)
        assert isinstance(await c.rpc(m.Twalk(0, 0, 2, ("version",))), m.Rwalk)
        reply = await c.rpc(m.Twalk(0, 0, 3, ("version",)))
        if dialect is L:
            assert reply == m.Rlerror(0, errno.EMFILE)
        else:
            assert isinstance(reply, m.Rerror)
            assert "too many fids on this connection (limit 3, max_fids)" in reply.ename
            assert "clunk the fids you no longer use" in reply.ename
        assert isinstance(await c.rpc(m.Twalk(0, 1, 1, ("version",))), m.Rwalk)  # in place: ok
        assert await c.rpc(m.Tclunk(0, 2)) == m.Rclunk(0)
        await _read_version(c, fid=3)  # room again; fids 0 and 1 are intact
        assert server.statistics().fids == 2


async def test_the_outstanding_request_cap_names_its_setting() -> None:
    events = BlockingFile("events")
    server = Server(lambda r: MemDir("/", [events]), max_outstanding=1)
    async with connected(server) as c:
        await c.handshake()
        assert isinstance(await c.rpc(m.Twalk(0, 0, 1, ("events",))), m.Rwalk)
        assert isinstance(await c.rpc(m.Topen(0, 1, OREAD)), m.Ropen)
        await c.send(m.Tread(1, 1, 0, 10))  # blocks: one request outstanding
        await trio.testing.wait_all_tasks_blocked()
        reply = await c.rpc(m.Tread(2, 1, 0, 10))
        assert isinstance(reply, m.Rerror)
        assert reply.tag == 2
        assert "too many outstanding requests on this connection (limit 1, max_outstanding)" in (
            reply.ename
        )
        assert "wait for replies or flush some" in reply.ename
        events.push(b"e1\n")
        assert await c.receive() == m.Rread(1, b"e1\n")  # nothing lost
        assert isinstance(await c.rpc(m.Tstat(2, 0)), m.Rstat)  # and room again
        # At the limit a flush is still possible (the refusal says to flush).
        await c.send(m.Tread(1, 1, 0, 10))
        await trio.testing.wait_all_tasks_blocked()
        assert await c.rpc(m.Tflush(2, 1)) == m.Rflush(2)
        assert events.cancelled_reads == 1
        assert isinstance(await c.rpc(m.Tstat(2, 0)), m.Rstat)


def test_limits_must_be_positive() -> None:
    for name in ("max_outstanding", "max_fids", "max_connections", "handshake_timeout"):
        with pytest.raises(ValueError, match=f"{name} must be greater than 0"):
            Server(lambda r: _tree(), **{name: 0})
    assert Server(lambda r: _tree(), handshake_timeout=math.inf).handshake_timeout == math.inf
