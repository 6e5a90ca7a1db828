"""The session index: a summary equals the replay's; an entry is used only for the file it was
taken from; a missing, corrupt or other-version index, or a changed file, means a replay."""

from __future__ import annotations

import json
import os
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvild.store import (
    IndexEntry,
    IndexWriter,
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
from anvild.store import index as index_module
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


def test_a_writer_encodes_only_what_changed_and_writes_what_json_dumps_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry given again (the same object) keeps its text; a new one (a Pending, a
    replaced entry) is encoded; the file is byte for byte the one-shot document."""
    pending = []
    for name in ("s1", "s2", "s3"):
        records: list[Record] = [started(name), StateChanged(SessionStatus.IDLE, "")]
        path = _write_file(tmp_path, records)
        pending.append(Pending(SessionSummary.of(replay(records)), path.stat().st_size, 2))
    writer = IndexWriter(tmp_path, lambda i: tmp_path / f"{i}.jsonl")
    encoded: list[str] = []
    real = index_module._entry_text

    def counting(session_id: str, entry: IndexEntry) -> str:
        encoded.append(session_id)
        return real(session_id, entry)

    monkeypatch.setattr(index_module, "_entry_text", counting)
    written = writer.write(pending)
    assert encoded == ["s1", "s2", "s3"]
    entries = list(written.values())
    encoded.clear()
    changed = attrs.evolve(entries[1], summary=attrs.evolve(entries[1].summary, alias="two"))
    written = writer.write([entries[0], changed, entries[2]])
    assert encoded == ["s2"]  # the others were the same objects: their texts were kept
    encoded.clear()
    writer.write([entries[2], entries[0]])  # one left out, the order changed
    assert encoded == []
    assert list(read_index(tmp_path)) == ["s3", "s1"]
    once = write_index(
        tmp_path, [entries[0], changed, entries[2]], lambda i: tmp_path / f"{i}.jsonl"
    )
    document = {
        "version": 1,
        "sessions": {
            k: {**e.summary.to_json(), "file": index_module._fingerprint_json(e.fingerprint)}
            for k, e in once.items()
        },
    }
    assert index_path(tmp_path).read_bytes() == json.dumps(document, separators=(",", ":")).encode()
    assert read_index(tmp_path)["s2"].summary.alias == "two"
