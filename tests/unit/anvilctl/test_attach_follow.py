"""`Attach.follow` and approvals: the request is read from `approval` when the session's
`approval_requested` event comes, never on a timer while the turn is quiet.

The command connection is a recording stand-in here (the real one is tested through a pty in
tests/integration/test_attach.py); the events are put on the queue the reader thread fills."""

from __future__ import annotations

import argparse
import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from anvilctl import attach
from anvilctl.attach import Attach

APPROVAL = (
    "kind tool\ncall_id c1\ntool write_file\n"
    'arguments {"file_path": "a.txt", "content": "x"}\nreason writes a file\n'
    "answer approve | always | reject REASON\n"
)


def line(event: dict[str, Any]) -> str:
    return json.dumps(event)


class Remote:
    """Records every read and write; `approval` holds a request until it is answered, and the
    answer ends the turn (the daemon would go on and finish it)."""

    def __init__(self, session: Attach) -> None:
        self.session = session
        self.calls: list[tuple[str, str]] = []
        self.approval = APPROVAL
        self.read_approval = threading.Event()

    def read(self, path: str) -> str:
        self.calls.append(("read", path))
        if path.endswith("/approval"):
            self.read_approval.set()
            return self.approval
        return ""

    def write(self, path: str, data: bytes) -> None:
        self.calls.append(("write", f"{path} {data.decode().strip()}"))
        if path.endswith("/approval"):
            self.approval = ""
            self.session.queue.put(line({"type": "turn_finished", "outcome": "done", "steps": 2}))

    def close(self) -> None:
        pass


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Attach:
    monkeypatch.setattr(attach, "history_path", lambda: tmp_path / "history")
    args = argparse.Namespace(id="s1", address="unix!/nonexistent", aname="", noauth=False)
    s = Attach(args, io.StringIO(), io.StringIO())
    s.remote = Remote(s)  # type: ignore[assignment]
    monkeypatch.setattr(s, "_ask", lambda question: "y")
    return s


def test_the_approval_is_read_on_its_event_and_not_while_the_turn_is_quiet(
    session: Attach,
) -> None:
    remote = session.remote
    assert isinstance(remote, Remote)
    session.queue.put(
        line({"type": "tool_call_started", "step": 1, "id": "c1", "name": "write_file"})
    )
    follower = threading.Thread(target=session.follow, daemon=True)
    follower.start()
    # A quiet turn (a tool running, a model thinking): longer than the old 0.3 s poll, and
    # nothing reads `approval`.
    assert not remote.read_approval.wait(1.0), remote.calls
    session.queue.put(line({"type": "approval_requested", "kind": "tool", "call_id": "c1"}))
    assert remote.read_approval.wait(5.0), "the event did not lead to a read of approval"
    follower.join(timeout=5.0)
    assert not follower.is_alive()
    assert remote.calls == [
        ("read", "s1/approval"),
        ("write", "s1/approval approve"),
        ("read", "s1/out"),
    ]
    shown = session.out.getvalue()  # type: ignore[attr-defined]
    assert "approval needed: write_file a.txt" in shown


def test_an_approval_someone_else_answered_first_asks_nothing(session: Attach) -> None:
    remote = session.remote
    assert isinstance(remote, Remote)
    remote.approval = ""  # answered on another client before this one read it
    session.queue.put(line({"type": "approval_requested", "kind": "tool", "call_id": "c1"}))
    session.queue.put(line({"type": "approval_answered", "kind": "tool", "verdict": "approve"}))
    session.queue.put(line({"type": "turn_finished", "outcome": "done", "steps": 2}))
    session.follow()
    assert remote.calls == [("read", "s1/approval"), ("read", "s1/out")]
    assert "approval needed" not in session.out.getvalue()  # type: ignore[attr-defined]
