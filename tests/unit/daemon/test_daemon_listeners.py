"""`anvild.daemon.listeners`: listen addresses, the Unix listener and peer credentials."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from anvild.daemon.listeners import (
    ListenError,
    TcpAddress,
    open_unix_listener,
    parse_listen_address,
    peer_credentials,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tcp!127.0.0.1!5640", TcpAddress("127.0.0.1", 5640)),
        ("tcp!127.1.2.3!0", TcpAddress("127.1.2.3", 0)),
        ("tcp!localhost!564", TcpAddress("localhost", 564)),
        ("tcp!::1!5640", TcpAddress("::1", 5640)),
        ("tcp![::1]!5640", TcpAddress("::1", 5640)),
    ],
)
def test_loopback_addresses_parse(text: str, expected: TcpAddress) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.1:5640", "write tcp!HOST!PORT"),
        ("unix!/tmp/x", "write tcp!HOST!PORT"),
        ("tcp!127.0.0.1", "write tcp!HOST!PORT"),
        ("tcp!127.0.0.1!http", "bad port 'http'"),
        ("tcp!127.0.0.1!70000", "bad port '70000'"),
        ("tcp!!5640", "missing host"),
        ("tcp!*!5640", r"refusing to listen on tcp!\*!5640.*--allow-remote"),
        ("tcp!0.0.0.0!5640", "refusing to listen on tcp!0.0.0.0!5640"),
        ("tcp!192.168.1.4!5640", "reachable from other machines"),
        ("tcp!example.com!5640", "reachable from other machines"),
    ],
)
def test_bad_or_remote_addresses_are_refused(text: str, message: str) -> None:
    with pytest.raises(ListenError, match=message):
        parse_listen_address(text)


def test_remote_addresses_need_explicit_permission() -> None:
    assert parse_listen_address("tcp!*!5640", allow_remote=True) == TcpAddress("", 5640)
    assert str(TcpAddress("", 5640)) == "tcp!*!5640"
    assert parse_listen_address("tcp!10.0.0.1!1", allow_remote=True) == TcpAddress("10.0.0.1", 1)


async def test_unix_listener_is_owner_only_and_reports_peer_credentials(tmp_path: Path) -> None:
    path = tmp_path / "agent"
    listener = await open_unix_listener(path)
    async with listener:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        client = await trio.open_unix_socket(str(path))
        async with client:
            server = await listener.accept()
            async with server:
                creds = peer_credentials(server.socket)
                assert (creds.pid, creds.uid, creds.gid) == (os.getpid(), os.getuid(), os.getgid())


async def test_unix_listener_on_a_taken_path_says_why(tmp_path: Path) -> None:
    path = tmp_path / "agent"
    path.write_text("")
    with pytest.raises(ListenError, match="cannot listen on"):
        await open_unix_listener(path)
