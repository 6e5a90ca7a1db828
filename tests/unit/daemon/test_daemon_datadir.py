"""The data directory's checks and its one-daemon lock."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from anvild.daemon.datadir import LOCK_FILE, DataDirError, DataDirLock, Holder, prepare_data_dir


def test_a_missing_data_dir_is_created_0700_with_its_parents(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = prepare_data_dir(tmp_path / "a" / "b" / "anvil")
    finally:
        os.umask(old)
    assert path.is_dir()
    assert path.stat().st_mode & 0o777 == 0o700


def test_an_existing_private_dir_is_accepted_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o700)
    (tmp_path / "d" / "kept").write_text("x")
    assert prepare_data_dir(tmp_path / "d") == tmp_path / "d"
    assert (tmp_path / "d" / "kept").read_text() == "x"


def test_a_symlink_is_refused_even_to_a_good_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(DataDirError, match="is a symbolic link; refusing to follow it"):
        prepare_data_dir(tmp_path / "link")


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o720])
def test_a_group_or_world_writable_dir_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d").chmod(mode)
    with pytest.raises(DataDirError, match=re.escape(f"Run `chmod 700 {tmp_path / 'd'}`")):
        prepare_data_dir(tmp_path / "d")


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(DataDirError, match="exists and is not a directory"):
        prepare_data_dir(tmp_path / "f")


def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("making a directory owned by another user needs root")
    (tmp_path / "d").mkdir(mode=0o700)
    os.chown(tmp_path / "d", 65534, 65534)
    with pytest.raises(DataDirError, match=r"belongs to .* \(uid 65534\), not to you"):
        prepare_data_dir(tmp_path / "d")


def test_a_parent_that_cannot_be_created_is_explained(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(DataDirError, match="Not a directory; choose another with --data-dir"):
        prepare_data_dir(tmp_path / "f" / "anvil")
    (tmp_path / "ro").mkdir(mode=0o500)
    if os.getuid() == 0:
        return  # root writes anywhere
    with pytest.raises(DataDirError, match=r"cannot create the data directory .*Permission denied"):
        prepare_data_dir(tmp_path / "ro" / "anvil")


def test_the_lock_records_its_holder_and_refuses_a_second(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path)
    holder = first.acquire(Path("/tmp/ns/agent"))
    assert holder.pid == str(os.getpid())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", holder.started)
    assert (tmp_path / LOCK_FILE).read_text() == holder.render()
    assert (tmp_path / LOCK_FILE).stat().st_mode & 0o777 == 0o600
    # flock belongs to the open file, so a second open in the same process conflicts too.
    second = DataDirLock(tmp_path)
    with pytest.raises(DataDirError) as refused:
        second.acquire(Path("/tmp/other/agent"))
    assert str(refused.value) == (
        f"another anvild (pid {os.getpid()}, started {holder.started}, serving /tmp/ns/agent) "
        f"is using the data directory {tmp_path}; stop it first (kill {os.getpid()}), or give "
        "this one another --data-dir"
    )
    assert not second.held
    assert (tmp_path / LOCK_FILE).read_text() == holder.render()  # the refusal wrote nothing
    first.release()
    first.release()  # idempotent
    assert not (tmp_path / LOCK_FILE).exists()
    second.acquire(Path("/tmp/other/agent"))
    assert Holder.parse((tmp_path / LOCK_FILE).read_text()).socket == "/tmp/other/agent"
    second.release()


def test_a_lock_file_left_by_a_dead_daemon_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("pid=999999\nstarted=yesterday\nsocket=/gone\n")
    lock = DataDirLock(tmp_path)
    assert lock.acquire(Path("/ns/agent")).pid == str(os.getpid())
    lock.release()


def test_holder_parse_tolerates_damage() -> None:
    assert Holder.parse("") == Holder()
    assert Holder.parse("garbage\npid=12\n=x\n") == Holder(pid="12")
