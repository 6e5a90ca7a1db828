"""The git CLI, run for the bead store with a fixed identity and none of the user's settings.

Every command is `git -C <repo> -c ... <args>` through `trio.run_process`, with an environment
built from scratch: PATH only from the daemon's, `HOME` and `XDG_CONFIG_HOME` pointed into the
repository's `.git` (no `~/.gitconfig`, no `~/.config/git/config`), `GIT_CONFIG_NOSYSTEM=1` and
`GIT_CONFIG_GLOBAL=/dev/null`, a fixed author and committer (`anvild <anvild@localhost>`), the C
locale (messages we can quote), no terminal prompts. The `-c` options turn off what could run
code or wait: hooks (`core.hooksPath=/dev/null`, and `--no-verify` on commit), signing, the
fsmonitor, a detached background gc, the `ext::` transport (a URL that runs a command). Objects
and refs are fsynced (`core.fsync=committed`), so a commit that returned is on disk. For a
remote: ssh runs in batch mode (never asks) with the daemon's `SSH_AUTH_SOCK`, and `call` bounds
a command by a time limit and hands back its exit status instead of raising.

Why the CLI and not a library: docs/decisions.md (2026-11-30, "Beads: the git CLI").
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from anvild.beads.errors import BeadStoreError

__all__ = ["AUTHOR", "EMAIL", "Git", "GitResult"]

AUTHOR: Final = "anvild"
EMAIL: Final = "anvild@localhost"

_OPTIONS: Final = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgsign=false",
    "-c", "core.fsmonitor=false",
    "-c", "core.autocrlf=false",
    "-c", "gc.autoDetach=false",
    "-c", "core.fsync=committed",
    "-c", "init.defaultBranch=main",
    "-c", "protocol.ext.allow=never",
)  # fmt: skip


@attrs.frozen
class GitResult:
    """What one `Git.call` did: the exit status (-1: timed out) and both outputs."""

    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def message(self) -> str:
        """git's own message (stderr, else stdout), one line per line, for a person."""
        text = (self.stderr or self.stdout).decode("utf-8", "replace").strip()
        return " ".join(text.split()) or f"exit {self.returncode}"


class Git:
    """Runs git in one repository."""

    def __init__(self, repo: Path, *, program: str = "git") -> None:
        self.repo = repo
        self.program = program
        private = str(repo / ".git")
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": private,
            "XDG_CONFIG_HOME": private,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_AUTHOR_NAME": AUTHOR,
            "GIT_AUTHOR_EMAIL": EMAIL,
            "GIT_COMMITTER_NAME": AUTHOR,
            "GIT_COMMITTER_EMAIL": EMAIL,
            "GIT_TERMINAL_PROMPT": "0",
            "LC_ALL": "C",
            "GIT_EDITOR": "true",
            "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        }
        if agent := os.environ.get("SSH_AUTH_SOCK"):
            self.env["SSH_AUTH_SOCK"] = agent

    async def run(self, *args: str, check: bool = True) -> bytes:
        """Run `git args...`; its stdout. A failure (when `check`) is a `BeadStoreError` that
        quotes git's own message."""
        done = await self.call(*args)
        if check and done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").strip() or "no message"
            raise BeadStoreError(
                f"git {args[0]} failed in {self.repo} (exit {done.returncode}): {message}"
            )
        return done.stdout

    async def call(self, *args: str, limit: float = float("inf")) -> GitResult:
        """Run `git args...` for at most `limit` seconds (then it is killed: exit -1)."""
        argv: Sequence[str] = [self.program, "-C", str(self.repo), *_OPTIONS, *args]
        with trio.move_on_after(limit):
            try:
                done = await trio.run_process(
                    argv,
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                )
            except FileNotFoundError as exc:
                raise BeadStoreError(
                    f"cannot run {self.program!r}: it is not installed or not on PATH; the bead "
                    "store needs git (apt-get install git)"
                ) from exc
            return GitResult(done.returncode, bytes(done.stdout), bytes(done.stderr))
        return GitResult(-1, b"", f"git {args[0]} timed out after {limit:g} s".encode())
