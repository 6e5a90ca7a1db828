"""The sandbox supervisor (`anvild.sandbox.supervisor`) on its own, without bwrap: it passes the
command's status on, and kills the command and every orphan reparented to it when the lifeline
reads end-of-file, when it is sent SIGTERM, and when the command ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from anvild.sandbox.bwrap import supervisor_argv
from tests.sandbox.conftest import pids_with

# A command that leaves an orphan (its parent, the subshell, exits at once; it is reparented to
# the supervisor, the subreaper) and then runs on itself.
ORPHAN = "(setsid bash -c 'exec -a {m}-orphan sleep 300' &); exec -a {m}-cmd sleep 300"


@pytest.fixture
def mark() -> Iterator[str]:
    tag = f"anvil-sup-{uuid.uuid4().hex[:10]}"
    yield tag
    for pid in pids_with(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def start(script: str) -> tuple[subprocess.Popen[bytes], int]:
    """The supervisor running `bash -c script`, and the write end of its lifeline."""
    lifeline_read, lifeline_write = os.pipe()
    try:
        proc = subprocess.Popen(
            [*supervisor_argv(lifeline_read), "bash", "-c", script], pass_fds=(lifeline_read,)
        )
    finally:
        os.close(lifeline_read)
    return proc, lifeline_write


def wait_for(mark: str, *names: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        argv0s = set()
        for pid in pids_with(mark):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0s.add(f.read().split(b"\0")[0].decode())
        if all(name in argv0s for name in names):
            return
        time.sleep(0.01)
    pytest.fail(f"{names} never started")


def test_exit_status_is_passed_on() -> None:
    proc, lifeline = start("exit 3")
    try:
        assert proc.wait(timeout=10) == 3
    finally:
        os.close(lifeline)


def test_death_by_a_signal_is_passed_on() -> None:
    proc, lifeline = start("kill -USR1 $$")
    try:
        assert proc.wait(timeout=10) == -signal.SIGUSR1
    finally:
        os.close(lifeline)


def test_lifeline_end_of_file_kills_the_command_and_its_orphans(mark: str) -> None:
    proc, lifeline = start(ORPHAN.format(m=mark))
    wait_for(mark, f"{mark}-cmd", f"{mark}-orphan")
    os.close(lifeline)  # what the kernel does when the daemon dies
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert pids_with(mark) == []


def test_sigterm_kills_the_command_and_its_orphans(mark: str) -> None:
    proc, lifeline = start(ORPHAN.format(m=mark))
    try:
        wait_for(mark, f"{mark}-cmd", f"{mark}-orphan")
        proc.terminate()
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert pids_with(mark) == []
    finally:
        os.close(lifeline)


def test_orphans_die_when_the_command_ends(mark: str) -> None:
    script = f"(setsid bash -c 'exec -a {mark}-orphan sleep 300' &); sleep 0.3; exit 4"
    proc, lifeline = start(script)
    try:
        assert proc.wait(timeout=10) == 4
        assert pids_with(mark) == []
    finally:
        os.close(lifeline)


def test_lifeline_closed_before_the_start_still_kills(mark: str) -> None:
    proc, lifeline = start(f"exec -a {mark}-cmd sleep 300")
    os.close(lifeline)  # the daemon died before the supervisor even looked
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert pids_with(mark) == []
