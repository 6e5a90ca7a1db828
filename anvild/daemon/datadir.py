"""The daemon's data directory: its checks, and the lock that allows one daemon per directory.

`platformdirs.user_data_dir("anvil")` unless `--data-dir`. It holds transcripts and may hold
secrets, so `prepare_data_dir` creates it 0700 and refuses a symlink, another user's, or a
group/world writable one (`DataDirError` says what to do). `DataDirLock` is an exclusive
non-blocking `flock` on `<data>/anvild.lock` naming its holder (`pid=`, `started=`, `socket=`);
it dies with the process. `release` removes the file before unlocking, so `acquire` checks after
locking that its descriptor is still the file at the path (device and inode) and retries if not.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import pwd
import stat
from pathlib import Path

import attrs

__all__ = [
    "LOCK_FILE",
    "DataDirError",
    "DataDirLock",
    "Holder",
    "check_private_dir",
    "prepare_data_dir",
]

LOCK_FILE = "anvild.lock"


class DataDirError(Exception):
    """The data directory cannot be used, or another daemon holds it; the message says why."""


def user_name(uid: int) -> str:
    """The login name of `uid`, or `uid N` when it has none (for the ownership errors)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_private_dir(
    path: Path,
    st: os.stat_result,
    error: type[Exception],
    what: str,
    option: str,
    harm: str,
) -> None:
    """Raise `error` unless `path` (its `lstat`, `st`) is a real directory of ours that no other
    user can write. `what` names it, `option` chooses another, `harm` is what another user
    could do with it. The data directory and the namespace are both such a directory."""
    if stat.S_ISLNK(st.st_mode):
        raise error(
            f"{what} {path} is a symbolic link; refusing to follow it (whoever controls the "
            f"target could {harm}). Give a real directory with {option}, or replace the link "
            "with a directory of your own"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise error(
            f"{what} {path} exists and is not a directory; move it away or choose another with "
            f"{option}"
        )
    if st.st_uid != os.getuid():
        raise error(
            f"{what} {path} belongs to {user_name(st.st_uid)} (uid {st.st_uid}), not to you "
            f"(uid {os.getuid()}); that user could {harm}. Choose another with {option}"
        )
    if st.st_mode & 0o022:
        raise error(
            f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}: other users can write to "
            f"it and {harm}. Run `chmod 700 {path}` and start again"
        )


def prepare_data_dir(path: Path) -> Path:
    """Create the data directory 0700, or check an existing one; return it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass  # created by someone else meanwhile: the checks below decide
        except OSError as exc:
            raise DataDirError(
                f"cannot create the data directory {path}: {exc.strerror}; create it (mode 700) "
                "or choose another with --data-dir"
            ) from exc
        else:
            os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
        st = os.lstat(path)
    except OSError as exc:
        raise DataDirError(
            f"cannot use {path} as the data directory: {exc.strerror}; choose another with "
            "--data-dir"
        ) from exc
    check_private_dir(
        path, st, DataDirError, "data directory", "--data-dir", "read or alter your sessions"
    )
    return path


@attrs.frozen
class Holder:
    """What a lock file says about the daemon holding it."""

    pid: str = "unknown"
    started: str = "unknown"
    socket: str = "unknown"

    @classmethod
    def parse(cls, text: str) -> Holder:
        fields = dict(
            line.split("=", 1) for line in text.splitlines() if "=" in line and line.strip()
        )
        return cls(
            pid=fields.get("pid", "unknown").strip() or "unknown",
            started=fields.get("started", "unknown").strip() or "unknown",
            socket=fields.get("socket", "unknown").strip() or "unknown",
        )

    def render(self) -> str:
        return f"pid={self.pid}\nstarted={self.started}\nsocket={self.socket}\n"


@attrs.define
class DataDirLock:
    """The exclusive lock on a data directory (`<data>/anvild.lock`)."""

    data_dir: Path
    _fd: int = attrs.field(default=-1, init=False)

    @property
    def path(self) -> Path:
        return self.data_dir / LOCK_FILE

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self, socket_path: Path) -> Holder:
        """Lock the data directory for this process, recording `socket_path`; return what was
        written. Raises `DataDirError` naming the holder if another daemon has it."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            try:
                fd = os.open(self.path, flags, 0o600)
            except OSError as exc:
                raise DataDirError(
                    f"cannot open the lock file {self.path}: {exc.strerror}; remove it if it is "
                    "not a regular file of yours"
                ) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
                os.close(fd)
                raise DataDirError(
                    f"another anvild (pid {holder.pid}, started {holder.started}, serving "
                    f"{holder.socket}) is using the data directory {self.data_dir}; stop it "
                    f"first (kill {holder.pid}), or give this one another --data-dir"
                ) from None
            mine = os.fstat(fd)
            try:
                there = os.lstat(self.path)
            except FileNotFoundError:
                there = None
            if there is None or (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
                os.close(fd)  # the holder released and removed it meanwhile: lock the new file
                continue
            break
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        holder = Holder(pid=str(os.getpid()), started=now.isoformat(), socket=str(socket_path))
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.render().encode(), 0)
        self._fd = fd
        return holder

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self._fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = -1
