"""The change watcher (real inotify): every kind of change under the workspace is reported, in
directories made since too, then the flag clears; `.git` is not watched; a lost queue, a file
system it cannot trust, too many directories or no inotify instance left mean "changed"."""

from __future__ import annotations

import gc
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anvild.checkpoints.watch import LOCAL, Watcher, WatchPool, fs_type


def inotify_fds() -> int:
    return sum(
        os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text("a\n")
    (root / "top.txt").write_text("top\n")
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "index").write_bytes(b"index")
    return root


@pytest.fixture
def watcher(tree: Path) -> Iterator[Watcher]:
    found = Watcher(tree)
    found.start()
    assert found.watching, found.off
    assert found.changed()  # a new watcher knows nothing yet
    assert not found.changed()
    yield found
    found.close()


def rename_file(root: Path) -> None:
    (root / "top.txt").rename(root / "src" / "moved.txt")


def remove_directory(root: Path) -> None:
    (root / "src" / "pkg" / "a.py").unlink()
    (root / "src" / "pkg").rmdir()


def append(root: Path) -> None:
    with (root / "top.txt").open("a") as file:
        file.write("more\n")


CHANGES: dict[str, Callable[[Path], object]] = {
    "create": lambda root: (root / "src" / "new.py").write_text("new\n"),
    "modify": lambda root: (root / "src" / "pkg" / "a.py").write_text("changed\n"),
    "append": append,
    "truncate": lambda root: os.truncate(root / "top.txt", 0),
    "delete": lambda root: (root / "src" / "pkg" / "a.py").unlink(),
    "rename": rename_file,
    "chmod": lambda root: (root / "top.txt").chmod(0o755),
    "touch": lambda root: os.utime(root / "top.txt", (1, 1)),
    "symlink": lambda root: (root / "link").symlink_to("top.txt"),
    "mkdir": lambda root: (root / "src" / "empty").mkdir(),
    "rmdir": remove_directory,
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_kind_of_change_is_seen_once(watcher: Watcher, tree: Path, change: str) -> None:
    CHANGES[change](tree)
    assert watcher.changed()
    assert not watcher.changed()


def test_a_directory_made_since_is_watched_and_so_are_those_made_inside_it(
    watcher: Watcher, tree: Path
) -> None:
    (tree / "new").mkdir()
    assert watcher.changed()
    (tree / "new" / "inner").mkdir()
    assert watcher.changed()
    (tree / "new" / "inner" / "file.txt").write_text("x\n")
    assert watcher.changed()
    # A whole tree made at once, before the watcher looked: its deepest directory is watched.
    (tree / "deep" / "b" / "c").mkdir(parents=True)
    (tree / "deep" / "b" / "c" / "f").write_text("f\n")
    assert watcher.changed()
    assert not watcher.changed()
    (tree / "deep" / "b" / "c" / "f").write_text("g\n")
    assert watcher.changed()


def test_a_moved_directory_is_watched_where_it_went(watcher: Watcher, tree: Path) -> None:
    (tree / "src").rename(tree / "lib")
    assert watcher.changed()
    assert watcher.rebuilds == 2
    assert not watcher.changed()
    (tree / "lib" / "pkg" / "a.py").write_text("after the move\n")
    assert watcher.changed()
    # Moved out of the workspace: no longer reported; moved in: watched.
    (tree / "lib").rename(tree.parent / "outside")
    assert watcher.changed()
    (tree.parent / "outside" / "pkg" / "a.py").write_text("outside\n")
    assert not watcher.changed()
    (tree.parent / "outside").rename(tree / "back")
    assert watcher.changed()
    (tree / "back" / "pkg" / "a.py").write_text("back\n")
    assert watcher.changed()


def test_git_directories_are_not_watched_but_their_creation_is_seen(
    watcher: Watcher, tree: Path
) -> None:
    (tree / ".git" / "index").write_bytes(b"another index")
    (tree / ".git" / "objects" / "ab").mkdir()
    (tree / ".git" / "objects" / "ab" / "cdef").write_bytes(b"object")
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert not watcher.changed()
    os.chmod(tree / ".git", 0o700)
    (tree / ".git").rename(tree / "old-git")  # the top .git itself comes and goes
    (tree / ".git").mkdir()
    (tree / ".git").rmdir()
    assert watcher.changed()  # old-git appeared
    (tree / "old-git").rename(tree / ".git")
    assert watcher.changed()  # and went
    (tree / ".git").rename(tree / ".git-moved")
    (tree / ".git-moved").rename(tree / ".git")
    assert watcher.changed()  # .git-moved came and went: an ordinary name
    os.utime(tree / ".git", (1, 1))
    assert not watcher.changed()
    (tree / "src" / ".git").mkdir()  # a nested repository appears: the shadow must look
    assert watcher.changed()
    assert not watcher.changed()
    (tree / "src" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # git init's rest
    assert watcher.changed()  # a repository now: git lists src/ differently
    (tree / "src" / ".git" / "index").write_bytes(b"its own git activity")
    assert not watcher.changed()


def test_a_sandbox_placeholder_that_came_and_went_is_no_change(
    watcher: Watcher, tree: Path
) -> None:
    (tree / ".anvil").mkdir()  # what bwrap does for a missing .anvil while a command runs
    (tree / ".anvil").rmdir()
    (tree / ".git").rename(tree / "git-was-here")
    (tree / ".git").mkdir()  # and for a missing top .git
    (tree / ".git").rmdir()
    (tree / "git-was-here").rename(tree / ".git")
    watcher.invalidate()
    assert watcher.changed()
    (tree / ".anvil").mkdir()
    (tree / ".anvil").rmdir()
    assert not watcher.changed()
    (tree / ".anvil").mkdir()  # one that stays empty: git does not see it
    assert not watcher.changed()
    (tree / ".anvil" / "role.toml").write_text("x\n")  # but it is watched
    assert watcher.changed()
    (tree / "src" / ".anvil").mkdir()
    (tree / "src" / ".anvil" / "f").write_text("made with it\n")
    assert watcher.changed()
    (tree / "src" / ".anvil" / "f").unlink()
    assert watcher.changed()
    (tree / "src" / ".anvil").rmdir()  # a watched directory gone
    assert watcher.changed()


def test_a_lost_queue_means_changed_and_every_directory_is_watched_again(
    watcher: Watcher, tree: Path
) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    (tree / "many").mkdir()
    assert watcher.changed()
    names = [str(tree / "top.txt"), str(tree / "src" / "pkg" / "a.py")]
    for n in range(limit + 100):  # alternating, so that no two events are merged
        os.chmod(names[n % 2], 0o644 | n % 2)
    (tree / "many" / "sub").mkdir()  # after the overflow: its event is lost
    assert watcher.changed()
    assert watcher.watching
    assert watcher.rebuilds == 2
    assert not watcher.changed()
    (tree / "many" / "sub" / "late.txt").write_text("seen\n")
    assert watcher.changed()


def test_the_root_removed_leaves_the_watcher_off(watcher: Watcher, tree: Path) -> None:
    (tree / "src" / "pkg" / "a.py").unlink()
    for path in (tree / "src" / "pkg", tree / "src"):
        path.rmdir()
    (tree / "top.txt").unlink()
    (tree / ".git" / "index").unlink()
    (tree / ".git" / "objects").rmdir()
    (tree / ".git").rmdir()
    tree.rmdir()
    assert watcher.changed()
    assert not watcher.watching
    assert watcher.changed()  # off: always changed


def test_invalidate_makes_the_next_answer_changed(watcher: Watcher) -> None:
    assert watcher.quiet()
    watcher.invalidate()
    assert not watcher.quiet()
    assert watcher.changed()
    assert not watcher.changed()


def test_quiet_is_false_while_an_event_waits(watcher: Watcher, tree: Path) -> None:
    assert watcher.quiet()
    (tree / "top.txt").write_text("changed\n")
    assert not watcher.quiet()
    assert not watcher.quiet()  # it only looks: the event is still there
    assert watcher.changed()
    assert watcher.quiet()
    watcher.close()
    assert not watcher.quiet()


def test_a_file_system_not_on_the_list_is_not_watched(tree: Path) -> None:
    kind = fs_type(tree)
    assert kind in LOCAL, f"the test directory's file system ({kind:#x}) should be local"
    found = Watcher(tree, fs_types={})  # as for NFS, CIFS, FUSE or 9p
    found.start()
    assert not found.watching
    assert "not on a local file system" in found.off
    proc = Watcher(Path("/proc/self"))  # a real one that is not on the list: procfs
    proc.start()
    assert "not on a local file system (statfs type 0x9fa0)" in proc.off
    assert found.changed()
    assert found.changed()


def test_too_many_directories_turn_the_watcher_off(tree: Path) -> None:
    found = Watcher(tree, max_dirs=3)  # ws, src, src/pkg
    found.start()
    assert found.watching, found.off
    assert found.changed()
    assert not found.changed()
    (tree / "src" / "more").mkdir()
    assert found.changed()
    assert "more than 3 directories" in found.off
    assert found.changed()


def test_no_inotify_instance_left_means_scanning(tree: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1024), hard))
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        found = Watcher(tree)
        found.start()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not found.watching
    assert "inotify_init1" in found.off
    assert found.changed()


def test_the_pool_caps_watched_workspaces_and_close_releases_them(tmp_path: Path) -> None:
    roots = [tmp_path / f"ws{n}" for n in range(3)]
    for root in roots:
        root.mkdir()
    gc.collect()  # watchers other tests dropped release their instances now, not meanwhile
    before = inotify_fds()
    pool = WatchPool(limit=2)
    watchers = [pool.watcher(root) for root in roots]
    for found in watchers:
        found.start()
    assert [w.watching for w in watchers] == [True, True, False]
    assert "already watching 2" in watchers[2].off
    assert inotify_fds() == before + 2
    watchers[0].close()
    assert pool.live == 1
    assert inotify_fds() == before + 1
    again = pool.watcher(roots[0])
    again.start()
    assert again.watching
    pool.close()
    assert pool.live == 0
    assert inotify_fds() == before
    assert all(w.changed() for w in (*watchers, again))


def test_a_workspace_reached_through_a_symbolic_link_is_watched_where_it_is(
    tree: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(tree)
    found = Watcher(link)
    found.start()
    assert found.watching, found.off
    assert found.changed()
    assert not found.changed()
    (link / "src" / "pkg" / "a.py").write_text("through the link\n")
    assert found.changed()
    found.close()
