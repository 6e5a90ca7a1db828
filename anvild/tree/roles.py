"""Roles and workflow scripts as files: `agent/roles/`, `agent/sandbox-roles/`, `agent/scripts/`.

A role file shows what a session would load now: the user's file in the config dir if any, else
the shipped one (`anvild/data/`); listings are the union, read at each listing. A write writes
the user's file (never the shipped one), checked at each Twrite with the same parse a session
runs (fail-closed: a file that would not load is never written) and replaced atomically at
clunk; the next session of that role uses it. A Twrite that leaves an invalid body ending in a
newline is refused at once (`9p write` never shows Rclunk); a refused Twrite refuses the open.
Create makes an empty (narrowest) sandbox role; role texts exist for built-in roles only (EPERM
otherwise). Remove deletes the user's file; a shipped-only file cannot be removed (EPERM).
Every connection is the owner's (socket uid check, TCP token), so the files are 0644; sandboxed
sessions cannot reach them. Details: docs/decisions.md, "Module notes" (anvild.tree.roles).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import trio
import yaml

from anvild import data
from anvild.fs import BodyBuffer, BodyError, BodyTooLarge, Directory, FsNode, SnapshotFile
from anvild.ninep.backend import Handle, Node, OpenMode, StatChange
from anvild.ninep.constants import DMDIR
from anvild.ninep.errors import (
    FsError,
    InvalidInput,
    NotFound,
    NotPermitted,
    StorageFailed,
    TooLarge,
)
from anvild.sandbox import RoleConfigError
from anvild.sandbox.roles import BUILTIN_DIR, ROLE_NAME_RE, parse_role, user_roles_dir
from anvild.session import roles as session_roles
from anvild.session.settings import SessionSettings
from anvild.store.durable import replace_durably

__all__ = ["MAX_ROLE_BYTES", "RoleKind", "nodes", "role_texts", "sandbox_roles", "scripts"]

MAX_ROLE_BYTES = 256 << 10
"""The largest role file the tree writes (a role text is a prompt layer, not a document)."""


class _Incomplete(ValueError):
    """The body so far is invalid, but more text could make it valid."""


@attrs.frozen
class RoleKind:
    """One directory of role files: where its files live, how they are named and checked."""

    dir_name: str
    suffix: str  # in the tree; the file on disk is always NAME + disk_suffix
    disk_suffix: str
    user_dir: Path
    builtin_dir: Path
    check: Callable[[str, str, Path], None]
    """`check(name, text, path)` raises `ValueError` (or `_Incomplete`) for a file that must not
    be written; `path` is where it would go (named in the error)."""
    creatable: Callable[[str], str | None]
    """Why a new name cannot be created (None: it can)."""

    def name_of(self, entry: str) -> str | None:
        """The role name of a tree entry, or None if `entry` is no valid name here."""
        if not entry.endswith(self.suffix):
            return None
        name = entry[: len(entry) - len(self.suffix)] if self.suffix else entry
        return name if ROLE_NAME_RE.fullmatch(name) else None

    def user_file(self, name: str) -> Path:
        return self.user_dir / f"{name}{self.disk_suffix}"

    def builtin_file(self, name: str) -> Path:
        return self.builtin_dir / f"{name}{self.disk_suffix}"

    def names(self) -> list[str]:
        """Every role with a file: the built-in roles in their order, then the others, sorted."""
        found: list[str] = []
        for directory in (self.builtin_dir, self.user_dir):
            with contextlib.suppress(OSError):
                for path in sorted(directory.iterdir()):
                    name = path.name.removesuffix(self.disk_suffix)
                    if (
                        path.name.endswith(self.disk_suffix)
                        and ROLE_NAME_RE.fullmatch(name)
                        and name not in found
                        and path.is_file()
                    ):
                        found.append(name)
        first = session_roles.ROLES
        return sorted(found, key=lambda n: (first.index(n) if n in first else len(first), n))

    def exists(self, name: str) -> bool:
        return self.user_file(name).is_file() or self.builtin_file(name).is_file()

    def read(self, name: str) -> bytes:
        """What a session would load: the user's file, else the shipped one."""
        for path in (self.user_file(name), self.builtin_file(name)):
            try:
                return path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageFailed(f"{name}{self.suffix}: {path} cannot be read: {exc}") from exc
        raise NotFound(f"{name}{self.suffix}: no such role (it was removed)")


def _check_text(name: str, text: str, path: Path) -> None:
    """A role text is any UTF-8 text (checked by the body buffer); nothing else to check."""


def _check_sandbox(name: str, text: str, path: Path) -> None:
    """What loading checks (`parse_role`), plus the expansion a session does (`resolve`: every
    path absolute), so a role that would refuse to load is never written."""
    try:
        role = parse_role(name, text, source=path)
        role.resolve(cwd=Path("/workspace"), home=Path.home())
    except RoleConfigError as exc:
        cause = exc.__cause__
        mark = cause.problem_mark if isinstance(cause, yaml.MarkedYAMLError) else None
        if mark is not None and mark.index >= len(text.rstrip()):  # more text could mend it
            raise _Incomplete(str(exc)) from exc
        raise ValueError(str(exc)) from exc


def _text_creatable(name: str) -> str | None:
    if name in session_roles.ROLES:
        return None
    return (
        f"{name}: a new role cannot be made here: a role is also a permission ceiling, which "
        f"only anvild defines; the roles are {', '.join(session_roles.ROLES)} (write "
        "roles/NAME to replace one's text)"
    )


def role_texts(settings: SessionSettings) -> RoleKind:
    return RoleKind(
        "roles",
        "",
        ".txt",
        settings.role_text_dir or session_roles.user_text_dir(),
        session_roles.BUILTIN_TEXT_DIR,
        _check_text,
        _text_creatable,
    )


def sandbox_roles(settings: SessionSettings) -> RoleKind:
    return RoleKind(
        "sandbox-roles",
        ".yaml",
        ".yaml",
        settings.sandbox_role_dir or user_roles_dir(),
        BUILTIN_DIR,
        _check_sandbox,
        lambda name: None,
    )


def _write_atomically(path: Path, body: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")  # one per writer, hidden
    replace_durably(path, body, temp=temp, mode=0o644)


class _RoleHandle(Handle):
    read_blocks = False
    write_blocks = False  # the checks are pure; the file is written at clunk

    def __init__(self, node: _RoleFile, mode: OpenMode, snapshot: bytes) -> None:
        self._node = node
        self._snapshot = snapshot
        self._body = BodyBuffer(MAX_ROLE_BYTES, text=True) if mode.write else None
        self._refused: FsError | None = None

    async def read(self, offset: int, count: int) -> bytes:
        return self._snapshot[offset : offset + count]

    def read_now(self, offset: int, count: int) -> bytes:
        return self._snapshot[offset : offset + count]

    async def write(self, offset: int, data: bytes) -> int:
        body = self._body
        assert body is not None, "the server only forwards writes on write opens"
        if self._refused is not None:
            raise self._refused
        entry = self._node.entry
        try:
            count = body.write(offset, data)
        except BodyTooLarge as exc:
            self._refused = TooLarge(f"{entry}: {exc}; the role file is unchanged")
            raise self._refused from exc
        except BodyError as exc:
            self._refused = InvalidInput(f"{entry}: {exc}; the role file is unchanged")
            raise self._refused from exc
        value = body.value()
        try:
            text = value.decode()
        except UnicodeDecodeError:  # a character cut between two writes: more is coming
            return count
        problem = self._problem(text, final=False)
        if problem is not None and value.endswith(b"\n"):
            problem = problem.rstrip(".")
            self._refused = InvalidInput(f"{entry}: {problem}; the role file is unchanged")
            raise self._refused
        return count

    def _problem(self, text: str, *, final: bool) -> str | None:
        """Why `text` must not be written, or None. Not final: None also when more text could
        mend it."""
        try:
            self._node.kind.check(self._node.role, text, self._node.path)
        except _Incomplete as exc:
            return str(exc) if final else None
        except ValueError as exc:
            return str(exc)
        return None

    async def clunk(self) -> None:
        body, self._body = self._body, None
        if body is None:
            return
        if self._refused is not None:
            raise self._refused
        if body.writes == 0:
            return  # a truncating open with nothing written: no file (9pfuse's shell `>`)
        value = body.value()
        entry = self._node.entry
        try:
            problem = self._problem(value.decode(), final=True)
        except UnicodeDecodeError:
            problem = "not valid UTF-8 (it ends inside a character); write text"
        if problem is not None:
            raise InvalidInput(f"{entry}: {problem.rstrip('.')}; the role file is unchanged")
        try:
            await trio.to_thread.run_sync(_write_atomically, self._node.path, value)
        except OSError as exc:
            raise StorageFailed(f"{entry}: {self._node.path} cannot be written: {exc}") from exc
        self._node.touch()

    async def abort(self) -> None:
        self._body = None  # a lost connection writes nothing


class _RoleFile(FsNode):
    """One role: reads what a session would load; a write replaces the user's file."""

    def __init__(self, kind: RoleKind, name: str) -> None:
        super().__init__(f"{name}{kind.suffix}", 0o644)
        self.kind = kind
        self.role = name
        self.open_blocks = False

    @property
    def entry(self) -> str:
        return f"{self.kind.dir_name}/{self.name}"

    @property
    def path(self) -> Path:
        """The user's file, where a write goes."""
        return self.kind.user_file(self.role)

    async def open(self, mode: OpenMode) -> Handle:
        return self.open_now(mode)

    def open_now(self, mode: OpenMode) -> Handle:
        # A file just created has no content until its first body is written.
        new = mode.read and not self.kind.exists(self.role)
        snapshot = self.kind.read(self.role) if mode.read and not new else b""
        return _RoleHandle(self, mode, snapshot)

    async def wstat(self, change: StatChange) -> None:
        if not change.is_truncate_only():
            await super().wstat(change)

    async def remove(self) -> None:
        user = self.kind.user_file(self.role)
        try:
            await trio.to_thread.run_sync(user.unlink)
        except FileNotFoundError:
            if self.kind.builtin_file(self.role).is_file():
                raise NotPermitted(
                    f"{self.entry}: a shipped role cannot be removed; write the file to "
                    "override it (the override goes in "
                    f"{self.kind.user_dir}), remove that to return to the shipped one"
                ) from None
            raise NotFound(f"{self.entry}: no such role") from None
        except OSError as exc:
            raise StorageFailed(f"{self.entry}: {user} cannot be removed: {exc}") from exc
        self.touch()


class _RoleDirectory(Directory):
    """The role files of one `RoleKind`, from the disk at each listing and lookup."""

    def __init__(self, kind: RoleKind) -> None:
        super().__init__(kind.dir_name, perm=0o755)
        self.kind = kind
        self._nodes: dict[str, _RoleFile] = {}  # kept, so a role's qid path stays stable

    def _node(self, name: str) -> _RoleFile:
        node = self._nodes.get(name)
        if node is None:
            node = self._nodes[name] = _RoleFile(self.kind, name)
        return node

    async def walk(self, name: str) -> Node | None:
        role = self.kind.name_of(name)
        if role is None or not self.kind.exists(role):
            return None
        return self._node(role)

    def walk_now(self, name: str) -> Node | None:
        role = self.kind.name_of(name)
        if role is None or not self.kind.exists(role):
            return None
        return self._node(role)

    async def list(self) -> Sequence[Node]:
        return [self._node(name) for name in self.kind.names()]

    async def create(self, name: str, perm: int) -> Node:
        where = f"{self.kind.dir_name}/{name}"
        if perm & DMDIR:
            raise NotPermitted(f"{where}: only role files can be created here, no directories")
        role = self.kind.name_of(name)
        if role is None:
            suffix = f", ending in {self.kind.suffix}" if self.kind.suffix else ""
            raise InvalidInput(
                f"{where}: not a role name: lowercase letters, digits, '-' and '_', starting "
                f"with a letter, at most 64{suffix}"
            )
        why = self.kind.creatable(role)
        if why is not None:
            raise NotPermitted(f"{self.kind.dir_name}/{why}")
        # The file exists from now on, empty: `9p create` and a later `9p write` are two
        # connections. An empty role file is a valid one, and the narrowest (nothing writable,
        # no network, .git read-only); the checks still run, fail-closed.
        node = self._node(role)
        try:
            self.kind.check(role, "", node.path)
        except ValueError as exc:
            raise InvalidInput(f"{where}: an empty file is not a valid role: {exc}") from exc
        try:
            await trio.to_thread.run_sync(_write_atomically, node.path, b"")
        except OSError as exc:
            raise StorageFailed(f"{where}: {node.path} cannot be written: {exc}") from exc
        self.touch()
        return node


def scripts() -> Directory:
    """`agent/scripts/`: the workflow scripts shipped in the package, read-only."""
    base = data.path(data.SCRIPTS)

    def reader(path: Path) -> Callable[[], bytes]:
        return path.read_bytes

    return Directory(
        "scripts", [SnapshotFile(name, reader(base / name)) for name in data.WORKFLOW_SCRIPTS]
    )


def nodes(settings: SessionSettings) -> list[Node]:
    """The three directories, for the root (`SessionTree` adds them)."""
    return [
        _RoleDirectory(role_texts(settings)),
        _RoleDirectory(sandbox_roles(settings)),
        scripts(),
    ]
