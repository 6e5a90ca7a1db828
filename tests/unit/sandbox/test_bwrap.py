"""The pure command builder: policy + role + host facts (a table) → argv. No processes."""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from anvild.sandbox import ReadOnly, SandboxRefused, WorkspaceWrite
from anvild.sandbox.bwrap import (
    Drop,
    PathKind,
    SandboxSpec,
    _Placeholders,
    bwrap_argv,
    parse_status,
    plan,
)
from anvild.sandbox.roles import DEFAULT_ROLE, Role, load_role, parse_role

WS = Path("/w")


class Facts:
    def __init__(
        self,
        kinds: dict[str, PathKind],
        pointers: dict[str, str] | None = None,
        configs: dict[str, tuple[tuple[str, str], ...]] | None = None,
    ):
        self.kinds = {Path(k): v for k, v in kinds.items()}
        self.pointers = {Path(k): Path(v) for k, v in (pointers or {}).items()}
        self.configs = {Path(k): v for k, v in (configs or {}).items()}

    def git_config(self, path: Path) -> tuple[tuple[str, str], ...]:
        return self.configs.get(path, ())

    def kind(self, path: Path) -> PathKind:
        if str(path) in ("/bin", "/lib"):
            return PathKind.SYMLINK
        return self.kinds.get(path, PathKind.MISSING)

    def symlink_target(self, path: Path) -> str:
        return "usr" + str(path)

    def gitdir_of(self, pointer: Path) -> Path | None:
        return self.pointers.get(pointer)

    def commondir_of(self, gitdir: Path) -> Path | None:
        return None

    def module_gitdirs(self, gitdir: Path) -> tuple[Path, ...]:
        return ()

    def worktree_gitdirs(self, gitdir: Path) -> tuple[Path, ...]:
        return tuple(p for p in self.kinds if p.parent == gitdir / "worktrees")

    def nested_dotgits(self, root: Path, limit: int) -> tuple[tuple[Path, ...], bool]:
        return tuple(p for p in self.kinds if p.name == ".git" and p.parent != root), False

    def enclosing_dotgit(self, path: Path) -> Path | None:
        return None

    def matching(self, pattern: Path) -> tuple[Path, ...]:
        return tuple(
            p
            for p in self.kinds
            if p.parent == pattern.parent and fnmatchcase(p.name, pattern.name)
        )


D, F, L = PathKind.DIR, PathKind.FILE, PathKind.SYMLINK
REPO = {"/w": D, "/w/.git": D, "/w/.git/config": F, "/w/.git/hooks": D, "/w/.anvil": D}


def argv_for(policy, role: Role, kinds: dict[str, PathKind], **kw: object) -> list[str]:  # type: ignore[no-untyped-def]
    spec = SandboxSpec(
        policy,
        role.resolve(cwd=WS, home=Path("/h"), environ={}),
        WS,
        Path("/h"),
        git_configs=(Path("/h/.gitconfig"),),
    )
    the_plan = plan(spec, Facts(kinds, kw.get("pointers"), kw.get("configs")))  # type: ignore[arg-type]
    return list(
        bwrap_argv(
            the_plan, ("cmd",), bwrap="bwrap", seccomp_fd=3, status_fd=4, drop=kw.get("drop")
        )
    )  # type: ignore[arg-type]


def has(argv: list[str], *seq: str) -> bool:
    n = len(seq)
    return any(tuple(argv[i : i + n]) == seq for i in range(len(argv) - n + 1))


@pytest.mark.parametrize(
    ("policy", "role", "kinds", "present", "absent"),
    [
        # workspace-write, developer: workspace writable, .git bound writable, config/hooks ro,
        # info and .anvil missing/present handled, network off.
        (
            WorkspaceWrite(),
            DEFAULT_ROLE,
            REPO,
            [
                ("--bind", "/w", "/w"),
                ("--bind", "/w/.git", "/w/.git"),
                ("--ro-bind", "/w/.git/config", "/w/.git/config"),
                ("--ro-bind", "/w/.git/hooks", "/w/.git/hooks"),
                ("--perms", "0555", "--tmpfs", "/w/.git/info"),
                ("--ro-bind", "/w/.anvil", "/w/.anvil"),
                ("--unshare-net",),
            ],
            [("--share-net",)],
        ),
        # network on: no --unshare-net
        (
            WorkspaceWrite(network=True),
            DEFAULT_ROLE,
            REPO,
            [("--bind", "/w", "/w")],
            [("--unshare-net",)],
        ),
        # read-only policy: nothing writable, .git read-only, no placeholders
        (
            ReadOnly(),
            DEFAULT_ROLE,
            REPO,
            [("--ro-bind", "/w", "/w"), ("--ro-bind", "/w/.git", "/w/.git")],
            [("--bind", "/w", "/w"), ("--tmpfs", "/w/.git/info")],
        ),
        # reviewer under workspace-write: its role has no writable path, .git read-only
        (
            WorkspaceWrite(),
            load_role("reviewer"),
            REPO,
            [("--ro-bind", "/w", "/w"), ("--ro-bind", "/w/.git", "/w/.git")],
            [("--bind", "/w", "/w"), ("--bind", "/w/.git", "/w/.git")],
        ),
        # missing .git and .anvil in a writable root: empty read-only placeholders
        (
            WorkspaceWrite(),
            DEFAULT_ROLE,
            {"/w": D},
            [
                ("--perms", "0555", "--tmpfs", "/w/.git", "--remount-ro", "/w/.git"),
                ("--perms", "0555", "--tmpfs", "/w/.anvil"),
            ],
            [],
        ),
        # a nested repository's config and hooks are protected too
        (
            WorkspaceWrite(),
            DEFAULT_ROLE,
            {**REPO, "/w/sub/.git": D, "/w/sub/.git/hooks": D, "/w/sub/.git/config": F},
            [
                ("--ro-bind", "/w/sub/.git/hooks", "/w/sub/.git/hooks"),
                ("--ro-bind", "/w/sub/.git/config", "/w/sub/.git/config"),
            ],
            [],
        ),
        # a worktree: the pointer file is read-only, its gitdir bound with protections
        (
            WorkspaceWrite(),
            DEFAULT_ROLE,
            {"/w": D, "/w/.git": F, "/r/.git/worktrees/w": D, "/r/.git/worktrees/w/config": F},
            [
                ("--ro-bind", "/w/.git", "/w/.git"),
                ("--bind", "/r/.git/worktrees/w", "/r/.git/worktrees/w"),
            ],
            [],
        ),
        # the system view and the fixed hardening
        (
            ReadOnly(),
            DEFAULT_ROLE,
            {"/w": D},
            [
                ("--ro-bind", "/usr", "/usr"),
                ("--symlink", "usr/bin", "/bin"),
                ("--tmpfs", "/tmp"),
                ("--tmpfs", "/run"),
                ("--tmpfs", "/h"),
                ("--new-session",),
                ("--die-with-parent",),
                ("--disable-userns",),
                ("--unshare-pid",),
                ("--remount-ro", "/"),
                ("--seccomp", "3"),
                ("--json-status-fd", "4"),
                ("--chdir", "/w", "--", "cmd"),
            ],
            [],
        ),
    ],
)
def test_argv(policy, role, kinds, present, absent) -> None:  # type: ignore[no-untyped-def]
    argv = argv_for(policy, role, kinds, pointers={"/w/.git": "/r/.git/worktrees/w"})
    for seq in present:
        assert has(argv, *seq), (seq, argv)
    for seq in absent:
        assert not has(argv, *seq), (seq, argv)


def test_binds_come_parents_first() -> None:
    argv = argv_for(WorkspaceWrite(), DEFAULT_ROLE, REPO)
    assert argv.index("/w/.git/config") > argv.index("/w/.git") > argv.index("/w")


def test_drop_precedes_bwrap() -> None:
    argv = argv_for(ReadOnly(), DEFAULT_ROLE, {"/w": D}, drop=Drop(1000, 1000))
    assert argv[:2] == ["setpriv", "--pdeathsig=KILL"]
    assert "--reuid=1000" in argv
    assert "--bounding-set=-all" in argv
    assert argv.index("--no-new-privs") < argv.index("bwrap")
    assert argv_for(ReadOnly(), DEFAULT_ROLE, {"/w": D})[:3] == [
        "setpriv",
        "--pdeathsig=KILL",
        "--",
    ]


@pytest.mark.parametrize("path", ["/w/.git", "/w/.anvil"])
def test_protected_symlink_in_a_writable_root_is_refused(path: str) -> None:
    with pytest.raises(SandboxRefused, match="symbolic link"):
        argv_for(WorkspaceWrite(), DEFAULT_ROLE, {"/w": D, path: L})


def test_writable_root_may_not_contain_the_system() -> None:
    role = Role(name="x", read_write=("/",))
    with pytest.raises(SandboxRefused, match="contains the system"):
        argv_for(WorkspaceWrite(), role, {"/": D, "/w": D})


def test_no_environment_value_is_on_the_command_line() -> None:
    argv = argv_for(WorkspaceWrite(), DEFAULT_ROLE, REPO)
    assert "--setenv" not in argv


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b'{ "child-pid": 5 }\n{ "exit-code": 3 }\n', 3),
        (b'{ "child-pid": 5 }\n', None),
        (b"", None),
        (b'garbage\n{"future": 1}\n{"exit-code": 0}', 0),
    ],
)
def test_parse_status(data: bytes, code: int | None) -> None:
    assert parse_status(data) == code


def test_roles_cannot_grant_full_access_and_templates_expand() -> None:
    with pytest.raises(Exception, match="only the user grants full access"):
        parse_role("x", "full_access: true\n")
    role = parse_role("x", "filesystem:\n  read_only: ['{CARGO_HOME}/reg', '{HOME}/a']\n")
    resolved = role.resolve(cwd=WS, home=Path("/h"), environ={})
    assert resolved.read_only == (Path("/h/a"),)
    assert resolved.skipped
    for name in ("developer", "reviewer", "planner", "tester"):
        assert load_role(name).name == name


def plan_for(kinds: dict[str, PathKind]):  # type: ignore[no-untyped-def]
    spec = SandboxSpec(
        WorkspaceWrite(), DEFAULT_ROLE.resolve(cwd=WS, home=Path("/h"), environ={}), WS, Path("/h")
    )
    return plan(spec, Facts(kinds))


def test_a_git_directory_keeps_every_name_git_reads_configuration_or_programs_from() -> None:
    kinds = {**REPO, "/w/.git/objects": D, "/w/.git/objects/info": D, "/w/.git/modules": D}
    argv = argv_for(WorkspaceWrite(), DEFAULT_ROLE, kinds)
    for seq in [
        ("--bind", "/w/.git", "/w/.git"),  # the top level: lock files beside index and HEAD
        ("--ro-bind", "/w/.git/commondir", "/w/.git/commondir"),  # seeded with "."
        ("--ro-bind", "/dev/null", "/w/.git/config.worktree"),
        ("--ro-bind", "/w/.git/modules", "/w/.git/modules"),
        ("--ro-bind", "/w/.git/objects/info", "/w/.git/objects/info"),
        ("--perms", "0555", "--tmpfs", "/w/.git/branches"),
        ("--perms", "0555", "--tmpfs", "/w/.git/remotes"),
    ]:
        assert has(argv, *seq), seq
    the_plan = plan_for(kinds)
    assert the_plan.seeds == ((Path("/w/.git/commondir"), b".\n"),)
    assert the_plan.gitdirs == (Path("/w/.git"),)
    assert Path("/w/.git/config.worktree") in the_plan.placeholders


def test_a_linked_worktree_git_directory_is_bound_with_its_pointers_read_only() -> None:
    kinds = {
        **REPO,
        "/w/.git/worktrees": D,
        "/w/.git/worktrees/wt": D,
        "/w/.git/worktrees/wt/commondir": F,
        "/w/.git/worktrees/wt/gitdir": F,
    }
    argv = argv_for(WorkspaceWrite(), DEFAULT_ROLE, kinds)
    admin = "/w/.git/worktrees/wt"
    assert has(argv, "--bind", admin, admin)
    assert has(argv, "--ro-bind", f"{admin}/commondir", f"{admin}/commondir")
    assert has(argv, "--ro-bind", f"{admin}/gitdir", f"{admin}/gitdir")
    assert has(argv, "--ro-bind", "/dev/null", f"{admin}/config.worktree")
    assert f"{admin}/hooks" not in argv  # a linked worktree's hooks are the common directory's
    assert Path(admin) in plan_for(kinds).gitdirs


def test_a_read_only_role_gets_no_seeds_or_writable_git_directories() -> None:
    argv = argv_for(ReadOnly(), DEFAULT_ROLE, REPO)
    assert "/w/.git/commondir" not in argv
    assert has(argv, "--ro-bind", "/w/.git", "/w/.git")


@pytest.mark.parametrize("name", ["developer", "tester", "reviewer", "planner", "conductor"])
def test_every_env_file_is_masked_but_committed_templates(name: str) -> None:
    kinds = {
        **REPO,
        "/w/.env": F,
        "/w/.env.local": F,
        "/w/.env.production": F,
        "/w/.envs": D,
        "/w/.env.example": F,
        "/w/env.txt": F,
    }

    role = load_role(name)
    spec = SandboxSpec(
        WorkspaceWrite(), role.resolve(cwd=WS, home=Path("/h"), environ={}), WS, Path("/h")
    )
    argv = list(
        bwrap_argv(plan(spec, Facts(kinds)), ("cmd",), bwrap="bwrap", seccomp_fd=3, status_fd=4)
    )
    for secret in ("/w/.env", "/w/.env.local", "/w/.env.production"):
        assert has(argv, "--ro-bind", "/dev/null", secret), secret
    assert has(argv, "--tmpfs", "/w/.envs")
    assert "/w/.env.example" not in argv
    assert "/w/env.txt" not in argv


@pytest.mark.parametrize("husky", [D, PathKind.MISSING])
def test_hooks_and_included_configuration_in_the_workspace_are_held(husky: PathKind) -> None:
    kinds = {**REPO, "/w/.husky": husky, "/w/team.gitconfig": F}
    configs = {
        "/w/.git/config": (("core.hookspath", ".husky"), ("include.path", "../team.gitconfig")),
        "/w/team.gitconfig": (("includeif.onbranch:main.path", "more.gitconfig"),),
        "/h/.gitconfig": (("include.path", "~/shared.gitconfig"),),
    }
    argv = argv_for(WorkspaceWrite(), DEFAULT_ROLE, kinds, configs=configs)
    if husky is D:
        assert has(argv, "--ro-bind", "/w/.husky", "/w/.husky")
    else:
        assert has(argv, "--perms", "0555", "--tmpfs", "/w/.husky")
    assert has(argv, "--ro-bind", "/w/team.gitconfig", "/w/team.gitconfig")
    assert has(argv, "--ro-bind", "/dev/null", "/w/more.gitconfig")  # followed, held
    assert "/h/shared.gitconfig" not in argv  # outside every writable root: nothing to do


def test_a_seed_is_written_once_and_removed_by_its_last_user(tmp_path: Path) -> None:
    seed = tmp_path / "commondir"
    holder = _Placeholders()
    holder.acquire((), ((seed, b".\n"),))
    holder.acquire((), ((seed, b".\n"),))
    assert seed.read_bytes() == b".\n"
    holder.release((seed,))
    assert seed.exists()
    holder.release((seed,))
    assert not seed.exists()
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b".\n")
    holder.acquire((), ((theirs, b".\n"),))
    holder.release((theirs,))
    assert theirs.exists()  # there before: never ours to remove


def test_a_seed_that_cannot_be_written_refuses_the_command(tmp_path: Path) -> None:
    holder = _Placeholders()
    with pytest.raises(SandboxRefused, match="Cannot write"):
        holder.acquire((tmp_path / "p",), ((tmp_path / "missing" / "commondir", b".\n"),))
    assert not holder.holds(tmp_path / "p")  # what it took is released


@pytest.mark.parametrize(
    ("target", "refused"),
    [(".env.development", False), ("/elsewhere/app.env", False), ("notes.txt", True)],
)
def test_a_hidden_symlink_is_refused_only_when_its_target_is_in_view(
    target: str, refused: bool
) -> None:
    class Links(Facts):
        def symlink_target(self, path: Path) -> str:
            return target if path == Path("/w/.env.local") else super().symlink_target(path)

    kinds = {**REPO, "/w/.env.local": L, "/w/.env.development": F, "/w/notes.txt": F}
    spec = SandboxSpec(
        WorkspaceWrite(), DEFAULT_ROLE.resolve(cwd=WS, home=Path("/h"), environ={}), WS, Path("/h")
    )
    if refused:
        with pytest.raises(SandboxRefused, match="symbolic link"):
            plan(spec, Links(kinds))
    else:
        the_plan = plan(spec, Links(kinds))
        masked = {m.dest for m in the_plan.mounts if m.op.value == "dev-null"}
        assert Path("/w/.env.development") in masked
