"""Crash tests for session records (DESIGN section 8, issue 7 item 5): a real child process
writes through the journal and is killed with SIGKILL.

1. Mid-tool: the child records ToolStarted (synced), performs the side effect (one line appended
   to a marker file), and is killed while the "tool" is still running. Loading and recovering
   the session must leave the marker with exactly one line (nothing re-run), a transcript that
   validates, an idle session, and a log note saying the outcome is unknown.
2. At random points of a record-writing loop: every load must give a prefix of the records
   written, possibly after a torn final line; never an interior error. Then recovery leaves a
   valid transcript. Every fourth turn carries a 3 MB tool result: SIGKILL interrupts a large
   write(2) between pages, so kills land inside a line often (about one run in four here), and
   the torn-tail path is exercised for real, not only simulated.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anvild.llm.integrity import validate_transcript
from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult
from anvild.store import (
    Journal,
    MessageAppended,
    Note,
    Record,
    SessionStarted,
    SessionStatus,
    StateChanged,
    ToolFinished,
    ToolStarted,
    UsageReported,
    read_journal,
)

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

HEADER = SessionStarted(
    id="crash1",
    alias=None,
    role="developer",
    model="local",
    cwd="/work",
    sandbox="workspace-write",
    created_at=dt.datetime(2026, 10, 10, tzinfo=dt.UTC),
)


def prologue() -> list[Record]:
    return [HEADER, StateChanged(SessionStatus.RUNNING)]


def cycle(i: int) -> list[Record]:
    """One deterministic turn of the loop child: prompt, call, start, finish, results, answer."""
    size = 3_000_000 if i % 4 == 3 else (i * 7919) % 200_000 + 10
    call = ToolCall(f"c{i}", "bash", {"command": f"step {i}"})
    result = ToolResult(call.id, f"{i}:" + "r" * size)
    return [
        MessageAppended(Message.user_text(f"prompt {i} " + "p" * (size // 3))),
        UsageReported(Usage(i, i, 0, 0)),
        MessageAppended(Message(Role.ASSISTANT, (Text(f"calling {i}"), call))),
        ToolStarted(call.id, call.name),
        ToolFinished(result),
        MessageAppended(Message(Role.USER, (result,))),
        MessageAppended(Message.assistant_text(f"answer {i}")),
        Note(f"cycle {i} done"),
    ]


def expected_records(count: int) -> list[Record]:
    records = prologue()
    i = 0
    while len(records) < count:
        records.extend(cycle(i))
        i += 1
    return records[:count]


def child_loop(path: str) -> None:
    """Run in the child: write the loop's records until killed."""
    journal = Journal.create(Path(path), HEADER)
    for record in prologue()[1:]:
        journal.append(record)
    print("ready", flush=True)
    i = 0
    while True:
        for record in cycle(i):
            journal.append(record)
        i += 1


def child_tool(path: str, marker: str) -> None:
    """Run in the child: start a slow tool whose side effect is one line in `marker`."""
    journal = Journal.create(Path(path), HEADER)
    call = ToolCall("c1", "bash", {"command": f"echo ran >> {marker}; sleep 60"})
    for record in (
        *prologue()[1:],
        MessageAppended(Message.user_text("append one line to the marker")),
        MessageAppended(Message(Role.ASSISTANT, (call,))),
        ToolStarted(call.id, call.name),  # synced before the side effect
    ):
        journal.append(record)
    with open(marker, "a") as file:  # the side effect
        file.write("ran\n")
    print("running", flush=True)
    time.sleep(60)  # the slow tool: killed here
    journal.append(ToolFinished(ToolResult(call.id, "done")))


def spawn(function: str, *args: str) -> subprocess.Popen[str]:
    code = f"from tests.integration.test_store_crash import {function}; {function}(*{args!r})"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(child: subprocess.Popen[str], line: str) -> None:
    assert child.stdout is not None
    got = child.stdout.readline().strip()
    if got != line:
        child.kill()
        _, err = child.communicate(timeout=10)
        pytest.fail(f"child said {got!r}, not {line!r}: {err}")


def kill9(child: subprocess.Popen[str]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    assert child.stdout is not None
    assert child.stderr is not None
    child.stdout.close()
    child.stderr.close()


def test_kill_9_mid_tool_recovers_an_unknown_outcome_and_never_reruns(tmp_path: Path) -> None:
    path, marker = tmp_path / "crash1.jsonl", tmp_path / "marker"
    child = spawn("child_tool", str(path), str(marker))
    wait_for(child, "running")
    kill9(child)

    with Journal.open(path) as journal:  # the daemon restarts
        assert journal.state.status is SessionStatus.RUNNING
        found = journal.recover()
        assert [call.id for call in found.unknown] == ["c1"]
    state = read_journal(path).state
    assert marker.read_text() == "ran\n"  # exactly one line: the tool was not run again
    validate_transcript(state.messages)
    assert state.status is SessionStatus.IDLE
    result = state.messages[-1].tool_results()[0]
    assert result.is_error
    assert "Outcome unknown" in result.content
    assert "not re-run" in result.content
    assert any("outcome unknown" in note and "c1" in note for note in state.notes)
    with Journal.open(path) as journal:  # a second restart finds nothing more to do
        assert journal.recover().records == ()
    assert marker.read_text() == "ran\n"


def test_kill_9_at_random_points_leaves_a_prefix_or_a_torn_tail(tmp_path: Path) -> None:
    rng = random.Random(20261010)
    deadline = time.monotonic() + 60
    outcomes: list[tuple[int, int]] = []
    for iteration in range(6):
        if time.monotonic() > deadline:
            break
        path = tmp_path / f"loop{iteration}.jsonl"
        child = spawn("child_loop", str(path))
        wait_for(child, "ready")
        time.sleep(rng.uniform(0.02, 0.6))
        kill9(child)

        loaded = read_journal(path)  # never an interior error
        count = len(loaded.records)
        assert count >= len(prologue())
        assert list(loaded.records) == expected_records(count)
        outcomes.append((count, loaded.torn_bytes))

        with Journal.open(path) as journal:
            assert journal.size == loaded.good_length == path.stat().st_size
            journal.recover()
            validate_transcript(journal.state.messages)
            assert journal.state.status is SessionStatus.IDLE
        reloaded = read_journal(path)
        assert reloaded.torn_bytes == 0
        assert list(reloaded.records[:count]) == expected_records(count)
    assert len(outcomes) >= 2, outcomes
