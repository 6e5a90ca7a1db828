"""replace_durably: the target holds the new bytes whole, with the temp file's mode; a failed
replacement leaves the old target and no temp file behind."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from anvild.store.durable import replace_durably


def test_replaces_the_file_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "index.json"
    target.write_bytes(b"old content, longer than the new")
    data = bytes(range(256)) * 4096  # 1 MiB: written in as many writes as it takes
    replace_durably(target, data, temp=tmp_path / ".index.json.tmp", mode=0o600)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["index.json"]


def test_a_failed_rename_keeps_the_target_and_removes_the_temp(tmp_path: Path) -> None:
    target = tmp_path / "box"
    target.mkdir()
    (target / "message.json").write_bytes(b"{}")  # rename(2) of a file over a directory: EISDIR
    with pytest.raises(IsADirectoryError):
        replace_durably(target, b"new", temp=tmp_path / ".box.tmp", mode=0o600)
    assert (target / "message.json").read_bytes() == b"{}"
    assert not (tmp_path / ".box.tmp").exists()


def test_an_unwritable_directory_raises_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(FileNotFoundError):
        replace_durably(missing / "f", b"x", temp=missing / ".f.tmp", mode=0o600)
    assert list(tmp_path.iterdir()) == []
