"""End to end: a fresh `anvild` process, driven by `anvilctl` and by python-9p.

Each test starts the real command (`python -m anvild`) in a temporary namespace directory, with
a temporary data directory and XDG directories (so the user's own config and data are never
read), and talks to it as a user would: the service `agent` found through $NAMESPACE.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import py9p
import pytest

from anvild import __version__
from tests.support.fake_llama_server import write_fake

STARTUP_TIMEOUT = 20.0


PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY")


def isolated_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a test daemon: ours, with XDG dirs under `home`, no ANVIL_LOG and no
    provider keys (so the embedded default applies), and the fake llama-server as its binary
    (it records each run in `home/llama-runs`)."""
    env = {k: v for k, v in os.environ.items() if k != "ANVIL_LOG" and k not in PROVIDER_KEYS}
    env["XDG_CONFIG_HOME"] = str(home / "xdg-config")
    env["XDG_DATA_HOME"] = str(home / "xdg-data")
    fake = home / "fake-llama-server"
    if not fake.exists():
        write_fake(fake, "--fake-record", str(home / "llama-runs"))
        (home / "model.gguf").write_text("")
        (home / "template.jinja").write_text("")
    env["ANVIL_LLAMA_SERVER"] = str(fake)
    env["ANVIL_LLAMA_MODEL"] = str(home / "model.gguf")
    env["ANVIL_LLAMA_TEMPLATE"] = str(home / "template.jinja")
    env.update(extra or {})
    return env


class Anvild:
    """A running `anvild` subprocess and what it printed on stdout and stderr.

    `data_dir` defaults to `data` next to the namespace; `platform_data_dir` leaves --data-dir
    out, so the daemon uses its default (under the test's XDG_DATA_HOME)."""

    def __init__(
        self,
        namespace: Path,
        *args: str,
        data_dir: Path | None = None,
        platform_data_dir: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.namespace = namespace
        self.data_dir = data_dir or namespace.parent / "data"
        more = ["--data-dir", str(self.data_dir)]
        if platform_data_dir:
            self.data_dir = namespace.parent / "xdg-data" / "anvil"
            more = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "anvild", "--namespace", str(namespace), *more, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=isolated_env(namespace.parent, env),
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
        out, rest = self.proc.communicate(timeout=STARTUP_TIMEOUT)
        self.stdout = out.decode(errors="replace")
        tail = (self._pending + rest).decode(errors="replace")
        return self.proc.returncode, "".join(self.log) + tail

    def log_records(self) -> list[dict[str, Any]]:
        """The daemon's log file, one JSON object per line (every line must be one)."""
        lines = (self.data_dir / "logs" / "anvild.log").read_text().splitlines()
        return [json.loads(line) for line in lines]


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
    assert sorted(ls.stdout.split()) == [
        *("beads", "budget", "convoys", "ctl", "events", "list", "load", "models", "roles"),
        *("sandbox-roles", "scripts", "user", "version"),
    ]

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
    assert "ctl: unknown command 'frobnicate'; known commands: kill, new, ping" in bad.stderr


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
        assert not (namespace / "agent").exists()
        assert not (namespace / "agent.pid").exists()
        assert not (d.data_dir / "anvild.lock").exists()
        records = [r for r in d.log_records() if r["event"].startswith("daemon.")]
        events = [r["event"] for r in records]
        last = len(events) - 1 - events[::-1].index("daemon.signal")  # this run's ending
        assert events[last:] == [
            "daemon.signal",
            "daemon.stopping",
            "daemon.stopped",
            "daemon.exit",
        ]
        assert records[last]["signal"] == signal.Signals(sig).name
        assert records[last + 1]["reason"] == f"received {signal.Signals(sig).name}"
        # The llama-server child is stopped between the stopping and the stopped lines.
        every = [r["event"] for r in d.log_records()]
        tail = every[len(every) - 1 - every[::-1].index("daemon.stopping") :]
        assert tail.index("llama.stopped") < tail.index("daemon.stopped")


def test_the_startup_line_is_all_it_prints_and_the_log_is_json(namespace: Path) -> None:
    d = Anvild(namespace, "--listen", "tcp!127.0.0.1!0")
    line = d.wait_serving()
    log_file = d.data_dir / "logs" / "anvild.log"
    assert line.startswith(f"anvild: serving {namespace}/agent, tcp!127.0.0.1!")
    assert line.endswith(
        f" (token in {namespace}/agent.token); data {d.data_dir}; log {log_file}; "
        "default model: local llama-server\n"
    )
    anvilctl(namespace, "read", "agent/version")
    code, log = d.stop()
    assert (code, log, d.stdout) == (0, line, "")
    records = d.log_records()
    assert {"timestamp", "level", "logger", "event"} <= set(records[0])
    assert records[0]["event"] == "daemon.starting"
    assert [r["tcp"] for r in records if r["event"] == "daemon.serving" and "tcp" in r]
    assert d.data_dir.stat().st_mode & 0o777 == 0o700
    assert log_file.stat().st_mode & 0o777 == 0o600


def test_quiet_prints_nothing(namespace: Path) -> None:
    d = Anvild(namespace, "-q")
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not (namespace / "agent").is_socket():
        assert time.monotonic() < deadline, "anvild -q did not post its socket"
        time.sleep(0.05)
    assert anvilctl(namespace, "read", "agent/version").returncode == 0
    code, log = d.stop()
    assert (code, log, d.stdout) == (0, "", "")


def test_a_second_daemon_on_the_data_dir_is_refused_and_names_the_first(
    daemon: Anvild, namespace: Path, tmp_path: Path
) -> None:
    second = Anvild(tmp_path / "other-ns")
    code, log = second.exit()
    assert code == 1
    lock = daemon.data_dir / "anvild.lock"
    started = lock.read_text().splitlines()[1].removeprefix("started=")
    assert (
        f"another anvild (pid {daemon.proc.pid}, started {started}, serving {namespace}/agent) "
        f"is using the data directory {daemon.data_dir}; stop it first (kill {daemon.proc.pid})"
    ) in log
    assert not (tmp_path / "other-ns" / "agent").exists()
    assert anvilctl(namespace, "read", "agent/version").returncode == 0  # the first still serves


def test_a_second_daemon_on_the_namespace_is_refused_and_names_the_first(
    daemon: Anvild, namespace: Path, tmp_path: Path
) -> None:
    second = Anvild(namespace, data_dir=tmp_path / "other-data")
    code, log = second.exit()
    assert code == 1
    assert f"another anvild (pid {daemon.proc.pid}) is already serving {namespace}/agent" in log
    assert not (tmp_path / "other-data" / "anvild.lock").exists()  # released on the way out
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


def test_the_default_data_dir_is_the_platform_one_created_0700(namespace: Path) -> None:
    d = Anvild(namespace, platform_data_dir=True)
    line = d.wait_serving()
    assert f"; data {d.data_dir}; " in line
    assert d.data_dir.stat().st_mode & 0o777 == 0o700
    assert (d.data_dir / "anvild.lock").read_text().startswith(f"pid={d.proc.pid}\n")
    assert d.stop()[0] == 0


@pytest.mark.parametrize("problem", ["symlink", "group-writable"])
def test_an_unsafe_data_dir_is_refused_with_an_explanation(
    namespace: Path, tmp_path: Path, problem: str
) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    if problem == "symlink":
        data = tmp_path / "link"
        data.symlink_to(real)
        expected = f"data directory {data} is a symbolic link; refusing to follow it"
    else:
        data = real
        data.chmod(0o770)
        expected = f"has mode 0770: other users can write to it and read or alter your sessions. Run `chmod 700 {data}`"  # noqa: E501
    code, log = Anvild(namespace, data_dir=data).exit()
    assert code == 1
    assert expected in log
    assert not (namespace / "agent").exists()
    assert list(real.iterdir()) == []


def test_a_bad_config_refuses_to_start_with_the_loaders_message(
    namespace: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text('[models.fast]\nprovider = "nowhere"\nmodel = "m"\n')
    code, log = Anvild(namespace, "--config", str(bad)).exit()
    assert code == 2
    assert log.startswith(f"anvild: bad configuration: {bad}: models.fast.provider: unknown")
    assert not (namespace / "agent").exists()
    bad.write_text("default_model = [\n")
    code, log = Anvild(namespace, "--config", str(bad)).exit()
    assert (code, log.startswith(f"anvild: bad configuration: {bad}")) == (2, True)


MODELS = """
[providers.local]
kind = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.tiny]
provider = "local"
model = "smollm2"

[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-5"
"""


def test_a_default_model_typo_is_refused_at_start_naming_the_key_and_the_aliases(
    namespace: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('default_model = "sonet"\n' + MODELS)
    code, log = Anvild(namespace, "--config", str(config)).exit()
    assert code == 2
    assert log.startswith(
        f"anvild: bad configuration: {config}: default_model: unknown model 'sonet'; did you "
        "mean 'sonnet'? (known aliases: sonnet, tiny; "
    )
    assert not (namespace / "agent").exists()


def test_a_key_a_model_needs_is_a_warning_at_start_and_the_daemon_serves(
    namespace: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('default_model = "tiny"\n' + MODELS)
    d = Anvild(namespace, "-q", "--config", str(config))  # printed even with -q
    try:
        line = d.wait_serving("ANTHROPIC_API_KEY")
        wait_for(lambda: (namespace / "agent").is_socket(), "the daemon's socket")
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert line == (
        "anvild: ANTHROPIC_API_KEY is not set in anvild's environment: model 'sonnet' "
        "(provider 'anthropic') will fail until anvild is restarted with it "
        "(`ANTHROPIC_API_KEY=... anvild`)\n"
    )
    warned = [r for r in d.log_records() if r.get("event") == "config.key_missing"]
    assert [r["message"] for r in warned] == [line.removeprefix("anvild: ").rstrip("\n")]


def test_the_user_config_file_is_the_default_and_is_validated(namespace: Path) -> None:
    user_file = namespace.parent / "xdg-config" / "anvil" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text("context_window = 'big'\n")
    code, log = Anvild(namespace).exit()
    assert code == 2
    assert f"anvild: bad configuration: {user_file}: " in log


def test_a_missing_explicit_config_is_refused(namespace: Path, tmp_path: Path) -> None:
    code, log = Anvild(namespace, "--config", str(tmp_path / "nope.toml")).exit()
    assert code == 2
    assert f"{tmp_path / 'nope.toml'}: does not exist or is not a file" in log


def test_an_invalid_anvil_log_is_refused_with_the_allowed_values(namespace: Path) -> None:
    code, log = Anvild(namespace, env={"ANVIL_LOG": "loud"}).exit()
    assert code == 2
    assert log == (
        "anvild: ANVIL_LOG='loud' is not a log level; set it to one of "
        "debug|info|warning|error (or unset it for info)\n"
    )


@pytest.mark.parametrize(("value", "debug_seen"), [("debug", True), ("warning", False)])
def test_anvil_log_sets_the_level_of_the_file(
    namespace: Path, value: str, debug_seen: bool
) -> None:
    d = Anvild(namespace, env={"ANVIL_LOG": value})
    d.wait_serving()
    assert anvilctl(namespace, "read", "agent/version").returncode == 0
    assert d.stop()[0] == 0
    levels = {r["level"] for r in d.log_records()}
    assert ("debug" in levels) is debug_seen  # unix.connection is logged at debug
    assert ("info" in levels) is debug_seen


def test_a_planted_api_key_is_redacted_in_the_log(namespace: Path, tmp_path: Path) -> None:
    key = "sk-ant-PLANTED0123456789abcdef"
    # The key reaches a log call through the data dir's path, which startup logs.
    data = tmp_path / f"data-{key}"
    d = Anvild(namespace, data_dir=data, env={"ANTHROPIC_API_KEY": key})
    d.wait_serving()
    assert d.stop()[0] == 0
    text = (data / "logs" / "anvild.log").read_text()
    assert key not in text
    starting = next(r for r in d.log_records() if r["event"] == "daemon.starting")
    assert starting["data_dir"] == f"{tmp_path}/data-[redacted:ANTHROPIC_API_KEY]"


def llama_runs(namespace: Path) -> list[dict[str, Any]]:
    """What the fake llama-server recorded: one {"pid", "argv"} per start."""
    path = namespace.parent / "llama-runs"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_for(condition: Any, what: str, timeout: float = STARTUP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_embedded_llama_server_runs_as_a_child_and_stops_with_the_daemon(
    namespace: Path,
) -> None:
    d = Anvild(namespace)
    d.wait_serving()
    wait_for(lambda: any(r["event"] == "llama.ready" for r in d.log_records()), "llama.ready")
    [run] = llama_runs(namespace)
    assert alive(run["pid"])
    ready = next(r for r in d.log_records() if r["event"] == "llama.ready")
    assert ready["base_url"] == f"http://127.0.0.1:{run['argv'][run['argv'].index('--port') + 1]}"
    code, log = d.stop()
    assert code == 0, log
    assert not alive(run["pid"])
    assert "fake llama-server: listening" in (d.data_dir / "logs" / "llama-server.log").read_text()
    assert "fake llama-server" not in log + d.stdout  # its output never reaches the terminal


def test_kill_9_of_the_daemon_leaves_no_llama_server(namespace: Path) -> None:
    d = Anvild(namespace)
    d.wait_serving()
    wait_for(lambda: bool(llama_runs(namespace)), "the llama-server child")
    [run] = llama_runs(namespace)
    assert alive(run["pid"])
    assert d.stop(signal.SIGKILL)[0] == -signal.SIGKILL
    wait_for(lambda: not alive(run["pid"]), "the orphaned llama-server to die", timeout=5)


@pytest.mark.parametrize("quiet", [False, True])
def test_an_unbuilt_llama_server_still_starts_and_says_how_to_build_it(
    namespace: Path, tmp_path: Path, quiet: bool
) -> None:
    missing = tmp_path / "cache" / "bin" / "llama-server"
    d = Anvild(namespace, *(["-q"] if quiet else []), env={"ANVIL_LLAMA_SERVER": str(missing)})
    note = d.wait_serving("not built")
    assert note == (
        f"anvild: the default model is a local llama-server, which is not built yet ({missing} "
        "is missing): run `make llama-server` in a checkout, `anvil-llama-server setup` where "
        "anvild is installed (about 10 minutes of compiling the first time), then restart "
        "anvild; or configure a hosted provider in the user config file\n"
    )
    assert anvilctl(namespace, "read", "agent/version").returncode == 0
    code, log = d.stop()
    assert code == 0
    assert "; default model: local llama-server" not in log
    assert log.count("\n") == (1 if quiet else 2)
    assert llama_runs(namespace) == []


def test_a_provider_key_in_the_environment_means_no_embedded_server(namespace: Path) -> None:
    d = Anvild(namespace, env={"ANTHROPIC_API_KEY": "sk-ant-test-key-not-real"})
    line = d.wait_serving()
    assert "default model" not in line
    code, _ = d.stop()
    assert code == 0
    assert llama_runs(namespace) == []
