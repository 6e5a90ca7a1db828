"""Interrupted turns survive a crash and leave nothing behind (issue 24 item 5): a real daemon
is killed with SIGKILL in the middle of a streamed answer, and in the middle of a write_file,
then restarted on the same data directory.

- Mid-stream: the fake provider holds the answer open after its first pieces. After the restart
  `out` shows the text that had streamed, marked [interrupted]; the log says the session was
  recovered; a follow-up prompt works, and the request the provider gets is valid and holds
  none of the unfinished answer, only the note saying it was not kept. (The held connection
  is reset by the kill: the fake provider must survive that to answer the follow-up.)
- Mid-write: a `sitecustomize` hook given to the first daemon only (PYTHONPATH) stops the
  write's worker thread at the fsync of its temporary file, the moment a kill leaves that file
  behind. After the restart the file is gone, the target untouched, and the removal is in the
  call's result (which the model receives with the follow-up) and in the log.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from anvild.session.leftovers import tag
from anvild.store import SessionStore
from anvild.store.recovery import TURN_DETAIL
from tests.integration.test_daemon_cli import STARTUP_TIMEOUT, Anvild
from tests.integration.test_daemon_crash import read_stream_until, wait_until
from tests.integration.test_sessions_e2e import (
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STREAMED = "Once upon a time there w"  # what the held answer streams before it stops
HOLD_TEMP_HOOK = """
import os, time
_marker = os.environ.get("ANVIL_TEST_HOLD_TEMP")
if _marker:
    _fsync = os.fsync

    def fsync(fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except (OSError, TypeError):
            path = ""
        if ".anvil-" in path and path.endswith(".tmp"):
            with open(_marker, "w") as out:
                out.write(path)
            time.sleep(3600)  # the temp file is written, not renamed: killed here
        return _fsync(fd)

    os.fsync = fsync
"""


def kill_9(daemon: Anvild) -> None:
    os.kill(daemon.proc.pid, signal.SIGKILL)
    code, _ = daemon.exit()
    assert code == -signal.SIGKILL


def test_kill_9_mid_stream_keeps_the_shown_text_and_resumes_validly(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    fake = FakeServer(
        tmp_path,
        [
            # openai-chat: the role delta, then 12-character pieces; held after two of them
            {
                "contains": "tell me a story",
                "text": STREAMED + "as a daemon.",
                "piece": 12,
                "hold": 3,
            },
            {"contains": "go on", "text": "It was restarted."},
        ],
    )
    config = user_config(tmp_path, fake.url)
    daemon: Anvild | None = None
    try:
        daemon = start_daemon(namespace, config)
        sid = ok(anvilctl(namespace, "new", "alias=story", cwd=workdir)).strip()
        store = SessionStore(daemon.data_dir / "sessions")
        ok(anvilctl(namespace, "send", sid, "tell me a story"))
        read_stream_until(namespace, f"agent/{sid}/events", "there w")
        # recorded (within a second of being shown: the unit tests time it)
        wait_until(lambda: store.read(sid).state.streamed == STREAMED, "the streamed text")
        kill_9(daemon)
        daemon = None

        daemon = start_daemon(namespace, config)
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        assert ok(anvilctl(namespace, "out", sid)) == (
            f"{STREAMED}\n[interrupted]\n\n[turn ended: error: {TURN_DETAIL}]\n"
        )
        log = read_stream_until(namespace, f"agent/{sid}/log", "now idle")
        assert "NOTE: recovered after a restart: the session was running, now idle" in log

        ok(anvilctl(namespace, "send", sid, "go on"))
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert ok(anvilctl(namespace, "out", sid)) == "It was restarted.\n"
        requests = fake.requests()
        assert len(requests) == 2
        messages = requests[-1]["body"]["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        sent = str(messages[-1]["content"])
        assert "Once upon" not in str(messages)  # the unfinished answer reaches no provider
        assert f"The {len(STREAMED)} characters of the answer already shown" in sent
        assert sent.index("tell me a story") < sent.index("were not kept") < sent.index("go on")
    finally:
        if daemon is not None:
            code, log_text = daemon.stop()
            assert code == 0, log_text
        fake.stop()


def test_kill_9_mid_write_removes_the_temporary_file_and_reports_it(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOLD_TEMP_HOOK)
    held = tmp_path / "held-temp"
    notes = workdir / "notes"
    arguments = {"file_path": "notes/x.txt", "content": "hello\n"}
    fake = FakeServer(
        tmp_path,
        [
            {
                "contains": "write the notes",
                "tool_calls": [{"name": "write_file", "arguments": arguments, "id": "w1"}],
            },
            {"contains": "what happened", "text": "I will check, then write it again."},
        ],
    )
    config = user_config(tmp_path, fake.url)
    daemon: Anvild | None = None
    held_open = True
    try:
        paths = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)
        hooked = {"PYTHONPATH": paths, "ANVIL_TEST_HOLD_TEMP": str(held)}
        daemon = Anvild(namespace, "--config", str(config), env=hooked)
        daemon.wait_serving()
        sid = ok(anvilctl(namespace, "new", "permission=accept-edits", cwd=workdir)).strip()
        ok(anvilctl(namespace, "send", sid, "write the notes"))
        wait_until(held.exists, "the write to reach its temporary file", STARTUP_TIMEOUT)
        temp = Path(held.read_text())
        assert temp == notes / f".x.txt.anvil-{tag(sid, 'w1')}.tmp"  # named before the write
        assert temp.read_text() == "hello\n"
        kill_9(daemon)
        daemon, held_open = None, False
        assert temp.exists()  # what the kill left

        daemon = start_daemon(namespace, config)
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        assert sorted(p.name for p in notes.iterdir()) == []  # nothing left, target untouched
        removed = f"anvild removed the unfinished temporary file(s) it had left: {temp}"
        log = read_stream_until(namespace, f"agent/{sid}/log", "did not reach its target")
        assert "NOTE: tool call w1 (write_file): outcome unknown" in log
        assert removed in log

        ok(anvilctl(namespace, "send", sid, "what happened?"))
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert ok(anvilctl(namespace, "out", sid)) == "I will check, then write it again.\n"
        messages = fake.requests()[-1]["body"]["messages"]
        tool = [m for m in messages if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool] == ["w1"]
        assert "Outcome unknown" in str(tool[0]["content"])
        assert removed in str(tool[0]["content"])
        assert not notes.exists() or not list(notes.iterdir())
    finally:
        if daemon is not None and held_open:  # its write thread sleeps: SIGTERM cannot end it
            daemon.stop(signal.SIGKILL)
        elif daemon is not None:
            code, log_text = daemon.stop()
            assert code == 0, log_text
        fake.stop()
