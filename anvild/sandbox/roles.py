"""Sandbox roles: what a role's commands may read and write, as `<role>.yaml` files (DESIGN 7).

    network: false            # the role's default; the session's policy has the last word
    git: commit               # or read-only
    filesystem: {read_only: [...], read_write: ["{CWD}"], hidden: ["{CWD}/.env*", "!..."]}

Paths expand `{CWD}`, `{HOME}`, `{TMPDIR}` and `{NAME}` (any daemon variable; unset -> the entry
is skipped, `ResolvedRole.skipped`); missing paths are left out; `hidden` may glob its last part.
Roles come from the user config dir, then the shipped files; never from a project (a repository
cannot widen its own sandbox), and no key can ask for `FullAccess`. `Role.default_policy` is
`WorkspaceWrite` with writable paths, else `ReadOnly`; a command gets the intersection of policy
and role.
"""

from __future__ import annotations

import enum
import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import platformdirs
import yaml

from anvild import data
from anvild.sandbox import ReadOnly, RoleConfigError, WorkspaceWrite, anvillm

BUILTIN_DIR: Final = data.path(data.SANDBOX_ROLES)
"""The role files shipped with anvild (package data: `anvild/data/sandbox-roles/`)."""

BUILTIN_ROLES: Final = ("developer", "reviewer", "planner", "tester", "conductor")
ROLE_NAME_RE: Final = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
"""What a sandbox role may be called (also its file name, without `.yaml`)."""
_TEMPLATE_RE: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TOP_KEYS: Final = frozenset({"description", "network", "git", "filesystem"})
_FS_KEYS: Final = frozenset({"read_only", "read_write", "hidden"})
_AUTHORITY_KEYS: Final = frozenset(
    {"full_access", "full-access", "fullaccess", "policy", "sandbox", "unsandboxed"}
)


def user_roles_dir() -> Path:
    """Where the user's role files (which override the shipped ones) live."""
    return platformdirs.user_config_path("anvil") / "sandbox-roles"


class GitAccess(enum.Enum):
    """What a role may do to the repositories in its workspace."""

    COMMIT = "commit"
    """`.git` writable (objects, refs, index, HEAD, rebase and merge state), but never what git
    reads configuration or programs from (docs/sandbox-escapes.md, "Git planting")."""
    READ_ONLY = "read-only"
    """All of `.git` read-only: no commit, no `git add`."""


def _strings(value: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class Role:
    """A role file as written: path templates not yet expanded."""

    name: str
    description: str = ""
    network: bool = False
    git: GitAccess = GitAccess.READ_ONLY
    read_only: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    read_write: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    hidden: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    source: Path | None = None

    def default_policy(self) -> ReadOnly | WorkspaceWrite:
        """The policy a session of this role starts with."""
        if self.read_write:
            return WorkspaceWrite(network=self.network)
        return ReadOnly(network=self.network)

    def resolve(
        self, *, cwd: Path, home: Path, environ: Mapping[str, str] | None = None
    ) -> ResolvedRole:
        """Expand the templates. Pure given `environ` (default: the daemon's environment)."""
        env = os.environ if environ is None else environ
        values = {
            "CWD": str(cwd),
            "HOME": str(home),
            "TMPDIR": env.get("TMPDIR") or "/tmp",
        }
        skipped: list[str] = []

        def expand(entries: tuple[str, ...]) -> tuple[Path, ...]:
            out: list[Path] = []
            for entry in entries:
                missing = [
                    m.group(1)
                    for m in _TEMPLATE_RE.finditer(entry)
                    if m.group(1) not in values and not env.get(m.group(1))
                ]
                if missing:
                    skipped.append(f"{entry} (${missing[0]} is not set)")
                    continue
                text = _TEMPLATE_RE.sub(lambda m: values.get(m.group(1)) or env[m.group(1)], entry)
                if not text.startswith("/"):
                    raise RoleConfigError(
                        f"{self._where()}: {entry!r} expands to {text!r}, which is not an "
                        "absolute path; start it with /, {CWD}, {HOME} or {TMPDIR}."
                    )
                out.append(Path(os.path.normpath(text)))
            return tuple(out)

        return ResolvedRole(
            role=self,
            read_only=expand(self.read_only),
            read_write=expand(self.read_write),
            hidden=expand(tuple(h for h in self.hidden if not h.startswith("!"))),
            skipped=tuple(skipped),
            unhidden=expand(tuple(h[1:] for h in self.hidden if h.startswith("!"))),
        )

    def _where(self) -> str:
        return str(self.source) if self.source else f"sandbox role {self.name!r}"


@attrs.frozen
class ResolvedRole:
    """A role with its paths expanded for one workspace."""

    role: Role
    read_only: tuple[Path, ...]
    read_write: tuple[Path, ...]
    hidden: tuple[Path, ...]  # may hold glob patterns in the last part
    skipped: tuple[str, ...] = ()
    unhidden: tuple[Path, ...] = ()  # patterns whose matches are taken back out of `hidden`


ENV_TEMPLATES: Final = ("example", "sample", "template", "dist")
"""`.env.<these>` are committed templates, not secrets, and stay visible: a masked file that git
tracks reads as empty in the sandbox, and `git commit -a` there would record it empty."""

DEFAULT_ROLE: Final = Role(
    name="default",
    description="The workspace writable, .git writable except what sets programs or config.",
    network=False,
    git=GitAccess.COMMIT,
    read_write=("{CWD}",),
    hidden=("{CWD}/.env*", *(f"!{{CWD}}/.env.{t}" for t in ENV_TEMPLATES)),
)
"""What a bare policy means when no role was chosen (`anvilctl sandbox --policy`, a session
without a role): under `ReadOnly` all of it is read-only anyway."""


def _path_list(where: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RoleConfigError(
            f"{where}: filesystem.{key} must be a list of path strings, got {value!r}."
        )
    return tuple(value)


def parse_role(name: str, text: str, *, source: Path | None = None) -> Role:
    """Parse one role file, in anvil's schema or AnviLLM's (`anvild.sandbox.anvillm`). Raises
    `RoleConfigError` naming the file, the key and what was expected."""
    where = str(source) if source else f"sandbox role {name!r}"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RoleConfigError(f"{where}: not valid YAML: {exc}") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise RoleConfigError(f"{where}: expected a mapping of keys at the top level.")
    authority = _AUTHORITY_KEYS & set(doc)
    if authority:
        raise RoleConfigError(
            f"{where}: {sorted(authority)[0]!r} is not a role setting. A role cannot turn the "
            "sandbox off: only the user grants full access (user config or command line)."
        )
    doc = anvillm.to_native(doc, where)
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise RoleConfigError(
            f"{where}: unknown key {sorted(unknown)[0]!r}; expected {sorted(_TOP_KEYS)}."
        )
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise RoleConfigError(f"{where}: description must be a string.")
    network = doc.get("network", False)
    if not isinstance(network, bool):
        raise RoleConfigError(f"{where}: network must be true or false, got {network!r}.")
    git_text = doc.get("git", GitAccess.READ_ONLY.value)
    try:
        git = GitAccess(git_text)
    except ValueError:
        raise RoleConfigError(
            f"{where}: git must be 'commit' or 'read-only', got {git_text!r}."
        ) from None
    fs = doc.get("filesystem") or {}
    if not isinstance(fs, dict):
        raise RoleConfigError(f"{where}: filesystem must be a mapping.")
    unknown = set(fs) - _FS_KEYS
    if unknown:
        raise RoleConfigError(
            f"{where}: unknown key filesystem.{sorted(unknown)[0]}; expected {sorted(_FS_KEYS)} "
            "(or AnviLLM's ro and rw)."
        )
    return Role(
        name=name,
        description=description,
        network=network,
        git=git,
        read_only=_path_list(where, "read_only", fs.get("read_only")),
        read_write=_path_list(where, "read_write", fs.get("read_write")),
        hidden=_path_list(where, "hidden", fs.get("hidden")),
        source=source,
    )


@functools.lru_cache(maxsize=64)
def _parsed(name: str, text: str, source: Path) -> Role:
    """`parse_role`, once per file content: every `new` loads its role's file (twice), and the
    YAML parse was most of that. The file is still read each time, so an edit counts at the
    next session; a file that fails raises each time (exceptions are not cached)."""
    return parse_role(name, text, source=source)


def load_role(name: str, *, user_dir: Path | None = None, builtin_dir: Path | None = None) -> Role:
    """The role `name`: the user's file if there is one, else the shipped one."""
    if not ROLE_NAME_RE.match(name):
        raise RoleConfigError(
            f"{name!r} is not a role name: use lowercase letters, digits, '-' and '_'."
        )
    searched: list[Path] = []
    for directory in (
        user_dir if user_dir is not None else user_roles_dir(),
        builtin_dir if builtin_dir is not None else BUILTIN_DIR,
    ):
        path = directory / f"{name}.yaml"
        searched.append(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RoleConfigError(f"{path}: cannot be read: {exc}") from exc
        return _parsed(name, text, path)
    raise RoleConfigError(
        f"There is no sandbox role {name!r} (looked for {', '.join(map(str, searched))}). "
        f"The shipped roles are {', '.join(BUILTIN_ROLES)}; add your own as a YAML file in "
        f"{searched[0].parent}."
    )


__all__ = [
    "BUILTIN_ROLES",
    "DEFAULT_ROLE",
    "ROLE_NAME_RE",
    "GitAccess",
    "ResolvedRole",
    "Role",
    "load_role",
    "parse_role",
    "user_roles_dir",
]
