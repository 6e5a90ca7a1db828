"""A crash at every record boundary of a compaction leaves the whole old transcript or the whole
new one, and it validates (the context-management issue's crash check).

A compaction is one `Compacted` record, written before the agent adopts the new transcript
(`anvild.session.compaction`). Its boundaries are checked at two levels:

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
2. Daemon level, a real `anvild` killed with SIGKILL and restarted on the same data dir, for
   both kill points a compaction has (the summary request in flight: no record yet; the record
   written: nothing after it), for the `compact FOCUS` ctl verb between turns and for an
   automatic compaction in the middle of a turn (a window small enough that the second prompt
   passes `[context] auto_compact`). The fake provider holds the summary stream, or the request
   that follows the compaction, so each kill lands exactly there. After each restart the
   session's records give exactly the old or the new transcript, which validates, `compactions`
   says whether the compaction happened, and the next prompt is answered with that transcript
   sent to the model.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from anvild.agent.context.compaction import (
    SUMMARY_MARK,
    facts,
    plan,
    prompt_text,
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


# -- daemon level: kill -9 at each boundary, restart ----------------------------------------------

SUMMARY_ASK = "Here is the conversation to summarise"  # in every summary request, never a prompt
KILLED_SUMMARY = "a summary the kill -9 cut off"  # held: never reaches the daemon


def ask(namespace: Path, sid: str, prompt: str) -> str:
    """Send `prompt` and wait for the turn to end; its `out`."""
    ok(anvilctl(namespace, "send", sid, prompt))
    assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
    return ok(anvilctl(namespace, "out", sid))


def wait_requests(fake: FakeServer, count: int) -> list[dict[str, Any]]:
    """Block until the fake provider has `count` requests (one may be held); all of them."""
    url = f"{fake.url}/_fake/wait?requests={count}&timeout={TURN_TIMEOUT}"
    with urllib.request.urlopen(url, timeout=TURN_TIMEOUT + 5) as reply:  # 408 raises
        assert json.load(reply)["requests"] >= count
    return fake.requests()


def is_summary(request: dict[str, Any]) -> bool:
    return bool(request["body"]["messages"][0] == {"role": "system", "content": prompt_text()})


def texts(message: dict[str, Any]) -> list[str]:
    """The text parts of one OpenAI chat message as the daemon sent it."""
    content = message["content"]
    if isinstance(content, str):
        return [content]
    return [part["text"] for part in content if part.get("type") == "text"]


def kill_9(daemon: Anvild) -> None:
    os.kill(daemon.proc.pid, signal.SIGKILL)
    code, _ = daemon.exit()
    assert code == -signal.SIGKILL


def session_file(daemon: Anvild, sid: str) -> Path:
    return SessionStore(daemon.data_dir / "sessions").path_for(sid)


def compact_in_background(
    namespace: Path, sid: str, line: str, stdin: Path
) -> subprocess.Popen[str]:
    """Write `line` to the session's ctl (through the file `stdin`); the write returns once the
    compaction is recorded."""
    stdin.write_text(line + "\n")
    with stdin.open() as source:
        return subprocess.Popen(
            [sys.executable, "-m", "anvilctl", "write", f"agent/{sid}/ctl"],
            stdin=source,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NAMESPACE": str(namespace)},
        )


def test_kill_9_at_each_boundary_of_the_compact_verb(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    fake = FakeServer(
        tmp_path,
        [
            {"contains": SUMMARY_ASK, "text": KILLED_SUMMARY, "hold": 1},
            {"contains": SUMMARY_ASK, "text": "The user asked three questions."},
            *(
                {"contains": f"{n} question", "text": f"{n} answer"}
                for n in ("first", "second", "third", "fourth")
            ),
        ],
    )
    config = user_config(tmp_path, fake.url)
    daemon: Anvild | None = start_daemon(namespace, config)
    writer: subprocess.Popen[str] | None = None
    try:
        assert daemon is not None
        sid = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        path = session_file(daemon, sid)
        assert ask(namespace, sid, "first question") == "first answer\n"
        assert ask(namespace, sid, "second question") == "second answer\n"
        old = read_journal(path).state.messages
        assert [m.text() for m in old] == [
            *("first question", "first answer", "second question", "second answer")
        ]

        # Boundary 1: the summary is being written (the provider holds it): nothing recorded.
        writer = compact_in_background(
            namespace, sid, "compact focus on the parser", tmp_path / "compact-line"
        )
        summary = wait_requests(fake, 3)[2]
        assert is_summary(summary)
        assert "Focus the summary on: focus on the parser" in summary["last_user_text"]
        assert writer.poll() is None  # the verb waits for the summary and its record
        kill_9(daemon)
        daemon = None
        _, failed = writer.communicate(timeout=TURN_TIMEOUT)
        # the writer was never told "compacted"
        assert writer.returncode == 1
        assert failed.startswith(f"anvilctl write agent/{sid}/ctl: connection lost: "), failed
        writer = None
        daemon = start_daemon(namespace, config)
        contents = read_journal(path)
        assert contents.torn_bytes == 0
        assert not [r for r in contents.records if isinstance(r, Compacted)]
        assert contents.state.messages == old  # all old
        validate_transcript(contents.state.messages)
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        assert read(namespace, f"agent/{sid}/compactions") == ""
        assert ask(namespace, sid, "third question") == "third answer\n"
        sent = fake.requests()[-1]["body"]["messages"]
        assert [(m["role"], texts(m)) for m in sent[1:]] == [
            *(("user" if i % 2 == 0 else "assistant", [m.text()]) for i, m in enumerate(old)),
            ("user", ["third question"]),
        ]

        # Boundary 2: the Compacted record is written, and nothing after it.
        old = read_journal(path).state.messages
        assert len(old) == 6
        assert ok(anvilctl(namespace, "write", f"agent/{sid}/ctl", stdin="compact\n")) == ""
        listed = read(namespace, f"agent/{sid}/compactions")
        contents = read_journal(path)
        compacted = contents.records[-1]
        assert isinstance(compacted, Compacted)
        assert contents.torn_bytes == 0
        new = compacted.messages
        assert contents.state.messages == new != old
        assert len(new) == 1
        assert new[0].text().startswith(SUMMARY_MARK)
        assert "The user asked three questions." in new[0].text()
        before, after = str(compacted.before), str(compacted.after)
        assert listed.split("\t")[1:] == ["manual", before, after, "6", "fake-model\n"]
        kill_9(daemon)
        daemon = None
        daemon = start_daemon(namespace, config)
        contents = read_journal(path)
        assert contents.records[-1] == compacted  # the restart needed nothing more
        assert contents.state.messages == new  # all new
        validate_transcript(contents.state.messages)
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        assert read(namespace, f"agent/{sid}/compactions") == listed
        assert ask(namespace, sid, "fourth question") == "fourth answer\n"
        requests = fake.requests()
        assert [is_summary(r) for r in requests] == [False, False, True, False, True, False]
        sent = requests[-1]["body"]["messages"]
        assert [m["role"] for m in sent] == ["system", "user"]
        assert texts(sent[1])[0].startswith(SUMMARY_MARK)
        assert texts(sent[1])[-1] == "fourth question"
        assert "first answer" not in json.dumps(sent)  # the old history is not sent
    finally:
        try:
            if writer is not None:
                writer.kill()
                writer.communicate()
            if daemon is not None:
                code, log = daemon.stop()
                assert code == 0, log
        finally:
            fake.stop()


FILLER = " Here is more context for the model to read." * 136  # about 1,500 tokens


def test_kill_9_at_each_boundary_of_an_automatic_compaction(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    fake = FakeServer(
        tmp_path,
        [
            {"contains": SUMMARY_ASK, "text": KILLED_SUMMARY, "hold": 1},
            {"contains": SUMMARY_ASK, "text": "The user sent long prompts."},
            {"contains": "alpha", "text": "alpha answer"},
            {"contains": "charlie", "text": "charlie answer, cut off", "hold": 1},
            {"contains": "delta", "text": "delta answer"},
        ],
    )
    config = user_config(tmp_path, fake.url)  # an 8,192-token window
    # The first request of the first turn is about 48% of the window, of the second about 66%.
    config.write_text(config.read_text() + "\n[context]\nauto_compact = 56\nclear_at = 0\n")
    alpha, bravo, charlie = (f"{word}:{FILLER}" for word in ("alpha", "bravo", "charlie"))
    daemon: Anvild | None = start_daemon(namespace, config)
    try:
        assert daemon is not None
        sid = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        path = session_file(daemon, sid)
        assert ask(namespace, sid, alpha) == "alpha answer\n"
        assert [is_summary(r) for r in fake.requests()] == [False]  # under the threshold
        old = read_journal(path).state.messages

        # Boundary 1: the second turn's prompt passes auto_compact; its summary is held.
        ok(anvilctl(namespace, "send", sid, bravo))
        assert [is_summary(r) for r in wait_requests(fake, 2)] == [False, True]
        contents = read_journal(path)
        assert contents.state.status is SessionStatus.RUNNING
        assert contents.state.messages == (*old, Message.user_text(bravo))
        kill_9(daemon)
        daemon = None
        daemon = start_daemon(namespace, config)
        contents = read_journal(path)
        assert not [r for r in contents.records if isinstance(r, Compacted)]
        # all old (with the interrupted turn's prompt and recovery's note)
        assert contents.state.messages == with_note((*old, Message.user_text(bravo)))
        validate_transcript(contents.state.messages)
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        assert read(namespace, f"agent/{sid}/compactions") == ""

        # Boundary 2: the next turn compacts again (answered), recorded; the request that
        # follows it, the turn's own, is held.
        old = contents.state.messages
        ok(anvilctl(namespace, "send", sid, charlie))
        requests = wait_requests(fake, 4)
        assert [is_summary(r) for r in requests] == [False, True, True, False]
        contents = read_journal(path)
        compacted = contents.records[-1]
        assert isinstance(compacted, Compacted)
        assert contents.torn_bytes == 0
        assert compacted.trigger == "auto"
        new = compacted.messages
        # One user message: the summary, then the running turn's message verbatim (the prompt
        # was merged into the trailing user message: the interrupted prompt with recovery's
        # note). No earlier user message is kept: alpha is larger than the share of the window
        # kept verbatim.
        assert [m.role for m in new] == [Role.USER]
        summary_text, *kept = new[0].content
        assert isinstance(summary_text, Text)
        assert summary_text.text.startswith(SUMMARY_MARK)
        assert "The user sent long prompts." in summary_text.text
        assert alpha not in summary_text.text  # summarised, not kept
        assert tuple(kept) == (*old[-1].content, Text(charlie))
        assert [texts(m) for m in requests[3]["body"]["messages"][1:]] == [
            [block.text for block in new[0].content if isinstance(block, Text)]
        ]  # the held request carries the new transcript
        kill_9(daemon)
        daemon = None
        daemon = start_daemon(namespace, config)
        contents = read_journal(path)
        assert compacted in contents.records
        assert contents.state.messages == with_note(new)  # all new
        validate_transcript(contents.state.messages)
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        listed = read(namespace, f"agent/{sid}/compactions").splitlines()
        assert [line.split("\t")[1] for line in listed] == ["auto"]
        assert ask(namespace, sid, "delta question") == "delta answer\n"
        requests = fake.requests()
        assert [is_summary(r) for r in requests] == [False, True, True, False, False]
        sent = requests[-1]["body"]["messages"]
        assert [m["role"] for m in sent] == ["system", "user"]
        assert texts(sent[1]) == [
            *(block.text for block in with_note(new)[0].content if isinstance(block, Text)),
            "delta question",
        ]
        assert "alpha answer" not in json.dumps(sent)
    finally:
        try:
            if daemon is not None:
                code, log = daemon.stop()
                assert code == 0, log
        finally:
            fake.stop()
