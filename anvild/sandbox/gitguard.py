"""After a sandboxed command: what it left that would make git run a program, moved aside.

`anvild.sandbox.bwrap.plan` holds, by mounts, every name git reads configuration or programs
from in the git directories a command may write. What mounts cannot stop, `Guard.inspect` looks
for once the command has ended, against a snapshot taken before it ran:

- a new name in such a git directory (or a linked worktree's) that git does not write itself
  (`GITDIR_NAMES`, `WORKTREE_NAMES`), and a new linked worktree not as `git worktree add` makes it;
- a repository under a writable root (a `.git` entry, or a directory that is a git directory
  itself) that is new or whose configuration, hooks or pointer changed, and whose files the
  command could write now set a program (`sets_program`) or cannot be parsed by git;
- a rebase todo list, new or changed, with `exec` lines or a merge strategy git does not ship.

Each is moved into the quarantine directory (`<data dir>/quarantine/<stamp>/`, with a manifest),
logged, and reported with the command's result. Design and vectors: docs/sandbox-escapes.md.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import attrs
import platformdirs
import structlog

log = structlog.get_logger("anvild.sandbox.gitguard")

GITDIR_NAMES: Final = (
    *("HEAD", "ORIG_HEAD", "FETCH_HEAD", "*_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_RR"),
    *("AUTO_MERGE", "SQUASH_MSG", "*EDITMSG", "BISECT_*", "NOTES_MERGE_*", "index"),
    *("index.stash.*", "sharedindex.*", "*.lock", "packed-refs", "objects", "refs", "logs"),
    *("rr-cache", "rebase-merge", "rebase-apply", "sequencer", "worktrees", "description"),
    *("gc.pid", "gc.log", "shallow", "lfs", "fsmonitor--daemon*"),
)
"""What git itself creates at the top of a git directory (commit, merge, rebase, stash,
cherry-pick, bisect, notes, gc, worktree add): refs, state and scratch files, none of which names a
program or a configuration. Anything else the command creates there is quarantined."""
WORKTREE_NAMES: Final = (
    *("HEAD", "ORIG_HEAD", "FETCH_HEAD", "*_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_RR"),
    *("AUTO_MERGE", "SQUASH_MSG", "*EDITMSG", "BISECT_*", "index", "index.stash.*"),
    *("sharedindex.*", "*.lock", "logs", "refs", "rebase-merge", "rebase-apply", "sequencer"),
    *("commondir", "gitdir", "locked"),
)
"""What git creates in a linked worktree's git directory (`.git/worktrees/NAME/`)."""
WORKTREE_COMMONDIR: Final = "../.."
"""What `git worktree add` writes to a new worktree's `commondir`."""

PROGRAM_KEYS: Final = (
    *("alias.*", "include.*", "includeif.*", "filter.*", "credential.*", "credentialcache.*"),
    *("pager.*", "sendemail.*", "trace2.*", "protocol.*", "mergetool.*", "difftool.*"),
    *("browser.*", "man.*", "gpg.*", "uploadpack.*", "uploadarchive.*", "tar.*", "instaweb.*"),
    *("web.*", "guitool.*", "imap.*", "help.browser", "gui.editor"),
    *("core.fsmonitor", "core.usebuiltinfsmonitor", "core.hookspath", "core.sshcommand"),
    *("core.pager", "core.editor", "core.askpass", "core.gitproxy", "core.worktree"),
    *("core.alternaterefscommand", "sequence.editor", "interactive.difffilter"),
    *("extensions.worktreeconfig", "diff.external", "diff.*.textconv", "diff.*.command"),
    *("diff.tool", "diff.guitool", "merge.tool", "merge.guitool", "merge.*.driver"),
    *("submodule.*.update", "remote.*.uploadpack", "remote.*.receivepack", "remote.*.vcs"),
)
"""Configuration keys (lower case, `*` for a subsection) that name a program git may run, a file
of further configuration, or a switch that makes git read more configuration."""

TODO: Final = Path("rebase-merge") / "git-rebase-todo"
BUILTIN_STRATEGIES: Final = frozenset({"ort", "recursive", "resolve", "octopus", "ours", "subtree"})
CONFIG_FILES: Final = ("config", "config.worktree")
GIT_TIMEOUT: Final = 10.0


def sets_program(key: str) -> bool:
    """Whether a configuration key (as `git config --list` prints it) may make git run a
    program or read more configuration."""
    lowered = key.lower()
    return any(fnmatch.fnmatchcase(lowered, pattern) for pattern in PROGRAM_KEYS)


def parse_config_list(output: bytes) -> tuple[tuple[str, str], ...]:
    """The (key, value) pairs of `git config --list -z` output (entries `key\nvalue` separated
    by NUL; a key alone is a boolean true)."""
    pairs = []
    for entry in output.split(b"\0"):
        if entry:
            key, _, value = entry.decode("utf-8", "replace").partition("\n")
            pairs.append((key, value))
    return tuple(pairs)


def todo_runs_commands(todo: str) -> bool:
    """Whether a rebase todo list has `exec` lines (run by whoever continues the rebase)."""
    for line in todo.splitlines():
        words = line.split(maxsplit=1)
        if words and words[0] in ("x", "exec"):
            return True
    return False


def allowed(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


# -- the filesystem ----------------------------------------------------------------------------


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """What changes when a file is replaced or written (ctime cannot be set by the writer)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _names(path: Path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(path))
    except OSError:
        return frozenset()


def _read(path: Path, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@attrs.frozen
class Layout:
    """Where a repository's configuration and hooks live: `entry` is the `.git` (or the bare
    git directory) that makes a directory a repository."""

    entry: Path
    gitdir: Path
    commondir: Path
    hooks: tuple[Path, ...]  # the hooks directories git may use here

    @classmethod
    def of(cls, entry: Path, relative_hooks: Iterable[str] = ()) -> Layout:
        """`relative_hooks`: a relative `core.hooksPath` of the user's global configuration,
        which names a directory in each repository's worktree."""
        gitdir = entry
        if entry.name == ".git" and not entry.is_dir():
            text = _read(entry, 4096) or ""  # a `gitdir: PATH` pointer (or a symlink)
            if text.startswith("gitdir:"):
                gitdir = Path(os.path.normpath(entry.parent / text[len("gitdir:") :].strip()))
            else:
                gitdir = Path(os.path.realpath(entry))
        common = (_read(gitdir / "commondir", 4096) or "").strip()
        commondir = Path(os.path.normpath(gitdir / common)) if common else gitdir
        hooks = [gitdir / "hooks", commondir / "hooks"]
        if entry.name == ".git":
            hooks += [Path(os.path.normpath(entry.parent / r)) for r in relative_hooks]
        return cls(entry, gitdir, commondir, tuple(dict.fromkeys(hooks)))

    def files(self) -> tuple[Path, ...]:
        """The files whose content decides what git runs here: the pointer, `commondir`,
        configuration, and every hook."""
        found = [self.entry, self.gitdir / "commondir", self.gitdir / TODO]
        for base in dict.fromkeys((self.gitdir, self.commondir)):
            found += [base / name for name in CONFIG_FILES]
        for hooks in self.hooks:
            found.append(hooks)
            found += [hooks / name for name in sorted(_names(hooks))]
        return tuple(dict.fromkeys(found))


def find_repositories(root: Path, limit: int) -> tuple[tuple[Path, ...], bool]:
    """Every `.git` entry under `root` (its own included) and every directory that is a git
    directory itself (HEAD, objects/ and refs/ in it), without following symlinks; and whether
    the search stopped at `limit` directories."""
    found: list[Path] = []
    pending = [root]
    visited = 0
    while pending:
        if visited >= limit:
            return tuple(sorted(found)), True
        here = pending.pop()
        visited += 1
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        names = {e.name for e in entries}
        if here != root and {"HEAD", "objects", "refs"} <= names:
            found.append(here)
            continue
        for entry in entries:
            if entry.name == ".git":
                found.append(Path(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
    return tuple(sorted(found)), False


@attrs.frozen
class Snapshot:
    """What was there before the command: names in each writable git directory, and the
    identity of every repository's files (`Layout.files`) under the writable roots."""

    names: Mapping[Path, frozenset[str]]
    repos: Mapping[Path, tuple[object, ...]]
    todos: Mapping[Path, object]
    truncated: bool
    started_ns: int  # the clock (as file ctimes read it) when the snapshot was taken


def _fingerprint(layout: Layout) -> tuple[object, ...]:
    return tuple((str(p), _identity(p)) for p in layout.files())


def take_snapshot(
    roots: Iterable[Path], gitdirs: Iterable[Path], limit: int, relative_hooks: tuple[str, ...] = ()
) -> Snapshot:
    started_ns = time.time_ns()
    names = {g: _names(g) for g in gitdirs}
    repos: dict[Path, tuple[object, ...]] = {}
    truncated = False
    for root in roots:
        found, cut = find_repositories(root, limit)
        truncated = truncated or cut
        for entry in found:
            repos[entry] = _fingerprint(Layout.of(entry, relative_hooks))
    todos = {g: _identity(g / TODO) for g in names}
    return Snapshot(names, repos, todos, truncated, started_ns)


CTIME_SLACK_NS: Final = 2_000_000_000
"""How much earlier than the snapshot a change may look (coarse file timestamps)."""


def _changed_since(layout: Layout, since_ns: int) -> bool:
    """Whether any of the repository's files changed since `since_ns`: ctime cannot be set
    back by whoever writes a file."""
    for path in layout.files():
        with contextlib.suppress(OSError):
            if os.lstat(path).st_ctime_ns >= since_ns - CTIME_SLACK_NS:
                return True
    return False


# -- judging -----------------------------------------------------------------------------------


@attrs.frozen
class Finding:
    path: Path
    reason: str
    moved_to: Path | None = None
    error: str = ""


def config_pairs(path: Path, git: str | None) -> tuple[tuple[str, str], ...] | None:
    """The (key, value) pairs of a configuration file, parsed by git itself (no includes
    followed, nothing run); None when git is missing or cannot parse it."""
    if git is None:
        return None
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CEILING_DIRECTORIES": "/",
    }
    try:
        done = subprocess.run(
            [git, "config", "--file", str(path), "--list", "-z"],
            cwd="/",
            env=env,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_config_list(done.stdout) if done.returncode == 0 else None


def program_reasons(layout: Layout, suspect: set[Path], git: str | None) -> list[str]:
    """Why git would run something the command wrote here (empty: it would not)."""
    reasons: list[str] = []
    for base in dict.fromkeys((layout.gitdir, layout.commondir)):
        for name in CONFIG_FILES:
            path = base / name
            if path not in suspect or not path.is_file():
                continue
            pairs = config_pairs(path, git)
            if pairs is None:
                reasons.append(f"{path}: git could not parse it (or git is missing)")
                continue
            bad = sorted({k for k, _ in pairs if sets_program(k)})
            if bad:
                reasons.append(f"{path} sets {', '.join(bad)}")
    todo = layout.gitdir / TODO
    if todo in suspect and todo_runs_commands(_read(todo) or ""):
        reasons.append(f"{todo} runs commands (exec)")
    for hooks in layout.hooks:
        for name in sorted(_names(hooks)):
            if hooks / name in suspect and not name.endswith(".sample"):
                reasons.append(f"hook {hooks / name}")
    return reasons


@attrs.frozen
class Guard:
    """One command's check: the plan's writable roots and git directories, its mounts (which
    say what the command could write), the placeholders it made (not the command's doing), and
    the snapshot taken before it ran."""

    roots: tuple[Path, ...]
    gitdirs: tuple[Path, ...]
    mounts: tuple[tuple[Path, bool], ...]  # (mount point, writable)
    placeholders: frozenset[Path]
    before: Snapshot
    limit: int
    quarantine: Path
    relative_hooks: tuple[str, ...] = ()

    @classmethod
    def prepare(
        cls,
        roots: Iterable[Path],
        gitdirs: Iterable[Path],
        mounts: Iterable[tuple[Path, bool]],
        placeholders: Iterable[Path],
        *,
        limit: int,
        quarantine: Path | None = None,
        relative_hooks: Iterable[str] = (),
    ) -> Guard:
        roots, gitdirs, relative = tuple(roots), tuple(gitdirs), tuple(relative_hooks)
        return cls(
            roots,
            gitdirs,
            tuple(mounts),
            frozenset(placeholders),
            take_snapshot(roots, gitdirs, limit, relative),
            limit,
            quarantine if quarantine is not None else default_quarantine(),
            relative,
        )

    def _writable(self, path: Path) -> bool:
        """Whether the command could have written `path`: the deepest mount holding it is
        writable."""
        holding = [(dest, rw) for dest, rw in self.mounts if _within(path, dest)]
        return bool(holding) and max(holding, key=lambda m: len(m[0].parts))[1]

    def inspect(self) -> Report:
        """Find what the command left (see the module docstring) and move it aside."""
        git = shutil.which("git")
        found: list[tuple[Path, str]] = []
        for gitdir in self.gitdirs:
            linked = (gitdir / "commondir").is_file() and gitdir.parent.name == "worktrees"
            patterns = WORKTREE_NAMES if linked else GITDIR_NAMES
            for name in sorted(_names(gitdir) - self.before.names.get(gitdir, frozenset())):
                if gitdir / name not in self.placeholders and not allowed(name, patterns):
                    found.append((gitdir / name, "not a name git writes in a git directory"))
            if not linked:
                known = set(self.before.names)
                for admin in sorted((gitdir / "worktrees").glob("*")):
                    if admin not in known:
                        reason = self._new_worktree_problem(admin)
                        if reason:
                            found.append((admin, reason))
        for gitdir in (*self.gitdirs, *self._new_worktrees()):
            todo = gitdir / TODO
            if _identity(todo) not in (None, self.before.todos.get(gitdir)):
                strategy = (_read(gitdir / "rebase-merge" / "strategy") or "").strip()
                if todo_runs_commands(_read(todo) or ""):
                    found.append((todo.parent, "the rebase's todo list runs commands (exec)"))
                elif strategy and strategy not in BUILTIN_STRATEGIES:
                    found.append((todo.parent, f"the rebase uses merge strategy {strategy!r}"))
        truncated = self.before.truncated
        for root in self.roots:
            entries, cut = find_repositories(root, self.limit)
            truncated = truncated or cut
            for entry in entries:
                if entry in self.placeholders or any(_within(entry, p) for p, _ in found):
                    continue
                layout = Layout.of(entry, self.relative_hooks)
                if entry in self.before.repos and layout.gitdir in self.gitdirs:
                    # Held by the plan's mounts, and judged piece by piece above: a repository
                    # that was there is never moved as a whole for what lies in its git dir.
                    continue
                if self.before.repos.get(entry) == _fingerprint(layout):
                    continue
                if self.before.truncated and not _changed_since(layout, self.before.started_ns):
                    continue  # beyond where the first search stopped, and untouched since
                suspect = {p for p in layout.files() if self._writable(p)}
                reasons = program_reasons(layout, suspect, git)
                if reasons:
                    found.append((entry, "; ".join(reasons)))
        if truncated:
            _note_truncated(self.roots, self.limit)
        return self._quarantine(found, truncated)

    def _new_worktrees(self) -> list[Path]:
        known = set(self.before.names)
        return [
            admin
            for gitdir in self.gitdirs
            for admin in sorted((gitdir / "worktrees").glob("*"))
            if admin not in known
        ]

    def _new_worktree_problem(self, admin: Path) -> str:
        if admin.is_symlink() or not admin.is_dir():
            return "not a directory as git worktree add makes it"
        extra = sorted(n for n in _names(admin) if not allowed(n, WORKTREE_NAMES))
        if extra:
            return f"a new worktree with {', '.join(extra)}"
        common = _read(admin / "commondir", 4096)
        if common is not None and common.strip() != WORKTREE_COMMONDIR:
            return f"a new worktree whose commondir is {common.strip()!r}"
        return ""

    def _quarantine(self, found: list[tuple[Path, str]], truncated: bool) -> Report:
        # Something inside a finding goes with it (a new worktree and its rebase state).
        found = [
            (path, reason)
            for path, reason in found
            if not any(other != path and _within(path, other) for other, _ in found)
        ]
        if not found:
            return Report((), truncated, self.limit)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)
        into = self.quarantine / stamp
        results = []
        for path, reason in found:
            dest = into / str(path).lstrip("/")
            try:
                move_aside(path, dest)
            except OSError as exc:
                results.append(Finding(path, reason, None, str(exc)))
            else:
                results.append(Finding(path, reason, dest))
        with contextlib.suppress(OSError):
            into.mkdir(parents=True, exist_ok=True)
            with open(into / "manifest.jsonl", "a", encoding="utf-8") as f:
                for r in results:
                    row = {"path": str(r.path), "reason": r.reason, "moved_to": str(r.moved_to)}
                    f.write(json.dumps(row | ({"error": r.error} if r.error else {})) + "\n")
        for r in results:
            log.warning(
                "sandbox.git_quarantine",
                path=str(r.path),
                reason=r.reason,
                moved_to=str(r.moved_to) if r.moved_to else None,
                error=r.error or None,
            )
        return Report(tuple(results), truncated, self.limit)


_TRUNCATED_ROOTS: set[tuple[Path, ...]] = set()


def _note_truncated(roots: tuple[Path, ...], limit: int) -> None:
    """Log, once per workspace and process, that repositories deeper than the search's limit
    are not checked (every command there would say so otherwise)."""
    if roots not in _TRUNCATED_ROOTS:
        _TRUNCATED_ROOTS.add(roots)
        log.warning(
            "sandbox.git_check_truncated",
            roots=[str(r) for r in roots],
            limit=limit,
            hint="repositories below the first LIMIT directories are not checked after commands",
        )


def default_quarantine() -> Path:
    """Under the daemon's data dir, which no sandbox ever sees."""
    return platformdirs.user_data_path("anvil") / "quarantine"


def move_aside(path: Path, dest: Path) -> None:
    """Move `path` to `dest`. Across filesystems it is first renamed beside itself (atomic: git
    stops seeing it at once), then copied over and removed."""
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.rename(path, dest)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # another filesystem
            raise
    beside = path.with_name(f"{path.name}.anvil-quarantine-{secrets.token_hex(4)}")
    os.rename(path, beside)
    shutil.move(beside, dest)


@attrs.frozen
class Report:
    findings: tuple[Finding, ...]
    truncated: bool
    limit: int

    def message(self) -> str | None:
        """For the command's result: what was moved and why, or None if nothing was."""
        if not self.findings:
            return None  # a search cut short is logged (`_note_truncated`), not said every time
        lines = []
        for f in self.findings:
            where = f"moved to {f.moved_to}" if f.moved_to else f"COULD NOT be moved ({f.error})"
            lines.append(f"- {f.path}: {f.reason}; {where}")
        if self.truncated:
            lines.append(
                f"- the search for repositories stopped after {self.limit} directories: "
                "deeper ones were not checked"
            )
        return (
            "Sandbox: after the command, what it left that would make git run a program or "
            "read configuration outside the sandbox was quarantined:\n" + "\n".join(lines)
        )


__all__ = [
    "GITDIR_NAMES",
    "PROGRAM_KEYS",
    "WORKTREE_NAMES",
    "Finding",
    "Guard",
    "Layout",
    "Report",
    "Snapshot",
    "allowed",
    "config_pairs",
    "default_quarantine",
    "find_repositories",
    "move_aside",
    "parse_config_list",
    "sets_program",
    "take_snapshot",
    "todo_runs_commands",
]
