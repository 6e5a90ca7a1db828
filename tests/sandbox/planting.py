"""The git planting vectors (docs/sandbox-escapes.md, "Git planting") as data, and the host side
of each attack. Free of pytest: `plant_unprivileged.py` runs the same attacks as an unprivileged
user.

A vector's `plant` runs in the workspace inside the sandbox, with `$PWN` the path of a program it
wrote there that creates a marker outside the workspace (where the sandbox cannot write). Then the
host's git, with the user's full authority, runs status, diff, log -p and commit in the workspace
and in each of the vector's `places`, then its `triggers`. The attack worked if the marker exists,
if the name in `leaves` exists, or if host git can read the object named in `object_file`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import attrs

FSMONITOR = "printf '[core]\\n\\tfsmonitor = %s\\n' \"$PWN\""
EVIL_COMMON = f"mkdir -p evil/objects evil/refs/heads && {FSMONITOR} > evil/config"
MAKE_SUB = "git init -q -b main {0} && (cd {0} && echo s > s && git add -A && git commit -qm s)"


@attrs.frozen
class Vector:
    name: str
    plant: str
    setup: tuple[tuple[str, ...], ...] = ()  # host git commands in the workspace, before
    places: tuple[str, ...] = ()  # where else host git runs, relative to the workspace
    triggers: tuple[tuple[str, ...], ...] = ()  # extra host git commands in the workspace
    leaves: str = ""
    object_file: str = ""


WORKTREE_CONFIG = (
    ("config", "core.repositoryformatversion", "1"),
    ("config", "extensions.worktreeConfig", "true"),
)
LINKED = (("worktree", "add", "-q", "../linked-wt"),)

VECTORS = (
    Vector("commondir", f'{EVIL_COMMON} && echo "$PWD/evil" > .git/commondir'),
    Vector("config_worktree", f"{FSMONITOR} > .git/config.worktree", setup=WORKTREE_CONFIG),
    Vector(
        "worktree_commondir",
        f'{EVIL_COMMON} && echo "$PWD/evil" > .git/worktrees/linked-wt/commondir',
        setup=LINKED,
        places=("../linked-wt",),
    ),
    Vector(
        "worktree_config",
        f"{FSMONITOR} > .git/worktrees/linked-wt/config.worktree",
        setup=(*WORKTREE_CONFIG, *LINKED),
        places=("../linked-wt",),
    ),
    Vector(
        "new_worktree",
        f"{EVIL_COMMON} && mkdir -p .git/worktrees/evil && "
        'echo "$PWD/evil" > .git/worktrees/evil/commondir && '
        'echo "$PWD/evilwt/.git" > .git/worktrees/evil/gitdir && '
        "git rev-parse HEAD > .git/worktrees/evil/HEAD && mkdir evilwt && "
        'echo "gitdir: $PWD/.git/worktrees/evil" > evilwt/.git',
        places=("evilwt",),
    ),
    Vector(
        "modules",
        "git init -q --bare .git/modules/evil && "
        "printf '[core]\\n\\tbare = false\\n\\tworktree = ../../../evilsub\\n"
        '\\tfsmonitor = %s\\n\' "$PWN" > .git/modules/evil/config && mkdir evilsub && '
        "echo 'gitdir: ../.git/modules/evil' > evilsub/.git && "
        'git update-index --add --cacheinfo "160000,$(git rev-parse HEAD),evilsub"',
        places=("evilsub",),
    ),
    Vector(
        "alternates",
        "git init -q --bare store.git && "
        "echo planted-object | git --git-dir=store.git hash-object -w --stdin > alt-sha; "
        'echo "$PWD/store.git/objects" > .git/objects/info/alternates',
        object_file="alt-sha",
    ),
    Vector(
        "nested_gitlink",
        f'{MAKE_SUB.format("sub")} && git -C sub config core.fsmonitor "$PWN" && git add sub',
        places=("sub",),
    ),
    Vector(
        "nested_hook",
        f"{MAKE_SUB.format('hooked')} && "
        'printf \'#!/bin/sh\\n"%s"\\n\' "$PWN" > hooked/.git/hooks/pre-commit && '
        "chmod +x hooked/.git/hooks/pre-commit && git add hooked",
        places=("hooked",),
    ),
    Vector(
        "nested_textconv",
        "git init -q -b main tc && (cd tc && echo '* diff=evil' > .gitattributes && "
        "echo a > a && git add -A && git commit -qm a && echo b > a && git commit -qam b && "
        'git config diff.evil.textconv "$PWN")',
        places=("tc",),
    ),
    Vector(
        "nested_bare",
        "git clone -q --bare . evil.git && git --git-dir=evil.git config diff.evil.textconv "
        "\"$PWN\" && mkdir -p evil.git/info && echo '* diff=evil' > evil.git/info/attributes",
        places=("evil.git",),
    ),
    Vector(
        "rebase_exec",
        "echo r > r && git add r && git commit -qm r && "
        'GIT_SEQUENCE_EDITOR="sed -i 1ibreak" git rebase -q -i --exec "$PWN" HEAD~1',
        triggers=(("rebase", "--continue"),),
    ),
    Vector(
        "hooks_path",
        'mkdir -p .husky && printf \'#!/bin/sh\\n"%s"\\n\' "$PWN" > .husky/pre-commit && '
        "chmod +x .husky/pre-commit",
        setup=(("config", "core.hooksPath", ".husky"),),
    ),
    Vector(
        "include_path",
        f"{FSMONITOR} > team.gitconfig",
        setup=(("config", "include.path", "../team.gitconfig"),),
    ),
    Vector("unknown_name", "echo x > .git/anvil-unknown", leaves=".git/anvil-unknown"),
)

HOST_COMMANDS = (
    ("status",),
    ("diff",),
    ("log", "-p", "-2"),
    ("commit", "-q", "--allow-empty", "-m", "host"),
)


def plant_script(vector: Vector, marker: Path) -> str:
    """The sandboxed command: write the program, then plant. Each step may be refused."""
    return "\n".join(
        [
            "export GIT_AUTHOR_NAME=m GIT_AUTHOR_EMAIL=m@x GIT_COMMITTER_NAME=m "
            "GIT_COMMITTER_EMAIL=m@x",
            'PWN="$PWD/.pwn.sh"',
            f'printf \'#!/bin/sh\\ntouch {marker}\\nexit 0\\n\' > "$PWN" && chmod +x "$PWN"',
            vector.plant,
        ]
    )


def host_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The user's git, unsandboxed. As root the workspace belongs to another uid, which git
    refuses unless told it is safe: the user's own workspace is."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_EDITOR": "true",
        "GIT_AUTHOR_NAME": "u",
        "GIT_AUTHOR_EMAIL": "u@x",
        "GIT_COMMITTER_NAME": "u",
        "GIT_COMMITTER_EMAIL": "u@x",
    }
    return subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def make_repo(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for args in (
        ("init", "-q", "-b", "main", "."),
        ("commit", "-q", "--allow-empty", "-m", "init"),
    ):
        done = host_git(path, *args)
        assert done.returncode == 0, done.stderr
    (path / "README").write_text("hello\n")
    assert host_git(path, "add", "README").returncode == 0
    assert host_git(path, "commit", "-q", "-m", "readme").returncode == 0


def set_up(vector: Vector, ws: Path) -> None:
    make_repo(ws)
    for args in vector.setup:
        done = host_git(ws, *args)
        assert done.returncode == 0, (args, done.stderr)


def attack_worked(vector: Vector, ws: Path, marker: Path) -> list[str]:
    """Run the user's git where the vector aims; what shows that the plant took effect."""
    for place in (Path("."), *map(Path, vector.places)):
        where = Path(os.path.normpath(ws / place))
        if where.is_dir():
            for args in HOST_COMMANDS:
                host_git(where, *args)
    for args in vector.triggers:
        host_git(ws, *args)
    evidence = []
    if marker.exists():
        evidence.append(f"the planted program ran ({marker})")
    if vector.leaves and os.path.lexists(ws / vector.leaves):
        evidence.append(f"{vector.leaves} is there")
    if vector.object_file and (ws / vector.object_file).is_file():
        sha = (ws / vector.object_file).read_text().strip()
        if sha and host_git(ws, "cat-file", "-e", sha).returncode == 0:
            evidence.append(f"host git reads the planted object {sha}")
    return evidence
