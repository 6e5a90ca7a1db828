"""Crash at daemon level (DESIGN section 8, issue 7 "Checks: crash"): kill -9 the real daemon while
a sandboxed tool runs, restart it, and check the tree, the records and the sandbox.

The scripted model (the fake provider server) calls bash with a slow command whose side effect
is one line appended to a marker file in the workspace, followed by a long sleep. The test
approves the call through the session's `approval` file (a redirect always asks), waits for the
marker line, and SIGKILLs the daemon. Then:

- no process of the sandboxed command survives the daemon (the sandbox supervisor's lifeline);
- a new daemon on the same data directory lists the session, idle;
- its records replay to a transcript that validates, with an "outcome unknown" result;
- the marker still has exactly one line (the call was never re-run, not even after a prompt);
- `log` says the outcome is unknown, and the model's next request carries that result;
- a next prompt works.

As root (CI) the sandbox drops to an unprivileged uid, so the workspace lives under /var/tmp
and belongs to that uid (the pytest tmp dir is 0700 root).
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anvild.llm.integrity import validate_transcript
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from anvild.store import ApprovalAnswered, SessionStore, replay
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)

pytestmark = pytest.mark.slow

SLEEP = "317.5"  # a distinctive duration: the sandboxed sleep is found by its command line


@pytest.fixture
def shared_workdir() -> Iterator[Path]:
    """A workspace the sandbox uid can write (as root the sandbox runs as uid 65534)."""
    top = Path(tempfile.mkdtemp(prefix="anvil-crash-", dir="/var/tmp"))
    top.chmod(0o755)
    work = top / "work"
    work.mkdir()
    if os.geteuid() == 0:
        os.chown(work, DEFAULT_UID, DEFAULT_GID)
    try:
        yield work
    finally:
        shutil.rmtree(top, ignore_errors=True)


def processes_with(token: str) -> list[str]:
    """Command lines of the live (not zombie) processes whose command line contains `token`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if token in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(f"{name}: {cmdline}")
    return found


def wait_until(condition: Callable[[], bool], what: str, timeout: float = TURN_TIMEOUT) -> None:
    """Poll `condition()` (a file or /proc, which cannot be waited on) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_kill_9_during_a_sandboxed_tool_recovers_without_rerunning(
    namespace: Path, tmp_path: Path, shared_workdir: Path
) -> None:
    marker = shared_workdir / "marker"
    command = f"echo ran >> {marker}; sleep {SLEEP}"
    fake = FakeServer(
        tmp_path,
        [
            {
                "contains": "start the slow job",
                "tool_calls": [{"name": "bash", "arguments": {"command": command}, "id": "c1"}],
            },
            {"contains": "Outcome unknown", "text": "I will check before running it again."},
        ],
    )
    config = user_config(tmp_path, fake.url)
    daemon: Anvild | None = None
    try:
        daemon = start_daemon(namespace, config)
        sid = ok(anvilctl(namespace, "new", "alias=crash", cwd=shared_workdir)).strip()
        ok(anvilctl(namespace, "send", sid, "start the slow job"))
        # The redirect makes the policy ask: approve it through the approval file.
        wait_until(
            lambda: read(namespace, f"agent/{sid}/state") == "await_approval\n",
            "the approval request",
        )
        assert "tool bash\n" in read(namespace, f"agent/{sid}/approval")
        ok(anvilctl(namespace, "write", f"agent/{sid}/approval", stdin="approve\n"))
        wait_until(lambda: marker.exists() and marker.read_text() == "ran\n", "the marker line")
        assert read(namespace, f"agent/{sid}/state") == "running\n"
        assert processes_with(f"sleep {SLEEP}"), "the sandboxed command is not running"

        os.kill(daemon.proc.pid, signal.SIGKILL)
        code, _ = daemon.exit()
        assert code == -signal.SIGKILL
        daemon = None
        # Nothing of the sandboxed command outlives the daemon.
        wait_until(lambda: not processes_with(f"sleep {SLEEP}"), "the sandbox to die", 10)
        assert not processes_with(str(marker))

        daemon = start_daemon(namespace, config)
        listing = read(namespace, "agent/list").splitlines()
        assert [line.split("\t")[:3] for line in listing] == [[sid, "crash", "idle"]]
        assert marker.read_text() == "ran\n"  # exactly one line: never re-run

        contents = SessionStore(daemon.data_dir / "sessions").read(sid)
        state = replay(contents.records)
        validate_transcript(state.messages)
        result = state.messages[-1].tool_results()[0]
        assert result.call_id == "c1"
        assert result.is_error
        assert "Outcome unknown" in result.content
        assert "It was not re-run" in result.content

        log_text = read_stream_until(namespace, f"agent/{sid}/log", "it was not re-run")
        assert "NOTE: tool call c1 (bash): outcome unknown" in log_text, log_text

        # The next turn works, and the model sees the unknown outcome.
        ok(anvilctl(namespace, "send", sid, "what happened?"))
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert ok(anvilctl(namespace, "out", sid)) == "I will check before running it again.\n"
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        messages = fake.requests()[-1]["body"]["messages"]
        tool_messages = [m for m in messages if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_messages] == ["c1"]
        assert "Outcome unknown" in str(tool_messages[0]["content"])
        assert marker.read_text() == "ran\n"
    finally:
        if daemon is not None:
            code, log = daemon.stop()
            assert code == 0, log
        fake.stop()
    assert not processes_with(f"sleep {SLEEP}")


def read_stream_until(namespace: Path, path: str, needle: str) -> str:
    """Read a blocking stream file (`log`, `events`) with `anvilctl read` until a line holds
    `needle`; what was read. Fails after TURN_TIMEOUT."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "anvilctl", "read", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "NAMESPACE": str(namespace)},
    )
    assert proc.stdout is not None
    text = b""
    deadline = time.monotonic() + TURN_TIMEOUT
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while needle.encode() not in text:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"{needle!r} not in {text!r}"
                assert sel.select(remaining), f"{needle!r} not in {text!r}"
                chunk = os.read(proc.stdout.fileno(), 65536)
                assert chunk, f"{path} ended without {needle!r}: {text!r}"
                text += chunk
    finally:
        proc.kill()
        proc.communicate()
    return text.decode()


def test_kill_9_while_a_call_awaits_approval_never_approves_it(
    namespace: Path, tmp_path: Path, shared_workdir: Path
) -> None:
    marker = shared_workdir / "marker"
    fake = FakeServer(
        tmp_path,
        [
            {
                "contains": "please write",
                "tool_calls": [
                    {
                        "name": "write_file",
                        "arguments": {"file_path": str(marker), "content": "x\n"},
                        "id": "w1",
                    }
                ],
            },
            {"contains": "Not run", "text": "it was not written"},
        ],
    )
    config = user_config(tmp_path, fake.url)
    daemon: Anvild | None = None
    try:
        daemon = start_daemon(namespace, config)
        sid = ok(anvilctl(namespace, "new", cwd=shared_workdir)).strip()
        ok(anvilctl(namespace, "send", sid, "please write the marker"))
        wait_until(
            lambda: read(namespace, f"agent/{sid}/state") == "await_approval\n",
            "the approval request",
        )
        os.kill(daemon.proc.pid, signal.SIGKILL)
        daemon.exit()
        daemon = None

        daemon = start_daemon(namespace, config)
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        assert read(namespace, f"agent/{sid}/approval") == ""
        refused = anvilctl(namespace, "write", f"agent/{sid}/approval", stdin="approve\n")
        assert refused.returncode == 1
        assert "no approval is pending" in refused.stderr
        state = replay(SessionStore(daemon.data_dir / "sessions").read(sid).records)
        validate_transcript(state.messages)
        result = state.messages[-1].tool_results()[0]
        assert (result.call_id, result.is_error) == ("w1", True)
        assert result.content.startswith("Not run")
        assert approvals(daemon, sid) == ["cancelled"]
        ok(anvilctl(namespace, "send", sid, "did it work?"))
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert ok(anvilctl(namespace, "out", sid)) == "it was not written\n"
        assert not marker.exists()
    finally:
        if daemon is not None:
            code, log = daemon.stop()
            assert code == 0, log
        fake.stop()


def approvals(daemon: Anvild, sid: str) -> list[str]:
    records = SessionStore(daemon.data_dir / "sessions").read(sid).records
    return [r.verdict.value for r in records if isinstance(r, ApprovalAnswered)]
