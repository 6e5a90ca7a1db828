"""The bubblewrap sandbox: what a sandboxed command sees, as a bwrap command line, and its launch.

Threat: the command is what a model chose, possibly steered by hostile repository text; it may
try to write outside the workspace, plant something that runs later unsandboxed (git hooks and
config, shell rc, `.anvil`), read credentials, reach the daemon's socket or the network, or
outlive its call. `anvild.sandbox.confine.Sandbox.prepare` refuses unless the probe passed
(nothing ever runs unsandboxed instead). `plan` (pure, given `HostFacts`) lays out a minimal
read-only system, empty tmpfs over /tmp, /run, /var/tmp and $HOME (no reachable sockets), the
role's paths (parents first), read-only re-binds of `.git` internals, `.anvil` and rc files
inside writable roots (a missing one gets an empty read-only placeholder; a symlink is refused),
and masks hidden paths. `bwrap_argv` (pure) adds namespaces, `--new-session`, seccomp and the
status fd. The launch runs supervisor -> setpriv (drops root) -> bwrap, so nothing outlives the
daemon; the environment is `child_env`, passed as bwrap's environment, never on its command
line. A status stream without an exit code is a sandbox failure, never re-run another way.
Layout rules, the lifeline rationale and limits: docs/decisions.md, "Module notes".
"""

from __future__ import annotations

import enum
import json
import os
import re
import shutil
import stat
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Final, Protocol

import attrs
import platformdirs
import structlog

from anvild.sandbox import (
    ReadOnly,
    SandboxRefused,
    SandboxUnavailable,
    WorkspaceWrite,
    litter,
)
from anvild.sandbox.gitguard import Guard, config_pairs, find_repositories
from anvild.sandbox.roles import GitAccess, ResolvedRole
from anvild.sandbox.secrets import child_env

log = structlog.get_logger("anvild.sandbox.bwrap")

DEFAULT_UID: Final = 65534
DEFAULT_GID: Final = 65534
NESTED_GIT_LIMIT: Final = 20_000
"""Directories visited per writable root when looking for nested repositories."""

MERGED_USR: Final = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
TMPFS_DIRS: Final = ("/tmp", "/run", "/var/tmp")
ETC_ENTRIES: Final = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "environment",
    "gai.conf",
    "gitattributes",
    "gitconfig",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "issue",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.conf",
    "localtime",
    "login.defs",
    "lsb-release",
    "magic",
    "magic.mime",
    "manpath.config",
    "mime.types",
    "nanorc",
    "networks",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "profile",
    "profile.d",
    "protocols",
    "python3",
    "python3.11",
    "resolv.conf",
    "rpc",
    "services",
    "shells",
    "ssl",
    "subgid",
    "subuid",
    "terminfo",
    "timezone",
    "vim",
    "wgetrc",
    "xattr.conf",
)
"""What of /etc a command sees: enough for name service, TLS, locales and common tools. Not
shadow files, ssh host keys, sudoers, cron, the package manager's state. A role adds more with
`read_only: [/etc/NAME]`."""

PROTECTED_NAMES: Final = (".anvil",)
RC_FILES: Final = (
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".inputrc",
)
"""Shell start-up files: read-only wherever a writable root holds them (they run later, outside
the sandbox, when the user opens a shell there)."""

GIT_READ_ONLY_DIRS: Final = ("hooks", "info", "modules", "branches", "remotes")
"""Directories of a git directory that set what git runs or reads (hooks; attributes, excludes
and grafts; submodule git directories; legacy remote definitions): read-only, and an empty
read-only directory where missing, so they cannot be created."""
GIT_READ_ONLY_FILES: Final = ("config", "config.worktree")
"""Configuration files of a git directory: read-only, and an empty file (an empty
configuration) bound read-only where missing."""
COMMONDIR_SEED: Final = b".\n"
"""What a missing `commondir` is seeded with before a commit-role sandbox starts: `.` names the
git directory itself, so git behaves as without the file, inside and outside the sandbox (an empty
file or a directory there makes git die), and the command cannot create one of its own."""
CREDENTIAL_HOME_PATHS: Final = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".docker",
    ".kube",
    ".config/gh",
    ".config/gcloud",
    ".local/share/keyrings",
)
"""Under $HOME; masked if a bound path (a workspace that is $HOME, a role entry) exposes them."""


def default_hidden(home: Path, environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Paths no sandbox may see even when a bound path contains them: credentials in $HOME,
    the daemon's config dir (it grants authority), data dir (records, trust grants) and the 9P
    namespace directory (its socket grants everything)."""
    env = os.environ if environ is None else environ
    paths = [home / rel for rel in CREDENTIAL_HOME_PATHS]
    paths += [
        platformdirs.user_config_path("anvil"),
        platformdirs.user_data_path("anvil"),
        platformdirs.user_state_path("anvil"),
    ]
    if env.get("NAMESPACE"):
        paths.append(Path(env["NAMESPACE"]))
    return tuple(Path(os.path.normpath(p)) for p in paths)


def user_git_configs(home: Path, environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The global and system git configuration files git reads besides a repository's own."""
    env = os.environ if environ is None else environ
    xdg = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return (home / ".gitconfig", xdg / "git" / "config", Path("/etc/gitconfig"))


# -- facts about the host ----------------------------------------------------------------------


class PathKind(enum.Enum):
    MISSING = "missing"
    DIR = "dir"
    FILE = "file"
    SYMLINK = "symlink"
    OTHER = "other"


class HostFacts(Protocol):
    """What the planner needs to know about the host's filesystem. `LiveFacts` asks the OS; the
    unit tests answer from a table."""

    def kind(self, path: Path) -> PathKind:
        """What is at `path`, without following a final symlink."""
        ...

    def symlink_target(self, path: Path) -> str:
        """The target text of a symlink (for the merged-/usr links)."""
        ...

    def gitdir_of(self, pointer: Path) -> Path | None:
        """The directory a `.git` file points to (`gitdir: ...`), made absolute."""
        ...

    def commondir_of(self, gitdir: Path) -> Path | None:
        """The common directory of a worktree's gitdir (its `commondir` file), if any."""
        ...

    def module_gitdirs(self, gitdir: Path) -> tuple[Path, ...]:
        """Submodule git directories kept under `gitdir/modules/`."""
        ...

    def worktree_gitdirs(self, gitdir: Path) -> tuple[Path, ...]:
        """Linked worktrees' git directories, `gitdir/worktrees/*/`."""
        ...

    def matching(self, pattern: Path) -> tuple[Path, ...]:
        """The entries of `pattern.parent` whose names match `pattern.name` (fnmatch)."""
        ...

    def git_config(self, path: Path) -> tuple[tuple[str, str], ...]:
        """The (key, value) pairs of a git configuration file (none if it is missing)."""
        ...

    def nested_dotgits(self, root: Path, limit: int) -> tuple[tuple[Path, ...], bool]:
        """`.git` entries strictly below `root` (not `root/.git`), and whether the search
        stopped at `limit` directories."""
        ...

    def enclosing_dotgit(self, path: Path) -> Path | None:
        """The `.git` of the repository containing `path`, looking at its strict ancestors."""
        ...


def _lkind(path: Path) -> PathKind:
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return PathKind.MISSING
    if stat.S_ISLNK(st.st_mode):
        return PathKind.SYMLINK
    if stat.S_ISDIR(st.st_mode):
        return PathKind.DIR
    if stat.S_ISREG(st.st_mode):
        return PathKind.FILE
    return PathKind.OTHER


def _read_small(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("utf-8", "replace")
    except OSError:
        return None


_CONFIG_LOCK: Final = threading.Lock()
_CONFIG_CACHE: dict[Path, tuple[tuple[int, int, int, int], tuple[tuple[str, str], ...]]] = {}
"""Parsed git configuration files by path, valid while the file's identity is unchanged."""


class LiveFacts:
    """`HostFacts` from the running system. Protected paths that are our own placeholder mount
    points (still in use by another sandbox) count as missing, so they get a placeholder again
    rather than a re-bind that would vanish when the other sandbox removes the mount point."""

    def kind(self, path: Path) -> PathKind:
        if _PLACEHOLDERS.holds(path):
            return PathKind.MISSING
        return _lkind(path)

    def symlink_target(self, path: Path) -> str:
        return os.readlink(path)

    def gitdir_of(self, pointer: Path) -> Path | None:
        text = _read_small(pointer)
        if text is None or not text.startswith("gitdir:"):
            return None
        target = text[len("gitdir:") :].strip()
        return Path(os.path.realpath(pointer.parent / target))

    def commondir_of(self, gitdir: Path) -> Path | None:
        text = _read_small(gitdir / "commondir")
        if text is None or not text.strip():
            return None
        return Path(os.path.realpath(gitdir / text.strip()))

    def module_gitdirs(self, gitdir: Path) -> tuple[Path, ...]:
        found: list[Path] = []
        pending = [gitdir / "modules"]
        visited = 0
        while pending and visited < 1000:
            here = pending.pop()
            visited += 1
            try:
                entries = list(os.scandir(here))
            except OSError:
                continue
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                child = Path(entry.path)
                if (child / "HEAD").is_file():
                    found.append(child)
                    pending.append(child / "modules")
                else:
                    pending.append(child)  # module names may contain slashes
        return tuple(sorted(found))

    def git_config(self, path: Path) -> tuple[tuple[str, str], ...]:
        try:
            st = os.stat(path)
        except OSError:
            return ()
        identity = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with _CONFIG_LOCK:
            cached = _CONFIG_CACHE.get(path)
        if cached is not None and cached[0] == identity:
            return cached[1]
        pairs = config_pairs(path, which("git")) or ()
        with _CONFIG_LOCK:
            if len(_CONFIG_CACHE) > 4096:
                _CONFIG_CACHE.clear()
            _CONFIG_CACHE[path] = (identity, pairs)
        return pairs

    def matching(self, pattern: Path) -> tuple[Path, ...]:
        try:
            names = os.listdir(pattern.parent)
        except OSError:
            return ()
        return tuple(sorted(pattern.parent / n for n in names if fnmatchcase(n, pattern.name)))

    def worktree_gitdirs(self, gitdir: Path) -> tuple[Path, ...]:
        try:
            entries = list(os.scandir(gitdir / "worktrees"))
        except OSError:
            return ()
        return tuple(sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)))

    def nested_dotgits(self, root: Path, limit: int) -> tuple[tuple[Path, ...], bool]:
        # The after-command check's walk, so the two never disagree on what is a repository.
        found, truncated = find_repositories(root, limit)
        return tuple(p for p in found if p.name == ".git" and p.parent != root), truncated

    def enclosing_dotgit(self, path: Path) -> Path | None:
        for parent in path.parents:
            candidate = parent / ".git"
            if _lkind(candidate) is not PathKind.MISSING:
                return candidate
        return None


# -- the plan (pure) ---------------------------------------------------------------------------


class Op(enum.Enum):
    """One filesystem step of the layout, in bwrap's vocabulary."""

    RO_BIND = "--ro-bind"
    BIND = "--bind"
    TMPFS = "--tmpfs"  # an empty writable tmpfs (/tmp, $HOME)
    EMPTY_RO = "empty-ro"  # an empty read-only tmpfs: a placeholder or a hidden directory
    DEV_NULL = "dev-null"  # /dev/null bound read-only: a hidden file or a file placeholder
    SEED = "seed"  # a file the daemon writes first if missing (`data`), bound read-only


_RANK: Final = {
    Op.TMPFS: 0,
    Op.RO_BIND: 1,
    Op.BIND: 2,
    Op.EMPTY_RO: 3,
    Op.DEV_NULL: 3,
    Op.SEED: 3,
}


@attrs.frozen
class Mount:
    op: Op
    dest: Path
    src: Path | None = None
    data: bytes = b""  # Op.SEED: the content written when the file is missing

    def argv(self) -> tuple[str, ...]:
        match self.op:
            case Op.RO_BIND | Op.BIND:
                return (self.op.value, str(self.src or self.dest), str(self.dest))
            case Op.SEED:
                return ("--ro-bind", str(self.dest), str(self.dest))
            case Op.TMPFS:
                return ("--tmpfs", str(self.dest))
            case Op.EMPTY_RO:
                return (
                    "--perms",
                    "0555",
                    "--tmpfs",
                    str(self.dest),
                    "--remount-ro",
                    str(self.dest),
                )
            case Op.DEV_NULL:
                return ("--ro-bind", "/dev/null", str(self.dest))


@attrs.frozen
class Drop:
    """Run as this unprivileged uid/gid (the daemon is root)."""

    uid: int = DEFAULT_UID
    gid: int = DEFAULT_GID


@attrs.frozen
class SandboxSpec:
    """Everything the plan depends on besides the host's filesystem."""

    policy: ReadOnly | WorkspaceWrite
    role: ResolvedRole
    cwd: Path
    home: Path
    hidden: tuple[Path, ...] = ()
    nested_git_limit: int = NESTED_GIT_LIMIT
    git_configs: tuple[Path, ...] = ()  # the user's global and system git configuration


@attrs.frozen
class Plan:
    """The layout of one sandbox and what it needs around it."""

    system: tuple[tuple[str, ...], ...]  # argv pieces for the read-only system view
    mounts: tuple[Mount, ...]
    writable: tuple[Path, ...]
    placeholders: tuple[Path, ...]  # mount points bwrap will create; removed afterwards
    network: bool
    cwd: Path
    notes: tuple[str, ...] = ()
    seeds: tuple[tuple[Path, bytes], ...] = ()  # files written before the launch, then removed
    gitdirs: tuple[Path, ...] = ()  # git directories the command may write (commit layout)
    relative_hooks: tuple[str, ...] = ()  # a relative core.hooksPath of the user's global config


_GLOB: Final = re.compile(r"[*?\[]")


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _depth(path: Path) -> int:
    return len(path.parts)


def _system_view(facts: HostFacts) -> tuple[tuple[str, ...], ...]:
    pieces: list[tuple[str, ...]] = [("--ro-bind", "/usr", "/usr")]
    for name in MERGED_USR:
        path = Path(name)
        match facts.kind(path):
            case PathKind.SYMLINK:
                pieces.append(("--symlink", facts.symlink_target(path), name))
            case PathKind.DIR:
                pieces.append(("--ro-bind", name, name))
            case _:
                pass
    for entry in ETC_ENTRIES:
        path = Path("/etc") / entry
        if facts.kind(path) is not PathKind.MISSING:
            pieces.append(("--ro-bind-try", str(path), str(path)))
    pieces.append(("--proc", "/proc"))
    pieces.append(("--dev", "/dev"))
    return tuple(pieces)


def _config_path(value: str, base: Path, home: Path) -> Path:
    """A path as git reads it from configuration: `~/` is the home directory, a relative path
    is relative to `base`."""
    if value.startswith("~/"):
        return Path(os.path.normpath(home / value[2:]))
    return Path(os.path.normpath(base / value))


def _config_targets(
    files: Iterable[Path], top: Path, home: Path, facts: HostFacts
) -> list[tuple[Path, Op]]:
    """Hooks directories (`core.hooksPath`, relative to the worktree's `top`) and included files
    (`include.path`, `includeIf.*.path`, relative to the including file, followed) named by
    `files`, each with the placeholder that holds it where it is missing."""
    found: list[tuple[Path, Op]] = []
    pending = [(f, 0) for f in files]
    seen: set[Path] = set()
    while pending:
        config, depth = pending.pop()
        if config in seen or depth > 8:
            continue
        seen.add(config)
        for key, value in facts.git_config(config):
            lowered = key.lower()
            if not value:
                continue
            if lowered == "core.hookspath":
                found.append((_config_path(value, top, home), Op.EMPTY_RO))
            elif lowered == "include.path" or (
                lowered.startswith("includeif.") and lowered.endswith(".path")
            ):
                included = _config_path(value, config.parent, home)
                found.append((included, Op.DEV_NULL))
                pending.append((included, depth + 1))
    return found


def plan(spec: SandboxSpec, facts: HostFacts) -> Plan:
    """Lay out the sandbox (see the module docstring). Raises `SandboxRefused` for what cannot
    be confined as asked."""
    policy = spec.policy
    role = spec.role
    writes = isinstance(policy, WorkspaceWrite)
    git = role.role.git if writes else GitAccess.READ_ONLY
    notes: list[str] = [f"role {role.role.name}: skipped {s}" for s in role.skipped]
    mounts: dict[Path, Mount] = {}

    def put(mount: Mount) -> None:
        old = mounts.get(mount.dest)
        if old is None or _RANK[mount.op] >= _RANK[old.op]:
            mounts[mount.dest] = mount

    for tmp in (*TMPFS_DIRS, str(spec.home)):
        put(Mount(Op.TMPFS, Path(tmp)))

    readable = [*role.read_only, spec.cwd]
    writable: list[Path] = []
    if writes:
        writable = [p for p in role.read_write if facts.kind(p) is PathKind.DIR]
        notes += [
            f"writable {p} does not exist: left out" for p in role.read_write if p not in writable
        ]
    else:
        readable += list(role.read_write)
    for root in writable:
        if root == Path("/") or any(_within(Path(d), root) for d in ("/usr", "/etc", "/proc")):
            raise SandboxRefused(
                f"Refusing to make {root} writable in the sandbox: it contains the system. "
                "Point the session at a project directory instead."
            )
    for path in readable:
        if facts.kind(path) in (PathKind.DIR, PathKind.FILE):
            put(Mount(Op.RO_BIND, path))
    for root in writable:
        put(Mount(Op.BIND, root))

    placeholders: list[Path] = []
    seeds: list[tuple[Path, bytes]] = []

    def writable_root_of(path: Path) -> Path | None:
        roots = [r for r in writable if _within(path, r)]
        return max(roots, key=_depth) if roots else None

    def protect(path: Path, *, placeholder: Op | None = Op.EMPTY_RO, seed: bytes = b"") -> None:
        """Make `path` read-only if a writable root contains it; where it is missing, mount
        `placeholder` there (or write `seed` first and bind that), so it cannot be created."""
        if writable_root_of(path) is None:
            return
        match facts.kind(path):
            case PathKind.DIR | PathKind.FILE:
                put(Mount(Op.RO_BIND, path))
            case PathKind.MISSING:
                if seed:
                    put(Mount(Op.SEED, path, data=seed))
                    seeds.append((path, seed))
                elif placeholder is not None:
                    put(Mount(placeholder, path))
                    placeholders.append(path)
            case PathKind.SYMLINK:
                raise SandboxRefused(
                    f"{path} is a symbolic link. The sandbox protects it by mounting over it, "
                    "and a mount follows the link, so it cannot be protected where it stands. "
                    "Replace the link with the directory it points to, or use a read-only "
                    "policy for this workspace."
                )
            case PathKind.OTHER:
                put(Mount(Op.DEV_NULL, path))

    gitdirs: list[Path] = []
    dotgits: list[Path] = []
    for root in writable:
        dotgits.append(root / ".git")
        nested, truncated = facts.nested_dotgits(root, spec.nested_git_limit)
        dotgits.extend(nested)
        if truncated:
            notes.append(
                f"stopped looking for nested repositories in {root} after "
                f"{spec.nested_git_limit} directories: deeper ones are not protected"
            )
    enclosing = facts.enclosing_dotgit(spec.cwd)
    if enclosing is not None:
        dotgits.append(enclosing)
    if facts.kind(spec.cwd / ".git") is not PathKind.MISSING:
        dotgits.append(spec.cwd / ".git")
    reading: list[tuple[Path, tuple[Path, ...]]] = []  # a worktree's top, its git directories
    for dotgit in dict.fromkeys(dotgits):
        kind = facts.kind(dotgit)
        if kind is PathKind.DIR:
            gitdirs.append(dotgit)
            reading.append((dotgit.parent, (dotgit,)))
        elif kind is PathKind.FILE:
            protect(dotgit)  # the pointer itself
            target = facts.gitdir_of(dotgit)
            if target is not None:
                gitdirs.append(target)
                common = facts.commondir_of(target)
                if common is not None:
                    gitdirs.append(common)
                reading.append((dotgit.parent, (target, common or target)))
        elif kind is PathKind.SYMLINK:
            protect(dotgit)  # refuses inside a writable root
        elif kind is PathKind.MISSING and writable_root_of(dotgit) == dotgit.parent:
            protect(dotgit)  # a missing .git at the top of a writable root: cannot be created
    pending = list(gitdirs)
    while pending:  # submodule and linked-worktree git directories, at any depth
        here = pending.pop()
        found = (*facts.module_gitdirs(here), *facts.worktree_gitdirs(here))
        fresh = [g for g in found if g not in gitdirs]
        gitdirs.extend(fresh)
        pending.extend(fresh)

    committing: list[Path] = []
    for gitdir in dict.fromkeys(gitdirs):
        if facts.kind(gitdir) is not PathKind.DIR:
            continue
        if git is not GitAccess.COMMIT:
            put(Mount(Op.RO_BIND, gitdir))
            continue
        # Bound onto itself even inside a writable root: a mount point cannot be renamed or
        # removed, so the command cannot swap in a .git of its own making. Its top level stays
        # writable (git replaces index, HEAD and packed-refs by renaming a lock file beside
        # them); every name there that git reads configuration or programs from is read-only
        # or held by a placeholder, and `anvild.sandbox.gitguard` quarantines whatever else
        # the command creates there.
        put(Mount(Op.BIND, gitdir))
        committing.append(gitdir)
        if writable_root_of(gitdir) is None:
            writable.append(gitdir)
        linked = facts.kind(gitdir / "commondir") is PathKind.FILE
        for name in GIT_READ_ONLY_FILES:
            protect(gitdir / name, placeholder=Op.DEV_NULL)
        protect(gitdir / "commondir", seed=COMMONDIR_SEED)
        protect(gitdir / "gitdir", placeholder=None)
        if not linked:  # a linked worktree's hooks, info, ... are its common directory's
            for name in GIT_READ_ONLY_DIRS:
                protect(gitdir / name)
        if facts.kind(gitdir / "objects") is PathKind.DIR:
            protect(gitdir / "objects" / "info")  # alternates: another object store

    # What the configuration git reads names as hooks or more configuration (husky's
    # `core.hooksPath = .husky`, an `include.path` into the project): read-only or held when it
    # lies in a writable root, or the command would choose what the user's git runs.
    for top, readers in reading:
        files = [g / name for g in dict.fromkeys(readers) for name in ("config", "config.worktree")]
        for path, op in _config_targets((*files, *spec.git_configs), top, spec.home, facts):
            protect(path, placeholder=op)

    for root in writable:
        for name in PROTECTED_NAMES:
            protect(root / name)
        for name in RC_FILES:
            protect(root / name, placeholder=None)
    for dotgit in dotgits:
        if writable_root_of(dotgit.parent) is not None and dotgit.parent not in writable:
            protect(dotgit.parent / ".anvil", placeholder=None)

    bound = [m.dest for m in mounts.values() if m.op in (Op.RO_BIND, Op.BIND)]
    role_hidden = [
        match
        for entry in role.hidden
        for match in (facts.matching(entry) if _GLOB.search(entry.name) else (entry,))
        if not any(fnmatchcase(str(match), str(u)) for u in role.unhidden)
    ]
    all_hidden = dict.fromkeys((*spec.hidden, *role_hidden))

    def covered(link: Path) -> bool:
        """Whether a hidden symlink's target is out of view anyway: hidden itself (a plain file
        or directory, so masked), or outside everything bound. Then changing the link (it is
        writable) reaches nothing either, since every other hidden path is masked too."""
        target = Path(os.path.normpath(link.parent / facts.symlink_target(link)))
        if target in all_hidden:
            return facts.kind(target) in (PathKind.FILE, PathKind.DIR, PathKind.MISSING)
        return not any(_within(target, b) for b in bound)

    for hidden in all_hidden:
        if not any(_within(hidden, b) for b in bound):
            continue
        match facts.kind(hidden):
            case PathKind.DIR:
                put(Mount(Op.EMPTY_RO, hidden))
            case PathKind.FILE | PathKind.OTHER:
                put(Mount(Op.DEV_NULL, hidden))
            case PathKind.SYMLINK:
                if writable_root_of(hidden) is not None and not covered(hidden):
                    raise SandboxRefused(
                        f"{hidden} must be hidden from the sandbox but is a symbolic link inside "
                        "a writable directory, where a mount cannot cover it. Remove the link or "
                        "use a read-only policy."
                    )
                # In a read-only bind the link cannot be changed; what it points to is either
                # outside the view or hidden in its own right.
            case PathKind.MISSING:
                pass

    ordered = sorted(mounts.values(), key=lambda m: (_depth(m.dest), _RANK[m.op], str(m.dest)))
    return Plan(
        system=_system_view(facts),
        mounts=tuple(ordered),
        writable=tuple(dict.fromkeys(writable)),
        placeholders=tuple(dict.fromkeys(placeholders)),
        network=policy.network,
        cwd=spec.cwd,
        notes=tuple(notes),
        seeds=tuple(dict.fromkeys(seeds)),
        gitdirs=tuple(committing),
        relative_hooks=tuple(
            value
            for config in spec.git_configs
            for key, value in facts.git_config(config)
            if key.lower() == "core.hookspath" and value and not value.startswith(("/", "~"))
        ),
    )


SUPERVISOR: Final = Path(__file__).with_name("supervisor.py")


def supervisor_argv(lifeline_fd: int, python: str | None = None) -> tuple[str, ...]:
    """The supervisor (`anvild.sandbox.supervisor`) in front of setpriv: it kills the launch's
    whole tree when the daemon dies (end-of-file on `lifeline_fd`), on SIGTERM, and when bwrap
    ends. Run by the daemon's own interpreter, isolated and without site (it is stdlib only)."""
    interpreter = python if python is not None else sys.executable
    if not interpreter:
        raise SandboxUnavailable(
            "The sandbox supervisor needs the daemon's Python interpreter, and "
            "sys.executable is empty: run the daemon with a normal Python."
        )
    return (interpreter, "-I", "-S", str(SUPERVISOR), str(lifeline_fd), "--")


def prefix_argv(drop: Drop | None, setpriv: str) -> tuple[str, ...]:
    """setpriv before bwrap: always `--pdeathsig=KILL` (bwrap dies with the supervisor, its
    parent, if that is killed outright); and when the daemon is root, the privilege drop."""
    if drop is None:
        return (setpriv, "--pdeathsig=KILL", "--")
    return (
        setpriv,
        "--pdeathsig=KILL",
        f"--reuid={drop.uid}",
        f"--regid={drop.gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    )


def bwrap_argv(
    the_plan: Plan,
    command: Sequence[str],
    *,
    bwrap: str,
    seccomp_fd: int,
    status_fd: int,
    drop: Drop | None = None,
    setpriv: str = "setpriv",
) -> tuple[str, ...]:
    """The full command line: [setpriv ... --] bwrap OPTIONS -- COMMAND."""
    argv: list[str] = [*prefix_argv(drop, setpriv), bwrap]
    argv += ["--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc"]
    argv += ["--unshare-uts", "--unshare-cgroup-try"]
    if not the_plan.network:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--new-session", "--hostname", "anvil-sandbox"]
    for piece in the_plan.system:
        argv += piece
    for mount in the_plan.mounts:
        argv += mount.argv()
    # The root itself (a tmpfs bwrap built, holding the mount points) read-only: nothing can be
    # created beside the binds, in /etc or at /.
    argv += ["--remount-ro", "/"]
    argv += ["--seccomp", str(seccomp_fd), "--json-status-fd", str(status_fd)]
    argv += ["--chdir", str(the_plan.cwd), "--", *command]
    return tuple(argv)


def git_safe_directory_env() -> dict[str, str]:
    """git refuses a repository owned by another uid ("dubious ownership"); in the sandbox the
    workspace belongs to the daemon's user. Command-line scope config (GIT_CONFIG_COUNT) is the
    scope git honours for safe.directory. `*` is safe here: git's concern is running another
    user's repository config outside any sandbox, and inside one it runs confined anyway."""
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
    }


def sandbox_env(
    home: Path,
    *,
    passthrough: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The command's environment: the allowlist, the user's trusted passthrough, then ours."""
    env = child_env(
        environ,
        passthrough=passthrough,
        overrides={"HOME": str(home), "TMPDIR": "/tmp", **git_safe_directory_env()},
    )
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


# -- who may write what ------------------------------------------------------------------------


def uid_may(path: Path, uid: int, gid: int, *, write: bool) -> bool:
    """Whether uid/gid (no supplementary groups) may reach `path` and read it (or write it).
    Mode bits only: ACLs are not consulted, so this can refuse something an ACL allows (never
    the reverse matters: the kernel still decides inside the sandbox)."""

    def allowed(st: os.stat_result, bit_user: int, bit_group: int, bit_other: int) -> bool:
        if st.st_uid == uid:
            return bool(st.st_mode & bit_user)
        if st.st_gid == gid:
            return bool(st.st_mode & bit_group)
        return bool(st.st_mode & bit_other)

    try:
        for parent in reversed(path.parents):
            if not allowed(os.stat(parent), stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
                return False
        st = os.stat(path)
    except OSError:
        return False
    if not allowed(st, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
        return False
    if stat.S_ISDIR(st.st_mode) and not allowed(st, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
        return False
    return not write or allowed(st, stat.S_IWUSR, stat.S_IWGRP, stat.S_IWOTH)


def check_access(the_plan: Plan, drop: Drop | None) -> None:
    """Refuse, with the reason, a plan the dropped uid cannot carry out."""
    if drop is None:
        return
    who = f"uid {drop.uid} (gid {drop.gid})"
    if not uid_may(the_plan.cwd, drop.uid, drop.gid, write=False):
        raise SandboxRefused(
            f"The sandbox runs commands as {who}, which cannot read {the_plan.cwd} (or one of "
            f"its parent directories). Make it readable for that uid (e.g. `chmod o+rx` on the "
            "directories on the way), or configure a sandbox uid that can."
        )
    for root in the_plan.writable:
        if not uid_may(root, drop.uid, drop.gid, write=True):
            try:
                st = os.stat(root)
                owner = f" (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
            except OSError:
                owner = ""
            raise SandboxRefused(
                f"Workspace-write refused: the sandbox runs commands as {who}, which cannot "
                f"write {root}{owner}. Give that uid write access (e.g. `chown -R "
                f"{drop.uid}:{drop.gid} {root}`, or an ACL), configure a sandbox uid that owns "
                "the workspace, or use a read-only policy."
            )


# -- placeholders ------------------------------------------------------------------------------


class _Placeholders:
    """Mount points this process asked bwrap to create, and seed files it wrote, counted across
    concurrent sandboxes. Removing one while another sandbox still has it mounted would detach
    that mount (the kernel lazily unmounts an unlinked mount point in every namespace), so only
    the last user removes it, and only if it is still as we left it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count: dict[Path, int] = {}
        self._seeds: dict[Path, bytes | None] = {}  # None: found there, never ours to remove

    def holds(self, path: Path) -> bool:
        with self._lock:
            return self._count.get(path, 0) > 0

    def acquire(self, paths: Iterable[Path], seeds: Iterable[tuple[Path, bytes]] = ()) -> None:
        """Count `paths` and `seeds` as in use; write each seed that is missing. Raises
        `SandboxRefused` (having released what it took) when a seed cannot be written."""
        taken: list[Path] = []
        with self._lock:
            for path in paths:
                self._count[path] = self._count.get(path, 0) + 1
                taken.append(path)
            for path, data in seeds:
                if self._count.get(path, 0) == 0:
                    try:
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    except FileExistsError:
                        # Made since the plan looked: bound as it is, never removed.
                        self._seeds[path] = None
                    except OSError as exc:
                        self._release_locked(taken)
                        raise SandboxRefused(
                            f"Cannot write {path} before the command runs ({exc.strerror}): "
                            "the sandbox places it there so that the command cannot create its "
                            "own. Check that the daemon may write that git directory."
                        ) from exc
                    else:
                        with os.fdopen(fd, "wb") as f:
                            f.write(data)
                        self._seeds[path] = data
                self._count[path] = self._count.get(path, 0) + 1
                taken.append(path)

    def release(self, paths: Iterable[Path]) -> None:
        with self._lock:
            self._release_locked(paths)

    def _release_locked(self, paths: Iterable[Path]) -> None:
        for path in paths:
            left = self._count.get(path, 0) - 1
            if left > 0:
                self._count[path] = left
                continue
            self._count.pop(path, None)
            if path in self._seeds:
                seed = self._seeds.pop(path)
                if seed is not None:
                    litter.remove_if_left(path, seed)
            else:
                litter.remove_if_left(path, None)


_PLACEHOLDERS: Final = _Placeholders()


# -- launching ---------------------------------------------------------------------------------

_STATUS_LIMIT: Final = 1 << 16

_FAILURE_HINTS: Final = (
    (
        "namespace",
        "user namespaces are not available to the sandbox uid: enable them (`sysctl -w "
        "kernel.unprivileged_userns_clone=1`, `user.max_user_namespaces` above 0, or on Ubuntu "
        "`kernel.apparmor_restrict_unprivileged_userns=0`)",
    ),
    ("seccomp", "the kernel refused the seccomp filter: it needs CONFIG_SECCOMP_FILTER"),
    (
        "Can't find source path",
        "a path in the sandbox role does not exist or the sandbox uid cannot reach it: check the "
        "role file, or run `anvilctl sandbox --role ROLE -- true` to see the layout",
    ),
    ("Permission denied", "the sandbox uid lacks permission on a path it must mount"),
)


def parse_status(data: bytes) -> int | None:
    """The `exit-code` of a bwrap `--json-status-fd` stream, or None if it has none (the
    sandbox never ran the command). Unknown objects and members are ignored, as bwrap(1) asks."""
    for line in data.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("exit-code"), int):
            return int(obj["exit-code"])
    return None


def failure_message(stderr: str) -> str:
    """Why the sandbox could not start the command, from bwrap's (or setpriv's) stderr."""
    said = " / ".join(line.strip() for line in stderr.strip().splitlines()[-3:]) or "no message"
    hint = next(
        (h for needle, h in _FAILURE_HINTS if needle.lower() in said.lower()),
        "run `anvilctl sandbox -- true` to see the sandbox's own error",
    )
    return (
        f"The command was not run: the sandbox could not be set up ({said}). Likely cause: "
        f"{hint}. The command is never re-run without the sandbox."
    )


class Launch:
    """One prepared sandboxed run: the command line, its environment, the descriptors the
    child needs, and the status stream read afterwards. Close it once the process is reaped."""

    def __init__(
        self,
        argv: tuple[str, ...],
        env: dict[str, str],
        plan: Plan,
        *,
        seccomp_fd: int,
        status_read: int,
        status_write: int,
        lifeline_read: int,
        lifeline_write: int,
        settings: SandboxSettings | None = None,
    ) -> None:
        self.argv = argv
        self.env = env
        self.plan = plan
        self._guard: Guard | None = None
        self.cwd = Path("/")
        self.pass_fds = (seccomp_fd, status_write, lifeline_read)
        self._seccomp_fd: int | None = seccomp_fd
        self._status_read: int | None = status_read
        self._status_write: int | None = status_write
        # The supervisor's lifeline: only its write end stays here (close-on-exec, never
        # passed), so the supervisor reads end-of-file exactly when this process is gone or
        # the launch is closed.
        self._lifeline_read: int | None = lifeline_read
        self._lifeline_write: int | None = lifeline_write
        settings = settings or SandboxSettings()
        self._placeholders: tuple[Path, ...] = ()
        self._listed: Path | None = None
        try:
            # Listed under the data dir before anything is created in the workspace, so that
            # the next start removes what a crash left (`anvild.sandbox.litter`).
            self._listed = litter.record(settings.litter_directory(), plan.placeholders, plan.seeds)
            self._placeholders = (*plan.placeholders, *(path for path, _ in plan.seeds))
            _PLACEHOLDERS.acquire(plan.placeholders, plan.seeds)
        except BaseException:
            self._placeholders = ()
            self.close()
            raise
        if plan.writable:
            self._guard = Guard.prepare(
                plan.writable,
                plan.gitdirs,
                [(m.dest, m.op is Op.BIND) for m in plan.mounts if m.op is not Op.TMPFS],
                self._placeholders,
                limit=settings.nested_git_limit,
                quarantine=settings.quarantine,
                relative_hooks=plan.relative_hooks,
            )

    def _close_writers(self) -> None:
        for name in ("_seccomp_fd", "_status_write", "_lifeline_read"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)

    def read_status(self) -> bytes:
        """The status stream to its end. Call after the process has exited: every writer is
        gone then (bwrap closes its copy in the sandbox, and the sandbox died with it)."""
        self._close_writers()
        fd = self._status_read
        if fd is None:
            return b""
        os.set_blocking(fd, False)
        chunks: list[bytes] = []
        size = 0
        while size < _STATUS_LIMIT:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                break  # a writer survived: take what is there
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)

    def verdict(self, returncode: int, stderr: str) -> str | None:
        """None if the sandbox ran the command (whatever its exit code, or if we killed it);
        otherwise the message refusing it as a sandbox failure."""
        if parse_status(self.read_status()) is not None or returncode < 0:
            return None
        return failure_message(stderr)

    def inspect(self) -> str | None:
        """After the process ended, before `close`: quarantine what the command left that would
        make git run a program or read configuration outside the sandbox
        (`anvild.sandbox.gitguard`). The report for the command's result, or None."""
        guard, self._guard = self._guard, None
        if guard is None:
            return None
        try:
            return guard.inspect().message()
        except Exception as exc:  # the check must not hide the command's result
            log.error("sandbox.git_check_failed", error=repr(exc), cwd=str(self.plan.cwd))
            return (
                f"Sandbox: the check for git configuration planted by the command failed "
                f"({exc!r}); do not run git in {self.plan.cwd} outside the sandbox until it "
                "has been looked at."
            )

    def close(self) -> None:
        """After the process is reaped (or never started). Closing the lifeline tells a
        supervisor still running, if any, to kill what is left. Runs `inspect` first if the
        caller did not (its report then goes to the log only)."""
        self.inspect()
        self._close_writers()
        for name in ("_status_read", "_lifeline_write"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)
        if self._placeholders:
            placeholders, self._placeholders = self._placeholders, ()
            _PLACEHOLDERS.release(placeholders)
        listed, self._listed = self._listed, None
        litter.forget(listed)

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@attrs.frozen
class SandboxSettings:
    """Machine-level settings: who the command runs as when the daemon is root, which binaries,
    which environment names the user trusts, what is hidden."""

    uid: int = DEFAULT_UID
    gid: int = DEFAULT_GID
    bwrap: str = "bwrap"
    setpriv: str = "setpriv"
    passthrough: tuple[str, ...] = ()
    nested_git_limit: int = NESTED_GIT_LIMIT
    quarantine: Path | None = None  # where `gitguard` moves what it finds; None: the data dir
    litter_dir: Path | None = None  # where launches list what they create; None: the data dir

    def litter_directory(self) -> Path:
        """Where launches list the seeds and mount points they create (`anvild.sandbox.litter`)."""
        return self.litter_dir if self.litter_dir is not None else litter.default_directory()

    def drop(self) -> Drop | None:
        """The drop to apply: only when the daemon runs as root."""
        return Drop(self.uid, self.gid) if os.geteuid() == 0 else None


def which(program: str) -> str | None:
    """`program` resolved on the daemon's PATH (an absolute path is checked as is)."""
    return shutil.which(program, path=os.environ.get("PATH", os.defpath))


def describe_plan(the_plan: Plan) -> str:
    """The layout as a person reads it (for `anvilctl sandbox`)."""
    lines = [f"network: {'on' if the_plan.network else 'off'}", f"cwd: {the_plan.cwd}"]
    for mount in the_plan.mounts:
        what = {
            Op.RO_BIND: "read-only",
            Op.BIND: "writable",
            Op.TMPFS: "empty tmpfs",
            Op.EMPTY_RO: "masked (empty, read-only)",
            Op.DEV_NULL: "masked (/dev/null)",
            Op.SEED: "read-only (written first)",
        }[mount.op]
        lines.append(f"  {what:26} {mount.dest}")
    lines += [f"note: {n}" for n in the_plan.notes]
    return "\n".join(lines)


__all__ = [
    "DEFAULT_GID",
    "DEFAULT_UID",
    "ETC_ENTRIES",
    "Drop",
    "HostFacts",
    "Launch",
    "LiveFacts",
    "Mount",
    "Op",
    "PathKind",
    "Plan",
    "SandboxSettings",
    "SandboxSpec",
    "bwrap_argv",
    "check_access",
    "default_hidden",
    "describe_plan",
    "failure_message",
    "parse_status",
    "plan",
    "prefix_argv",
    "sandbox_env",
    "supervisor_argv",
    "uid_may",
]
