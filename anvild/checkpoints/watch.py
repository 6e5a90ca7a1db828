"""`Watcher`: whether anything under a workspace changed since the last look (Linux inotify).

A `Shadow` asks `changed()` before a snapshot's scans; False lets it keep the last tree. Every
directory of the workspace is watched except `.git` directories (the user's git activity is not
a change to the workspace's files). `changed()` drains the queue without blocking, watching the
directories created since, and rebuilds every watch after a directory moved or the queue
overflowed, before it clears its flag. Any event, an overflow, a watched directory gone, a
failed read or a watcher that is off answers True (scan); the empty mount points a sandboxed
command's bwrap makes and removes (`.anvil`) are no change. inotify does not report writes
through a shared mapping (only their descriptor's close), so an undo always scans
(docs/decisions.md). Only local file systems (a statfs type allowlist), at most `MAX_DIRS`
directories and `limit` workspaces per `WatchPool` are watched; past a limit, or on
ENOSPC/EMFILE, the workspace is scanned every time, as without a watcher.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Final

from anvild.sandbox.bwrap import PROTECTED_NAMES

IN_MODIFY: Final = 0x2
IN_ATTRIB: Final = 0x4
IN_CLOSE_WRITE: Final = 0x8
IN_MOVED_FROM: Final = 0x40
IN_MOVED_TO: Final = 0x80
IN_CREATE: Final = 0x100
IN_DELETE: Final = 0x200
IN_DELETE_SELF: Final = 0x400
IN_MOVE_SELF: Final = 0x800
IN_Q_OVERFLOW: Final = 0x4000
IN_IGNORED: Final = 0x8000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_ISDIR: Final = 0x40000000
MASK: Final = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)

MAX_DIRS: Final = 20_000
"""The most directories one workspace's watcher watches; a larger tree is scanned instead."""
MAX_WORKSPACES: Final = 16
"""The most workspaces a `WatchPool` watches at once (an inotify instance each, out of the
user's `fs.inotify.max_user_instances`, 128 by default, shared with editors and the like)."""

LOCAL: Final = {
    0xEF53: "ext2/3/4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x794C7630: "overlay",
    0xF2F52010: "f2fs",
    0x2FC12FC1: "zfs",
    0xCA451A4E: "bcachefs",
    0x3153464A: "jfs",
    0x52654973: "reiserfs",
}
"""statfs `f_type`s whose changes all go through this kernel: inotify sees them. Others (NFS,
CIFS, FUSE, 9p, ...) can change under us unseen, so they are scanned."""

PLACEHOLDERS: Final = frozenset(os.fsencode(n) for n in PROTECTED_NAMES)
"""Names of the empty directories a sandboxed command's bwrap makes as mount points (a missing
`.anvil`) and removes after it: nothing can be written in them, and git does not record empty
directories, so their coming and going is no change. (A missing top `.git` is one too: events
of the top `.git` are not changes at all.)"""


class _Libc:
    """The three inotify calls and statfs, from the C library (None off Linux)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.init1: Callable[[int], int] = libc.inotify_init1
        self.add_watch = libc.inotify_add_watch
        self.add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self.statfs = libc.statfs
        self.statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)


def _load() -> _Libc | None:
    try:
        return _Libc()
    except (OSError, AttributeError):
        return None


_LIBC: Final = _load()


def fs_type(path: Path) -> int | None:
    """The statfs `f_type` of the file system holding `path` (None when it cannot be read)."""
    if _LIBC is None:
        return None
    buffer = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if _LIBC.statfs(os.fsencode(path), buffer) != 0:
        return None
    return ctypes.c_ulong.from_buffer(buffer).value & 0xFFFFFFFF


class Off(Exception):
    """The watcher cannot watch (the message says why); the workspace is scanned instead."""


class Watcher:
    """The change flag of the workspace `root`. Not thread-safe: one caller at a time (the
    workspace's lock), and `changed`/`start` block on the file system (run them in a thread)."""

    def __init__(
        self,
        root: Path,
        *,
        max_dirs: int = MAX_DIRS,
        fs_types: dict[int, str] = LOCAL,
        on_close: Callable[[Watcher], None] | None = None,
        refuse: str = "",
    ) -> None:
        """`refuse`: never watch, for this reason."""
        self.root = Path(os.path.realpath(root))  # a symlinked workspace: its directory
        self.max_dirs = max_dirs
        self.fs_types = fs_types
        self.off = refuse or "not started"  # why the watcher is not watching ("": it is)
        self._refuse = refuse
        self.rebuilds = 0  # how many times every watch was set up (the start included)
        self._fd = -1
        self._paths: dict[int, bytes] = {}  # watch descriptor -> directory
        self._empty_git: set[bytes] = set()  # .git directories made empty: a change once filled
        self._root_dev = -1
        self._dirty = True
        self._on_close = on_close
        self._finalizer: weakref.finalize[[int], Watcher] | None = None

    @property
    def watching(self) -> bool:
        return not self.off

    def start(self) -> None:
        """Watch every directory of the workspace; on failure `off` says why."""
        if self._refuse:
            return
        try:
            self._rebuild()
        except Off as exc:
            self.close(str(exc))

    def changed(self) -> bool:
        """Whether anything may have changed since the last call (True when off), draining the
        queue and watching new directories first, then clearing the flag."""
        if self.off:
            return True
        try:
            self._drain()
        except Off as exc:
            self.close(str(exc))
            return True
        dirty, self._dirty = self._dirty, False
        return dirty

    def quiet(self) -> bool:
        """True when `changed` would answer False without blocking: no event queued, nothing
        pending (one poll; lets the caller skip a worker thread)."""
        if self.off or self._dirty or self._empty_git:
            return False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return not poller.poll(0)

    def invalidate(self) -> None:
        """The next `changed` answers True (a snapshot that asked did not finish)."""
        self._dirty = True

    def close(self, why: str = "closed") -> None:
        """Stop watching for good: release the inotify instance."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            on_close(self)
        self._fd = -1
        self._paths.clear()
        self._dirty = True
        self.off = why

    # -- inside --------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """A new inotify instance watching the whole tree (the old one, if any, is closed)."""
        if _LIBC is None:
            raise Off("inotify is not available on this system")
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        try:
            self._root_dev = os.lstat(self.root).st_dev
        except OSError as exc:
            raise Off(f"{self.root}: {exc.strerror}") from exc
        kind = fs_type(self.root)
        if kind not in self.fs_types:
            raise Off(f"{self.root} is not on a local file system (statfs type {kind or 0:#x})")
        fd = _LIBC.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise Off(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)
        self._paths.clear()
        self._empty_git.clear()
        self._dirty = True
        self.off = ""
        self.rebuilds += 1
        if not self._watch(os.fsencode(self.root)):
            raise Off(f"{self.root} is not a directory")
        self._watch_tree(os.fsencode(self.root))

    def _watch_tree(self, top: bytes) -> None:
        """Watch `top` and every directory below it (but `.git`): each watch is added before its
        directory is listed, so an entry made in between is either listed or reported."""
        pending = [top]
        while pending:
            path = pending.pop()
            if not self._watch(path):
                continue
            try:
                entries = list(os.scandir(path))
            except FileNotFoundError:
                continue  # gone already: its parent reported that
            except OSError as exc:
                raise Off(f"cannot list {os.fsdecode(path)}: {exc.strerror}") from exc
            for entry in entries:
                if entry.name != b".git" and entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)

    def _watch(self, path: bytes) -> bool:
        """Watch one directory; False when it is gone (or not a directory any more)."""
        assert _LIBC is not None
        if len(self._paths) >= self.max_dirs:
            raise Off(f"{self.root} has more than {self.max_dirs} directories")
        try:
            dev = os.lstat(path).st_dev
        except FileNotFoundError:
            return False
        if dev != self._root_dev:  # a mount inside the workspace: it must be local too
            kind = fs_type(Path(os.fsdecode(path)))
            if kind not in self.fs_types:
                raise Off(f"{os.fsdecode(path)} is not on a local file system")
        wd = _LIBC.add_watch(self._fd, path, MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code in (errno.ENOENT, errno.ENOTDIR):
                return False
            raise Off(f"inotify_add_watch {os.fsdecode(path)}: {os.strerror(code)}")
        self._paths[wd] = path
        return True

    def _drain(self) -> None:
        """Read every queued event: any event sets the flag (but a sandbox's placeholder come
        and gone); directories created are watched; a directory moved, the queue overflowing
        or the root gone rebuilds every watch."""
        rebuild = False
        created: list[bytes] = []
        placed: list[bytes] = []
        root = os.fsencode(self.root)
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                break
            except OSError as exc:
                raise Off(f"reading inotify events: {exc.strerror}") from exc
            if not data:
                raise Off("the inotify instance was closed")
            at = 0
            while at + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
                at += _EVENT.size + size
                parent = self._paths.get(wd)
                if name == b".git" and parent == root:
                    continue  # the user's repository: git never lists it, the shadow never reads it
                if mask & IN_ISDIR and mask & (IN_CREATE | IN_DELETE) and name in PLACEHOLDERS:
                    if mask & IN_CREATE and parent is not None:
                        placed.append(os.path.join(parent, name))
                    continue  # what it holds (if it stays) is looked at below
                self._dirty = True
                if mask & (IN_Q_OVERFLOW | IN_MOVE_SELF):
                    rebuild = True
                elif mask & IN_IGNORED:
                    self._paths.pop(wd, None)
                    if parent == root:
                        rebuild = True
                elif mask & IN_ISDIR and mask & (IN_MOVED_FROM | IN_MOVED_TO):
                    rebuild = True  # the paths of the watches below it changed
                elif mask & IN_ISDIR and mask & IN_CREATE and parent is not None:
                    if name == b".git":  # not watched; git reads it once it is a repository
                        self._empty_git.add(os.path.join(parent, name))
                    else:
                        created.append(os.path.join(parent, name))
        for path in list(self._empty_git):
            if _holds_something(path) is not False:
                self._empty_git.discard(path)  # filled (a change) or gone (events said so)
                self._dirty = True
        if rebuild:
            self._rebuild()
            return
        for path in created:
            self._watch_tree(path)
        for path in placed:  # watched first, then looked into: nothing put there is missed
            self._watch_tree(path)
            if _holds_something(path):  # None: come and gone, a sandboxed command's mount point
                self._dirty = True  # not (only) a mount point


def _holds_something(path: bytes) -> bool | None:
    """Whether the directory `path` has an entry (None: it is gone; unreadable: True)."""
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is not None
    except FileNotFoundError:
        return None
    except OSError:
        return True


class WatchPool:
    """At most `limit` watched workspaces (the rest are scanned); `close` releases them all."""

    def __init__(self, limit: int = MAX_WORKSPACES, *, max_dirs: int = MAX_DIRS) -> None:
        self.limit = limit
        self.max_dirs = max_dirs
        self._live: set[Watcher] = set()
        self._lock = threading.Lock()  # watchers close from worker threads

    def watcher(self, root: Path) -> Watcher:
        """A watcher of `root`, not started (`start` it in a thread); when the pool is full, one
        that is off for good."""
        with self._lock:
            if len(self._live) >= self.limit:
                return Watcher(root, refuse=f"already watching {self.limit} workspaces")
            watcher = Watcher(root, max_dirs=self.max_dirs, on_close=self._forget)
            self._live.add(watcher)
        return watcher

    def _forget(self, watcher: Watcher) -> None:
        with self._lock:
            self._live.discard(watcher)

    @property
    def live(self) -> int:
        """How many watchers hold (or may still take) an inotify instance."""
        with self._lock:
            return len(self._live)

    def close(self) -> None:
        with self._lock:
            watchers = list(self._live)
        for watcher in watchers:
            watcher.close()


__all__ = ["LOCAL", "MAX_DIRS", "MAX_WORKSPACES", "Off", "WatchPool", "Watcher", "fs_type"]
