"""`sync_soon`: the file is fsynced by the syncer thread, errors are logged, never raised."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog.testing

from anvild.store import syncer
from tests.unit.store.support import record_fsyncs


def test_a_queued_file_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = record_fsyncs(monkeypatch)
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"one\n")
    syncer.sync_soon(path)
    assert syncer.wait_synced(10)
    assert path.stat().st_ino in synced
    synced.clear()
    path.write_bytes(b"one\ntwo\n")  # written again after its sync: queued again
    syncer.sync_soon(path)
    assert syncer.wait_synced(10)
    assert synced == [path.stat().st_ino]


def test_a_path_that_cannot_be_synced_is_logged(tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        syncer.sync_soon(tmp_path / "gone.jsonl")  # never written
        assert syncer.wait_synced(10)
        syncer.sync_soon(tmp_path / "also-gone.jsonl")
        assert syncer.wait_synced(10)  # the thread carries on
    failed = [entry["path"] for entry in logs if entry["event"] == "store.sync_failed"]
    assert failed == [str(tmp_path / "gone.jsonl"), str(tmp_path / "also-gone.jsonl")]
