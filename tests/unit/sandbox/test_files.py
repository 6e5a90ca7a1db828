"""FileAccess: roots, symlinks, protected and credential paths, hard links, atomic writes.

Every test runs twice: through openat2 (when the kernel has it) and through the
canonicalise-and-check fallback. Each refusal sits next to a must-work twin.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

import pytest

from anvild.sandbox.files import (
    AccessDenied,
    FileAccess,
    is_credential,
    is_protected,
    openat2_available,
)

MODES = [
    pytest.param(
        True,
        id="openat2",
        marks=pytest.mark.skipif(not openat2_available(), reason="kernel without openat2"),
    ),
    pytest.param(False, id="fallback"),
]


@pytest.fixture(params=MODES)
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[FileAccess, Path, Path]:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    access = FileAccess.workspace(ws)
    access.use_openat2 = request.param
    return access, ws.resolve(), outside.resolve()


def put(data: bytes) -> object:
    return lambda canonical, current: data


def test_roots_are_canonical(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    access = FileAccess(readable=[tmp_path / "alias"], writable=[])
    assert access.readable_roots == (real.resolve(),)
    assert access.writable_roots == ()
    both = FileAccess(readable=[], writable=[real])
    assert both.readable_roots == both.writable_roots == (real.resolve(),)


def test_read_inside_and_outside(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, outside = tree
    (ws / "a.txt").write_text("inside")
    (outside / "b.txt").write_text("outside")
    assert access.read(ws, "a.txt", max_bytes=100).data == b"inside"
    with pytest.raises(AccessDenied, match="outside the readable roots"):
        access.read(ws, str(outside / "b.txt"), max_bytes=100)
    with pytest.raises(AccessDenied):
        access.read(ws, "../outside/b.txt", max_bytes=100)


def test_read_through_symlinks(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, outside = tree
    (outside / "secret.txt").write_text("outside")
    (ws / "out").symlink_to(outside / "secret.txt")
    (ws / "real.txt").write_text("inside")
    (ws / "in").symlink_to(ws / "real.txt")
    with pytest.raises(AccessDenied):
        access.read(ws, "out", max_bytes=100)
    result = access.read(ws, "in", max_bytes=100)
    assert result.data == b"inside"
    assert result.canonical == ws / "real.txt"


def test_write_through_symlink_to_outside_is_refused_inside_is_allowed(
    tree: tuple[FileAccess, Path, Path],
) -> None:
    access, ws, outside = tree
    (outside / "target.txt").write_text("original")
    (ws / "evil").symlink_to(outside / "target.txt")
    with pytest.raises(AccessDenied):
        access.update(ws, "evil", put(b"pwned"), max_bytes=100)
    assert (outside / "target.txt").read_text() == "original"

    (ws / "real.txt").write_text("old")
    (ws / "alias").symlink_to("real.txt")
    result = access.update(ws, "alias", put(b"new"), max_bytes=100)
    assert result.canonical == ws / "real.txt"
    assert (ws / "real.txt").read_text() == "new"
    assert (ws / "alias").is_symlink()  # written through, not replaced
    (ws / "abs_alias").symlink_to(ws / "real.txt")  # absolute, still inside
    access.update(ws, "abs_alias", put(b"newer"), max_bytes=100)
    assert (ws / "real.txt").read_text() == "newer"
    (ws / "realdir").mkdir()
    (ws / "abs_dir").symlink_to(ws / "realdir")
    assert access.update(ws, "abs_dir/made.txt", put(b"m"), max_bytes=100).created
    assert (ws / "realdir/made.txt").read_text() == "m"


def test_new_file_under_symlinked_parent_is_refused_real_subdir_works(
    tree: tuple[FileAccess, Path, Path],
) -> None:
    access, ws, outside = tree
    (ws / "linkdir").symlink_to(outside)
    with pytest.raises(AccessDenied):
        access.update(ws, "linkdir/new.txt", put(b"x"), max_bytes=100)
    with pytest.raises(AccessDenied):
        access.update(ws, "linkdir/deeper/new.txt", put(b"x"), max_bytes=100)
    assert list(outside.iterdir()) == []

    (ws / "sub").mkdir()
    result = access.update(ws, "sub/deeper/new.txt", put(b"x"), max_bytes=100)
    assert result.created
    assert (ws / "sub/deeper/new.txt").read_bytes() == b"x"


def test_dangling_symlink_to_outside_is_refused(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, outside = tree
    (ws / "dangling").symlink_to(outside / "not-yet.txt")
    with pytest.raises(AccessDenied):
        access.update(ws, "dangling", put(b"x"), max_bytes=100)
    assert not (outside / "not-yet.txt").exists()


def test_protected_paths_are_not_writable(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, _ = tree
    (ws / ".git").mkdir()
    (ws / ".git/config").write_text("[core]\n")
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        ".anvil/config.toml",
        ".env",
        ".env.local",
        "deep/.ssh/authorized_keys",
        ".netrc",
        "id_ed25519",
    ]:
        with pytest.raises(AccessDenied, match="protected"):
            access.update(ws, path, put(b"x"), max_bytes=100)
    assert (ws / ".git/config").read_text() == "[core]\n"
    assert not (ws / ".git/hooks").exists()
    # The twins: ordinary files next to them, and names that only look similar.
    for path in ["gitconfig", "src/git/config", "environment.py", "notes/id.txt"]:
        access.update(ws, path, put(b"ok"), max_bytes=100)
        assert (ws / path).read_bytes() == b"ok"


def test_symlink_into_protected_path_is_not_writable(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, _ = tree
    (ws / ".git").mkdir()
    (ws / ".git/config").write_text("[core]\n")
    (ws / "innocent").symlink_to(".git/config")
    with pytest.raises(AccessDenied, match="protected"):
        access.update(ws, "innocent", put(b"x"), max_bytes=100)
    assert (ws / ".git/config").read_text() == "[core]\n"


def test_hard_linked_file_is_refused_single_link_works(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, outside = tree
    (outside / "victim.txt").write_text("original")
    os.link(outside / "victim.txt", ws / "linked.txt")
    with pytest.raises(AccessDenied, match="2 hard links"):
        access.update(ws, "linked.txt", put(b"pwned"), max_bytes=100)
    assert (outside / "victim.txt").read_text() == "original"
    (ws / "single.txt").write_text("one link")
    access.update(ws, "single.txt", put(b"changed"), max_bytes=100)
    assert (ws / "single.txt").read_text() == "changed"


def test_credentials_are_not_readable(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, _ = tree
    files = {
        ".env": "A=1",
        ".env.production": "A=1",
        ".ssh/config": "Host x",
        "home/.aws/credentials": "key",
        ".netrc": "machine",
        ".npmrc": "token",
        ".pypirc": "pw",
        ".git-credentials": "https://u:p@h",
        "id_rsa": "KEY",
    }
    for name, content in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(content)
        with pytest.raises(AccessDenied, match="credential"):
            access.read(ws, name, max_bytes=100)
    (ws / "id_rsa.pub").write_text("ssh-rsa AAAA")
    (ws / ".editorconfig").write_text("root = true")
    assert access.read(ws, "id_rsa.pub", max_bytes=100).data == b"ssh-rsa AAAA"
    assert access.read(ws, ".editorconfig", max_bytes=100).data == b"root = true"


def test_symlink_to_credential_is_not_readable(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, _ = tree
    (ws / ".env").write_text("SECRET=1")
    (ws / "notes.txt").symlink_to(".env")
    with pytest.raises(AccessDenied, match="credential"):
        access.read(ws, "notes.txt", max_bytes=100)


def test_atomic_write_keeps_mode_and_leaves_no_temp(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, _ = tree
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o751)
    seen: list[bytes | None] = []

    def transform(canonical: Path, current: bytes | None) -> bytes:
        seen.append(current)
        return b"#!/bin/sh\necho hi\n"

    access.update(ws, "run.sh", transform, max_bytes=100)
    assert seen == [b"#!/bin/sh\n"]
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert sorted(p.name for p in ws.iterdir()) == ["run.sh"]


def test_transform_failure_writes_nothing(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, _ = tree
    (ws / "a.txt").write_text("keep")

    def refuse(canonical: Path, current: bytes | None) -> bytes:
        raise ValueError("stale")

    with pytest.raises(ValueError, match="stale"):
        access.update(ws, "a.txt", refuse, max_bytes=100)
    with pytest.raises(ValueError, match="stale"):
        access.update(ws, "new/b.txt", refuse, max_bytes=100)
    assert (ws / "a.txt").read_text() == "keep"
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt"]


def test_read_only_root_is_not_writable(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    ws = tmp_path / "ws"
    docs.mkdir()
    ws.mkdir()
    (docs / "guide.md").write_text("guide")
    access = FileAccess(readable=[docs], writable=[ws])
    assert access.read(ws, str(docs / "guide.md"), max_bytes=100).data == b"guide"
    with pytest.raises(AccessDenied, match="outside the writable roots"):
        access.update(ws, str(docs / "guide.md"), put(b"x"), max_bytes=100)
    access.update(ws, "mine.md", put(b"x"), max_bytes=100)


def test_symlink_between_roots_is_followed_for_reads(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    ws = tmp_path / "ws"
    lib.mkdir()
    ws.mkdir()
    (lib / "api.py").write_text("api")
    (ws / "vendored").symlink_to(lib)
    access = FileAccess(readable=[lib], writable=[ws])
    assert access.read(ws, "vendored/api.py", max_bytes=100).canonical == (lib / "api.py").resolve()
    with pytest.raises(AccessDenied):
        access.update(ws, "vendored/api.py", put(b"x"), max_bytes=100)


def test_walk_hides_credentials_and_symlinks(tree: tuple[FileAccess, Path, Path]) -> None:
    access, ws, outside = tree
    (ws / ".ssh").mkdir()
    (ws / ".ssh/id_ed25519").write_text("KEY")
    (ws / ".env").write_text("A=1")
    (ws / "src").mkdir()
    (ws / "src/main.py").write_text("x")
    (ws / ".github").mkdir()
    (ws / ".github/ci.yml").write_text("x")
    (ws / "out").symlink_to(outside)
    (outside / "leak.txt").write_text("x")
    seen = []
    for walkdir in access.walk(ws):
        seen += [str((walkdir.path / f).relative_to(ws)) for f in walkdir.files]
    assert sorted(seen) == [".github/ci.yml", "src/main.py"]


def test_classes() -> None:
    p = PurePosixPath
    assert is_protected(p(".git/config"))
    assert is_protected(p("a/.git/HEAD"))
    assert is_protected(p(".anvil/x"))
    assert is_protected(p("id_rsa"))
    assert not is_protected(p("src/a.py"))
    assert not is_protected(p("identity/x.py"))
    assert is_credential(p("x/.ssh/known_hosts"))
    assert is_credential(p(".envrc"))
    assert is_credential(p("id_ecdsa"))
    assert not is_credential(p("id_ecdsa.pub"))
    assert not is_credential(p(".git/config"))
    assert not is_credential(p("env.py"))


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership hand-over only happens as root")
def test_as_root_created_files_take_their_directory_owner(
    tree: tuple[FileAccess, Path, Path],
) -> None:
    """DESIGN section 5: as root, what the daemon's tools create belongs to the workspace's
    owner (the sandbox uid must be able to change it later), and a replaced file keeps its own
    owner. CI runs as root, so this runs there."""
    access, ws, _ = tree
    os.chown(ws, 65534, 65534)
    access.update(ws, "new/deeper/file.txt", put(b"x"), max_bytes=100)
    for path in (ws / "new", ws / "new" / "deeper", ws / "new" / "deeper" / "file.txt"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (65534, 65534), path
    kept = ws / "kept.txt"
    kept.write_text("old")
    os.chown(kept, 1234, 4321)
    access.update(ws, "kept.txt", put(b"new"), max_bytes=100)
    assert kept.read_bytes() == b"new"
    assert (kept.stat().st_uid, kept.stat().st_gid) == (1234, 4321)
