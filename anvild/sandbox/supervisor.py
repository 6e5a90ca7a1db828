"""The sandbox's supervisor: the first process of every sandboxed launch, whose only job is that
nothing it started outlives the daemon, a kill of its process group, or the command.

    python -I -S supervisor.py LIFELINE_FD -- setpriv ... -- bwrap ... -- COMMAND

Standard library only (no site, no anvild imports). It becomes a child subreaper, spawns the
rest and waits for the first of: end-of-file on the lifeline (the daemon holds the only write
end, so the kernel closes it whenever the daemon dies), SIGTERM/SIGINT/SIGHUP, or the spawned
process's exit. Then it SIGKILLs the spawned process and every child (bwrap's sandbox init takes
its pid namespace with it), reaps them all, and exits with the spawned status or its signal.
Not a parent-death signal: that is armed too late by bwrap and fires when the forking *thread*
exits (docs/decisions.md, "Sandbox cleanup when the daemon dies").
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_received: list[int] = []


def _note(signum: int, _frame: object) -> None:
    _received.append(signum)


def proc_stats() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the fields of /proc/PID/stat after the command name: state ppid pgrp ...) of
    every process, read as the iterator is consumed (proc(5)); one that goes while we read is
    passed over. Raises OSError at the call when /proc cannot be listed."""
    return _stats(os.listdir("/proc"))


def _stats(names: list[str]) -> Iterator[tuple[int, list[bytes]]]:
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        yield int(name), stat[stat.rfind(b")") + 2 :].split()


def _children() -> list[int]:
    """Our children (zombies included), from /proc: their pids cannot be reused until we reap
    them, so signalling them is safe."""
    me = os.getpid()
    return [pid for pid, fields in proc_stats() if len(fields) > 1 and int(fields[1]) == me]


def _kill_all() -> None:
    """SIGKILL every child and reap them all, including orphans reparented while we do."""
    while True:
        for pid in _children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _die(status: int | None, signum: int | None) -> NoReturn:
    """Exit as the spawned process did (status), or die of `signum`."""
    if signum is None and status is not None:
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
        else:
            os._exit(os.waitstatus_to_exitcode(status))
    if signum is None:
        signum = signal.SIGKILL
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught or blocked
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def main(argv: list[str]) -> NoReturn:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: supervisor.py LIFELINE_FD -- COMMAND...\n")
        os._exit(125)
    lifeline = int(argv[1])
    command = argv[3:]
    os.set_inheritable(lifeline, False)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        error = os.strerror(ctypes.get_errno())
        sys.stderr.write(f"anvil sandbox supervisor: prctl(PR_SET_CHILD_SUBREAPER): {error}\n")
        os._exit(125)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    for signum in STOP_SIGNALS:
        signal.signal(signum, _note)
    try:
        pid = os.posix_spawnp(
            command[0],
            command,
            dict(os.environ),
            # Python ignores SIGPIPE and SIGXFSZ; the command gets them as it would from the
            # daemon (subprocess restores them), and the stop signals at their default.
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, *STOP_SIGNALS),
        )
    except OSError as exc:
        sys.stderr.write(f"anvil sandbox supervisor: cannot run {command[0]}: {exc}\n")
        os._exit(127)
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:  # Linux < 5.3: poll for the exit instead
        pidfd = None
    poller = select.poll()
    poller.register(lifeline, select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    status: int | None = None
    daemon_gone = False
    while status is None and not _received and not daemon_gone:
        for fd, _event in poller.poll(None if pidfd is not None else 50):
            if fd == lifeline:
                daemon_gone = True  # end-of-file (the daemon never writes)
        done, got = os.waitpid(pid, os.WNOHANG)
        if done:
            status = got
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # nothing interrupts the cleanup
    _kill_all()
    _die(status, _received[0] if _received else (signal.SIGKILL if daemon_gone else None))


if __name__ == "__main__":
    main(sys.argv)
