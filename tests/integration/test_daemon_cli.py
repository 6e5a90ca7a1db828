"""End to end: a fresh `anvild` process, driven by `anvilctl` and by python-9p.

Each test starts the real command (`python -m anvild`) in a temporary namespace directory and
talks to it as a user would: the service `agent` found through $NAMESPACE.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import py9p
import pytest

from anvild import __version__

STARTUP_TIMEOUT = 20.0


class Anvild:
    """A running `anvild` subprocess and what it printed on stderr."""

    def __init__(self, namespace: Path, *args: str) -> None:
        self.namespace = namespace
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "anvild", "--namespace", str(namespace), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._pending = b""
        self.log: list[str] = []

    def wait_serving(self, pattern: str = "serving ") -> str:
        """The first stderr line containing `pattern`; kills the daemon and fails if none comes."""
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" in self._pending:
                    raw, self._pending = self._pending.split(b"\n", 1)
                    line = raw.decode(errors="replace") + "\n"
                    self.log.append(line)
                    if pattern in line:
                        return line
                remaining = deadline - time.monotonic()
                chunk = os.read(fd, 65536) if remaining > 0 and sel.select(remaining) else b""
                if not chunk:
                    break
                self._pending += chunk
        _, log = self.stop(signal.SIGKILL)
        raise AssertionError(f"anvild did not report {pattern!r}; stderr: {log}")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Signal the daemon, then collect its exit status and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.exit()

    def exit(self) -> tuple[int, str]:
        """Wait for a daemon that exits on its own (a refused start); its status and stderr."""
        _, rest = self.proc.communicate(timeout=STARTUP_TIMEOUT)
        tail = (self._pending + rest).decode(errors="replace")
        return self.proc.returncode, "".join(self.log) + tail


@pytest.fixture
def namespace(tmp_path: Path) -> Path:
    return tmp_path / "ns"


@pytest.fixture
def daemon(namespace: Path) -> Iterator[Anvild]:
    d = Anvild(namespace)
    d.wait_serving()
    yield d
    d.stop()


def anvilctl(namespace: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT,
        env={**os.environ, "NAMESPACE": str(namespace)},
        check=False,
    )


def test_anvild_posts_agent_with_pid_file(daemon: Anvild, namespace: Path) -> None:
    assert (namespace / "agent").is_socket()
    assert (namespace / "agent.pid").read_text() == f"{daemon.proc.pid}\n"
    assert namespace.stat().st_mode & 0o777 == 0o700


def test_anvilctl_ls_read_and_write(daemon: Anvild, namespace: Path) -> None:
    ls = anvilctl(namespace, "ls", "agent")
    assert (ls.returncode, ls.stderr) == (0, "")
    assert sorted(ls.stdout.split()) == ["ctl", "events", "list", "version"]

    version = anvilctl(namespace, "read", "agent/version")
    assert (version.returncode, version.stdout) == (0, f"anvild {__version__}\n")

    ping = anvilctl(namespace, "write", "agent/ctl", stdin="ping\n")
    assert (ping.returncode, ping.stdout, ping.stderr) == (0, "", "")

    rdwr = anvilctl(namespace, "rdwr", "agent/ctl", stdin="ping\n")
    assert rdwr.returncode == 0
    assert rdwr.stdout == "\npong\n\n"  # nothing before the write, then the answer


def test_a_bad_ctl_command_fails_the_write_with_the_message(
    daemon: Anvild, namespace: Path
) -> None:
    bad = anvilctl(namespace, "write", "agent/ctl", stdin="frobnicate now\n")
    assert bad.returncode != 0
    assert "ctl: unknown command 'frobnicate'; known commands: ping" in bad.stderr


def test_python_9p_client_over_the_socket(daemon: Anvild, namespace: Path) -> None:
    with py9p.Client.connect_unix(str(namespace / "agent")) as c:
        c.negotiate()
        c.attach(0)
        c.walk(0, 1, ["ctl"])
        c.open(1, py9p.ORDWR)
        c.write(1, b"ping", 0)
        assert c.read(1, 100, 0) == b"pong\n"
        with pytest.raises(py9p.RemoteError, match="ctl: ping: takes no arguments"):
            c.write(1, b"ping twice\n", 0)
        c.clunk(1)


def test_sigterm_and_sigint_shut_down_cleanly(namespace: Path) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        d = Anvild(namespace)
        d.wait_serving()
        code, log = d.stop(sig)
        assert code == 0, log
        assert f"received {signal.Signals(sig).name}" in log
        assert not (namespace / "agent").exists()
        assert not (namespace / "agent.pid").exists()


def test_a_second_daemon_is_refused_and_names_the_first(daemon: Anvild, namespace: Path) -> None:
    second = Anvild(namespace)
    code, log = second.exit()
    assert code == 1
    assert f"another anvild (pid {daemon.proc.pid}) is already serving {namespace}/agent" in log
    assert anvilctl(namespace, "read", "agent/version").returncode == 0  # the first still serves


def test_a_stale_socket_is_replaced(namespace: Path) -> None:
    namespace.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(namespace / "agent"))
    stale.close()
    d = Anvild(namespace)
    d.wait_serving()
    try:
        assert anvilctl(namespace, "read", "agent/version").stdout.startswith("anvild ")
    finally:
        d.stop()


@pytest.mark.parametrize("problem", ["world-writable", "stranger"])
def test_an_unsafe_namespace_directory_is_refused_with_an_explanation(
    namespace: Path, problem: str
) -> None:
    namespace.mkdir()
    if problem == "world-writable":
        namespace.chmod(0o777)
        expected = f"has mode 0777: other users can write to it and replace the socket. Run `chmod 700 {namespace}`"  # noqa: E501
    else:
        if os.getuid() != 0:
            pytest.skip("making a directory owned by another user needs root")
        namespace.chmod(0o700)
        os.chown(namespace, 65534, 65534)
        expected = "belongs to"
    code, log = Anvild(namespace).exit()
    assert code == 1
    assert expected in log
    assert not (namespace / "agent").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "tcp!0.0.0.0!5640"], "reachable from other machines"),
        (["--listen", "5640"], "write tcp!HOST!PORT"),
    ],
)
def test_bad_listen_addresses_are_usage_errors(
    namespace: Path, args: list[str], message: str
) -> None:
    code, log = Anvild(namespace, *args).exit()
    assert code == 2
    assert message in log


def test_version_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "anvild", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=STARTUP_TIMEOUT,
    )
    assert out.stdout == f"anvild {__version__}\n"


def test_a_busy_tcp_port_fails_the_start_and_cleans_up(namespace: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code, log = Anvild(namespace, "--listen", f"tcp!127.0.0.1!{port}").exit()
    assert code == 1
    assert f"cannot listen on tcp!127.0.0.1!{port}" in log
    assert not (namespace / "agent").exists()
    assert not (namespace / "agent.pid").exists()


def test_restart_after_kill_9_takes_over_the_stale_socket_and_pid_file(namespace: Path) -> None:
    first = Anvild(namespace)
    first.wait_serving()
    code, _ = first.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert (namespace / "agent").exists()  # left behind, nobody answers
    assert (namespace / "agent.pid").exists()
    second = Anvild(namespace)
    second.wait_serving()
    try:
        assert (namespace / "agent.pid").read_text() == f"{second.proc.pid}\n"
        assert anvilctl(namespace, "read", "agent/version").returncode == 0
    finally:
        assert second.stop()[0] == 0
