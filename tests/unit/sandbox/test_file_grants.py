"""`FileAccess.granting`: paths outside the roots that a person granted for one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.sandbox.files import AccessDenied, FileAccess


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    (out / "granted.txt").write_text("granted\n")
    (out / "sibling.txt").write_text("sibling\n")
    (out / "dir").mkdir()
    (out / "dir" / "inner.txt").write_text("inner\n")
    (out / ".ssh").mkdir()
    (out / ".ssh" / "config").write_text("Host *\n")
    return work, out


def read(files: FileAccess, cwd: Path, path: Path) -> bytes:
    return files.read(cwd, path, max_bytes=1000).data


def write(files: FileAccess, cwd: Path, path: Path) -> None:
    files.update(cwd, path, lambda _p, _b: b"new\n", max_bytes=1000)


def test_a_granted_file_is_admitted_alone(world: tuple[Path, Path]) -> None:
    work, out = world
    base = FileAccess.workspace(work)
    with pytest.raises(AccessDenied, match="outside the readable roots"):
        read(base, work, out / "granted.txt")
    granted = base.granting(reads=[out / "granted.txt"])
    assert read(granted, work, out / "granted.txt") == b"granted\n"
    with pytest.raises(AccessDenied, match=r"only .*granted.txt was granted"):
        read(granted, work, out / "sibling.txt")
    with pytest.raises(AccessDenied, match="outside the writable roots"):
        write(granted, work, out / "granted.txt")  # a read grant does not write
    with pytest.raises(AccessDenied):
        read(base, work, out / "granted.txt")  # the base boundary is unchanged
    assert read(granted, work, work / ".." / "work" / ".." / "out" / "granted.txt") == b"granted\n"


def test_a_granted_write_creates_or_replaces_only_that_file(world: tuple[Path, Path]) -> None:
    work, out = world
    base = FileAccess(readable=[work])  # a role with no writable root at all
    granted = base.granting(writes=[out / "new.txt", out / "granted.txt"])
    write(granted, work, out / "new.txt")
    write(granted, work, out / "granted.txt")
    assert (out / "new.txt").read_text() == "new\n"
    assert (out / "granted.txt").read_text() == "new\n"
    assert read(granted, work, out / "new.txt") == b"new\n"  # writable means readable
    with pytest.raises(AccessDenied, match="only"):
        write(granted, work, out / "sibling.txt")
    assert (out / "sibling.txt").read_text() == "sibling\n"


def test_a_granted_directory_is_a_root(world: tuple[Path, Path]) -> None:
    work, out = world
    granted = FileAccess.workspace(work).granting(reads=[out / "dir"])
    assert read(granted, work, out / "dir" / "inner.txt") == b"inner\n"
    with pytest.raises(AccessDenied):
        read(granted, work, out / "sibling.txt")


def test_credentials_and_protected_paths_are_never_granted(world: tuple[Path, Path]) -> None:
    work, out = world
    granted = FileAccess.workspace(work).granting(
        reads=[out / ".ssh" / "config", out / ".ssh"], writes=[out / ".git" / "config"]
    )
    with pytest.raises(AccessDenied):
        read(granted, work, out / ".ssh" / "config")
    with pytest.raises(AccessDenied):
        write(granted, work, out / ".git" / "config")
    assert not (out / ".git").exists()
