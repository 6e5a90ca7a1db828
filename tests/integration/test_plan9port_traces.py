"""Replay plan9port's recorded `9p` client sequences against our server over a Unix socket.

The `->` lines of fixtures/9p/plan9port-9p-client-traces.txt are what the real client sent; the
`<-` lines came from a small logging server, not a reference implementation, so only the reply
types and tags are compared. The tree is shaped like the recorded one (ctl, list, and a third
entry; 202 bytes of directory data) so the recorded read offsets are valid here too.
"""

from __future__ import annotations

import pathlib
import re
import socket

import pytest
import trio

from anvild.ninep.constants import Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import MemDir, MemFile, RawClient

TRACES = pathlib.Path(__file__).resolve().parents[2] / "fixtures/9p/plan9port-9p-client-traces.txt"
LINE = re.compile(
    r"^\S+ (?P<dir>->|<-) (?P<name>[TR]\w+) tag=(?P<tag>\d+).*raw=(?P<raw>[0-9a-f]+)$"
)


def sections() -> dict[str, list[tuple[bytes, str, int]]]:
    """title -> [(client frame, expected reply type, expected reply tag)]."""
    out: dict[str, list[tuple[bytes, str, int]]] = {}
    title = ""
    pending: bytes | None = None
    for line in TRACES.read_text().splitlines():
        if line.startswith("### "):
            title = line[4:]
            out[title] = []
        elif match := LINE.match(line):
            if match["dir"] == "->":
                pending = bytes.fromhex(match["raw"])
            else:
                assert pending is not None
                out[title].append((pending, match["name"], int(match["tag"])))
                pending = None
    return out


SECTIONS = sections()


def make_tree() -> MemDir:
    ctl = MemFile("ctl", b"a 1\nb 2\n", mode=0o666, append_only=True)
    lst = MemFile("list", b"agent1 idle\nagent2 busy\n", mode=0o444)
    return MemDir("/", [ctl, lst, MemFile("new", mode=0o444)])


def test_all_recorded_commands_are_replayed() -> None:
    assert len(SECTIONS) == 8
    assert all(SECTIONS.values())


@pytest.mark.parametrize("title", list(SECTIONS))
async def test_replay(title: str, tmp_path: pathlib.Path) -> None:
    root = make_tree()
    server = Server(lambda req: root)
    path = str(tmp_path / "agent")
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(4)
    listener = trio.SocketListener(sock)
    done = trio.Event()

    async def handle(stream: trio.SocketStream) -> None:
        await server.serve(stream, peer="unix")
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, [listener])
        stream = await trio.open_unix_socket(path)
        client = RawClient(stream, Dialect.P9P2000)
        for frame, reply_type, reply_tag in SECTIONS[title]:
            await client.send_raw(frame)
            with trio.fail_after(5):
                reply = await client.receive()
            assert (type(reply).__name__, reply.tag) == (reply_type, reply_tag), reply
        # Like plan9port: hang up without clunking the root fid.
        await stream.aclose()
        with trio.fail_after(5):
            await done.wait()
        nursery.cancel_scope.cancel()
    stats = server.statistics()
    assert (stats.connections_open, stats.fids, stats.requests_in_flight) == (0, 0, 0)
