"""The embedded default model: llama.cpp's llama-server, run by the daemon as a child process.

Used only when nothing names a model: no `providers.*`, `models.*` or `default_model` key in any
config and no built-in provider's key variable set (`embedded_default_wanted`); then provider and
alias `local` point at this server (`with_local_model`). `LlamaPaths.find` asks the shipped
recipe (`ANVIL_LLAMA_SERVER`/`_MODEL`/`_TEMPLATE` override); a missing build is `LlamaNotBuilt`
(run `make llama-server`) and the daemon starts without it. `ANVIL_LLAMA_THREADS` (default 2).
`LlamaServer.run` (a daemon child) reports started at once, then spawns the server on a free
loopback port with a scrubbed environment and its log in `<data>/logs/llama-server.log`, waits
for `/health`, restarts it within `max_restarts`/`restart_window`, else `failed`; on shutdown
SIGTERM then SIGKILL to its process group. No orphans even after SIGKILL of the daemon:
`setpriv --pdeathsig KILL`, spawned from the main trio thread (the signal fires when the forking
thread exits, so never from a worker thread). `wait_ready()` gives the base URL or raises
`LlamaUnavailable`. Details: docs/decisions.md, "Module notes" (anvild.daemon.llama).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs
import httpx
import structlog
import trio

from anvild import data
from anvild.config import Config, Trust
from anvild.llm.registry import Limits, ModelSpec, ProviderSpec
from anvild.llm.transport import LeanTransport
from anvild.sandbox.secrets import child_env

__all__ = [
    "BUILD_COMMAND",
    "CONTEXT",
    "INSTALLED_BUILD_COMMAND",
    "LOCAL",
    "SCRIPT",
    "LlamaError",
    "LlamaNotBuilt",
    "LlamaPaths",
    "LlamaServer",
    "LlamaUnavailable",
    "State",
    "embedded_default_wanted",
    "with_local_model",
]

log = structlog.get_logger("anvild.daemon.llama")

LOCAL: Final = "local"
"""The name of the embedded provider and of its model alias."""
SERVED_MODEL: Final = "smollm2-135m"
"""The model name the server answers to (`--alias`)."""
CONTEXT: Final = 8192
MAX_OUTPUT: Final = 256
"""Output tokens per response: SmolLM2-135M rarely stops on its own (it rambles up to any
limit), and on two cores 2048 tokens took minutes; 256 keeps a short answer short."""
HOST: Final = "127.0.0.1"
HEALTH_REQUEST_TIMEOUT: Final = 2.0  # seconds for one /health request
SCRIPT: Final = data.path(data.LLAMA_SERVER)
BUILD_COMMAND: Final = "make llama-server"
"""What builds it in a checkout; `anvil-llama-server setup` (INSTALLED_BUILD_COMMAND) does the same
where anvild is installed, and the messages name both."""
INSTALLED_BUILD_COMMAND: Final = "anvil-llama-server setup"
_CONFIGURED: Final = frozenset({"providers", "models", "default_model"})


class LlamaError(Exception):
    """Root of this module's errors."""


class LlamaNotBuilt(LlamaError):
    """The binary, the model or the template is missing; the message says how to get them."""


class LlamaUnavailable(LlamaError):
    """The embedded server failed or was stopped; the message says why."""


def embedded_default_wanted(config: Config, env: Mapping[str, str]) -> bool:
    """True when nothing configured names a model and no provider key is in `env`."""
    for key, source in config.sources.items():
        if key[0] in _CONFIGURED and source.trust is not Trust.BUILTIN:
            return False
    return not any(p.api_key_env and env.get(p.api_key_env) for p in config.providers.values())


def with_local_model(config: Config, base_url: str) -> Config:
    """`config` with the embedded server as provider `local`, model alias `local`, and the
    default model. `base_url` is the server's root (`http://127.0.0.1:P`)."""
    limits = Limits(context_window=CONTEXT, max_output_tokens=MAX_OUTPUT)
    provider = ProviderSpec(
        name=LOCAL, kind="openai-chat", base_url=f"{base_url}/v1", default_limits=limits
    )
    model = ModelSpec(alias=LOCAL, provider=LOCAL, model=SERVED_MODEL, limits=limits)
    return attrs.evolve(
        config,
        providers={**config.providers, LOCAL: provider},
        models={**config.models, LOCAL: model},
        default_model=LOCAL,
    )


@attrs.frozen
class LlamaPaths:
    server: Path
    model: Path
    template: Path

    @classmethod
    def find(cls, env: Mapping[str, str], script: Path = SCRIPT) -> LlamaPaths:
        """The binary, model and template: from the environment, else `script env`."""
        names = ("ANVIL_LLAMA_SERVER", "ANVIL_LLAMA_MODEL", "ANVIL_LLAMA_TEMPLATE")
        found = {name: env[name] for name in names if env.get(name)}
        if len(found) < len(names):
            found = {**_ask_script(script, env), **found}
        paths = cls(*(Path(found[name]) for name in names))
        if not os.access(paths.server, os.X_OK) or not paths.server.is_file():
            raise LlamaNotBuilt(
                f"the default model is a local llama-server, which is not built yet "
                f"({paths.server} is missing): run `{BUILD_COMMAND}` in a checkout, "
                f"`{INSTALLED_BUILD_COMMAND}` where anvild is installed (about 10 minutes of "
                "compiling the first time), then restart anvild; or configure a hosted "
                "provider in the user config file"
            )
        for what, path in (("model", paths.model), ("chat template", paths.template)):
            if not path.is_file():
                raise LlamaNotBuilt(
                    f"the local llama-server's {what} {path} is missing: run "
                    f"`{BUILD_COMMAND}` (installed: `{INSTALLED_BUILD_COMMAND}`), then restart "
                    "anvild"
                )
        return paths


def _ask_script(script: Path, env: Mapping[str, str]) -> dict[str, str]:
    if not script.is_file():
        raise LlamaNotBuilt(
            f"cannot find {script} (anvild installed without its package data?): set "
            "ANVIL_LLAMA_SERVER, ANVIL_LLAMA_MODEL and ANVIL_LLAMA_TEMPLATE to the llama-server "
            "binary, the GGUF model and the chat template, or configure a hosted provider"
        )
    try:
        out = subprocess.run(
            ["bash", str(script), "env"],  # bash: whatever an installer did to its mode
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise LlamaNotBuilt(
            f"`{script} env` failed ({exc}); run `{BUILD_COMMAND}` (installed: "
            f"`{INSTALLED_BUILD_COMMAND}`)"
        ) from exc
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


class State(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    FAILED = "failed"
    STOPPED = "stopped"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class _Exited(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def threads_from(env: Mapping[str, str], default: int = 2) -> int:
    """`ANVIL_LLAMA_THREADS` as a thread count (1 to 64), else `default`; a bad value is
    refused with what to write."""
    text = env.get("ANVIL_LLAMA_THREADS", "").strip()
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise ValueError(f"ANVIL_LLAMA_THREADS={text!r}: write a whole number from 1 to 64")
    return int(text)


class LlamaServer:
    """Supervises one llama-server child; see the module docstring."""

    def __init__(
        self,
        paths: LlamaPaths,
        *,
        log_file: Path,
        env: Mapping[str, str] | None = None,
        threads: int = 2,
        health_timeout: float = 60.0,
        max_restarts: int = 3,
        restart_window: float = 300.0,
        backoff: float = 1.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self.paths = paths
        self.log_file = log_file
        self._env = child_env(os.environ if env is None else env)
        self.threads = threads
        self.health_timeout = health_timeout
        self.max_restarts = max_restarts
        self.restart_window = restart_window
        self.backoff = backoff
        self.stop_timeout = stop_timeout
        self.state = State.STARTING
        self.reason = ""
        self.base_url: str | None = None
        self.pid: int | None = None
        self.starts = 0
        self._changed = trio.Event()

    def _set(self, state: State, reason: str = "", base_url: str | None = None) -> None:
        self.state, self.reason, self.base_url = state, reason, base_url
        self._changed.set()
        self._changed = trio.Event()

    async def wait_ready(self) -> str:
        """The base URL (`http://127.0.0.1:P`) once the server is healthy; raises
        `LlamaUnavailable` if it failed or was stopped."""
        while True:
            if self.state is State.READY and self.base_url is not None:
                return self.base_url
            if self.state in (State.FAILED, State.STOPPED):
                raise LlamaUnavailable(f"the local llama-server is {self.state}: {self.reason}")
            await self._changed.wait()

    def command(self, port: int) -> list[str]:
        setpriv = shutil.which("setpriv", path=self._env.get("PATH"))
        if setpriv is None:
            raise FileNotFoundError(
                "setpriv (util-linux) is not on PATH; it sets the child's parent-death signal. "
                "Install util-linux (`make setup` does)"
            )
        threads = str(self.threads)
        # fmt: off
        return [
            setpriv, "--pdeathsig", "KILL", "--",
            str(self.paths.server),
            "--model", str(self.paths.model), "--alias", SERVED_MODEL,
            "--host", HOST, "--port", str(port),
            "--jinja", "--chat-template-file", str(self.paths.template),
            "--ctx-size", str(CONTEXT), "--parallel", "1",
            "--threads", threads, "--threads-batch", threads,
            "--no-webui",
        ]
        # fmt: on

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        restarts: collections.deque[float] = collections.deque()
        try:
            while True:
                reason = await self._run_once()
                now = trio.current_time()
                while restarts and now - restarts[0] > self.restart_window:
                    restarts.popleft()
                if len(restarts) >= self.max_restarts:
                    self._set(
                        State.FAILED,
                        f"{reason}; gave up after {self.max_restarts} restarts within "
                        f"{self.restart_window:g} s (see {self.log_file})",
                    )
                    log.error("llama.failed", reason=self.reason, log_file=str(self.log_file))
                    return
                restarts.append(now)
                delay = self.backoff * 2 ** (len(restarts) - 1)
                self._set(State.RESTARTING, reason)
                log.warning("llama.restarting", reason=reason, in_seconds=delay)
                await trio.sleep(delay)
        finally:
            if self.state is not State.FAILED:
                self._set(State.STOPPED, "the daemon stopped it")

    async def _run_once(self) -> str:
        """Start the server, wait until healthy, wait until it exits; why it ended."""
        port = _free_port()
        try:
            proc = self._spawn(port)
        except OSError as exc:
            return f"cannot start {self.paths.server}: {exc.strerror or exc}"
        pidfd = os.pidfd_open(proc.pid)
        try:
            base_url = f"http://{HOST}:{port}"
            try:
                await self._wait_healthy(proc, base_url)
            except _Exited as exited:
                return f"llama-server exited with status {exited.status} while starting"
            except trio.TooSlowError:
                return f"llama-server was not healthy after {self.health_timeout:g} s"
            self._set(State.READY, base_url=base_url)
            log.info("llama.ready", base_url=base_url, pid=proc.pid)
            await trio.lowlevel.wait_readable(pidfd)
            return f"llama-server exited with status {proc.wait()}"
        finally:
            with trio.CancelScope(shield=True):
                await self._stop(proc, pidfd)
            trio.lowlevel.notify_closing(pidfd)
            os.close(pidfd)
            self.pid = None

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        with contextlib.suppress(FileNotFoundError):
            self.log_file.replace(self.log_file.with_name(self.log_file.name + ".1"))
        fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            # On this (the trio, main) thread: see the module docstring on PR_SET_PDEATHSIG.
            proc = subprocess.Popen(
                self.command(port),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._env,
            )
        finally:
            os.close(fd)
        self.starts += 1
        self.pid = proc.pid
        log.info("llama.spawned", pid=proc.pid, port=port, server=str(self.paths.server))
        return proc

    async def _wait_healthy(self, proc: subprocess.Popen[bytes], base_url: str) -> None:
        # The daemon's lean transport, no proxy: httpx's default transport would import
        # httpcore and build a TLS context (0.3 s of CPU at every start) for a loopback GET.
        transport = LeanTransport()
        with trio.fail_after(self.health_timeout):
            async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
                while True:
                    status = proc.poll()
                    if status is not None:
                        raise _Exited(status)
                    with trio.move_on_after(HEALTH_REQUEST_TIMEOUT):  # the transport sets none
                        try:
                            response = await client.get(f"{base_url}/health")
                        except httpx.TransportError:
                            pass
                        else:
                            if response.status_code == 200:
                                return
                    await trio.sleep(0.1)

    async def _stop(self, proc: subprocess.Popen[bytes], pidfd: int) -> None:
        """SIGTERM the process group, SIGKILL after `stop_timeout`, reap. Signals go to the group
        only while the leader is unreaped, so its id cannot have been reused."""
        if proc.poll() is not None:
            return
        for sig, patience in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with trio.move_on_after(patience if patience is not None else 30.0):
                await trio.lowlevel.wait_readable(pidfd)
                break
            log.warning("llama.stop_timeout", pid=proc.pid, signal=sig.name)
        status = proc.wait()
        log.info("llama.stopped", pid=proc.pid, status=status)
