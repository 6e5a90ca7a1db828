"""A turn's recorded outcome survives a daemon stop after its `TurnEnded` and before the
session's next state (an ephemeral session's `SessionEnded`, another's `await`): the restore
brings the session to rest without a second, interrupted `TurnEnded` over it, also for files
written before this rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
import trio.testing

from anvild.llm import stream
from anvild.llm.testing import Pause, script
from anvild.store import SessionStatus, read_journal
from anvild.store.recovery import INTERRUPTED_NOTE, RECOVERED_DETAIL, TURN_DETAIL
from tests.unit.session.support import new, running, workspace

S = SessionStatus


async def test_a_clean_stop_mid_turn_keeps_a_childs_turn_outcome(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = [stream.TextDelta(0, "half"), Pause(100), *script.text("never")]
    async with running(tmp_path, [slow]) as manager:
        parent = await new(manager)
        child = await new(manager, ephemeral=True, parent=parent.id)
        child.submit("work")
        while child.status is not S.RUNNING:
            await child.wait_changed(child.version)
        await trio.sleep(1)  # the answer streams; the stop (a SIGTERM's) cancels the turn
    stopped = read_journal(child.journal.path).state
    assert stopped.ended is None
    assert stopped.status is S.RUNNING  # its end not recorded: the stop cut `_exit`
    assert stopped.last_turn is not None
    assert stopped.last_turn.outcome == "cancelled"
    async with running(tmp_path, []) as manager:
        (shown,) = manager.children(parent.id)
    after = read_journal(child.journal.path).state
    assert after.last_turn == stopped.last_turn
    assert shown.outcome == "cancelled"
    assert after.messages == stopped.messages  # no interrupted note added
    assert [turn.turn for turn in after.turns] == [1]


# Files as anvild wrote them when it stopped after a turn's `TurnEnded` and before the next
# record (a kill -9, or a SIGTERM, between them): schema 5 JSON lines.
CWD = "/placeholder"
PARENT = "0a000001"


def _started(session_id: str, *, ephemeral: bool, parent: str | None = None) -> dict[str, Any]:
    return {
        "type": "session_started",
        "id": session_id,
        "alias": None,
        "role": "developer",
        "model": "fake",
        "cwd": CWD,
        "sandbox": "workspace-write",
        "created_at": "2026-12-03T06:38:09.570491+00:00",
        "ephemeral": ephemeral,
        "context": "",
        "schema": 5,
        **({"parent": parent} if parent else {}),
    }


def _turn(prompt: str, answer: str | None, number: int) -> list[dict[str, Any]]:
    """A prompt taken and run; `answer` None: cut before the answer (no `TurnEnded`)."""
    pid = f"p{number}"
    lines: list[dict[str, Any]] = [
        {"type": "prompt_queued", "prompt_id": pid, "text": prompt},
        {"type": "prompt_taken", "prompt_id": pid},
        {"type": "state_changed", "status": "running", "detail": ""},
        {"type": "message_appended", "message": _message("user", prompt)},
    ]
    if answer is not None:
        lines.append({"type": "message_appended", "message": _message("assistant", answer)})
        lines.append({"type": "turn_ended", "outcome": "done", "detail": ""})
    return lines


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"text": text, "type": "text"}]}


IDLE: dict[str, Any] = {"type": "state_changed", "status": "idle", "detail": ""}
FILES: dict[str, list[dict[str, Any]]] = {
    PARENT: [_started(PARENT, ephemeral=False), IDLE],
    # a `task` child: its `SessionEnded` not written
    "0c000002": [_started("0c000002", ephemeral=True, parent=PARENT), IDLE, *_turn("a", "A", 1)],
    # `anvilctl -p`'s session: the same
    "0e000003": [_started("0e000003", ephemeral=True), IDLE, *_turn("b", "B", 1)],
    # a session stopped during its turn's end snapshot: its `await` not written
    "0d000004": [_started("0d000004", ephemeral=False), IDLE, *_turn("c", "C", 1)],
    # a second turn cut before its end: interrupted, as always
    "0f000005": [
        _started("0f000005", ephemeral=False),
        IDLE,
        *_turn("d", "D", 1),
        {"type": "state_changed", "status": "await", "detail": ""},
        *_turn("e", None, 2),
    ],
    # one the previous recovery already brought to rest (a second, interrupted `TurnEnded`)
    "0b000006": [
        _started("0b000006", ephemeral=False),
        IDLE,
        *_turn("f", "F", 1),
        {"type": "turn_ended", "outcome": "error", "detail": TURN_DETAIL, "interrupted": True},
        {"type": "state_changed", "status": "idle", "detail": RECOVERED_DETAIL},
        {"type": "note", "text": "recovered after a restart: the session was running, now idle"},
    ],
}


def _write(directory: Path, cwd: Path) -> None:
    directory.mkdir(parents=True)
    for session_id, lines in FILES.items():
        text = "".join(
            json.dumps({"seq": seq, **line} | ({"cwd": str(cwd)} if seq == 1 else {})) + "\n"
            for seq, line in enumerate(lines, start=1)
        )
        (directory / f"{session_id}.jsonl").write_text(text)


async def test_files_stopped_after_a_turns_end_restore_with_its_outcome(tmp_path: Path) -> None:
    data = tmp_path / "data" / "sessions"
    _write(data, workspace(tmp_path))
    already = (data / "0b000006.jsonl").read_bytes()
    async with running(tmp_path, []) as manager:
        (child,) = manager.children(PARENT)
        assert (child.id, child.outcome, child.state) == ("0c000002", "done", "exited")
        for session_id, answer in (("0e000003", "B"), ("0d000004", "C")):
            session = await manager.load(session_id)
            assert session.status is S.IDLE
            assert session.out == f"{answer}\n"
            assert session.record.last_turn is not None
            assert session.record.last_turn.outcome == "done"
            assert INTERRUPTED_NOTE not in str(session.record.messages)
            assert session.record.notes[-1] == (
                "recovered after a restart: the session was running (its turn had ended: "
                "done), now idle"
            )
        cut = (await manager.load("0f000005")).record.last_turn
        assert cut is not None
        assert (cut.outcome, cut.interrupted) == ("error", True)
        assert manager.peek("0b000006") is not None
    ended = read_journal(data / "0c000002.jsonl").state
    assert ended.last_turn is not None
    assert not ended.last_turn.interrupted
    assert [turn.turn for turn in ended.turns] == [1]
    assert (data / "0b000006.jsonl").read_bytes() == already
