"""FileAccess: the one boundary every native file tool (read, write, edit, glob, grep) goes through.

The native tools run in the daemon, outside the shell sandbox, so they are confined here: readable
and writable roots, an optional role `write_check`, per-call `granting` of person-approved paths.
Protected paths (`.git`, `.anvil`, `.env*`, `.ssh`, `.aws`, `.netrc`, `id_*`, ...) are never
writable; credential files never readable or searchable. Classes match the path as given and its
canonical target; a file with several hard links is never written.
Opens use `openat2(root_fd, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` where the kernel has
it (absolute symlinks re-resolved and reopened with RESOLVE_NO_SYMLINKS), else `realpath` and
O_NOFOLLOW; the opened file's canonical path is classified after the open. Writes are atomic
(O_EXCL temp in the held parent, fsync, rename). Searches walk descriptor-relative without
following symlinks and drop credential entries. Every method blocks: call from a worker thread.
The remaining races and limits: docs/decisions.md, "Module notes" (anvild.sandbox.files).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Final

import attrs

RESOLVE_NO_XDEV: Final = 0x01
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08
SYS_OPENAT2: Final = 437  # same number on every architecture (unified syscall table, Linux 5.6)

PROTECTED_DIRS: Final = frozenset({".git", ".anvil", ".ssh", ".aws"})
PROTECTED_NAMES: Final = frozenset({".netrc", ".npmrc", ".pypirc", ".git-credentials"})
CREDENTIAL_DIRS: Final = frozenset({".ssh", ".aws"})
CREDENTIAL_NAMES: Final = PROTECTED_NAMES

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_PATH_DIR_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class FileAccessError(Exception):
    """Root of the boundary's refusals. The message says what was refused and why.

        FileAccessError
         └── AccessDenied   outside the roots, protected, a credential, hard-linked, escaping

    Ordinary OS failures (missing file, not a directory, permissions) stay `OSError`s.
    """


class AccessDenied(FileAccessError):
    pass


class _OpenHow(ctypes.Structure):
    # struct open_how from <linux/openat2.h>: three u64s, zero-filled for future extensions.
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


class _Openat2:
    """openat2(2) through libc's `syscall`, or None when the kernel (or a seccomp filter)
    refuses it."""

    def __init__(self) -> None:
        self._syscall: Callable[..., int] | None = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.syscall
        except (OSError, AttributeError):
            return
        fn.restype = ctypes.c_long
        fn.argtypes = (
            ctypes.c_long,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.POINTER(_OpenHow),
            ctypes.c_size_t,
        )
        self._syscall = fn
        try:
            fd = self.open(-100, "/", os.O_PATH | os.O_CLOEXEC, 0)  # AT_FDCWD
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                self._syscall = None
                return
            raise
        os.close(fd)

    @property
    def available(self) -> bool:
        return self._syscall is not None

    def open(self, dir_fd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
        assert self._syscall is not None
        how = _OpenHow(flags, mode, resolve)
        encoded = os.fsencode(path)
        while True:
            fd = self._syscall(SYS_OPENAT2, dir_fd, encoded, ctypes.byref(how), ctypes.sizeof(how))
            if fd >= 0:
                return fd
            err = ctypes.get_errno()
            if err in (errno.EINTR, errno.EAGAIN):
                continue
            raise OSError(err, os.strerror(err), path)


_OPENAT2: Final = _Openat2()


def openat2_available() -> bool:
    return _OPENAT2.available


def _parts(rel: PurePosixPath) -> tuple[str, ...]:
    return tuple(p for p in rel.parts if p not in ("", "."))


def _is_private_key(name: str) -> bool:
    return name.startswith("id_") and not name.endswith(".pub")


def is_protected(rel: PurePosixPath) -> bool:
    """Never writable: `.git/**`, `.anvil/**`, `.ssh/**`, `.aws/**`, `.env*` (any component),
    and files named `.netrc`, `.npmrc`, `.pypirc`, `.git-credentials` or `id_*`. `rel` is
    relative to a root."""
    parts = _parts(rel)
    if any(p in PROTECTED_DIRS or p.startswith(".env") for p in parts):
        return True
    return bool(parts) and (parts[-1] in PROTECTED_NAMES or parts[-1].startswith("id_"))


def is_credential(rel: PurePosixPath) -> bool:
    """Never readable or searchable: `.ssh/**`, `.aws/**`, `.env*` (and anything under a `.env*`
    directory), `.netrc`, `.npmrc`, `.pypirc`, `.git-credentials`, `id_*` private keys (not
    `*.pub`). `rel` is relative to a root."""
    parts = _parts(rel)
    if any(p in CREDENTIAL_DIRS or p.startswith(".env") for p in parts):
        return True
    return bool(parts) and (parts[-1] in CREDENTIAL_NAMES or _is_private_key(parts[-1]))


def is_credential_name(name: str, *, is_dir: bool) -> bool:
    """The walk-time form of `is_credential` for one directory entry."""
    if is_dir:
        return name in CREDENTIAL_DIRS or name.startswith(".env")
    return name.startswith(".env") or name in CREDENTIAL_NAMES or _is_private_key(name)


def _canonical(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _fd_path(fd: int) -> Path | None:
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not target.startswith("/") or target.endswith(" (deleted)"):
        return None
    return Path(target)


@attrs.frozen
class ReadResult:
    canonical: Path
    data: bytes


@attrs.frozen
class WriteResult:
    canonical: Path
    created: bool
    data: bytes


@attrs.frozen
class WalkDir:
    """One directory of a walk. Prune `dirs` in place to skip subdirectories. `dir_fd` is valid
    only until the walk moves on."""

    path: Path
    dir_fd: int
    dirs: list[str]
    files: list[str]


def _norm_roots(roots: Iterable[Path | str]) -> tuple[Path, ...]:
    result: list[Path] = []
    for r in roots:
        c = _canonical(Path(r))
        if c not in result:
            result.append(c)
    return tuple(result)


class FileAccess:
    """Readable and writable roots plus the protected and credential classes (module docstring)."""

    def __init__(
        self,
        *,
        readable: Iterable[Path | str],
        writable: Iterable[Path | str] = (),
        write_check: Callable[[Path], str | None] | None = None,
    ) -> None:
        self._writable = _norm_roots(writable)
        self._readable = _norm_roots([*readable, *self._writable])
        self._write_check = write_check
        # Roots that were added for granted files, and the files they admit, per access kind.
        self._only: dict[str, dict[Path, frozenset[Path]]] = {"readable": {}, "writable": {}}
        self.use_openat2 = _OPENAT2.available

    def granting(
        self, *, reads: Iterable[Path | str] = (), writes: Iterable[Path | str] = ()
    ) -> FileAccess:
        """This boundary plus the canonical paths a person granted for one call (the permission
        policy's outside-workspace escalations, approved or covered by a grant). A granted
        directory becomes a root; a granted file is admitted alone: its directory becomes a
        root restricted to exactly that file. A credential path is never granted (nor a
        protected one for writing): the boundary keeps refusing it."""
        roots = {"readable": list(self._readable), "writable": list(self._writable)}
        only = {kind: dict(files) for kind, files in self._only.items()}
        grants = [(r, ("readable",)) for r in reads] + [
            (w, ("writable", "readable")) for w in writes
        ]
        for raw, kinds in grants:
            path = _canonical(Path(raw))
            absolute = PurePosixPath(path)
            if is_credential(absolute) or ("writable" in kinds and is_protected(absolute)):
                continue
            for kind in kinds:
                covering = self._root_of(path, tuple(roots[kind]))
                if covering is not None and covering not in only[kind]:
                    continue
                if path.is_dir():
                    roots[kind].append(path)
                    continue
                roots[kind].append(path.parent)
                only[kind][path.parent] = only[kind].get(path.parent, frozenset()) | {path}
        granted = FileAccess(
            readable=roots["readable"], writable=roots["writable"], write_check=self._write_check
        )
        granted._only = only
        granted.use_openat2 = self.use_openat2
        return granted

    def _check_granted(self, root: Path, canonical: Path, what: str) -> None:
        allowed = self._only[what].get(root)
        if allowed is not None and canonical not in allowed:
            listed = ", ".join(str(p) for p in sorted(allowed))
            raise AccessDenied(
                f"{canonical} is outside the {what} roots: in {root} only {listed} was granted."
            )

    @classmethod
    def workspace(cls, root: Path | str) -> FileAccess:
        """One root, readable and writable."""
        return cls(readable=[root], writable=[root])

    @property
    def readable_roots(self) -> tuple[Path, ...]:
        return self._readable

    @property
    def writable_roots(self) -> tuple[Path, ...]:
        return self._writable

    # -- classification -------------------------------------------------------------------

    @staticmethod
    def absolute(cwd: Path | str, user_path: str | Path) -> Path:
        """`user_path` made absolute against `cwd` and normalised lexically (no symlinks read)."""
        path = (
            Path(os.path.expanduser(user_path))
            if str(user_path).startswith("~")
            else Path(user_path)
        )
        return Path(os.path.normpath(Path(cwd) / path))

    @staticmethod
    def _root_of(path: Path, roots: tuple[Path, ...]) -> Path | None:
        best: Path | None = None
        for root in roots:
            if (path == root or root in path.parents) and (
                best is None or len(root.parts) > len(best.parts)
            ):
                best = root
        return best

    def _locate(self, path: Path, roots: tuple[Path, ...], what: str) -> tuple[Path, PurePosixPath]:
        root = self._root_of(path, roots)
        if root is None:
            # An absolute path reaching a root through a symlinked prefix (/tmp -> /private/tmp).
            canon = _canonical(path)
            root = self._root_of(canon, roots)
            if root is None:
                listed = ", ".join(str(r) for r in roots) or "none"
                raise AccessDenied(f"{path} is outside the {what} roots ({listed}).")
            path = canon
        return root, PurePosixPath(os.path.relpath(path, root))

    def may_read(self, canonical: Path) -> bool:
        """Whether a canonical path is under a readable root and not a credential."""
        root = self._root_of(canonical, self._readable)
        return root is not None and not is_credential(
            PurePosixPath(os.path.relpath(canonical, root))
        )

    def _check_read_class(self, given: PurePosixPath, root: Path, canonical: Path) -> None:
        croot = self._root_of(canonical, self._readable)
        if croot is None:
            raise AccessDenied(f"{canonical} is outside the readable roots.")
        self._check_granted(croot, canonical, "readable")
        if is_credential(given) or is_credential(PurePosixPath(os.path.relpath(canonical, croot))):
            raise AccessDenied(
                f"{root / given} is a credential file (.env*, .ssh, .aws, .netrc, .npmrc, "
                ".pypirc, .git-credentials, private keys): it cannot be read or searched."
            )

    def _check_write_class(self, given: PurePosixPath, root: Path, canonical: Path) -> Path:
        croot = self._root_of(canonical, self._writable)
        if croot is None:
            listed = ", ".join(str(r) for r in self._writable) or "none"
            raise AccessDenied(
                f"{root / given} resolves to {canonical}, outside the writable roots ({listed})."
            )
        if is_protected(given) or is_protected(PurePosixPath(os.path.relpath(canonical, croot))):
            raise AccessDenied(
                f"{root / given} is protected (.git, .anvil, credential files) and cannot be "
                "written by the file tools."
            )
        self._check_granted(croot, canonical, "writable")
        if self._write_check is not None and (why := self._write_check(canonical)) is not None:
            raise AccessDenied(why)
        return croot

    # -- opening --------------------------------------------------------------------------

    def _open_beneath(
        self, root: Path, rel: PurePosixPath, flags: int, *, no_symlinks: bool = False
    ) -> int:
        """Open `rel` beneath `root` and return the fd; refuses escapes (AccessDenied)."""
        if self.use_openat2:
            resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
            if no_symlinks:
                resolve |= RESOLVE_NO_SYMLINKS
            root_fd = os.open(root, _PATH_DIR_FLAGS)
            try:
                return _OPENAT2.open(root_fd, str(rel), flags, resolve)
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    raise AccessDenied(
                        f"{root / rel} resolves outside {root} (through a symlink or '..')."
                    ) from exc
                if exc.errno == errno.ELOOP and no_symlinks:
                    raise AccessDenied(f"{root / rel} changed into a symlink; refusing.") from exc
                raise
            finally:
                os.close(root_fd)
        canonical = _canonical(root / rel)
        if canonical != root and root not in canonical.parents:
            raise AccessDenied(f"{root / rel} resolves to {canonical}, outside {root}.")
        return os.open(canonical, flags | os.O_NOFOLLOW)

    def _open_resolving(
        self, roots: tuple[Path, ...], root: Path, rel: PurePosixPath, flags: int
    ) -> int:
        """Like `_open_beneath`, but when openat2 reports an escape (an absolute symlink, or one
        into another root), the canonical path is reopened beneath the root that contains it,
        with no symlink allowed on the way, so the retry cannot be redirected."""
        try:
            return self._open_beneath(root, rel, flags)
        except AccessDenied:
            canonical = _canonical(root / rel)
            other = self._root_of(canonical, roots)
            if other is None:
                raise
            crel = PurePosixPath(os.path.relpath(canonical, other))
            return self._open_beneath(other, crel, flags, no_symlinks=True)

    @staticmethod
    def _path_of(fd: int, fallback: Path) -> Path:
        return _fd_path(fd) or _canonical(fallback)

    # -- reading --------------------------------------------------------------------------

    def read(self, cwd: Path | str, user_path: str | Path, *, max_bytes: int) -> ReadResult:
        """The whole content of a readable regular file."""
        path = self.absolute(cwd, user_path)
        root, rel = self._locate(path, self._readable, "readable")
        fd = self._open_resolving(self._readable, root, rel, _READ_FLAGS)
        try:
            canonical = self._path_of(fd, root / rel)
            self._check_read_class(rel, root, canonical)
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
            if not stat.S_ISREG(st.st_mode):
                raise AccessDenied(f"{path} is not a regular file.")
            if st.st_size > max_bytes:
                raise OSError(
                    errno.EFBIG,
                    f"file is too large ({st.st_size} bytes, limit {max_bytes})",
                    str(path),
                )
            return ReadResult(canonical, _read_all(fd, max_bytes))
        finally:
            os.close(fd)

    def resolve_dir(self, cwd: Path | str, user_path: str | Path) -> Path:
        """The canonical path of a readable directory (a search root)."""
        path = self.absolute(cwd, user_path)
        root, rel = self._locate(path, self._readable, "readable")
        fd = self._open_resolving(self._readable, root, rel, _PATH_DIR_FLAGS)
        try:
            canonical = self._path_of(fd, root / rel)
        finally:
            os.close(fd)
        self._check_read_class(rel, root, canonical)
        return canonical

    # -- writing --------------------------------------------------------------------------

    def update(
        self,
        cwd: Path | str,
        user_path: str | Path,
        transform: Callable[[Path, bytes | None], bytes],
        *,
        max_bytes: int,
        temp_tag: str | None = None,
    ) -> WriteResult:
        """Atomically replace (or create) a file with `transform(canonical, current_or_None)`.

        `transform` sees the canonical path and the current bytes (None for a new file) and
        may raise to abort (freshness, no match); nothing is written then. The temporary file
        is `temp_name(name, temp_tag)` beside the canonical path (a random tag when None): a
        caller that names it can find what a crash left.
        """
        path = self.absolute(cwd, user_path)
        root, rel = self._locate(path, self._writable, "writable")
        try:
            fd = self._open_resolving(self._writable, root, rel, _READ_FLAGS)
        except FileNotFoundError:
            return self._create(root, rel, transform, temp_tag)
        try:
            canonical = self._path_of(fd, root / rel)
            croot = self._check_write_class(rel, root, canonical)
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
            if not stat.S_ISREG(st.st_mode):
                raise AccessDenied(f"{path} is not a regular file.")
            if st.st_nlink > 1:
                raise AccessDenied(
                    f"{path} has {st.st_nlink} hard links; writing it would change the other "
                    "links too, which may be outside the workspace. Refusing."
                )
            current = _read_all(fd, max_bytes)
        finally:
            os.close(fd)
        new = transform(canonical, current)
        crel = PurePosixPath(os.path.relpath(canonical, croot))
        parent_fd = self._open_beneath(croot, crel.parent, _PATH_DIR_FLAGS, no_symlinks=True)
        try:
            owner = (st.st_uid, st.st_gid)
            _replace(parent_fd, crel.name, new, stat.S_IMODE(st.st_mode), owner, temp_tag)
        finally:
            os.close(parent_fd)
        return WriteResult(canonical, created=False, data=new)

    def _create(
        self,
        root: Path,
        rel: PurePosixPath,
        transform: Callable[[Path, bytes | None], bytes],
        temp_tag: str | None,
    ) -> WriteResult:
        # The nearest existing parent decides: resolve it, then build the rest below it.
        missing: list[str] = [rel.name]
        parent = rel.parent
        while True:
            try:
                parent_fd = self._open_resolving(self._writable, root, parent, _PATH_DIR_FLAGS)
                break
            except FileNotFoundError:
                if parent == PurePosixPath("."):
                    raise
                missing.insert(0, parent.name)
                parent = parent.parent
        try:
            parent_canonical = self._path_of(parent_fd, root / parent)
            canonical = parent_canonical.joinpath(*missing)
            self._check_write_class(rel, root, canonical)
            new = transform(canonical, None)
            for name in missing[:-1]:
                created = False
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=parent_fd)
                    created = True
                if created:
                    _give_to_directory_owner(name, parent_fd)
                child = os.open(name, _PATH_DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
                os.close(parent_fd)
                parent_fd = child
            _replace(parent_fd, missing[-1], new, None, temp_tag=temp_tag)
        finally:
            os.close(parent_fd)
        return WriteResult(canonical, created=True, data=new)

    # -- walking --------------------------------------------------------------------------

    def walk(
        self, top: Path, *, cancelled: Callable[[], bool] = lambda: False
    ) -> Iterator[WalkDir]:
        """Walk a canonical readable directory top-down without following symlinks.

        Credential files and directories are removed before the caller sees them; symlinks,
        sockets and devices are not listed. Stops early when `cancelled()` turns true.
        """
        if not self.may_read(top):
            raise AccessDenied(f"{top} is not readable (outside the roots or a credential path).")
        root = self._root_of(top, self._readable)
        assert root is not None
        top_fd = self._open_beneath(
            root, PurePosixPath(os.path.relpath(top, root)), _DIR_FLAGS, no_symlinks=True
        )
        yield from self._walk_fd(top, top_fd, cancelled)

    def _walk_fd(self, path: Path, fd: int, cancelled: Callable[[], bool]) -> Iterator[WalkDir]:
        try:
            dirs: list[str] = []
            files: list[str] = []
            with os.scandir(fd) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if not is_credential_name(entry.name, is_dir=True):
                                dirs.append(entry.name)
                        elif entry.is_file(follow_symlinks=False) and not is_credential_name(
                            entry.name, is_dir=False
                        ):
                            files.append(entry.name)
                    except OSError:
                        continue
            dirs.sort()
            files.sort()
            walkdir = WalkDir(path, fd, dirs, files)
            yield walkdir
            for name in walkdir.dirs:
                if cancelled():
                    return
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                yield from self._walk_fd(path / name, child, cancelled)
        finally:
            os.close(fd)

    @staticmethod
    def open_in(walkdir: WalkDir, name: str) -> int:
        """Open a listed file of a walk for reading (no symlink followed); the caller closes
        it. Raises OSError when it is no longer a regular file."""
        fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=walkdir.dir_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", name)
        return fd


def _read_all(fd: int, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise OSError(errno.EFBIG, f"file grew past the limit of {max_bytes} bytes")
        chunks.append(chunk)


def _give_to_directory_owner(name: str, dir_fd: int, *, fd: int | None = None) -> None:
    """When the daemon runs as root, what it creates takes the owner of its directory: the
    sandbox runs commands as an unprivileged uid, which must still be able to change the files
    the agent wrote (DESIGN section 5). As any other user, ownership is the user's already."""
    if os.geteuid() != 0:
        return
    st = os.fstat(dir_fd)
    if fd is not None:
        os.fchown(fd, st.st_uid, st.st_gid)
    else:
        os.chown(name, st.st_uid, st.st_gid, dir_fd=dir_fd, follow_symlinks=False)


def temp_name(name: str, tag: str) -> str:
    """The temporary file that a write of `name` renames over it once complete."""
    return f".{name}.anvil-{tag}.tmp"


def _replace(
    dir_fd: int,
    name: str,
    data: bytes,
    mode: int | None,
    owner: tuple[int, int] | None = None,
    temp_tag: str | None = None,
) -> None:
    """Write `data` to a temp file in `dir_fd` and rename it over `name`. The new inode keeps
    the replaced file's `owner`; a new file takes its directory's owner (as root)."""
    tmp = temp_name(name, temp_tag or secrets.token_hex(6))
    # 0o666 lets the umask decide a new file's mode, as `open(..., "w")` would.
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o666,
        dir_fd=dir_fd,
    )
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if owner is not None and os.geteuid() == 0:
                os.fchown(fd, *owner)
            elif owner is None:
                _give_to_directory_owner(tmp, dir_fd, fd=fd)
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
