"""Part c: the data directory fills up (ENOSPC on a size-limited tmpfs).

The daemon's data directory (records, logs, locks) lives on its own tmpfs of a few MiB. A
session answers a prompt; then, round by round, a filler file takes the filesystem down to a
few bytes free (0, 64, 512, 4096) and the harness sends prompts (200 bytes, which may fit in
the slack of a page the records file has, and 20,000), creates a session and (in one variant)
writes `clear` to the session's ctl. Each must be acknowledged (and then be in the records) or
refused with an error that says the disk is full; never an "internal error", never a dead
daemon. Then the filler goes; a session left in `error` by a failed record write is started
again with `start` (what its refusal says to do), a prompt must be answered, and after a clean
restart every record file must be whole (every line JSON, the store reads it, the transcript
validates).

Needs `mount -t tmpfs` (root, or a user namespace that allows it): without it the part is
skipped with the mount command's own error.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from anvild.llm.integrity import validate_transcript
from anvild.store import SessionStore, replay
from tests.chaos.common import (
    INTERNAL,
    Closed,
    Result,
    Timeout,
    alive,
    connect,
    fake_provider,
    new_session,
    start,
    user_config,
    wait_state,
)
from tests.integration.test_daemon_cli import Anvild

SIZE = "8m"
FREE_LEFT = (0, 64, 512, 4096)
FULL_WORDS = ("no space", "disk full", "enospc", "space left", "full")


class MountRefused(Exception):
    """tmpfs cannot be mounted here; the message is the precise reason."""


@contextlib.contextmanager
def tmpfs(where: Path, size: str = SIZE) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise MountRefused(
            f"mount -t tmpfs -o size={size} failed (uid {os.geteuid()}, exit "
            f"{done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def fill(directory: Path, leave: int) -> Path:
    """A filler file in `directory` that leaves about `leave` bytes free on its filesystem."""
    filler = directory / "filler"
    with filler.open("ab") as f:
        chunk = b"\0" * (1 << 20)
        while True:
            st = os.statvfs(directory)
            free = st.f_bavail * st.f_frsize
            if free <= leave:
                break
            try:
                f.write(chunk[: max(1, min(len(chunk), free - leave))])
                f.flush()
            except OSError:
                break
    return filler


def _classify(result: Result, what: str, exc: BaseException | None, leave: int) -> None:
    if exc is None:
        result.add(f"{what}: acknowledged")
        return
    text = str(exc).lower()
    if INTERNAL in text:
        result.add("internal errors")
        result.note(f"{what} with {leave} bytes free: {exc}")
    elif any(word in text for word in FULL_WORDS):
        result.add(f"{what}: refused, naming the full disk")
        result.note(f"{what} with {leave} bytes free: refused: {str(exc)[:300]}")
    else:
        result.add("refusals that do not say the disk is full")
        result.note(f"{what} with {leave} bytes free: unclear refusal: {str(exc)[:300]}")


def _attempt(result: Result, what: str, leave: int, action: object) -> bool:
    assert callable(action)
    try:
        action()
    except (OSError, AssertionError) as exc:
        _classify(result, what, exc, leave)
        return False
    except (Closed, Timeout) as exc:
        result.add("hangs or dropped connections")
        result.note(f"{what} with {leave} bytes free: {exc!r}")
        return False
    _classify(result, what, None, leave)
    return True


def _check_records(result: Result, data: Path, acked: list[str], where: str) -> None:
    sessions = data / "sessions"
    raw_all = ""
    for path in sorted(sessions.glob("*.jsonl")):
        raw = path.read_text(errors="replace")
        raw_all += raw
        for number, line in enumerate(raw.splitlines(), 1):
            result.add("record lines checked")
            try:
                json.loads(line)
            except ValueError:
                result.add("corrupt records")
                result.note(f"{where}: {path.name}:{number} is not JSON: {line[:200]!r}")
        try:
            state = replay(SessionStore(sessions).read(path.stem).records)
            validate_transcript(state.messages)
        except Exception as exc:
            result.add("corrupt records")
            result.note(f"{where}: {path.name} does not read back: {exc!r}")
    for prompt in acked:
        if prompt not in raw_all:
            result.add("records lost (acknowledged prompt missing)")
            result.note(f"{where}: acknowledged {prompt} is not in the records")


def run(
    workdir: Path,
    rounds: int = 1,
    clear_while_full: bool = False,
    free_left: tuple[int, ...] = FREE_LEFT,
    then_clear: tuple[int, ...] = (),
) -> Result:
    """`rounds` passes over `free_left` (bytes); raises MountRefused when tmpfs cannot be mounted.
    `clear_while_full`: also write `clear` to the session's ctl while the disk is full;
    `then_clear`: after those, the same with `clear` at these sizes (one daemon for both)."""
    result = Result("Disk full" + (", with `clear` while full" if clear_while_full else ""))
    started = time.monotonic()
    work = workdir / "work"
    work.mkdir(parents=True)
    namespace = workdir / "ns"
    with (
        tmpfs(workdir / "mnt") as mnt,
        fake_provider(workdir, [{"text": "pong", "repeat": True}]) as fake,
    ):
        data = mnt / "data"
        config = user_config(workdir, fake.url)
        daemon: Anvild = start(namespace, config, data)
        acked: list[str] = []
        try:
            sid = new_session(namespace, work)
            with connect(namespace) as c:
                c.write_file(f"{sid}/in", b"before")
            acked.append("before")
            wait_state(namespace, sid, ("await", "idle"), 30)
            plan = [(leave, clear_while_full) for leave in free_left]
            plan += [(leave, True) for leave in then_clear]
            for round_ in range(rounds):
                for leave, clear in plan:
                    filler = fill(mnt, leave)
                    # A short prompt may fit in the slack of a page the records file already
                    # has; a long one needs new pages.
                    for size in (200, 20_000):
                        prompt = f"full-{round_}-{leave}-{size}-" + "x" * size

                        def send(prompt: str = prompt, sid: str = sid) -> None:
                            with connect(namespace) as c:
                                c.write_file(f"{sid}/in", prompt.encode())

                        if _attempt(result, f"prompt of {size} bytes", leave, send):
                            acked.append(prompt)
                        state = wait_state(namespace, sid, ("await", "idle", "error"), 30)
                        if state.startswith("timeout"):
                            result.add("hangs or dropped connections")
                            result.note(f"the turn with {leave} bytes free stayed {state}")

                    def create() -> None:
                        new_session(namespace, work)

                    _attempt(result, "new session", leave, create)

                    def ctl(sid: str = sid) -> None:
                        with connect(namespace) as c:
                            c.write_file(f"{sid}/ctl", b"clear\n")

                    if clear:
                        _attempt(result, "session ctl (clear)", leave, ctl)
                    if not alive(daemon):
                        result.add("crashes (daemon died)")
                        _, log = daemon.exit()
                        result.note(f"the daemon died with {leave} bytes free: {log[-1500:]}")
                        filler.unlink()
                        daemon = start(namespace, config, data)
                        continue
                    filler.unlink()
                    # Space is back. A session whose record could not be written is in
                    # `error` until `start` (its refusals say so); then it answers again.
                    with connect(namespace) as c:
                        state = c.read_file(f"{sid}/state").decode().strip()
                    if state == "error":
                        result.add("sessions in error until `start` (as their refusal says)")
                        try:
                            with connect(namespace) as c:
                                c.write_file(f"{sid}/ctl", b"start\n")
                            result.add("sessions started again by `start`")
                        except OSError as exc:
                            result.add("sessions that `start` cannot recover once space is back")
                            result.note(f"`start` after {leave} bytes free: {exc}")
                            sid = new_session(namespace, work)  # go on with another
                        wait_state(namespace, sid, ("idle", "await"), 30)
                    with connect(namespace) as c:
                        c.write_file(f"{sid}/in", f"back-{round_}-{leave}".encode())
                        c.read_file(f"{sid}/wait")
                        out = c.read_file(f"{sid}/out")
                    acked.append(f"back-{round_}-{leave}")
                    if out == b"pong\n":
                        result.add("recoveries when space returned")
                    else:
                        result.add("no recovery when space returned")
                        result.note(f"after {leave} bytes free, out is {out!r}")
        finally:
            if alive(daemon):
                code, log = daemon.stop()
                if code != 0:
                    result.add("crashes (daemon died)")
                    result.note(f"the daemon stopped with {code}: {log[-1500:]}")
        # A clean restart reads every record back.
        daemon = start(namespace, config, data)
        code, log = daemon.stop()
        if code != 0:
            result.add("crashes (daemon died)")
            result.note(f"the restarted daemon stopped with {code}: {log[-1500:]}")
        _check_records(result, data, acked, "after the restart")
    for name in (
        "crashes (daemon died)",
        "corrupt records",
        "records lost (acknowledged prompt missing)",
        "internal errors",
        "refusals that do not say the disk is full",
        "hangs or dropped connections",
        "sessions that `start` cannot recover once space is back",
    ):
        result.counts[name] = result[name]
    result.seconds = time.monotonic() - started
    return result
