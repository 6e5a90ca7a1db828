"""`Shadow`: one workspace's shadow git repository, owned by the daemon.

The repository lives under the daemon's data dir (`GIT_DIR`, its own `GIT_INDEX_FILE`) with the
workspace as `GIT_WORK_TREE`; git runs with a clean environment (no system or global config,
hooks pointed at an empty directory, `--no-optional-locks`), so the user's `.git` (HEAD, index,
refs, stash, hooks, config) is never read for settings nor written. `.gitignore` files apply, and
the user's `.git/info/exclude` is copied into the shadow's own. `$GIT_DIR/info/attributes`
switches off every conversion, so a blob is the file's exact bytes. A snapshot asks git which
paths differ from the shadow index (its stat cache: unchanged files are not read), adds those
under the size cap and records the others as skipped, then writes a tree: an unchanged workspace
costs two scans run at once (`diff-files`, `ls-files -o`), or none when its `Watcher` (inotify)
saw nothing change since the last snapshot. Callers serialise operations on one workspace
(`Workspace.lock`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from anvild.checkpoints.watch import Watcher, WatchPool

EMPTY_TREE: Final = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
ATTRIBUTES: Final = "* -text -filter -ident -eol -working-tree-encoding -crlf\n"
"""The shadow's `info/attributes`: no line-ending, filter or encoding conversion at all."""
CONFIG: Final = (
    ("core.bare", "false"),
    ("core.autocrlf", "false"),
    ("core.filemode", "true"),
    ("core.symlinks", "true"),
    ("core.untrackedCache", "true"),
    ("core.fsmonitor", "false"),
    ("core.quotepath", "false"),
    ("gc.auto", "0"),
)


MAX_NEW_FILES: Final = 100_000
"""The most files one snapshot adds: a workspace with more new files at once (a session started
in a home directory) is not checkpointed, instead of copying all of it into the data dir."""


class GitFailed(Exception):
    """A git command of the shadow repository failed; the message has its stderr."""


class TooLarge(GitFailed):
    """The workspace has more new files than a snapshot takes (`MAX_NEW_FILES`)."""


@attrs.frozen
class Skipped:
    """A path a snapshot left out: `why` is `over N bytes`, `not a regular file`, ..."""

    path: str
    why: str

    def line(self) -> str:
        return f"{self.path}\t{self.why}"


@attrs.frozen
class Snapshot:
    tree: str
    skipped: tuple[Skipped, ...] = ()


@attrs.frozen
class Entry:
    """One path of a tree: its git mode (`100644`, `100755`, `120000`) and blob id."""

    mode: str
    blob: str


@attrs.frozen
class Change:
    """One path that differs between two trees (None: absent on that side)."""

    path: str
    old: Entry | None
    new: Entry | None

    @property
    def status(self) -> str:
        return "A" if self.old is None else "D" if self.new is None else "M"


def _env(git_dir: Path, work_tree: Path, index: Path, home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(work_tree),
        "GIT_INDEX_FILE": str(index),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
    }


class Shadow:
    """The shadow repository of the workspace `work_tree`, kept in `root` (created on `open`)."""

    def __init__(
        self,
        root: Path,
        work_tree: Path,
        *,
        max_file_bytes: int,
        max_new_files: int = MAX_NEW_FILES,
        watch: WatchPool | None = None,
    ) -> None:
        self.root = root
        self.work_tree = work_tree
        self.max_file_bytes = max_file_bytes
        self.max_new_files = max_new_files
        self.git_dir = root / "git"
        self._hooks = root / "no-hooks"
        self._env = _env(self.git_dir, work_tree, root / "index", root)
        self._last: Snapshot | None = None
        self._exclude: bytes | None = None
        self._pool = watch
        self.watcher: Watcher | None = None

    # -- running git ---------------------------------------------------------------------------

    async def git(self, *args: str, stdin: bytes = b"", ok: Iterable[int] = (0,)) -> bytes:
        """Run `git ARGS` for the shadow repository; its stdout. Exit codes outside `ok` fail."""
        command = ["git", "--no-optional-locks", "-c", f"core.hooksPath={self._hooks}", *args]
        result = await trio.run_process(
            command,
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=self._env,
            cwd=str(self.work_tree),
        )
        if result.returncode not in tuple(ok):
            why = result.stderr.decode(errors="replace").strip()
            raise GitFailed(f"git {args[0]} failed ({result.returncode}): {why}")
        return result.stdout

    async def open(self) -> None:
        """Create the repository if it is new; drop a lock a killed git left behind."""
        self._hooks.mkdir(parents=True, exist_ok=True)
        if not (self.git_dir / "HEAD").exists():
            self.git_dir.parent.mkdir(parents=True, exist_ok=True)
            env = {k: v for k, v in self._env.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
            await trio.run_process(
                ["git", "init", "-q", "--bare", str(self.git_dir)],
                env=env,
                capture_stdout=True,
                capture_stderr=True,
            )
            for key, value in CONFIG:
                await self.git("config", key, value)
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        if not (info / "attributes").exists():
            (info / "attributes").write_text(ATTRIBUTES)
        self.clear_lock()

    def clear_lock(self) -> None:
        """Drop the index lock a git killed mid-write left (only the daemon writes this index)."""
        (self.root / "index.lock").unlink(missing_ok=True)

    # -- snapshots -----------------------------------------------------------------------------

    def _sync_exclude(self) -> bool:
        """The user's `.git/info/exclude` as the shadow's (`--exclude-standard` reads it); True
        when it changed (the watcher does not look inside `.git`)."""
        try:
            user = (self.work_tree / ".git" / "info" / "exclude").read_bytes()
        except OSError:
            user = b""
        if user == self._exclude:
            return False
        (self.git_dir / "info" / "exclude").write_bytes(user)
        self._exclude = user
        return True

    async def _changed(self) -> bool:
        """Whether the workspace may have changed since the last snapshot (True: scan)."""
        if self._pool is None:
            return True
        if self.watcher is None:
            self.watcher = self._pool.watcher(self.work_tree)
            await trio.to_thread.run_sync(self.watcher.start)
        if self.watcher.quiet():
            return False  # the common case, without a worker thread
        return await trio.to_thread.run_sync(self.watcher.changed)

    def close(self) -> None:
        """Release the watcher's inotify instance (snapshots scan from now on)."""
        if self.watcher is not None:
            self.watcher.close()
        self._pool = None

    async def snapshot(self, *, scan: bool = False) -> Snapshot:
        """The workspace now, as a tree in the shadow's object store (and what was left out).
        When the watcher saw nothing change since the last one, that one, without scanning,
        unless `scan` (an undo compares with what is really there: writes inotify misses)."""
        try:
            changed = await self._changed()
            if self._sync_exclude() or self._last is None or scan:
                changed = True
            if not changed:
                assert self._last is not None
                return self._last
            return await self._scan()
        except BaseException:
            if self.watcher is not None:
                self.watcher.invalidate()  # what the watcher drained was not scanned
            raise

    async def _scan(self) -> Snapshot:
        listed: list[bytes] = []

        async def run(*args: str) -> None:
            listed.append(await self.git(*args))

        # Two scans at once: tracked files whose stat differs (diff-files stats them on several
        # threads), and files not in the index and not ignored (the untracked cache).
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "diff-files", "-z", "--name-only")
            nursery.start_soon(run, "ls-files", "-z", "-o", "--exclude-standard")
        text = b"".join(listed).decode("utf-8", "surrogateescape")
        paths = sorted({p for p in text.split("\0") if p})
        if len(paths) > self.max_new_files:
            raise TooLarge(
                f"{len(paths)} files are new or changed at once, more than {self.max_new_files}: "
                f"{self.work_tree} is not checkpointed (start sessions in a project directory, "
                "or .gitignore what need not be)"
            )
        add: list[str] = []
        remove: list[str] = []
        skipped: list[Skipped] = []
        for path in paths:
            if path.endswith("/"):
                skipped.append(Skipped(path, "a nested git repository"))
                continue
            try:
                st = os.lstat(self.work_tree / path)
            except FileNotFoundError:
                remove.append(path)
                continue
            if stat.S_ISLNK(st.st_mode):
                add.append(path)
            elif stat.S_ISDIR(st.st_mode):  # a file that became a directory: its files follow
                remove.append(path)
            elif not stat.S_ISREG(st.st_mode):
                skipped.append(Skipped(path, "not a regular file"))
                remove.append(path)
            elif st.st_size > self.max_file_bytes:
                skipped.append(Skipped(path, f"{st.st_size} bytes, over max_file_bytes"))
                remove.append(path)
            elif not os.access(self.work_tree / path, os.R_OK):
                skipped.append(Skipped(path, "not readable"))
                remove.append(path)
            else:
                add.append(path)
        last = self._last
        if add or remove or last is None:
            if remove:
                await self.git("update-index", "-z", "--force-remove", "--stdin", stdin=_z(remove))
            if add:
                await self.git("update-index", "-z", "--add", "--stdin", stdin=_z(add))
            tree = (await self.git("write-tree")).decode().strip()
        else:
            tree = last.tree
        self._last = Snapshot(tree, tuple(skipped))
        return self._last

    async def ignored(self) -> list[str]:
        """The ignored paths of the workspace (`.gitignore`, the user's info/exclude), a wholly
        ignored directory as one `DIR/`, sorted: what snapshots leave out and undo never touches.
        One scan of the workspace: asked at undo time only."""
        self._sync_exclude()
        out = await self.git(
            "ls-files",
            "-z",
            "-o",
            "-i",
            "--exclude-standard",
            "--directory",
            "--no-empty-directory",
        )
        return sorted(p for p in out.decode("utf-8", "surrogateescape").split("\0") if p)

    async def keep(self, ref: str, tree: str) -> None:
        """Keep `tree` reachable under `refs/anvil/REF` (the shadow is never pruned anyway)."""
        await self.git("update-ref", f"refs/anvil/{ref}", await self._commit(tree))

    async def _commit(self, tree: str) -> str:
        out = await self.git(
            "-c",
            "user.name=anvild",
            "-c",
            "user.email=anvild@localhost",
            "commit-tree",
            tree,
            "-m",
            "anvild checkpoint",
        )
        return out.decode().strip()

    # -- reading trees -------------------------------------------------------------------------

    async def changes(self, old: str, new: str) -> list[Change]:
        """The paths that differ between two trees, sorted; renames are a D and an A."""
        if old == new:
            return []
        out = await self.git("diff-tree", "-r", "-z", "--no-renames", "--raw", old, new)
        fields = out.decode("utf-8", "surrogateescape").split("\0")
        found: list[Change] = []
        for meta, path in zip(fields[0::2], fields[1::2], strict=False):
            if not meta.startswith(":"):
                continue
            old_mode, new_mode, old_blob, new_blob, _ = meta[1:].split(" ")
            before = None if old_mode == "000000" else Entry(old_mode, old_blob)
            after = None if new_mode == "000000" else Entry(new_mode, new_blob)
            found.append(Change(path, before, after))
        return found

    async def numstat(self, old: str, new: str) -> dict[str, tuple[str, str]]:
        """Lines added and deleted per path (`-` for binary files)."""
        if old == new:
            return {}
        out = await self.git("diff-tree", "-r", "-z", "--no-renames", "--numstat", old, new)
        counts: dict[str, tuple[str, str]] = {}
        for item in out.decode("utf-8", "surrogateescape").split("\0"):
            added, _, rest = item.partition("\t")
            deleted, _, path = rest.partition("\t")
            if path:
                counts[path] = (added, deleted)
        return counts

    async def diff(self, old: str, new: str) -> bytes:
        """The unified diff from `old` to `new`."""
        if old == new:
            return b""
        return await self.git(
            "diff-tree",
            "-p",
            "-r",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            old,
            new,
        )

    async def entries(self, tree: str, paths: Sequence[str]) -> dict[str, Entry]:
        """The entries of `paths` in `tree` (absent paths are missing from the answer)."""
        if not paths:
            return {}
        out = await self.git("ls-tree", "-z", "--full-tree", tree, "--", *paths)
        found: dict[str, Entry] = {}
        for item in out.decode("utf-8", "surrogateescape").split("\0"):
            meta, _, path = item.partition("\t")
            if path:
                mode, kind, blob = meta.split(" ")
                if kind == "blob":
                    found[path] = Entry(mode, blob)
        return found

    async def blobs(self, ids: Iterable[str]) -> dict[str, bytes]:
        """The contents of blobs, read in one `cat-file --batch`."""
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        out = await self.git(
            "cat-file", "--batch", stdin="".join(f"{i}\n" for i in wanted).encode()
        )
        found: dict[str, bytes] = {}
        at = 0
        for blob in wanted:
            end = out.index(b"\n", at)
            header = out[at:end].split(b" ")
            if len(header) != 3:
                raise GitFailed(f"blob {blob} is missing from the shadow repository")
            size = int(header[2])
            found[blob] = out[end + 1 : end + 1 + size]
            at = end + 1 + size + 1
        return found

    async def store(self, content: bytes) -> str:
        """Write `content` as a blob; its id."""
        out = await self.git("hash-object", "-w", "--no-filters", "--stdin", stdin=content)
        return out.decode().strip()

    async def merge(self, ours: bytes, base: bytes, theirs: bytes) -> bytes | None:
        """A three-way text merge (`git merge-file`); None when it conflicts or is binary."""
        scratch = self.root / "merge"
        scratch.mkdir(exist_ok=True)
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (scratch / name).write_bytes(data)
            names.append(str(scratch / name))
        result = await trio.run_process(
            ["git", "merge-file", "-p", "--quiet", *names],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=self._env,
        )
        return result.stdout if result.returncode == 0 else None


def _z(paths: Iterable[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def entry_map(changes: Iterable[Change]) -> Mapping[str, Change]:
    return {change.path: change for change in changes}


__all__ = [
    "EMPTY_TREE",
    "Change",
    "Entry",
    "GitFailed",
    "Shadow",
    "Skipped",
    "Snapshot",
    "TooLarge",
    "entry_map",
]
