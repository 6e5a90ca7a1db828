"""Roles: what a session's role sets (DESIGN section 7), chosen before the first prompt.

- its text, a prompt layer: shipped `anvild/data/roles/<name>.txt`, overridden by the user config
  dir's `roles/<name>.txt`; a project can never supply one;
- its sandbox role file `<name>.yaml` (`anvild.sandbox.roles.load_role`);
- its permission ceiling (`RoleCeiling`): reviewer, planner and conductor write no files and run
  no mutating git; the tester writes only under test directories. The policy and the file tools'
  boundary (`file_access`) both enforce it, whatever rules, mode or model say.

Only the built-in `ROLES` exist (a user cannot invent a role without a ceiling); every role ships
its sandbox file (a test checks). `SANDBOX_OF` covers a missing conductor file (the planner's).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final

import platformdirs

from anvild import data
from anvild.agent.permissions.policy import CEILINGS, RoleCeiling
from anvild.sandbox import RoleConfigError
from anvild.sandbox.files import FileAccess
from anvild.sandbox.roles import BUILTIN_DIR, Role, load_role, user_roles_dir
from anvild.session.errors import InvalidSessionRequest

BUILTIN_TEXT_DIR: Final = data.path(data.ROLES)
"""The role texts shipped with anvild (package data: `anvild/data/roles/`)."""

ROLES: Final = ("developer", "reviewer", "planner", "tester", "conductor")
DEFAULT_ROLE: Final = "developer"

CONDUCTOR: Final = RoleCeiling("conductor", file_writes=False, mutating_git=False)
SANDBOX_OF: Final[Mapping[str, str]] = {"conductor": "planner"}
"""Roles that borrow another role's sandbox file when they have none of their own."""


def user_text_dir() -> Path:
    return platformdirs.user_config_path("anvil") / "roles"


def check_name(name: str) -> str:
    if name not in ROLES:
        raise InvalidSessionRequest(
            f"unknown role {name!r}: the roles are {', '.join(ROLES)} (override their text in "
            f"{user_text_dir()}/<role>.txt)"
        )
    return name


def role_text(name: str, *, user_dir: Path | None = None, builtin_dir: Path | None = None) -> str:
    """The role's prompt text: the user's override if there is one, else the shipped file."""
    check_name(name)
    for directory in (
        user_text_dir() if user_dir is None else user_dir,
        BUILTIN_TEXT_DIR if builtin_dir is None else builtin_dir,
    ):
        path = os.path.join(directory, f"{name}.txt")  # a string: read at every `new`, twice
        try:
            with open(path, encoding="utf-8") as file:
                return file.read().strip()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidSessionRequest(f"role text {path} cannot be read: {exc}") from exc
    raise InvalidSessionRequest(
        f"role {name!r} has no text file: anvild's built-in role texts are missing "
        f"({BUILTIN_TEXT_DIR}); reinstall anvild or add {user_text_dir()}/{name}.txt"
    )


def ceiling(name: str) -> RoleCeiling:
    """The role's permission ceiling."""
    check_name(name)
    if name == "conductor":
        return CONDUCTOR
    return CEILINGS[name]


def daemon_dirs(extra: Iterable[Path | None] = ()) -> tuple[Path, ...]:
    """anvild's own configuration, data and state directories: the platformdirs defaults and
    the ones this daemon was given (`extra`: its config, role and data directories). What they
    hold grants authority (role files, config, trust grants, the TCP token), so no session's
    file tools write there, whatever the workspace."""
    defaults = (
        platformdirs.user_config_path("anvil"),
        platformdirs.user_data_path("anvil"),
        platformdirs.user_state_path("anvil"),
    )
    return tuple(dict.fromkeys(p.resolve() for p in (*defaults, *extra) if p is not None))


def _outside(protected: tuple[Path, ...]) -> Callable[[Path], str | None]:
    def check(canonical: Path) -> str | None:
        for directory in protected:
            if canonical.is_relative_to(directory):
                return (
                    f"{canonical} is in anvild's own directory {directory} (configuration, "
                    "roles, data): a session cannot write there, or it could widen its own "
                    "sandbox; edit it yourself, or write agent/roles/ and agent/sandbox-roles/ "
                    "over 9P"
                )
        return None

    return check


def _read_only(
    roots: tuple[Path, ...], then: Callable[[Path], str | None]
) -> Callable[[Path], str | None]:
    def check(canonical: Path) -> str | None:
        for root in roots:
            if canonical.is_relative_to(root):
                return f"{canonical} is in the skill folder {root}, which is read-only for you."
        return then(canonical)

    return check


def file_access(
    name: str,
    cwd: Path,
    protected: Iterable[Path | None] = (),
    read_only: Iterable[Path] = (),
) -> FileAccess:
    """The native file tools' boundary for a session of role `name` in `cwd`: the workspace is
    readable; what is writable follows the role's ceiling, so the boundary holds even where the
    policy is bypassed: nothing for reviewer, planner and conductor, only test directories for
    the tester; never anvild's own directories (`daemon_dirs` with `protected`, the ones this
    daemon was given: a workspace that is $HOME, or holds them, must not reach them).
    `read_only` roots (skill folders outside the workspace) are readable and never writable,
    even for a path a person grants."""
    fixed = tuple(p.resolve() for p in read_only)
    outside = _read_only(fixed, _outside(daemon_dirs(protected)))  # resolved once per session
    readable = [cwd, *fixed]
    limit = ceiling(name)
    if not limit.file_writes:
        return FileAccess(readable=readable)
    if not limit.write_patterns:
        return FileAccess(readable=readable, writable=[cwd], write_check=outside)
    root = cwd.resolve()
    dirs = ", ".join(p.rstrip("/") for p in limit.write_patterns)

    def check(canonical: Path) -> str | None:
        if (why := outside(canonical)) is not None:
            return why
        inside = canonical.is_relative_to(root)
        if limit.allows_write(canonical.relative_to(root).as_posix() if inside else None):
            return None
        return (
            f"The {name} role writes only under test directories ({dirs}) inside the workspace: "
            f"{canonical} is not in one."
        )

    return FileAccess(readable=readable, writable=[cwd], write_check=check)


def sandbox_role(name: str, *, user_dir: Path | None = None) -> Role:
    """The role's sandbox file (`anvild.sandbox.roles.load_role`)."""
    check_name(name)
    users = user_roles_dir() if user_dir is None else user_dir
    file = f"{name}.yaml"
    if name in SANDBOX_OF and not (users / file).exists() and not (BUILTIN_DIR / file).exists():
        name = SANDBOX_OF[name]
    try:
        return load_role(name, user_dir=users)
    except RoleConfigError as exc:
        raise InvalidSessionRequest(f"the sandbox of role {name!r}: {exc}") from exc


__all__ = [
    "BUILTIN_TEXT_DIR",
    "DEFAULT_ROLE",
    "ROLES",
    "ceiling",
    "check_name",
    "daemon_dirs",
    "file_access",
    "role_text",
    "sandbox_role",
    "user_text_dir",
]
