"""A crash at the record boundary of a compaction leaves the whole old transcript or the whole
new one, and it validates (the context-management issue's crash check).

A compaction is one `Compacted` record, written before the agent adopts the new transcript
(`anvild.session.compaction`). Its boundary is checked here at the store level:

1. Store level, cuts of the `Compacted` line. A journal with a realistic history (queued and
   taken prompts, tool calls with their starts and results, usage, todos) ends in a `Compacted`
   record made by the real compaction code (`plan`, `facts`, `summary_block`, `rebuild`), once
   between turns and once in the middle of a turn (the unfinished step kept). A copy of the
   file cut inside that line (every byte near both of its ends and inside its first multi-byte
   characters, every STRIDE-th byte between: each cut takes tens of milliseconds here), at its
   start and at its end is loaded the way the daemon loads a session at start
   (`SessionStore.open`, which cuts a torn tail, then `Journal.recover`): a cut before the
   line's newline gives exactly the old transcript, a cut at its end exactly the new one (plus
   the recovery's note for the interrupted turn), and both validate.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from anvild.agent.context.compaction import (
    facts,
    plan,
    rebuild,
    summary_block,
)
from anvild.agent.tools.base import Effects
from anvild.llm.integrity import validate_transcript
from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult
from anvild.store import (
    Compacted,
    CompactionInfo,
    Journal,
    MessageAppended,
    PromptQueued,
    PromptTaken,
    Record,
    SessionStarted,
    SessionStatus,
    SessionStore,
    StateChanged,
    TodoItem,
    TodosChanged,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UsageReported,
    read_journal,
    replay,
)
from anvild.store.recovery import INTERRUPTED_NOTE

pytestmark = pytest.mark.slow

# -- store level: every cut of the Compacted line ----------------------------------------------

SID = "compact1"
HEADER = SessionStarted(
    id=SID,
    alias=None,
    role="developer",
    model="fake",
    cwd="/work",
    sandbox="workspace-write",
    created_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
)
EDGE = 16  # cuts at every byte this close to either end of the Compacted line
STRIDE = 131  # and at every STRIDE-th byte between
# Non-ASCII text, so that some cuts fall inside a multi-byte UTF-8 character of the line.
SUMMARY = "## Goals\nFix the parser of the naïve façade (日本語 comments), one module a turn."


def effects(call: ToolCall) -> Effects:
    """What the calls of the history do (as the tool registry would say), for `facts`."""
    if call.name == "read_file":
        return Effects.read(str(call.arguments["file_path"]))
    if call.name == "write_file":
        return Effects.write(str(call.arguments["file_path"]))
    return Effects(subprocess=True)


def turn_records(i: int, *, finished: bool = True) -> list[Record]:
    """One turn as a session records it: the prompt queued and taken, a read, a write and a
    failing command (started, finished, their results), usage per step, todos, the answer. An
    unfinished turn stops after its first step's results, still running."""
    prompt = f"Turn {i}: fix the parser in src/mod{i}.py — keep the façade 日本. " + "ctx " * 40
    calls = (
        ToolCall(f"r{i}", "read_file", {"file_path": f"src/mod{i}.py"}),
        ToolCall(f"b{i}", "bash", {"command": f"pytest tests/test_mod{i}.py"}),
    )
    results = (
        ToolResult(f"r{i}", f"def parse{i}(text):\n" + "    pass\n" * 30),
        ToolResult(f"b{i}", f"FAILED tests/test_mod{i}.py::test_parse - AssertionError", True),
    )
    write = ToolCall(f"w{i}", "write_file", {"file_path": f"src/mod{i}.py", "content": "x = 1\n"})
    records: list[Record] = [
        PromptQueued(f"p{i}", prompt),
        PromptTaken(f"p{i}"),
        StateChanged(SessionStatus.RUNNING),
        MessageAppended(Message.user_text(prompt)),
        UsageReported(Usage(1200 + i, 40, 0, 0)),
        MessageAppended(Message(Role.ASSISTANT, (Text(f"Reading mod{i}."), *calls))),
        *(
            record
            for call, result in zip(calls, results, strict=True)
            for record in (ToolStarted(call.id, call.name), ToolFinished(result))
        ),
        MessageAppended(Message(Role.USER, results)),
    ]
    if not finished:
        return records
    return [
        *records,
        UsageReported(Usage(1500 + i, 30, 1200, 0)),
        MessageAppended(Message(Role.ASSISTANT, (write,))),
        ToolStarted(write.id, write.name),
        ToolFinished(ToolResult(write.id, f"wrote src/mod{i}.py")),
        MessageAppended(Message(Role.USER, (ToolResult(write.id, f"wrote src/mod{i}.py"),))),
        TodosChanged(
            (TodoItem(f"fix mod{i + 1}", "pending"), TodoItem(f"fix mod{i}", "completed"))
        ),
        UsageReported(Usage(1600 + i, 20, 1500, 0)),
        MessageAppended(Message.assistant_text(f"Fixed mod{i}; its test still fails.")),
        TurnEnded("done"),
        StateChanged(SessionStatus.AWAIT),
        StateChanged(SessionStatus.IDLE),
    ]


def history(*, mid_turn: bool) -> tuple[list[Record], Compacted]:
    """Four finished turns (and, `mid_turn`, a fifth still running after its first step), and
    the `Compacted` record the real compaction code makes of their transcript."""
    records: list[Record] = [HEADER, StateChanged(SessionStatus.IDLE)]
    for i in range(4):
        records += turn_records(i)
    if mid_turn:
        records += turn_records(4, finished=False)
    state = replay(records)
    messages = state.messages
    turn_start = len(messages) - 3 if mid_turn else None  # the prompt, the call, its results
    chosen = plan(messages, turn_start=turn_start, keep_user_bytes=700)
    todos = [(t.content, t.status) for t in state.todos]
    block = summary_block(SUMMARY, facts(chosen.dropped, todos, effects), model="fake-model")
    new = rebuild(block, chosen)
    compacted = Compacted(
        new,
        SUMMARY,
        len(chosen.dropped),
        9000,
        1800,
        "fake-model",
        "auto" if mid_turn else "manual",
        dt.datetime(2026, 12, 1, 1, tzinfo=dt.UTC),
        "" if mid_turn else "the parser",
        Usage(9000, 300, 0, 0),
    )
    return records, compacted


def with_note(messages: Sequence[Message]) -> tuple[Message, ...]:
    """`messages` as recovery leaves an interrupted turn's: the note added to the last (user)
    message."""
    *head, last = messages
    assert last.role is Role.USER
    return (*head, Message(Role.USER, (*last.content, Text(INTERRUPTED_NOTE))))


@pytest.mark.parametrize("mid_turn", [False, True], ids=["between-turns", "mid-turn"])
def test_every_cut_of_the_compacted_line_loads_all_old_or_all_new(
    tmp_path: Path, mid_turn: bool
) -> None:
    records, compacted = history(mid_turn=mid_turn)
    old, new = replay(records).messages, compacted.messages
    validate_transcript(new)
    assert new != old
    assert len(new) == (3 if mid_turn else 1)  # the unfinished step is kept
    info = CompactionInfo(
        compacted.at,
        compacted.before,
        compacted.after,
        compacted.trigger,
        compacted.model,
        compacted.dropped,
    )
    built = tmp_path / "built"
    built.mkdir()
    with Journal.create(built / f"{SID}.jsonl", HEADER) as journal:
        for record in records[1:]:
            journal.append(record, sync=False)
        start = journal.size
        journal.append(compacted)
        end = journal.size
    data = (built / f"{SID}.jsonl").read_bytes()
    assert len(data) == end
    assert data[end - 1 : end] == b"\n"
    line = data[start:end]
    assert json.loads(line)["type"] == "compacted"
    assert len(line) > 2000, len(line)  # a realistic record: thousands of byte boundaries
    inside = [i for i, byte in enumerate(line) if byte & 0xC0 == 0x80]  # inside a character
    assert inside, "no multi-byte character to cut inside"
    # Each cut costs two loads, a cut of the tail with fsync, a recovery and a check (about
    # 25 ms here): every byte at both ends of the line, inside its first multi-byte characters,
    # and every STRIDE-th byte between. (The loader never parses a torn tail, so the cuts
    # between the ends all take one path; the ends are where an off-by-one would show.)
    cuts = sorted(
        {start + i for i in range(EDGE)}
        | {end - i for i in range(EDGE)}
        | {start + i for i in inside[:8]}
        | set(range(start, end + 1, STRIDE))
    )

    # Recovery ends an interrupted turn with a note (the daemon's start path appends it).
    expected_old = with_note(old) if mid_turn else old
    expected_new = with_note(new) if mid_turn else new
    store = SessionStore(tmp_path / "sessions")
    store.directory.mkdir()
    path = store.path_for(SID)
    for cut in cuts:
        path.write_bytes(data[:cut])
        torn = read_journal(path)  # what the loader sees, before anything is cut away
        assert torn.torn_bytes == (0 if cut in (start, end) else cut - start), cut
        with store.open(SID) as journal:  # the daemon's start: the torn tail cut, then recover
            assert path.stat().st_size == (end if cut == end else start), cut
            journal.recover()
            restored = journal.state
        reloaded = read_journal(path)
        assert reloaded.state == restored, cut  # what is on disk says the same
        assert reloaded.records[: len(records)] == tuple(records), cut
        validate_transcript(restored.messages)
        assert restored.status is SessionStatus.IDLE
        if cut < end:
            assert compacted not in reloaded.records, cut
            assert restored.messages == expected_old, cut
            assert restored.compactions == ()
        else:
            assert reloaded.records[len(records)] == compacted
            assert restored.messages == expected_new
            assert restored.compactions == (info,)
    assert cuts[0] == start
    assert cuts[-1] == end
