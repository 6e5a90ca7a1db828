"""Reverting a workspace from one tree to another without losing anyone's later edits.

`plan` decides, per path the revert touches, what it becomes: a path still as the reverted step
left it (`base`) goes back to `target`; one someone changed since is merged three ways (`git
merge-file`: ours = now, base, theirs = target) and is a conflict when that does not merge
cleanly, unless `force`. Paths a snapshot skipped (over the size cap, not regular files) are
never touched and are reported. `apply` makes the plan's paths so on disk (deletions first,
then writes through a temp file and a rename; never through a symlinked parent). The intent
file (`write_intent`, before `apply`; removed once the result is recorded) makes it all or
nothing across a kill -9: a leftover intent is applied again at the next start (roll forward).
"""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path
from typing import Final

import attrs

from anvild.checkpoints.shadow import Entry, Shadow, Skipped, Snapshot

CRASH_ENV: Final = "ANVILD_CHECKPOINTS_CRASH_AFTER"
"""For crash tests only: SIGKILL the daemon after applying this many paths of an undo."""


@attrs.frozen
class Plan:
    targets: dict[str, Entry | None]  # what each path becomes (None: removed)
    conflicts: tuple[str, ...] = ()  # path and why, tab-separated
    merged: tuple[str, ...] = ()
    left: tuple[str, ...] = ()  # skipped paths the revert would have touched, with why


def _symlinked_parent(root: Path, path: str) -> bool:
    here = root
    for part in Path(path).parts[:-1]:
        here = here / part
        if here.is_symlink():
            return True
    return False


async def plan(
    shadow: Shadow,
    base: str,
    target: str,
    now: Snapshot,
    *,
    force: bool,
    skipped: tuple[Skipped, ...] = (),
) -> Plan:
    """What going back from tree `base` (what the reverted step left) to tree `target` does
    to the workspace as it is `now` (a snapshot taken just before)."""
    wanted = await shadow.changes(base, target)
    drift = {c.path: c for c in await shadow.changes(base, now.tree)}
    untouchable = {s.path: s.why for s in (*now.skipped, *skipped)}
    targets: dict[str, Entry | None] = {}
    conflicts: list[str] = []
    merged: list[str] = []
    left: list[str] = []
    for change in wanted:
        path = change.path
        at_base, at_target = change.old, change.new
        if path in untouchable:
            left.append(f"{path}\t{untouchable[path]}")
            continue
        current = drift[path].new if path in drift else at_base
        if current == at_target:
            continue
        if _symlinked_parent(shadow.work_tree, path):
            conflicts.append(f"{path}\ta parent directory is a symbolic link")
            continue
        if current == at_base or force:
            targets[path] = at_target
            continue
        result = await _merged(shadow, current, at_base, at_target)
        if result is None:
            conflicts.append(f"{path}\tchanged since, and the changes overlap")
            continue
        targets[path] = result
        merged.append(path)
    return Plan(targets, tuple(conflicts), tuple(merged), tuple(left))


async def _merged(
    shadow: Shadow, current: Entry | None, base: Entry | None, target: Entry | None
) -> Entry | None:
    if current is None or base is None or target is None:
        return None
    if "120000" in (current.mode, base.mode, target.mode):
        return None
    blobs = await shadow.blobs((current.blob, base.blob, target.blob))
    text = await shadow.merge(blobs[current.blob], blobs[base.blob], blobs[target.blob])
    if text is None:
        return None
    mode = target.mode if current.mode == base.mode else current.mode
    return Entry(mode, await shadow.store(text))


# -- the intent ------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Write `path` whole (temp file, fsync, rename, fsync of the directory)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_intent(path: Path, payload: dict[str, object], targets: dict[str, Entry | None]) -> None:
    body = {
        **payload,
        "targets": {p: None if e is None else [e.mode, e.blob] for p, e in targets.items()},
    }
    write_durably(path, json.dumps(body, sort_keys=True).encode())


def read_intent(path: Path) -> tuple[dict[str, object], dict[str, Entry | None]] | None:
    try:
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    raw = body.pop("targets")
    targets = {p: None if e is None else Entry(e[0], e[1]) for p, e in raw.items()}
    return body, targets


# -- applying --------------------------------------------------------------------------------


async def apply(shadow: Shadow, targets: dict[str, Entry | None]) -> None:
    """Make every path of `targets` so on disk. Idempotent: applying twice is applying once."""
    root = shadow.work_tree
    blobs = await shadow.blobs(e.blob for e in targets.values() if e is not None)
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    done = 0
    for path in sorted(p for p, e in targets.items() if e is None):
        try:
            os.unlink(root / path)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            pass  # a directory now stands there: what was in it is listed on its own
        _prune(root, Path(path).parent)
        done += 1
        _maybe_crash(done, crash_after)
    for path, entry in sorted((p, e) for p, e in targets.items() if e is not None):
        _write(root / path, entry, blobs[entry.blob])
        done += 1
        _maybe_crash(done, crash_after)


def _maybe_crash(done: int, after: int) -> None:
    if after and done >= after:
        os.kill(os.getpid(), signal.SIGKILL)


def _prune(root: Path, parent: Path) -> None:
    """Remove directories emptied by a deletion, up to (not including) the workspace."""
    while parent.parts:
        try:
            os.rmdir(root / parent)
        except OSError:
            return
        parent = parent.parent


def _write(path: Path, entry: Entry, content: bytes) -> None:
    parent = path.parent
    for ancestor in reversed([parent, *parent.parents]):
        if ancestor.exists() and not ancestor.is_dir() and not ancestor.is_symlink():
            ancestor.unlink()  # a file where a directory must be (it is replaced too)
    parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        os.rmdir(path)  # emptied by the deletions before: the file goes back in its place
    tmp = parent / f".{path.name}.anvil-undo"
    tmp.unlink(missing_ok=True)
    if entry.mode == "120000":
        os.symlink(content, tmp)
    else:
        executable = entry.mode == "100755"
        try:
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            mode = (mode | (mode & 0o444) >> 2) if executable else mode & ~0o111
        except FileNotFoundError:
            mode = 0o755 if executable else 0o644
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, path)


__all__ = ["CRASH_ENV", "Plan", "apply", "plan", "read_intent", "write_durably", "write_intent"]
