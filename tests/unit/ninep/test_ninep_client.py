"""`anvild.ninep.client`: the daemon-side 9P client against the real server over memory streams
(and a dial to a port nobody listens on)."""

from __future__ import annotations

import errno
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from anvild.ninep.backend import AttachRequest
from anvild.ninep.client import Connection, RemoteRefused, RemoteUnreachable
from anvild.ninep.errors import FsError
from anvild.ninep.server import Server
from anvild.ninep.testing import MemDir, MemFile


@asynccontextmanager
async def served(root: MemDir) -> AsyncIterator[Connection]:
    """A connection to a server of `root` that admits the attach name `token` (not attached)."""

    def token(request: AttachRequest) -> None:
        if request.aname != "token":
            raise FsError("attach refused: give the token", errno.EACCES)

    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        server = Server(lambda request: root)
        nursery.start_soon(lambda: server.serve(server_stream, check_attach=token, peer="t"))
        conn = Connection(client_stream, "mem", limit=5.0)
        try:
            yield conn
        finally:
            await conn.aclose()


async def test_reads_and_writes_whole_files_by_path() -> None:
    big = bytes(range(128)) * 1200  # more than one message
    note, ctl = MemFile("note"), MemFile("ctl")
    root = MemDir("/", [MemDir("s1", [MemFile("out", big)]), note, ctl])
    async with served(root) as conn:
        await conn.attach("token")
        assert await conn.read("s1/out") == big.decode()
        payload = "x" * 200_000  # more than one message the other way
        assert await conn.write("note", payload) == ""
        assert bytes(note.data) == payload.encode()
        # with answer, what the file says after the write, on the same fid (a ctl's reply)
        assert await conn.write("ctl", "ping", answer=True) == "ping"


async def test_refusals_name_the_path_and_a_bad_token_is_refused_at_attach() -> None:
    root = MemDir("/", [MemFile("version", b"v1\n")])
    async with served(root) as conn:
        await conn.attach("token")
        with pytest.raises(RemoteRefused, match=re.escape("gone/file: ")):
            await conn.read("gone/file")
        assert await conn.read("version") == "v1\n"  # the connection is still usable
    async with served(root) as conn:
        with pytest.raises(RemoteRefused, match=re.escape("attach: attach refused: give the")):
            await conn.attach("wrong")


async def test_a_dial_to_nobody_is_unreachable() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RemoteUnreachable, match=re.escape(f"dial tcp!127.0.0.1!{port}: ")):
        await Connection.dial(f"tcp!127.0.0.1!{port}", aname="", limit=5.0)
    with pytest.raises(RemoteUnreachable, match=re.escape("write tcp!HOST!PORT or unix!/path")):
        await Connection.dial("udp!h!1", aname="", limit=5.0)
