"""The journal: file layout, durability policy, torn tails, interior errors, schema handling, and
failed writes (a real full tmpfs, a real RLIMIT_FSIZE, and simulated failures)."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import resource
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from anvild.llm.types import Message, Role, ToolResult
from anvild.store import (
    SCHEMA_VERSION,
    Compacted,
    CorruptJournalError,
    Journal,
    JournalError,
    JournalWriteError,
    MessageAppended,
    ModelChanged,
    Note,
    Record,
    RecordError,
    SchemaVersionError,
    SessionEnded,
    SessionStore,
    StateChanged,
    ToolFinished,
    ToolStarted,
    needs_sync,
    read_journal,
    replay,
)
from anvild.store.records import SessionStatus, encode
from tests.unit.store.support import V0_LINES, assistant, started, user
from tests.unit.store.test_reducer import CALL

TURN: tuple[Record, ...] = (
    MessageAppended(user("list files")),
    MessageAppended(assistant("", CALL)),
    ToolStarted("c1", "bash"),
)


def write_session(path: Path, *records: Record) -> Journal:
    journal = Journal.create(path, started())
    for record in records:
        journal.append(record)
    return journal


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "s1.jsonl"


# -- layout and writing ------------------------------------------------------------------------


def test_store_creates_private_files_one_per_session(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "data" / "sessions")
    assert store.ids() == []
    with store.create(started("b2")) as journal:
        assert journal.path == tmp_path / "data" / "sessions" / "b2.jsonl"
        assert journal.seq == 1
    with store.create(started("a1")):
        pass
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((store.directory / "a1.jsonl").stat().st_mode) == 0o600
    for stray in ("a1.schema0.bak", "a1.jsonl.upgrade", "bad.name.jsonl", "notes.txt"):
        (store.directory / stray).write_text("")
    assert store.ids() == ["a1", "b2"]
    assert store.read("a1").state.id == "a1"
    with pytest.raises(JournalError, match="already exists"):
        store.create(started("a1"))


@pytest.mark.parametrize("bad", ["", "../x", "a.b", "a/b", "-a", "x" * 65])
def test_session_ids_are_safe_file_names(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="session id"):
        SessionStore(tmp_path).path_for(bad)


def test_each_append_is_one_whole_line_with_the_next_seq(path: Path) -> None:
    with write_session(path, *TURN) as journal:
        assert journal.seq == 4
        lines = path.read_bytes().split(b"\n")
        assert lines[-1] == b""
        assert [json.loads(line)["seq"] for line in lines[:-1]] == [1, 2, 3, 4]
        assert journal.size == path.stat().st_size
    with Journal.open(path) as journal:
        journal.append(Note("after reopen"))
        assert json.loads(path.read_bytes().splitlines()[-1]) == {
            "seq": 5,
            "type": "note",
            "text": "after reopen",
        }


def test_a_record_that_does_not_fit_writes_nothing(path: Path) -> None:
    with write_session(path) as journal:
        before = path.read_bytes()
        with pytest.raises(RecordError):
            journal.append(ToolStarted("c9", "bash"))
        assert path.read_bytes() == before
        assert journal.state == replay([started()])


def test_a_closed_journal_refuses_appends(path: Path) -> None:
    journal = write_session(path)
    journal.close()
    journal.close()  # idempotent
    assert journal.closed
    with pytest.raises(JournalError, match="closed"):
        journal.append(Note("x"))


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_durability_policy_syncs_exactly_tool_start_tool_finish_compactions_and_ends(
    path: Path, fsyncs: list[int]
) -> None:
    journal = Journal.create(path, started())
    assert len(fsyncs) == 2  # the file and its directory
    expected: list[tuple[Record, int]] = [
        (MessageAppended(user("list files")), 0),
        (StateChanged(SessionStatus.RUNNING), 0),
        (MessageAppended(assistant("", CALL)), 0),
        (ToolStarted("c1", "bash"), 1),
        (ToolFinished(ToolResult("c1", "a.txt")), 1),
        (MessageAppended(Message(Role.USER, (ToolResult("c1", "a.txt"),))), 0),
        (ModelChanged("gpt"), 0),
        (Note("x"), 0),
        (
            Compacted(
                (user("[Compacted history: S]"),),
                "S",
                3,
                900,
                100,
                "m",
                "auto",
                dt.datetime(2026, 12, 2, tzinfo=dt.UTC),
            ),
            1,
        ),
        (SessionEnded("killed"), 1),
    ]
    for record, syncs in expected:
        before = len(fsyncs)
        journal.append(record)
        assert (len(fsyncs) - before, needs_sync(record)) == (syncs, bool(syncs)), record
        assert set(fsyncs[before:]) <= {journal.fileno()}
    journal.close()


def test_sync_can_be_forced_or_skipped(path: Path, fsyncs: list[int]) -> None:
    with write_session(path, *TURN[:2]) as journal:
        before = len(fsyncs)
        journal.append(Note("forced"), sync=True)
        journal.append(ToolStarted("c1", "bash"), sync=False)
        journal.sync()
        assert len(fsyncs) - before == 2


def test_begin_writes_the_header_unsynced_and_sync_created_makes_it_create(
    tmp_path: Path, fsyncs: list[int]
) -> None:
    store = SessionStore(tmp_path / "sessions")
    assert store.begin(started("s1")) is None  # no directory yet: `create` (in a thread) makes it
    assert not (tmp_path / "sessions").exists()
    store.create(started("s1")).close()
    before = len(fsyncs)
    journal = store.begin(started("s2"))
    assert journal is not None
    assert len(fsyncs) == before  # written, not synced
    journal.sync_created()
    assert len(fsyncs) - before == 2  # the file, then its directory
    journal.append(Note("x"))
    journal.close()
    twin = Journal.create(tmp_path / "twin.jsonl", started("s2"))
    twin.append(Note("x"))
    twin.close()
    assert store.path_for("s2").read_bytes() == (tmp_path / "twin.jsonl").read_bytes()
    with pytest.raises(JournalError, match="already exists"):
        store.begin(started("s2"))


def test_a_failed_sync_of_a_new_file_removes_it_and_closes_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionStore(tmp_path / "sessions")
    store.create(started("s1")).close()
    journal = store.begin(started("s2"))
    assert journal is not None

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(JournalWriteError, match="cannot write the session header") as caught:
        journal.sync_created()
    assert (caught.value.errno, caught.value.intact, journal.closed) == (errno.EIO, True, True)
    assert not store.path_for("s2").exists()
    assert store.ids() == ["s1"]


# -- loading ----------------------------------------------------------------------------------


def test_a_torn_final_line_is_reported_by_read_and_cut_by_open(path: Path) -> None:
    write_session(path, *TURN).close()
    good = path.read_bytes()
    torn = encode(5, Note("half written"))[:17]
    path.write_bytes(good + torn)
    loaded = read_journal(path)
    assert (loaded.torn_bytes, loaded.torn_line, loaded.good_length) == (17, 5, len(good))
    assert len(loaded.records) == 4
    assert path.read_bytes() == good + torn  # read never modifies
    with structlog.testing.capture_logs() as logs, Journal.open(path) as journal:
        assert path.read_bytes() == good
        assert journal.seq == 4
        journal.append(Note("next"))
    assert logs == [
        {
            "event": "store.torn_tail",
            "log_level": "warning",
            "path": str(path),
            "line": 5,
            "dropped_bytes": 17,
        }
    ]
    assert read_journal(path).records[-1] == Note("next")


def test_an_unparsable_complete_last_line_is_a_torn_tail(path: Path) -> None:
    write_session(path, *TURN).close()
    good = path.read_bytes()
    path.write_bytes(good + b"\x00\x00\x00\n")  # zeros a power loss can leave
    loaded = read_journal(path)
    assert (loaded.torn_bytes, loaded.torn_line) == (4, 5)
    Journal.open(path).close()
    assert path.read_bytes() == good


def session_lines() -> list[bytes]:
    """A session file's lines, without their newlines."""
    records = [started(), *TURN, Note("last")]
    return [encode(seq, record)[:-1] for seq, record in enumerate(records, start=1)]


def replace_line(index: int, new: bytes) -> Callable[[list[bytes]], None]:
    def edit(lines: list[bytes]) -> None:
        lines[index] = new

    return edit


def drop_line(index: int) -> Callable[[list[bytes]], None]:
    def edit(lines: list[bytes]) -> None:
        del lines[index]

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (replace_line(1, b"{not json"), r"s1\.jsonl:2: not a JSON line"),
        (replace_line(2, b""), r"s1\.jsonl:3: not a JSON line"),
        (replace_line(2, b"\xff\xfe"), r"s1\.jsonl:3: not a JSON line"),
        (replace_line(1, b'{"seq":2,"type":"bogus"}'), r"s1\.jsonl:2: not a valid record"),
        (replace_line(2, b'{"seq":7,"type":"note","text":"x"}'), r"s1\.jsonl:3: seq 7 where 3"),
        (drop_line(2), r"s1\.jsonl:3: seq 4 where 3 was expected"),
        (
            replace_line(3, b'{"seq":4,"type":"tool_started","call_id":"c9","name":"bash"}'),
            r"s1\.jsonl:4: tool_started for 'c9', which is not a call of the last message",
        ),
        (
            replace_line(0, b'{"seq":1,"type":"note","text":"x"}'),
            r"s1\.jsonl:1: the first record declares no schema version",
        ),
        (
            replace_line(2, encode(3, started())[:-1]),
            r"s1\.jsonl:3: a second SessionStarted",
        ),
    ],
)
def test_a_malformed_interior_line_is_an_error_naming_file_and_line(
    path: Path, edit: Callable[[list[bytes]], None], message: str
) -> None:
    lines = session_lines()
    edit(lines)
    data = b"".join(line + b"\n" for line in lines)
    path.write_bytes(data)
    for load in (read_journal, Journal.open):
        with pytest.raises(CorruptJournalError, match=message) as caught:
            load(path)
        assert caught.value.path == path
        assert caught.value.line is not None
    assert path.read_bytes() == data  # an error never cuts anything


def test_a_well_formed_last_line_that_does_not_apply_is_an_error_not_a_tear(path: Path) -> None:
    write_session(path, *TURN[:2]).close()
    with path.open("ab") as file:
        file.write(encode(5, Note("seq jumps")))
    with pytest.raises(CorruptJournalError, match=r":4: seq 5 where 4"):
        read_journal(path)


def test_an_invalid_recorded_transcript_is_an_error(path: Path) -> None:
    records = [started(), MessageAppended(user("a")), MessageAppended(assistant("b"))]
    bad_user = Message(Role.USER, (ToolResult("zz", "orphan"),))  # answers no call
    data = b"".join(encode(i, r) for i, r in enumerate(records, start=1))
    data += encode(4, MessageAppended(bad_user))
    path.write_bytes(data)
    with pytest.raises(CorruptJournalError, match="recorded transcript is invalid"):
        read_journal(path)


@pytest.mark.parametrize("content", [b"", b'{"seq":1,"type":"sess'])
def test_a_file_without_a_complete_record_was_never_created(path: Path, content: bytes) -> None:
    path.write_bytes(content)
    with pytest.raises(CorruptJournalError, match="never fully created"):
        Journal.open(path)


def test_an_unreadable_file_is_a_journal_error(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="cannot read"):
        read_journal(tmp_path / "missing.jsonl")


# -- schema versions ---------------------------------------------------------------------------


def test_a_newer_schema_is_refused_and_the_file_left_untouched(path: Path) -> None:
    header = json.loads(encode(1, started()))
    header["schema"] = SCHEMA_VERSION + 1
    header["future_field"] = "x"
    future = [header, {"seq": 2, "type": "hologram_appended", "data": 1}]
    data = b"".join(json.dumps(obj).encode() + b"\n" for obj in future) + b'{"seq":3,"ty'
    path.write_bytes(data)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = path.stat()
    for load in (read_journal, Journal.open):
        newer = f"newer than this anvild's {SCHEMA_VERSION}"
        with pytest.raises(SchemaVersionError, match=newer) as caught:
            load(path)
        assert caught.value.schema == SCHEMA_VERSION + 1
    assert path.read_bytes() == data  # the torn-looking tail was not cut either
    after = path.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )
    assert list(path.parent.iterdir()) == [path]


def test_a_schema_0_file_is_upgraded_in_place_with_a_backup(path: Path) -> None:
    original = b"".join(json.dumps(line).encode() + b"\n" for line in V0_LINES) + b'{"type":"no'
    path.write_bytes(original)
    loaded = read_journal(path)
    assert loaded.schema == 0
    assert path.read_bytes() == original
    with structlog.testing.capture_logs() as logs, Journal.open(path) as journal:
        assert journal.state == loaded.state
        assert journal.state.model == "sonnet"
        assert journal.seq == len(V0_LINES)
        journal.append(Note("appended in schema 1"))
    assert (path.parent / "s1.schema0.bak").read_bytes() == original
    assert not (path.parent / "s1.jsonl.upgrade").exists()
    rewritten = read_journal(path)
    assert rewritten.schema == SCHEMA_VERSION
    assert rewritten.records[: len(V0_LINES)] == loaded.records
    assert rewritten.records[-1] == Note("appended in schema 1")
    first = json.loads(path.read_bytes().split(b"\n")[0])
    assert (first["type"], first["schema"], first["seq"]) == ("session_started", SCHEMA_VERSION, 1)
    assert [entry["event"] for entry in logs] == ["store.upgraded"]
    assert logs[0]["from_schema"] == 0
    assert logs[0]["dropped_torn_bytes"] == len(b'{"type":"no')


# -- failed writes ------------------------------------------------------------------------------


def assert_failed_cleanly(journal: Journal, before: bytes, caught: JournalWriteError) -> None:
    assert caught.intact
    assert journal.path.read_bytes() == before
    assert journal.size == len(before)
    loaded = read_journal(journal.path)
    assert loaded.torn_bytes == 0
    assert loaded.state == journal.state


@contextlib.contextmanager
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the simulated and RLIMIT_FSIZE cases cover it")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_fails_the_append_cleanly_and_the_journal_goes_on(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path) as mount:
        ballast = mount / "ballast"
        ballast.write_bytes(b"b" * 8192)
        journal = write_session(mount / "s1.jsonl", *TURN[:2])
        big = Note("x" * 3000)
        with pytest.raises(JournalWriteError) as caught:
            for _ in range(100):  # 64 KiB fill up long before 300 KB
                before = mount.joinpath("s1.jsonl").read_bytes()
                state = journal.append(big)
        assert caught.value.errno == errno.ENOSPC
        assert "No space left on device" in str(caught.value)
        assert journal.state == state
        assert_failed_cleanly(journal, before, caught.value)
        # the daemon goes on: after space is freed the same journal appends again
        ballast.unlink()
        journal.append(StateChanged(SessionStatus.ERROR, "disk full"))
        assert read_journal(journal.path).state.status is SessionStatus.ERROR
        journal.close()


def test_a_file_size_limit_mid_line_leaves_no_partial_line(path: Path) -> None:
    journal = write_session(path, *TURN[:2])
    before = path.read_bytes()
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 100, old_limit[1]))
        with pytest.raises(JournalWriteError) as caught:
            journal.append(Note("y" * 1000))  # the kernel takes 100 bytes, then EFBIG
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert caught.value.errno == errno.EFBIG
    assert_failed_cleanly(journal, before, caught.value)
    journal.append(Note("fits"))
    assert read_journal(path).records[-1] == Note("fits")
    journal.close()


def failing_after_partial(real: Callable[..., Any], fd_to_fail: int) -> Callable[..., int]:
    """os.write that writes half a line, then fails with ENOSPC (as a filling disk does)."""
    state = {"calls": 0}

    def write(fd: int, data: Any) -> int:
        if fd != fd_to_fail:
            return int(real(fd, data))
        state["calls"] += 1
        if state["calls"] == 1:
            return int(real(fd, bytes(data[: len(data) // 2])))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return write


def test_a_simulated_short_write_then_enospc_is_cut_back(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = write_session(path, *TURN[:2])
    before = path.read_bytes()
    monkeypatch.setattr(os, "write", failing_after_partial(os.write, journal.fileno()))
    with pytest.raises(JournalWriteError, match=r"cannot record note \(write\)") as caught:
        journal.append(Note("z" * 500))
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert_failed_cleanly(journal, before, caught.value)
    journal.append(Note("ok"))
    journal.close()


def test_when_the_cut_back_fails_too_the_journal_refuses_appends_and_the_tail_is_torn(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = write_session(path, *TURN[:2])
    state = journal.state
    before = path.read_bytes()
    monkeypatch.setattr(os, "write", failing_after_partial(os.write, journal.fileno()))

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with pytest.raises(JournalWriteError) as caught:
        journal.append(Note("z" * 500))
    monkeypatch.undo()
    assert not caught.value.intact
    assert "may end in a partial record" in str(caught.value)
    assert journal.state == state
    with pytest.raises(JournalWriteError, match="appends refused after an earlier failure"):
        journal.append(Note("no"))
    journal.close()
    loaded = read_journal(path)
    assert loaded.torn_bytes > 0  # the partial line is the last one: recoverable
    assert loaded.state == state
    Journal.open(path).close()
    assert path.read_bytes() == before


def test_a_failed_fsync_is_an_error_and_ends_appends(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = write_session(path, *TURN[:2])
    before = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(JournalWriteError, match=r"tool_started \(fsync\)") as caught:
        journal.append(ToolStarted("c1", "bash"))
    with pytest.raises(JournalWriteError, match="fsync failed"):
        journal.sync()
    monkeypatch.undo()
    assert caught.value.errno == errno.EIO
    assert caught.value.intact  # cut back: the start is not on disk, so the tool must not run
    assert path.read_bytes() == before
    with pytest.raises(JournalWriteError, match="fsync failed"):
        journal.append(Note("after"))
    journal.close()


def test_a_session_file_that_cannot_be_written_at_creation_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(JournalWriteError, match="session header") as caught:
        Journal.create(tmp_path / "s1.jsonl", started())
    monkeypatch.undo()
    assert caught.value.intact
    assert list(tmp_path.iterdir()) == []
