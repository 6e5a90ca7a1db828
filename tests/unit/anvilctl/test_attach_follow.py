"""The attach controller: approvals are read when the session's `approval_requested` event comes
(never on a timer while the turn is quiet), an answer someone else gave first asks nothing, the
status line follows the turn (waiting, retrying with a countdown, gone after), prompts typed
while the daemon is away stay in the input line, and the footer reads `cost` and `usage`.

The command connection is a recording stand-in here (the real one is tested through a pty in
tests/integration/test_attach.py), and so is the UI; event lines go through `_handle` as the
controller's loop hands them on."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from collections.abc import Coroutine
from typing import Any

import pytest

from anvilctl.attach import SYNCED, Attach, Submit
from anvilctl.ninep_client import ConnectError

APPROVAL = (
    "kind tool\ncall_id c1\ntool write_file\n"
    'arguments {"file_path": "a.txt", "content": "x"}\nreason writes a file\n'
    "answer approve | always | reject REASON\n"
)


def line(event: dict[str, Any]) -> str:
    return json.dumps(event)


class Remote:
    """Records every read and write; `approval` holds a request until it is answered."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.approval = APPROVAL
        self.files = {"s1/cost": "input 10\nusd n/a\n", "s1/usage": "500/8192 (6.1%)\n"}
        self.down = False

    def read(self, path: str) -> str:
        self.calls.append(("read", path))
        if path.endswith("/approval"):
            return self.approval
        if path == "list":
            return "s1\t-\tidle\tdeveloper\tfake\t-\n"
        return self.files.get(path, "")

    def write(self, path: str, data: bytes) -> None:
        if self.down:
            raise ConnectError("the daemon closed the connection")
        self.calls.append(("write", f"{path} {data.decode().strip()}"))
        if path.endswith("/approval"):
            self.approval = ""

    def close(self) -> None:
        pass


class Ui:
    color = False
    width = 100

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.text = io.StringIO()
        self.restored: list[str] = []

    def write(self, text: str) -> None:
        self.text.write(text)

    def live(self, text: str) -> None:
        pass

    def changed(self) -> None:
        pass

    def ready(self, idle: bool) -> None:
        pass

    def restore(self, text: str) -> None:
        self.restored.append(text)

    def clear(self) -> None:
        pass

    async def ask(self, question: str) -> str | None:
        self.asked.append(question)
        return self.answers.pop(0)


def attached(answers: list[str] | None = None) -> tuple[Attach, Remote, Ui]:
    args = argparse.Namespace(id="s1", address="unix!/nonexistent", aname="", noauth=False)
    session = Attach(args, io.StringIO(), io.StringIO())
    remote = Remote()
    ui = Ui(answers or [])
    session.remote = remote  # type: ignore[assignment]
    session.ui = ui
    session.connected = session.attached_once = True
    return session, remote, ui


def run(session: Attach, work: Coroutine[Any, Any, None]) -> None:
    async def main() -> None:
        session.worker.start()
        try:
            await work
        finally:
            session.worker.stop()

    asyncio.run(main())


def test_the_approval_is_read_on_its_event_and_not_while_the_turn_is_quiet() -> None:
    session, remote, ui = attached(["maybe", "y"])

    async def turn() -> None:
        await session._handle(line({"type": "step_started", "step": 1}))
        started = {"type": "tool_call_started", "step": 1, "id": "c1", "name": "write_file"}
        await session._handle(line(started))
        await asyncio.sleep(0.5)  # a quiet turn: a tool running, a model thinking
        assert remote.calls == []  # nothing read `approval` meanwhile
        await session._handle(line({"type": "approval_requested", "kind": "tool"}))
        finished = {"type": "turn_finished", "outcome": "done", "steps": 2, "usage": {}}
        await session._handle(line(finished))

    run(session, turn())
    assert ui.asked == ["approve? [y/a/n] ", "approve? [y/a/n] "]  # "maybe" is no answer
    assert remote.calls == [
        ("read", "s1/approval"),
        ("write", "s1/approval approve"),
        ("read", "s1/cost"),
        ("read", "s1/usage"),
        ("read", "s1/out"),
    ]
    shown = ui.text.getvalue()
    assert "approval needed: write_file a.txt" in shown
    assert "[done · 2 steps · tokens ? in, ? out · cost unknown · context 500/8192 (6.1%)]" in shown


def test_an_approval_someone_else_answered_first_asks_nothing() -> None:
    session, remote, ui = attached()
    remote.approval = ""  # answered on another client before this one read it

    async def turn() -> None:
        await session._handle(line({"type": "approval_requested", "kind": "tool"}))
        await session._handle(line({"type": "approval_answered", "kind": "tool"}))

    run(session, turn())
    assert remote.calls == [("read", "s1/approval")]
    assert ui.asked == []
    assert "approval needed" not in ui.text.getvalue()


def test_the_status_line_follows_the_turn_and_counts_down_a_retry() -> None:
    session, _, ui = attached()
    assert session.status() is None  # idle: no status line

    async def turn() -> None:
        await session._handle(Submit("hello"))
        status = session.status()
        assert status is not None
        assert status.startswith("waiting for the model · 0.")
        retry = {"type": "retrying", "step": 1, "attempt": 2, "max_attempts": 5, "delay": 3.0,
                 "reason": "HTTP 529: Overloaded"}  # fmt: skip
        await session._handle(line(retry))
        status = session.status()
        assert status is not None
        assert status.startswith("retrying (attempt 2 of 5) in 3s · ")
        await session._handle(line({"type": "text_delta", "step": 1, "text": "hi"}))
        assert (session.status() or "").startswith("answering · ")
        await session._handle(line({"type": "turn_finished", "outcome": "done", "steps": 1}))
        assert session.status() is None

    run(session, turn())
    assert "retrying in 3 s (attempt 2 of 5): HTTP 529: Overloaded\n" in ui.text.getvalue()


def test_a_prompt_sent_while_the_daemon_is_away_goes_back_to_the_input_line() -> None:
    session, remote, ui = attached()

    async def away() -> None:
        session.connected = False
        await session._handle(Submit("first"))
        session.connected = True
        remote.down = True  # it went away just now: the write fails
        with pytest.raises(ConnectError):
            await session._handle(Submit("second"))

    run(session, away())
    assert ui.restored == ["first", "second"]
    assert "not sent: the daemon is away" in ui.text.getvalue()
    assert session.status() is None


def test_what_is_typed_before_attach_caught_up_is_sent_after() -> None:
    session, remote, ui = attached()
    session.syncing = True
    session.attached_once = False
    session.row = ["s1", "-", "idle", "developer", "fake", "-"]

    async def early() -> None:
        await session._handle(Submit("early bird"))
        assert ("write", "s1/in early bird") not in remote.calls
        await session._handle(SYNCED)

    run(session, early())
    assert ("write", "s1/in early bird") in remote.calls
    assert "attached to s1: developer, model fake" in ui.text.getvalue()
