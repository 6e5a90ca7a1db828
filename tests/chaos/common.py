"""What every part of the reliability harness shares: a real daemon with a fake provider, a
blocking 9P client that never waits without a bound, and the result of a part as data.

A part is a function `run_*(workdir, counts...) -> Result`; the short pytest tests call it with
small counts and assert its targets, `python -m tests.chaos` calls it with the full counts and
prints the figures (docs/RELIABILITY.md). Nothing here waits on a socket or a process without a
deadline, so a daemon that stops answering is counted as a hang, never a harness that hangs.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from anvild.ninep import messages as m
from anvild.ninep.constants import NOFID, NOTAG, Dialect
from anvild.ninep.errors import ProtocolError
from anvild.ninep.framing import FrameReader
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer

MSIZE = 8192
INTERNAL = "internal error"


@attrs.define
class Result:
    """One part's figures: named counts (insertion order is the order they are reported in),
    the seconds it took, and notes (each finding in a sentence, with what reproduces it)."""

    part: str
    counts: dict[str, int] = attrs.field(factory=dict)
    seconds: float = 0.0
    notes: list[str] = attrs.field(factory=list)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 50:
            self.notes.append(text)

    def __getitem__(self, name: str) -> int:
        return self.counts.get(name, 0)

    def table(self) -> str:
        rows = "\n".join(f"| {name} | {value:,} |" for name, value in self.counts.items())
        return f"| {self.part} | count |\n|---|---|\n{rows}\n| seconds | {self.seconds:.1f} |"


def user_config(tmp: Path, url: str, extra: str = "") -> Path:
    """A user config whose default model `fake` is the fake provider at `url`, every session in
    bypass mode (tool calls run without an approval), plus `extra` TOML."""
    config = tmp / "config.toml"
    config.write_text(
        'default_model = "fake"\n\n'
        "[permissions]\n"
        'mode = "bypass"\n'
        'max_mode = "bypass"\n\n'
        "[providers.fake]\n"
        'kind = "openai-chat"\n'
        f'base_url = "{url}/v1"\n\n'
        "[models.fake]\n"
        'provider = "fake"\n'
        'model = "fake-model"\n'
        "context_window = 65536\n"
        "max_output_tokens = 1024\n" + extra
    )
    return config


@contextlib.contextmanager
def fake_provider(tmp: Path, turns: list[dict[str, Any]]) -> Iterator[FakeServer]:
    server = FakeServer(tmp, turns)
    try:
        yield server
    finally:
        server.stop()


def start(namespace: Path, config: Path, data_dir: Path | None = None) -> Anvild:
    daemon = Anvild(namespace, "--config", str(config), data_dir=data_dir)
    daemon.wait_serving()
    return daemon


def alive(daemon: Anvild) -> bool:
    return daemon.proc.poll() is None


def log_events(daemon: Anvild, needle: str) -> list[str]:
    """The `event` text of every daemon log line that contains `needle` (log lines that are not
    JSON are kept whole: a half-written last line after a kill)."""
    path = daemon.data_dir / "logs" / "anvild.log"
    if not path.exists():
        return []
    import json

    out = []
    for line in path.read_text(errors="replace").splitlines():
        if needle not in line:
            continue
        try:
            out.append(str(json.loads(line).get("event", line)))
        except ValueError:
            out.append(line)
    return out


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Closed(Exception):
    """The daemon closed the connection."""


class Timeout(Exception):
    """No reply within the bound."""


class Client:
    """A blocking 9P connection: every receive has a deadline (`Timeout`), EOF is `Closed`."""

    def __init__(self, path: Path, dialect: Dialect = Dialect.P9P2000, bound: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(bound)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()  # a refused connect must not leak the socket into a later test
            raise
        self.dialect = dialect
        self.bound = bound
        self.reader = FrameReader(1 << 24)
        self._tag = 0

    def tag(self) -> int:
        self._tag = (self._tag + 1) % NOTAG
        return self._tag

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, frame: bytes) -> None:
        try:
            self.sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Closed(str(exc)) from exc
        except TimeoutError as exc:  # the daemon reads nothing: its buffers are full
            raise Timeout("send") from exc

    def send(self, msg: m.Message) -> None:
        self.send_raw(m.encode(msg, self.dialect))

    def receive(self, bound: float | None = None) -> m.Message:
        deadline = time.monotonic() + (self.bound if bound is None else bound)
        while True:
            try:
                frame = self.reader.next_frame()
            except ProtocolError as exc:
                raise AssertionError(f"the daemon sent a bad frame: {exc}") from exc
            if frame is not None:
                return self._decode(frame)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout("receive")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError as exc:
                raise Timeout("receive") from exc
            except ConnectionResetError as exc:
                raise Closed(str(exc)) from exc
            if not data:
                raise Closed("EOF")
            self.reader.feed(data)

    def _decode(self, frame: bytes) -> m.Message:
        """A reply in the connection's dialect; a hostile Tversion may have renegotiated it
        (or reset it: the daemon then answers in plain 9P2000 until the next version)."""
        try:
            reply = m.decode(frame, self.dialect)
        except ProtocolError:
            reply = m.decode(frame, Dialect.P9P2000)  # raises when no dialect reads it
        if isinstance(reply, m.Rversion):
            known = {d.value: d for d in Dialect}
            self.dialect = known.get(reply.version, self.dialect)
        return reply

    def rpc(self, msg: m.Message) -> m.Message:
        self.send(msg)
        return self.receive()

    def handshake(self, uname: str = "root") -> None:
        reply = self.rpc(m.Tversion(NOTAG, MSIZE, self.dialect.value))
        assert isinstance(reply, m.Rversion), reply
        assert reply.version == self.dialect.value, reply
        attach = m.Tattach(self.tag(), 0, NOFID, uname, "", n_uname=0)
        reply = self.rpc(attach)
        assert isinstance(reply, m.Rattach), reply

    def ok(self, msg: m.Message) -> m.Message:
        reply = self.rpc(msg)
        if isinstance(reply, m.Rerror | m.Rlerror):
            raise OSError(f"{type(msg).__name__}: {reply}")
        return reply

    def walk(self, fid: int, newfid: int, path: str) -> None:
        names = tuple(p for p in path.split("/") if p)
        reply = self.ok(m.Twalk(self.tag(), fid, newfid, names))
        assert isinstance(reply, m.Rwalk), (path, reply)
        assert len(reply.qids) == len(names), (path, reply)

    def open(self, fid: int, mode: int) -> None:
        if self.dialect is Dialect.P9P2000_L:
            self.ok(m.Tlopen(self.tag(), fid, mode))
        else:
            self.ok(m.Topen(self.tag(), fid, mode))

    def read_all(self, fid: int, limit: int = 1 << 20) -> bytes:
        out = b""
        while len(out) < limit:
            reply = self.ok(m.Tread(self.tag(), fid, len(out), MSIZE - 24))
            assert isinstance(reply, m.Rread)
            if not reply.data:
                break
            out += reply.data
        return out

    def clunk(self, fid: int) -> None:
        self.ok(m.Tclunk(self.tag(), fid))

    def read_file(self, path: str) -> bytes:
        self.walk(0, 99, path)
        try:
            self.open(99, 0)
            return self.read_all(99)
        finally:
            self.clunk(99)

    def write_file(self, path: str, data: bytes) -> None:
        """One open, one write, one clunk (one prompt for `in`); raises OSError on a refusal."""
        self.walk(0, 98, path)
        try:
            self.open(98, 1)
            step = MSIZE - 24  # IOHDRSZ: a Twrite's frame fits msize
            for offset in range(0, max(len(data), 1), step):
                piece = data[offset : offset + step]
                reply = self.ok(m.Twrite(self.tag(), 98, offset, piece))
                assert isinstance(reply, m.Rwrite), reply
                assert reply.count == len(piece), reply
        finally:
            self.clunk(98)

    def rdwr(self, path: str, data: bytes) -> bytes:
        """Write then read on one open fid (a ctl's answer)."""
        self.walk(0, 97, path)
        try:
            self.open(97, 2)
            self.ok(m.Twrite(self.tag(), 97, 0, data))
            reply = self.ok(m.Tread(self.tag(), 97, 0, MSIZE - 24))
            assert isinstance(reply, m.Rread)
            return reply.data
        finally:
            self.clunk(97)


@contextlib.contextmanager
def connect(namespace: Path, bound: float = 5.0) -> Iterator[Client]:
    client = Client(namespace / "agent", bound=bound)
    try:
        client.handshake()
        yield client
    finally:
        client.close()


def new_session(namespace: Path, cwd: Path, extra: str = "") -> str:
    with connect(namespace) as c:
        sid = c.rdwr("ctl", f"new cwd={cwd}{extra}\n".encode()).decode().strip()
    assert sid.isalnum(), sid
    return sid


def wait_state(
    namespace: Path, sid: str, states: tuple[str, ...], bound: float, read_file: str = "state"
) -> str:
    """Poll `agent/<sid>/state` until it is one of `states`; the state, or the last one seen
    prefixed with 'timeout:' after `bound` seconds."""
    deadline = time.monotonic() + bound
    state = ""
    while time.monotonic() < deadline:
        with connect(namespace) as c:
            state = c.read_file(f"{sid}/{read_file}").decode().strip()
        if state in states:
            return state
        time.sleep(0.1)
    return f"timeout:{state}"
