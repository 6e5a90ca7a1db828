"""anvilctl sends exactly plan9port's `9p` message sequences (fixtures/9p traces).

A real Unix socket in a temporary namespace directory, our server with a tree shaped like the one
the traces were recorded against, a recording stream that keeps every byte anvilctl sends, and
anvilctl run as a real process.
"""

from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys

import pytest
import trio

from anvilctl.ninep_cli import _mode_string
from anvilctl.ninep_client import ConnectError, dial, namespace_dir
from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect
from anvild.ninep.framing import FrameReader
from anvild.ninep.server import Server
from anvild.ninep.testing import MemDir, MemFile

ROOT = pathlib.Path(__file__).resolve().parents[3]
TRACES = ROOT / "fixtures" / "9p" / "plan9port-9p-client-traces.txt"


def trace_sections() -> dict[str, list[bytes]]:
    sections: dict[str, list[bytes]] = {}
    current: list[bytes] = []
    for line in TRACES.read_text().splitlines():
        if line.startswith("### "):
            current = sections.setdefault(line[4:], [])
        elif " -> " in line:
            current.append(bytes.fromhex(re.search(r"raw=([0-9a-f]+)", line)[1]))  # type: ignore[index]
    return sections


SECTIONS = trace_sections()

CASES = [
    ("9p ls agent", ["ls", "agent"], b"", b"ctl\nlist\nnew\n"),
    ("9p read agent/list", ["read", "agent/list"], b"", b"agent1 idle\nagent2 busy\n"),
    ("echo 'new claude' | 9p write agent/ctl", ["write", "agent/ctl"], b"new claude\n", b""),
    ("9p write agent/ctl </dev/null", ["write", "agent/ctl"], b"", b""),
    ("printf 'a 1\\nb 2\\n' | 9p write -l agent/ctl", ["write", "-l", "agent/ctl"],
     b"a 1\nb 2\n", b""),
    ("9p stat agent/list", ["stat", "agent/list"], b"", None),
    ("printf 'x\\n' | 9p rdwr agent/ctl", ["rdwr", "agent/ctl"], b"x\n",
     b"a 1\nb 2\n\na 1\nb 2\nx\n"),
    ("9p -n read agent/list", ["-n", "read", "agent/list"], b"", b"agent1 idle\nagent2 busy\n"),
]  # fmt: skip


def make_tree() -> tuple[MemDir, MemFile]:
    # Shaped like the recorded server: three entries, 202 bytes of directory data.
    ctl = MemFile("ctl", b"a 1\nb 2\n", mode=0o666, append_only=True)
    lst = MemFile("list", b"agent1 idle\nagent2 busy\n", mode=0o444)
    return MemDir("/", [ctl, lst, MemFile("new", mode=0o444)]), ctl


class RecordingStream(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream, log: bytearray) -> None:
        self.inner = inner
        self.log = log

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        self.log += data
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def serve_unix(
    path: str, server: Server, log: bytearray, nursery: trio.Nursery
) -> trio.Event:
    """Serve on a Unix socket; the event is set when the first connection has been served."""
    served = trio.Event()
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(16)
    listener = trio.SocketListener(sock)

    async def handle(stream: trio.SocketStream) -> None:
        await server.serve(RecordingStream(stream, log), peer="unix")
        served.set()

    nursery.start_soon(trio.serve_listeners, handle, [listener])
    return served


def frames(data: bytes) -> list[bytes]:
    reader = FrameReader(1 << 20)
    reader.feed(data)
    out = reader.frames()
    assert reader.buffered == 0
    return out


def describe(raw: list[bytes]) -> list[m.Message]:
    return [m.decode(f, Dialect.P9P2000) for f in raw]


@pytest.mark.parametrize(("title", "argv", "stdin", "stdout"), CASES, ids=[c[0] for c in CASES])
async def test_same_wire_sequence_as_plan9port(
    title: str, argv: list[str], stdin: bytes, stdout: bytes | None, tmp_path: pathlib.Path
) -> None:
    root, _ = make_tree()
    server = Server(lambda req: root)
    log = bytearray()
    env = {**os.environ, "NAMESPACE": str(tmp_path), "USER": "root"}
    async with trio.open_nursery() as nursery:
        served = await serve_unix(str(tmp_path / "agent"), server, log, nursery)
        result = await trio.run_process(
            [sys.executable, "-m", "anvilctl", *argv], stdin=stdin, capture_stdout=True,
            capture_stderr=True, env=env, check=False,
        )  # fmt: skip
        with trio.fail_after(5):
            await served.wait()
        nursery.cancel_scope.cancel()
    assert result.returncode == 0, result.stderr
    assert describe(frames(bytes(log))) == describe(SECTIONS[title])
    assert bytes(log) == b"".join(SECTIONS[title])  # byte for byte
    if stdout is not None:
        assert result.stdout == stdout
    else:
        assert result.stdout.startswith(b"'list' 'anvil' 'anvil' 'anvil' q (")
    # plan9port's `9p` never clunks its root fid; the server dropped it at EOF.
    assert server.statistics().fids == 0


async def test_errors_print_the_server_message_and_exit_nonzero(tmp_path: pathlib.Path) -> None:
    root, ctl = make_tree()
    ctl.reject_at_clunk = "ctl: unknown command 'frob'"
    server = Server(lambda req: root)
    env = {**os.environ, "NAMESPACE": str(tmp_path)}
    async with trio.open_nursery() as nursery:
        await serve_unix(str(tmp_path / "agent"), server, bytearray(), nursery)
        cmd = [sys.executable, "-m", "anvilctl"]
        missing = await trio.run_process([*cmd, "read", "agent/nope"], capture_stdout=True,
                                         capture_stderr=True, env=env, check=False)  # fmt: skip
        readonly = await trio.run_process([*cmd, "write", "agent/list"], stdin=b"x",
                                          capture_stderr=True, env=env, check=False)  # fmt: skip
        rejected = await trio.run_process([*cmd, "write", "agent/ctl"], stdin=b"frob\n",
                                          capture_stderr=True, env=env, check=False)  # fmt: skip
        nosvc = await trio.run_process([*cmd, "ls", "other/x"], capture_stderr=True, env=env,
                                       check=False)  # fmt: skip
        nursery.cancel_scope.cancel()
    assert missing.returncode == 1
    assert missing.stderr == b"anvilctl read agent/nope: nope: file does not exist\n"
    assert readonly.returncode == 1
    assert b"list: permission denied: the file is read-only" in readonly.stderr
    assert rejected.returncode == 1
    assert rejected.stderr == b"anvilctl write agent/ctl: ctl: unknown command 'frob'\n"
    assert nosvc.returncode == 1
    assert b"dial unix!" + str(tmp_path / "other").encode() in nosvc.stderr


def test_namespace_dir_follows_plan9port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESPACE", "/x/ns")
    assert namespace_dir() == "/x/ns"
    monkeypatch.delenv("NAMESPACE")
    monkeypatch.setenv("USER", "glenda")
    monkeypatch.delenv("DISPLAY", raising=False)
    assert namespace_dir() == "/tmp/ns.glenda.:0"
    monkeypatch.setenv("DISPLAY", "localhost:10.0")
    assert namespace_dir() == "/tmp/ns.glenda.localhost:10"
    monkeypatch.setenv("DISPLAY", ":1")
    assert namespace_dir() == "/tmp/ns.glenda.:1"


def test_dial_strings() -> None:
    with pytest.raises(ConnectError, match="not a dial string"):
        dial("udp!x!1")
    with pytest.raises(ConnectError, match="dial unix!/nonexistent/sock"):
        dial("unix!/nonexistent/sock")
    with pytest.raises(ConnectError, match=re.escape("dial tcp!127.0.0.1!notaport")):
        dial("tcp!127.0.0.1!notaport")


def test_no_daemon_says_anvild_is_not_running_and_how_to_start_it(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket `agent` missing, or left by a daemon that exited (nothing listens on it), or
    a TCP address that refuses: "anvild is not running", and the command that starts it."""
    monkeypatch.setenv("NAMESPACE", str(tmp_path))
    with pytest.raises(ConnectError) as missing:
        dial(f"unix!{tmp_path}/agent")
    assert str(missing.value) == (
        f"anvild is not running (no socket at {tmp_path}/agent): start it with `anvild`"
    )
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "agent"))  # bound, never listening: what a killed daemon leaves
    try:
        with pytest.raises(ConnectError) as refused:
            dial(f"unix!{tmp_path}/agent")
    finally:
        stale.close()
    assert str(refused.value) == (
        f"anvild is not running (the socket {tmp_path}/agent refuses connections: left by a "
        "daemon that has exited): start it with `anvild`"
    )
    # Another namespace than this environment's: the start command names it.
    elsewhere = tmp_path / "other-ns"
    with pytest.raises(ConnectError) as other:
        dial(f"unix!{elsewhere}/agent")
    assert str(other.value).endswith(f"start it with `anvild --namespace {elsewhere}`")
    # Nothing listens on a TCP port (bound, then closed: refused).
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(ConnectError) as tcp:
        dial(f"tcp!127.0.0.1!{port}")
    assert str(tcp.value) == (
        f"anvild is not listening on tcp!127.0.0.1!{port} (connection refused): start it with "
        f"`anvild --listen tcp!127.0.0.1!{port}`"
    )
    # A service that is not anvild's keeps the plain dial error.
    with pytest.raises(ConnectError, match=re.escape(f"dial unix!{tmp_path}/acme: ")):
        dial(f"unix!{tmp_path}/acme")


def test_every_command_says_anvild_is_not_running(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "NAMESPACE": str(tmp_path)}
    expected = f"anvild is not running (no socket at {tmp_path}/agent): start it with `anvild`"
    for argv, what in [
        (["read", "agent/list"], "read agent/list"),
        (["ls", "-l", "agent"], "ls agent"),
        (["sessions"], "sessions"),
        (["out", "r1"], "out r1"),
        (["new"], "new"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "anvilctl", *argv],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert (result.returncode, result.stderr) == (1, f"anvilctl {what}: {expected}\n")


def test_mode_strings() -> None:
    assert _mode_string(0x80000000 | 0o755) == "d-rwxr-xr-x"
    assert _mode_string(0o644) == "--rw-r--r--"
    assert _mode_string(0x40000000 | 0x20000000 | 0o600) == "alrw-------"


def test_help_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "anvilctl", "--help"], capture_output=True,
                         check=True)  # fmt: skip
    assert b"ls" in out.stdout


def test_9p_commands_start_without_the_heavy_layers(tmp_path: pathlib.Path) -> None:
    # Scripts call `anvilctl read` in loops; only the 9P client may be imported for that.
    code = (
        "import sys\n"
        "from anvilctl.__main__ import main\n"
        "assert main(['-n', 'read', 'agent/x']) == 1\n"
        "heavy = sorted(n for n in sys.modules if n.startswith(('anvild.llm', 'anvild.sandbox',"
        " 'anvild.config', 'trio', 'httpx')))\n"
        "print(heavy)\n"
    )
    env = {**os.environ, "NAMESPACE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True)
    assert out.stdout == b"[]\n"
