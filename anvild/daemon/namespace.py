"""Where the daemon posts its socket: the plan9port namespace directory, its checks and files.

The namespace is `$NAMESPACE`, else `/tmp/ns.$USER.$DISPLAY` as lib9's `getns.c` computes it
(DISPLAY defaults to `:0`), so `9p read agent/list` works unchanged. The directory is the Unix
socket's security boundary: `prepare_namespace` creates it 0700 and refuses one owned by another
user, group/world writable, or a symlink (`NamespaceError` says what to do).
`ServiceFiles`: `agent.pid` (pid, with a `flock` held for life: a second daemon is told the
first's pid); `agent` (the socket; a stale one is replaced only when nothing answers);
`agent.token` (hex, 0600, only with a TCP listener, kept across restarts; delete to rotate; an
older token starting with `-` is replaced). Synchronous: runs at start-up and shutdown.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import re
import secrets
import socket
import stat
from collections.abc import Mapping
from pathlib import Path

import attrs

from anvild.daemon.datadir import check_private_dir

__all__ = [
    "SERVICE",
    "NamespaceError",
    "ServiceFiles",
    "default_namespace",
    "prepare_namespace",
    "read_or_create_token",
]

SERVICE = "agent"
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{31,127}$")  # never a leading "-"


class NamespaceError(Exception):
    """The namespace directory or the service's files cannot be used; the message says why."""


def _user_name() -> str:
    # plan9port's getuser() uses the passwd name of the real uid; fall back to $USER like a shell.
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        name = os.environ.get("USER")
        if not name:
            raise NamespaceError(
                f"uid {os.getuid()} has no passwd entry and $USER is not set; "
                "set $NAMESPACE to a directory of your own"
            ) from None
        return name


def default_namespace(environ: Mapping[str, str] | None = None) -> Path:
    """The namespace directory plan9port clients use: `$NAMESPACE` or `/tmp/ns.$USER.$DISPLAY`."""
    env = os.environ if environ is None else environ
    explicit = env.get("NAMESPACE")
    if explicit:
        return Path(explicit)
    display = env.get("DISPLAY") or ":0"
    head, colon, tail = display.rpartition(":")
    if colon:
        digits = len(tail) - len(tail.lstrip("0123456789"))
        if tail[digits:] == ".0":
            display = f"{head}:{tail[:digits]}"
    display = display.replace("/", "_")
    return Path(f"/tmp/ns.{_user_name()}.{display}")


def prepare_namespace(path: Path) -> Path:
    """Create the namespace directory 0700, or check an existing one; return it."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except FileNotFoundError as exc:
        raise NamespaceError(
            f"cannot create the namespace directory {path}: its parent does not exist; "
            "create it or set $NAMESPACE / --namespace to an existing place"
        ) from exc
    except OSError as exc:
        raise NamespaceError(
            f"cannot create the namespace directory {path}: {exc.strerror}"
        ) from exc
    else:
        os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise NamespaceError(
            f"cannot inspect the namespace directory {path}: {exc.strerror}"
        ) from exc
    check_private_dir(
        path,
        st,
        NamespaceError,
        "namespace directory",
        "$NAMESPACE / --namespace",
        "replace the socket",
    )
    return path


def _answers(path: Path) -> bool:
    """True if something accepts a connection on the Unix socket `path`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2.0)
        sock.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError as exc:
        # Anything else (a timeout, say) means something is there: do not take it over.
        return exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK)
    else:
        return True
    finally:
        sock.close()


def read_or_create_token(path: Path) -> str:
    """The TCP attach token kept in `path` (0600); created with a fresh random value if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        raise NamespaceError(f"cannot read the token file {path}: {exc.strerror}") from exc
    if fd >= 0:
        with os.fdopen(fd, "r") as f:
            st = os.fstat(f.fileno())
            token = f.read(256).strip()
        if (
            st.st_uid == os.getuid()
            and stat.S_IMODE(st.st_mode) == 0o600
            and _TOKEN_RE.match(token)
        ):
            return token
    token = secrets.token_hex(32)
    try:
        if fd >= 0:
            # Anything else (wrong owner or mode, damaged) is replaced with a fresh token.
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(token + "\n")
    except OSError as exc:
        raise NamespaceError(
            f"cannot write the token file {path}: {exc.strerror}; remove it and start again"
        ) from exc
    return token


@attrs.define
class ServiceFiles:
    """The socket, pid/lock file and token file of one service in the namespace directory."""

    namespace: Path
    service: str = SERVICE
    _lock_fd: int = attrs.field(default=-1, init=False)

    @property
    def socket_path(self) -> Path:
        return self.namespace / self.service

    @property
    def pid_path(self) -> Path:
        return self.namespace / f"{self.service}.pid"

    @property
    def token_path(self) -> Path:
        return self.namespace / f"{self.service}.token"

    def claim(self) -> None:
        """Take the pid lock and clear a stale socket; refuse if another daemon is serving."""
        fd = os.open(self.pid_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise NamespaceError(
                f"another anvild (pid {holder}) is already serving {self.socket_path}; "
                "stop it first, or use another --namespace"
            ) from None
        try:
            self._clear_stale_socket()
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _clear_stale_socket(self) -> None:
        path = self.socket_path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise NamespaceError(
                f"{path} exists and is not a socket; it is not ours to remove. "
                "Move it away and start again"
            )
        if _answers(path):
            raise NamespaceError(
                f"a live server already answers on {path} (another program is using the service "
                f"name {self.service!r}); stop it first, or use another --namespace"
            )
        path.unlink()

    def release(self) -> None:
        """Remove the socket and the pid file and drop the lock (idempotent)."""
        if self._lock_fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        with contextlib.suppress(FileNotFoundError):
            self.pid_path.unlink()
        os.close(self._lock_fd)
        self._lock_fd = -1
