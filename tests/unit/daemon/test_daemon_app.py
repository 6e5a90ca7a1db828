"""The daemon in-process: listeners, peer checks, the TCP token, the root tree, shutdown.

The client is PyPI `python-9p` (plan9port's C codec), run in a worker thread so the daemon keeps
running in the test's trio loop.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import py9p
import pytest
import trio

from anvild import __version__
from anvild.daemon.app import Daemon, DaemonConfig, Endpoints
from anvild.daemon.listeners import TcpAddress
from anvild.daemon.namespace import NamespaceError

T = TypeVar("T")


async def in_thread(fn: Callable[[], T]) -> T:
    with trio.fail_after(20):
        return await trio.to_thread.run_sync(fn)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[Daemon, Endpoints]]:
    daemon = Daemon(DaemonConfig(namespace=tmp_path / "ns", listen=(TcpAddress("127.0.0.1", 0),)))
    async with trio.open_nursery() as nursery:
        endpoints = await nursery.start(daemon.run)
        yield daemon, endpoints
        nursery.cancel_scope.cancel()


def unix_client(endpoints: Endpoints) -> py9p.Client:
    client = py9p.Client.connect_unix(str(endpoints.socket_path))
    client.negotiate()
    client.attach(0)
    return client


def read_file(client: py9p.Client, name: str) -> bytes:
    client.walk(0, 1, [name])
    client.open(1, py9p.OREAD)
    out = b""
    while chunk := client.read(1, 4096, len(out)):
        out += chunk
    client.clunk(1)
    return out


async def test_unix_socket_serves_the_root_tree(running: tuple[Daemon, Endpoints]) -> None:
    _, endpoints = running

    def session() -> tuple[list[str], bytes, bytes]:
        with unix_client(endpoints) as c:
            c.walk(0, 1, [])
            c.open(1, py9p.OREAD)
            data = c.read(1, 8168, 0)
            names = _names(data)
            c.clunk(1)
            return names, read_file(c, "version"), read_file(c, "list")

    names, version, listing = await in_thread(session)
    assert names == ["ctl", "list", "version", "events"]
    assert version == f"anvild {__version__}\n".encode()
    assert listing == b""


def _names(data: bytes) -> list[str]:
    names = []
    while data:
        size = int.from_bytes(data[:2], "little") + 2
        names.append(py9p.decode_dir(data[:size]).name)
        data = data[size:]
    return names


async def test_ctl_ping_answers_pong_and_bad_commands_fail(
    running: tuple[Daemon, Endpoints],
) -> None:
    _, endpoints = running

    def session() -> tuple[bytes, bytes, str]:
        with unix_client(endpoints) as c:
            c.walk(0, 1, ["ctl"])
            c.open(1, py9p.ORDWR)
            before = c.read(1, 4096, 0)
            c.write(1, b"ping", 0)
            after = c.read(1, 4096, 0)
            with pytest.raises(py9p.RemoteError) as info:
                c.write(1, b"frobnicate\n", 0)
            c.clunk(1)
            return before, after, str(info.value)

    before, after, error = await in_thread(session)
    assert before == b""
    assert after == b"pong\n"
    assert error == "ctl: unknown command 'frobnicate'; known commands: ping"


async def test_events_stream_blocks_then_delivers_the_ping(
    running: tuple[Daemon, Endpoints],
) -> None:
    _, endpoints = running

    def session() -> list[dict[str, object]]:
        with unix_client(endpoints) as c, unix_client(endpoints) as pinger:
            c.walk(0, 1, ["events"])
            c.open(1, py9p.OREAD)
            first = json.loads(c.read(1, 4096, 0))  # the backlog: daemon_started
            pinger.walk(0, 1, ["ctl"])
            pinger.open(1, py9p.OWRITE | py9p.OTRUNC)
            pinger.write(1, b"ping\n", 0)
            second = json.loads(c.read(1, 4096, 0))  # blocks until the ping
            return [first, second]

    first, second = await in_thread(session)
    assert first["type"] == "daemon_started"
    assert first["version"] == __version__
    assert second["type"] == "ping"
    assert isinstance(second["ts"], str)


async def test_tcp_attach_needs_the_token(running: tuple[Daemon, Endpoints]) -> None:
    daemon, endpoints = running
    assert endpoints.token_path is not None
    token = endpoints.token_path.read_text().strip()
    assert endpoints.token_path.stat().st_mode & 0o777 == 0o600
    host, port = endpoints.tcp[0]
    assert host == "127.0.0.1"

    def session() -> tuple[list[str], bytes]:
        errors = []
        for aname in ("", "not-the-token", token[:-1]):
            with py9p.Client.connect_tcp(host, port) as c:
                c.negotiate()
                with pytest.raises(py9p.RemoteError) as info:
                    c.attach(0, aname=aname)
                errors.append(str(info.value))
        with py9p.Client.connect_tcp(host, port) as c:
            c.negotiate()
            c.attach(0, aname=token)
            return errors, read_file(c, "version")

    errors, version = await in_thread(session)
    assert version.startswith(b"anvild ")
    for error in errors:
        assert error.startswith("attach refused: over TCP the attach name must be the daemon's ")
        assert "-a TOKEN" in error
        # Nothing an unauthenticated peer reads names a path or a user.
        assert "/" not in error.replace("9P2000", "")
        assert str(os.getuid()) not in error
        assert pwd.getpwuid(os.getuid()).pw_name not in re.findall(r"\w+", error)
    assert daemon.tree.events.statistics().published >= 4  # started + three refusals


async def test_unix_peer_with_another_uid_is_refused(tmp_path: Path) -> None:
    daemon = Daemon(DaemonConfig(namespace=tmp_path / "ns"), peer_uid=os.getuid() + 4242)
    async with trio.open_nursery() as nursery:
        endpoints = await nursery.start(daemon.run)
        reader = daemon.tree.events.open_reader()

        def connect() -> bytes:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(10)
                s.connect(str(endpoints.socket_path))
                return s.recv(100)  # the daemon closes without a word

        assert await in_thread(connect) == b""
        events = reader.read_nowait(1 << 16) or b""
        lines = [json.loads(line) for line in events.splitlines()]
        refused = [e for e in lines if e["type"] == "client_refused"]
        assert refused
        assert refused[0]["transport"] == "unix"
        assert f"is not the daemon's uid {os.getuid() + 4242}" in refused[0]["reason"]
        nursery.cancel_scope.cancel()


async def test_shutdown_removes_socket_and_pid_file_and_ends_streams(tmp_path: Path) -> None:
    daemon = Daemon(DaemonConfig(namespace=tmp_path / "ns"))
    async with trio.open_nursery() as nursery:
        endpoints = await nursery.start(daemon.run)
        assert endpoints.socket_path.exists()
        assert (tmp_path / "ns" / "agent.pid").read_text() == f"{os.getpid()}\n"
        assert endpoints.token_path is None
        assert not (tmp_path / "ns" / "agent.token").exists()  # TCP off: no token
        reader = daemon.tree.events.open_reader(backlog=False)
        nursery.cancel_scope.cancel()
    assert not endpoints.socket_path.exists()
    assert not (tmp_path / "ns" / "agent.pid").exists()
    assert json.loads(reader.read_nowait(4096) or b"")["type"] == "daemon_stopping"
    assert reader.read_nowait(4096) == b""
    assert daemon.server.statistics().connections_open == 0


async def test_a_second_daemon_on_the_same_namespace_is_refused(tmp_path: Path) -> None:
    first = Daemon(DaemonConfig(namespace=tmp_path / "ns"))
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        with pytest.raises(NamespaceError, match=rf"another anvild \(pid {os.getpid()}\)"):
            await Daemon(DaemonConfig(namespace=tmp_path / "ns")).run()
        assert (tmp_path / "ns" / "agent").exists()  # the refusal touched nothing
        nursery.cancel_scope.cancel()
