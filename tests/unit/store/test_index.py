"""The session index: a summary equals the replay's; an entry is used only for the file it was
taken from; a missing, corrupt or other-version index, or a changed file, means a replay."""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvild.store import (
    IndexEntry,
    Pending,
    Record,
    SessionStarted,
    SessionStatus,
    SessionSummary,
    StateChanged,
    read_index,
    replay,
    trusted,
    write_index,
)
from anvild.store.index import INDEX_NAME, index_path
from anvild.store.records import encode
from tests.unit.store.support import started, valid_records


def _write_file(directory: Path, records: list[Record]) -> Path:
    started = records[0]
    assert isinstance(started, SessionStarted)
    path = directory / f"{started.id}.jsonl"
    path.write_bytes(b"".join(encode(seq, r) for seq, r in enumerate(records, start=1)))
    return path


def _index(directory: Path, records: list[Record]) -> dict[str, IndexEntry]:
    state = replay(records)
    pending = Pending(SessionSummary.of(state), (directory / f"{state.id}.jsonl").stat().st_size, 1)
    return write_index(directory, [pending], lambda i: directory / f"{i}.jsonl")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(histories=st.lists(valid_records(max_size=25), min_size=1, max_size=4))
def test_the_summary_read_from_the_index_is_the_summary_of_a_full_replay(
    tmp_path: Path, histories: list[list[Record]]
) -> None:
    directory = tmp_path / "sessions"
    directory.mkdir(exist_ok=True)
    for name in os.listdir(directory):
        (directory / name).unlink()
    expected = {}
    pending = []
    for index, records in enumerate(histories):
        first = records[0]
        assert isinstance(first, SessionStarted)
        records = [attrs.evolve(first, id=f"s{index}"), *records[1:]]
        path = _write_file(directory, records)
        summary = SessionSummary.of(replay(records))
        expected[summary.id] = summary
        pending.append(Pending(summary, path.stat().st_size, len(records)))
    write_index(directory, pending, lambda i: directory / f"{i}.jsonl")
    found = read_index(directory)
    assert {k: e.summary for k, e in found.items()} == expected
    for session_id, entry in found.items():
        assert trusted(entry, directory / f"{session_id}.jsonl") is entry


def test_an_entry_is_not_trusted_once_its_file_changed(tmp_path: Path) -> None:
    records: list[Record] = [started(), StateChanged(SessionStatus.IDLE, "")]
    path = _write_file(tmp_path, records)
    entry = _index(tmp_path, records)["s1"]
    assert trusted(read_index(tmp_path)[entry.summary.id], path) == entry
    with path.open("ab") as f:  # a record appended after the index was written
        f.write(encode(len(records) + 1, records[-1]))
    assert trusted(read_index(tmp_path)[entry.summary.id], path) is None
    path.unlink()
    assert trusted(entry, path) is None


def test_a_pending_entry_whose_file_grew_is_left_out(tmp_path: Path) -> None:
    records: list[Record] = [started(), StateChanged(SessionStatus.IDLE, "")]
    path = _write_file(tmp_path, records)
    summary = SessionSummary.of(replay(records))
    written = write_index(
        tmp_path, [Pending(summary, path.stat().st_size - 1, 1)], lambda i: tmp_path / f"{i}.jsonl"
    )
    assert written == {}
    assert read_index(tmp_path) == {}


def test_a_missing_corrupt_or_other_version_index_is_empty(tmp_path: Path) -> None:
    assert read_index(tmp_path) == {}
    records: list[Record] = [started(), StateChanged(SessionStatus.IDLE, "")]
    _write_file(tmp_path, records)
    _index(tmp_path, records)
    assert len(read_index(tmp_path)) == 1
    path = index_path(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # torn
    assert read_index(tmp_path) == {}
    document = json.loads(good)
    path.write_text(json.dumps({**document, "version": 99}))
    assert read_index(tmp_path) == {}
    (only,) = document["sessions"].values()
    only["status"] = "no such status"
    path.write_text(json.dumps(document))
    assert read_index(tmp_path) == {}  # a malformed entry is left out
    assert path.name == INDEX_NAME


def test_the_index_is_replaced_whole(tmp_path: Path) -> None:
    records: list[Record] = [started(), StateChanged(SessionStatus.IDLE, "")]
    _write_file(tmp_path, records)
    _index(tmp_path, records)
    write_index(tmp_path, [], lambda i: tmp_path / f"{i}.jsonl")
    assert read_index(tmp_path) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [INDEX_NAME, "s1.jsonl"]
    )  # no temporary file left
