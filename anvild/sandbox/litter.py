"""What a sandbox leaves on the host while its command runs, and its removal after a crash.

A commit-role launch writes seeds (a missing `commondir` holding `.`) and bwrap creates mount
points for its placeholders (empty directories and files) inside the workspace; `Launch.close`
removes them. A daemon killed meanwhile never closes its launches, so before anything is created
each launch lists those paths in `<data dir>/sandbox-mounts/<pid>-<start>-<hex>.json` (the data
dir is hidden from every sandbox) and deletes the list after its release. `sweep` (daemon start,
`SessionManager.run`) takes every list whose process is gone (pid and start time), removes each
path still as it was left (an empty directory, an empty file, a seed holding its content),
deepest first, then the list; never through a symbolic link, never a path a live process
(another daemon, `anvilctl sandbox`) lists: its sandbox may have it mounted. A list that cannot
be written (and synced: about 1 ms) refuses the launch (`SandboxRefused`): nothing is created
that a crash could leave unlisted. Blocking file I/O.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import platformdirs
import structlog

from anvild.sandbox import SandboxRefused

log = structlog.get_logger(__name__)

SUFFIX: Final = ".json"


def default_directory() -> Path:
    """Where launches list what they create when the settings name no directory."""
    return platformdirs.user_data_path("anvil") / "sandbox-mounts"


def remove_if_left(path: Path, seed: bytes | None) -> bool:
    """Remove a mount point or seed we caused, if it is still what we left: an empty directory,
    an empty file (bwrap's mount point for a file placeholder), or a seed with its content.
    True if it was removed."""
    try:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(path)  # fails (and stays) unless it is still empty
            return True
        if (
            stat.S_ISREG(st.st_mode)
            and st.st_size == len(seed or b"")
            and (seed is None or path.read_bytes() == seed)
        ):
            os.unlink(path)
            return True
    except OSError:
        pass
    return False


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def record(
    directory: Path, paths: Iterable[Path], seeds: Iterable[tuple[Path, bytes]] = ()
) -> Path | None:
    """List `paths` (mount points bwrap will create) and `seeds` (files written first) before
    the launch creates any; the list's path, or None when there is nothing to list. Raises
    `SandboxRefused` when the list cannot be written."""
    entries = [[str(p), None] for p in paths]
    entries += [[str(p), data.decode("utf-8", "surrogateescape")] for p, data in seeds]
    if not entries:
        return None
    pid = os.getpid()
    name = f"{pid}-{_start_time(pid)}-{secrets.token_hex(4)}{SUFFIX}"
    where = directory / name
    body = json.dumps({"pid": pid, "start": _start_time(pid), "paths": entries}).encode()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)  # the placeholders outlive a power loss too, so must their list
        finally:
            os.close(fd)
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            where.unlink()
        raise SandboxRefused(
            f"Cannot write {where} ({exc.strerror or exc}): the sandbox lists there what it "
            "creates in the workspace for the command's mounts, so that a crash cannot leave it "
            "behind. Check that the data directory is writable and has space."
        ) from exc
    return where


def forget(listed: Path | None) -> None:
    """The launch released what it created: its list goes."""
    if listed is not None:
        with contextlib.suppress(FileNotFoundError):
            listed.unlink()


def _alive(obj: object) -> bool:
    if not isinstance(obj, dict):
        return False
    pid, start = obj.get("pid"), obj.get("start")
    return isinstance(pid, int) and start is not None and _start_time(pid) == start


def sweep(directory: Path) -> list[Path]:
    """Remove what the launches of dead processes left (see the module docstring); the paths
    removed."""
    try:
        lists = sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX))
    except OSError:  # no directory: nothing was ever listed
        return []
    dead: list[Path] = []
    found: dict[Path, bytes | None] = {}
    in_use: set[Path] = set()
    for listed in lists:
        try:
            obj = json.loads(listed.read_bytes())
        except (OSError, ValueError):
            obj = None  # cut by a crash while it was written: nothing was created yet
        alive = _alive(obj)
        if not alive:
            dead.append(listed)
        entries = obj.get("paths", []) if isinstance(obj, dict) else []
        for entry in entries:
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str):
                if alive:
                    in_use.add(Path(entry[0]))
                    continue
                seed = entry[1]
                data = seed.encode("utf-8", "surrogateescape") if isinstance(seed, str) else None
                found[Path(entry[0])] = data
    removed: list[Path] = []
    # Deepest first, across every list: a seed inside a placeholder of another launch goes
    # before the placeholder's directory.
    for path in sorted(found, key=lambda p: len(p.parts), reverse=True):
        # Never through a symbolic link: the parent must be where the list says.
        if not path.is_absolute() or os.path.realpath(path.parent) != str(path.parent):
            continue
        if path in in_use:  # a live process's sandbox may have it mounted
            continue
        if remove_if_left(path, found[path]):
            removed.append(path)
    for listed in dead:
        forget(listed)
    if removed:
        log.warning("sandbox.litter_removed", paths=[str(p) for p in removed])
    return removed


__all__ = ["default_directory", "forget", "record", "remove_if_left", "sweep"]
