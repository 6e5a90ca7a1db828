"""The 9P server's bounds through a real `anvild`: an error reply always fits msize, and the
`[server]` limits (handshake deadline, connections, fids, outstanding requests) refuse with a
message that names the limit, lose nothing, and leave the daemon serving the next request.

Stock clients (python-9p, which refuses a reply larger than its msize; Debian's diod tools) where
they can express the case, raw sockets for the hostile ones. The limits are set small in the
user config (`[server]`), so each case takes about a second.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import py9p
import pytest

from anvild.ninep import messages as m
from anvild.ninep.constants import NOFID, NOTAG, OREAD, Dialect
from anvild.ninep.framing import FrameReader
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_diod_clients import diod_tool

HANDSHAKE = 1.0
MAX_CONNECTIONS = 3
MAX_FIDS = 8
MAX_OUTSTANDING = 2


# --- a raw client ----------------------------------------------------------------------------


class Raw:
    """A blocking 9P connection that sends any frame and reads replies of any size."""

    def __init__(self, sock: socket.socket, dialect: Dialect = Dialect.P9P2000) -> None:
        self.sock = sock
        self.sock.settimeout(10)
        self.dialect = dialect
        self.reader = FrameReader(1 << 24)

    @classmethod
    def unix(cls, namespace: Path) -> Raw:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(namespace / "agent"))
        return cls(sock)

    def send(self, msg: m.Message) -> None:
        self.sock.sendall(m.encode(msg, self.dialect))

    def frame(self) -> bytes | None:
        """The next reply frame, or None at EOF."""
        while (frame := self.reader.next_frame()) is None:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.reader.feed(data)
        return frame

    def rpc(self, msg: m.Message) -> m.Message:
        self.send(msg)
        frame = self.frame()
        assert frame is not None, f"closed instead of answering {msg!r}"
        return m.decode(frame, self.dialect)

    def closed_after(self) -> float:
        """Seconds until the daemon closes the connection (with nothing more to say)."""
        start = time.monotonic()
        assert self.frame() is None
        return time.monotonic() - start

    def close(self) -> None:
        self.sock.close()


def log_lines(daemon: Anvild, pattern: str) -> list[dict[str, object]]:
    return [r for r in daemon.log_records() if pattern in str(r.get("event", ""))]


def assert_no_error_lines(daemon: Anvild) -> None:
    errors = [r for r in daemon.log_records() if r.get("level") in ("error", "critical")]
    assert errors == []


# --- 3. an error reply always fits msize ------------------------------------------------------


def test_a_long_ctl_error_is_cut_to_msize_and_logged_in_full(
    limited: tuple[Anvild, int, str],
) -> None:
    daemon, _, _ = limited
    verb = "z" * 8150  # one Twrite of almost msize; the error quotes it and lists the commands
    with py9p.Client.connect_unix(str(daemon.namespace / "agent"), msize=8192) as c:
        c.negotiate()
        assert c.msize == 8192
        c.attach(0)
        c.walk(0, 1, ["ctl"])
        c.open(1, py9p.ORDWR)
        # py9p refuses any reply larger than its msize: this is the reply as sent.
        with pytest.raises(py9p.RemoteError) as info:
            c.write(1, verb.encode() + b"\n", 0)
        text = str(info.value)
        assert "unknown command 'zzz" in text
        assert text.endswith(m.TRUNCATED)
        assert len(text.encode()) <= 8192 - 9
        # The connection serves the next request on the same fid.
        c.write(1, b"ping\n", 0)
        assert c.read(1, 100, 0) == b"pong\n"
        c.clunk(1)
    full = log_lines(daemon, "cut to fit msize 8192")
    assert len(full) == 1
    assert full[0]["level"] == "warning"
    event = str(full[0]["event"])
    assert f"unknown command '{verb}'; known commands: " in event  # the whole text
    assert_no_error_lines(daemon)


# --- 4. the limits ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Anvild, int, str]]:
    """A daemon with small `[server]` limits, on the Unix socket and on loopback TCP."""
    home = tmp_path_factory.mktemp("limits")
    config = home / "config.toml"
    config.write_text(
        f"[server]\nhandshake_timeout = {HANDSHAKE}\nmax_connections = {MAX_CONNECTIONS}\n"
        f"max_fids = {MAX_FIDS}\nmax_outstanding = {MAX_OUTSTANDING}\n"
    )
    namespace = home / "ns"
    daemon = Anvild(namespace, "--config", str(config), "--listen", "tcp!127.0.0.1!0")
    line = daemon.wait_serving("serving ")
    match = re.search(r", tcp!127\.0\.0\.1!(\d+)", line)
    assert match, line
    token = (namespace / "agent.token").read_text().strip()
    yield daemon, int(match.group(1)), token
    code, log = daemon.stop()
    assert code == 0, log


def _serves(daemon: Anvild) -> None:
    """A fresh stock client reads a file: the daemon serves the next request."""
    with py9p.Client.connect_unix(str(daemon.namespace / "agent")) as c:
        c.negotiate()
        c.attach(0)
        c.walk(0, 1, ["version"])
        c.open(1, py9p.OREAD)
        assert c.read(1, 100, 0).startswith(b"anvild ")
        c.clunk(1)


def test_a_silent_connection_is_closed_at_the_handshake_timeout(
    limited: tuple[Anvild, int, str],
) -> None:
    daemon, _, _ = limited
    silent = Raw.unix(daemon.namespace)
    assert HANDSHAKE * 0.8 < silent.closed_after() < HANDSHAKE + 5
    silent.close()
    _serves(daemon)
    assert log_lines(daemon, "closed: no Tversion within 1 s")


def test_over_tcp_only_an_attach_with_the_token_ends_the_handshake(
    limited: tuple[Anvild, int, str],
) -> None:
    daemon, port, token = limited
    peer = Raw(socket.create_connection(("127.0.0.1", port)))
    assert isinstance(peer.rpc(m.Tversion(NOTAG, 8192, "9P2000")), m.Rversion)
    refused = peer.rpc(m.Tattach(0, 0, NOFID, "me", "not-the-token"))
    assert isinstance(refused, m.Rerror)
    assert refused.ename.startswith("attach refused: over TCP the attach name must be the")
    # Nothing an unauthenticated peer receives names a path or a user.
    assert "/" not in refused.ename
    assert str(daemon.namespace) not in refused.ename
    assert str(os.getuid()) not in refused.ename
    assert peer.closed_after() < HANDSHAKE + 5
    peer.close()
    assert log_lines(daemon, "closed: no successful Tattach within 1 s")
    refusals = [r for r in daemon.log_records() if r.get("event") == "tcp.refused"]
    assert str(daemon.namespace / "agent.token") in str(refusals[-1]["token_file"])

    # Attached with the token, a connection is never timed out, however idle.
    with py9p.Client.connect_tcp("127.0.0.1", port, timeout=10) as c:
        c.negotiate()
        c.attach(0, aname=token)
        time.sleep(HANDSHAKE * 2.5)
        c.walk(0, 1, ["version"])
        c.open(1, py9p.OREAD)
        assert c.read(1, 100, 0).startswith(b"anvild ")
        c.clunk(1)


def test_diodls_is_refused_without_the_token_and_served_with_it(
    limited: tuple[Anvild, int, str],
) -> None:
    _, port, token = limited
    server = f"127.0.0.1:{port}"
    out = subprocess.run(
        [diod_tool("diodls"), "-s", server, "-a", "wrong", "/"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert out.returncode != 0
    assert "Permission denied" in out.stderr
    out = subprocess.run(
        [diod_tool("diodls"), "-s", server, "-a", token, "/"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert (out.returncode, out.stderr) == (0, "")
    assert "version" in out.stdout.split()


def test_a_connection_over_the_cap_gets_an_error_naming_the_limit(
    limited: tuple[Anvild, int, str],
) -> None:
    daemon, port, token = limited
    held = []
    for _ in range(MAX_CONNECTIONS):
        c = py9p.Client.connect_unix(str(daemon.namespace / "agent"))
        c.negotiate()
        c.attach(0)
        held.append(c)
    try:
        extra = py9p.Client.connect_unix(str(daemon.namespace / "agent"))
        with pytest.raises(py9p.RemoteError) as info:
            extra.negotiate()
        extra.close()
        assert f"the server is busy: {MAX_CONNECTIONS} connections are open" in str(info.value)
        assert "(max_connections)" in str(info.value)
        # 9P2000.L carries only an errno: diodls reports EAGAIN.
        out = subprocess.run(
            [diod_tool("diodls"), "-s", f"127.0.0.1:{port}", "-a", token, "/"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert out.returncode != 0
        assert "Resource temporarily unavailable" in out.stderr
        # The connections being served lose nothing.
        for fid, c in enumerate(held, 1):
            c.walk(0, fid, ["version"])
            c.open(fid, py9p.OREAD)
            assert c.read(fid, 100, 0).startswith(b"anvild ")
            c.clunk(fid)
    finally:
        for c in held:
            c.close()
    assert len(log_lines(daemon, "refused: 3 connections are open (max_connections)")) >= 2
    deadline = time.monotonic() + 10
    while True:  # the daemon notices the closed connections asynchronously
        try:
            _serves(daemon)
            break
        except py9p.RemoteError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_the_fid_cap_is_refused_by_name_and_a_clunk_makes_room(
    limited: tuple[Anvild, int, str],
) -> None:
    daemon, _, _ = limited
    with py9p.Client.connect_unix(str(daemon.namespace / "agent")) as c:
        c.negotiate()
        c.attach(0)
        for fid in range(1, MAX_FIDS):
            c.walk(0, fid, [])
        with pytest.raises(py9p.RemoteError) as info:
            c.walk(0, MAX_FIDS, ["version"])
        assert f"too many fids on this connection (limit {MAX_FIDS}, max_fids)" in str(info.value)
        assert "clunk the fids you no longer use" in str(info.value)
        c.clunk(1)
        c.walk(0, 1, ["version"])
        c.open(1, py9p.OREAD)
        assert c.read(1, 100, 0).startswith(b"anvild ")
    _serves(daemon)


def test_the_outstanding_request_cap_is_refused_by_name(
    limited: tuple[Anvild, int, str],
) -> None:
    daemon, _, _ = limited
    raw = Raw.unix(daemon.namespace)
    assert isinstance(raw.rpc(m.Tversion(NOTAG, 8192, "9P2000")), m.Rversion)
    assert isinstance(raw.rpc(m.Tattach(0, 0, NOFID, "me", "")), m.Rattach)
    for fid in (1, 2):
        assert isinstance(raw.rpc(m.Twalk(0, 0, fid, ("events",))), m.Rwalk)
        assert isinstance(raw.rpc(m.Topen(0, fid, OREAD)), m.Ropen)
        backlog = raw.rpc(m.Tread(0, fid, 0, 4096))  # what was published so far
        assert isinstance(backlog, m.Rread)
    raw.send(m.Tread(1, 1, 0, 4096))  # both block: nothing new is published
    raw.send(m.Tread(2, 2, 0, 4096))
    time.sleep(0.2)
    refused = raw.rpc(m.Tstat(3, 0))
    assert isinstance(refused, m.Rerror)
    assert refused.tag == 3
    assert "too many outstanding requests on this connection (limit 2, max_outstanding)" in (
        refused.ename
    )
    assert "wait for replies or flush some" in refused.ename
    assert raw.rpc(m.Tflush(4, 1)) == m.Rflush(4)  # room again; tag 1 is never answered
    assert isinstance(raw.rpc(m.Tstat(3, 0)), m.Rstat)
    raw.close()
    _serves(daemon)
    assert_no_error_lines(daemon)


def test_garbage_frames_are_not_a_handshake(limited: tuple[Anvild, int, str]) -> None:
    daemon, _, _ = limited
    raw = Raw.unix(daemon.namespace)
    raw.sock.sendall(struct.pack("<IBH", 11, 100, 0) + b"\0\0\0\0")  # Tversion cut short
    assert raw.closed_after() < HANDSHAKE + 5
    raw.close()
    _serves(daemon)
