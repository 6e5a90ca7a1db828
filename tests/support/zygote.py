"""A Python with anvild and anvilctl already imported that forks the tests' `python -m anvild`
and `python -m anvilctl` processes, so none pays the imports again (about a second of CPU for
a daemon; the suite starts hundreds).

`python -m tests.support.zygote SOCKET` imports both, then serves SOCKET (SOCK_SEQPACKET): a
request is one message (JSON: module, argv, env, cwd, new_session) carrying the child's stdin,
stdout and stderr as SCM_RIGHTS descriptors. The child, once set up, answers with its pid; the
zygote, its parent, later sends its wait status. The zygote is one thread and never runs trio,
so a fork copies nothing running; it exits when its stdin (a pipe from the test) closes.

`ForkingPopen` is `subprocess.Popen` asking the zygote for the fork when the command is exactly
`sys.executable -m anvild|anvilctl ...` and nothing in it needs an exec (`_request`, and the
interpreter's start-up variables as the zygote's); any other command, or any with
ANVIL_TEST_ZYGOTE=0, starts as Popen starts it. Pipes, `communicate`, signals, `wait` and
`returncode` behave as for the test's own child.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import inspect
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

MODULES: Final = ("anvild", "anvilctl")
ENV_SWITCH: Final = "ANVIL_TEST_ZYGOTE"
_REQUEST_MAX: Final = 1 << 20
# What the interpreter reads from the environment when it starts: a child forked from the
# zygote has the zygote's, so a command asking for others is started normally.
_STARTUP_PREFIXES: Final = ("PYTHON", "LC_")
_STARTUP_NAMES: Final = frozenset({"LANG"})
_EXECUTE_PARAMETERS: Final = tuple(
    inspect.signature(subprocess.Popen._execute_child).parameters  # type: ignore[attr-defined]
)[1:]


# -- the zygote ------------------------------------------------------------------------------


def serve(path: str) -> None:
    """Preload, then fork children on request until stdin closes."""
    import anvilctl.__main__  # noqa: F401  (the imports every child would otherwise pay)
    import anvild.__main__  # noqa: F401

    # What is loaded now is never collected: a child's collections then skip it, and its exit
    # touches (copies) far fewer of the pages it shares with the zygote (0.25 -> 0.09 s for an
    # `anvilctl --help`).
    gc.freeze()

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                _start(conn, children, (selector, listener, wake_read, wake_write))
            elif key.fileobj == wake_read:
                os.read(wake_read, 4096)
                _reap(children)
            elif not os.read(0, 4096):  # the test process went away
                os.unlink(path)
                return


def _start(conn: socket.socket, children: dict[int, socket.socket], own: tuple[Any, ...]) -> None:
    try:
        message, fds, _, _ = socket.recv_fds(conn, _REQUEST_MAX, 3)
        request = json.loads(message)
    except (OSError, ValueError):
        conn.close()
        return
    try:
        pid = os.fork()
    except OSError:  # the test sees the connection close: "did not start"
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    if pid == 0:
        selector, listener, wake_read, wake_write = own
        for open_conn in children.values():
            open_conn.close()
        selector.close()
        listener.close()
        os.close(wake_read)
        os.close(wake_write)
        _become(request, fds, conn)  # runs the module; the interpreter then exits as it would
    for fd in fds:
        os.close(fd)
    children[pid] = conn  # the child answers with its pid; the zygote, later, its status


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(str(status).encode())
            conn.close()


def _become(request: Mapping[str, Any], fds: list[int], conn: socket.socket) -> None:
    """In the forked child: what `python -m MODULE ARGV...` would be, in the request's cwd,
    environment and standard streams. Its pid goes back once all is set, as Popen returns
    only after the exec (a session already made, a bad cwd already refused)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        conn.send(f"error {exc.errno}".encode())
        os._exit(255)
    conn.send(str(os.getpid()).encode())
    conn.close()
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # as `python -m` has it
    sys.argv = [request["module"], *request["argv"]]
    # Run afresh as __main__, as `python -m` does (runpy warns about a preloaded copy).
    sys.modules.pop(f"{request['module']}.__main__", None)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    sys.exit(0)


# -- the test process's side ---------------------------------------------------------------


class _Zygote:
    """The zygote this test process started (lazily, once), or None where it could not start."""

    _lock = threading.Lock()
    _path: str | None = None
    _failed = False
    startup: ClassVar[dict[str, str]] = {}  # the interpreter's start-up variables it has

    @classmethod
    def path(cls) -> str | None:
        with cls._lock:
            if cls._path is None and not cls._failed:
                cls._path = cls._spawn()
                cls._failed = cls._path is None
            return cls._path

    @staticmethod
    def _spawn() -> str | None:
        scratch = tempfile.mkdtemp(prefix="anvil-zygote-")
        path = os.path.join(scratch, "socket")
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, ENV_SWITCH: "0"}
        proc = _REAL_POPEN(
            [sys.executable, "-m", "tests.support.zygote", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
            env=env,
        )
        assert proc.stdout is not None
        atexit.register(_stop, proc, scratch)
        if proc.stdout.readline() != b"ready\n":
            return None
        _Zygote.startup = _startup(env)
        return path


def _stop(proc: subprocess.Popen[bytes], scratch: str) -> None:
    if proc.stdin is not None:
        proc.stdin.close()  # the zygote's cue to exit
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(scratch, ignore_errors=True)


def _request(call: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the zygote needs to fork this call's process, or None if it must be exec'd."""
    args = call["args"]
    if (
        os.environ.get(ENV_SWITCH) == "0"
        or not isinstance(args, (list, tuple))
        or len(args) < 3
        or list(args[:2]) != [sys.executable, "-m"]
        or args[2] not in MODULES
        or not all(isinstance(arg, str) for arg in args)
        or call["executable"] is not None
        or call["shell"]
        or call["preexec_fn"] is not None
        or call["pass_fds"]
        or not call["close_fds"]
        or call["gid"] is not None
        or call["gids"] is not None
        or call["uid"] is not None
        or call["umask"] >= 0
        or call.get("process_group", -1) != -1
    ):
        return None
    env = dict(os.environ if call["env"] is None else call["env"])
    cwd = os.fspath(call["cwd"]) if call["cwd"] is not None else os.getcwd()
    return {
        "module": args[2],
        "argv": list(args[3:]),
        "env": {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()},
        "cwd": os.fsdecode(cwd),
        "new_session": bool(call["start_new_session"]),
    }


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES}


class ForkingPopen(subprocess.Popen):  # type: ignore[type-arg]
    """`subprocess.Popen`, forking `python -m anvild|anvilctl` from the zygote (module doc)."""

    _zygote_conn: socket.socket | None = None
    _zygote_status: int | None = None

    def _execute_child(self, *args: Any) -> None:
        call = dict(zip(_EXECUTE_PARAMETERS, args, strict=True))
        request = _request(call)
        path = _Zygote.path() if request is not None else None
        if request is None or path is None or _startup(request["env"]) != _Zygote.startup:
            super()._execute_child(*args)  # type: ignore[misc]
            return
        stdio = [
            call["p2cread"] if call["p2cread"] != -1 else 0,
            call["c2pwrite"] if call["c2pwrite"] != -1 else 1,
            call["errwrite"] if call["errwrite"] != -1 else 2,
        ]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(path)
            socket.send_fds(conn, [json.dumps(request).encode()], stdio)
            answer = conn.recv(64)
        except OSError:
            conn.close()
            raise
        if not answer or answer.startswith(b"error "):
            conn.close()
            if not answer:
                raise OSError(f"the test zygote did not start {args[0][2]}")
            errno = int(answer.split()[1])
            raise OSError(errno, os.strerror(errno), request["cwd"])  # as Popen's bad cwd
        self.pid = int(answer)
        self._child_created = True
        self._zygote_conn = conn
        self._close_pipe_fds(  # type: ignore[attr-defined]
            call["p2cread"],
            call["p2cwrite"],
            call["c2pread"],
            call["c2pwrite"],
            call["errread"],
            call["errwrite"],
        )

    def _zygote_waitpid(self, pid: int, flags: int) -> tuple[int, int]:
        """`os.waitpid` for a child of the zygote: its status comes on the connection."""
        if self._zygote_status is None:
            conn = self._zygote_conn
            assert conn is not None
            conn.setblocking(not flags & os.WNOHANG)
            try:
                data = conn.recv(64)
            except BlockingIOError:
                return 0, 0
            conn.close()
            if not data:
                raise ChildProcessError(f"the test zygote lost process {pid}")
            self._zygote_status = int(data)
        return pid, self._zygote_status

    def _internal_poll(self, _deadstate: int | None = None, **kwargs: Any) -> int | None:
        if self._zygote_conn is None:
            return super()._internal_poll(_deadstate, **kwargs)  # type: ignore[misc,no-any-return]
        return super()._internal_poll(_deadstate, _waitpid=self._zygote_waitpid)  # type: ignore[misc,no-any-return]

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        if self._zygote_conn is None:
            return super()._try_wait(wait_flags)  # type: ignore[misc,no-any-return]
        try:
            return self._zygote_waitpid(self.pid, wait_flags)
        except ChildProcessError:
            return self.pid, 0


_REAL_POPEN: Final = subprocess.Popen


def install() -> None:
    """Start the tests' `python -m anvild|anvilctl` through the zygote (`ForkingPopen`)."""
    if os.environ.get(ENV_SWITCH) != "0":
        subprocess.Popen = ForkingPopen  # type: ignore[misc]


if __name__ == "__main__":
    serve(sys.argv[1])
