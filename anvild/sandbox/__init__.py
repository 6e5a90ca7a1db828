"""Authority boundaries for what an agent may touch.

`anvild.sandbox.files.FileAccess` is the one boundary every native file tool (read, write, edit,
glob, grep) goes through. The policies below say how a subprocess (the bash tool) may run:

- `ReadOnly(network)`: the command sees a minimal read-only view of the system and the workspace;
- `WorkspaceWrite(network)`: the same, plus the role's writable roots (protected paths excluded);
- `FullAccess(granted_by)`: no sandbox at all.

The sandboxed policies run under bubblewrap (`anvild.sandbox.bwrap`, role configs in
`anvild.sandbox.roles`, the seccomp program in `anvild.sandbox.seccomp`, the startup check in
`anvild.sandbox.probe`). If the sandbox cannot be set up, the command is refused and never run
unsandboxed. Nothing defaults to `FullAccess`: `ToolContext` defaults to `ReadOnly()`. Only the
user (user config or command line) may grant `FullAccess`, never a role or a project file
(DESIGN section 5); `granted_by` records who did, for the session record.

Errors of the subprocess sandbox share one root:

    SandboxError
     ├── SandboxUnavailable   this machine cannot run the sandbox (bwrap, user namespaces,
     │                        seccomp or the privilege drop missing); the message says what
     │                        to install or enable
     ├── SandboxRefused       the sandbox works, but this command cannot be confined as asked
     │                        (an unwritable workspace, a protected path that is a symlink)
     ├── SandboxFailed        bubblewrap started but never ran the command (its status stream
     │                        ended without an exit code)
     └── RoleConfigError      a sandbox role file is invalid (the file, the key, what was expected)

This package imports nothing from `anvild.agent`: tools depend on the boundary, not the reverse.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs


@attrs.frozen
class ReadOnly:
    """Subprocesses see the filesystem read-only; `network` says whether they may reach it."""

    network: bool = False


@attrs.frozen
class WorkspaceWrite:
    """Subprocesses may write the workspace (protected paths excluded) and nothing else."""

    network: bool = False


@attrs.frozen
class FullAccess:
    """No sandbox at all: the process can reach everything the daemon can, the 9P socket too."""

    granted_by: str


SandboxPolicy: TypeAlias = ReadOnly | WorkspaceWrite | FullAccess


class SandboxError(Exception):
    """Root of the subprocess sandbox's errors. The message is meant for a person (or the model)
    and says what to do."""


class SandboxUnavailable(SandboxError):
    """The machine cannot run the sandbox at all; sandboxed commands are refused."""


class SandboxRefused(SandboxError):
    """This command cannot be confined as its policy asks; it is refused, not run."""


class SandboxFailed(SandboxError):
    """bubblewrap never started the command (setup failed); the command did not run."""


class RoleConfigError(SandboxError):
    """A sandbox role file is malformed."""


def policy_name(policy: SandboxPolicy | None) -> str:
    """The policy as a person reads it: `read-only`, `workspace-write (network on)`, ..."""
    match policy:
        case ReadOnly(network=net) | WorkspaceWrite(network=net):
            kind = "read-only" if isinstance(policy, ReadOnly) else "workspace-write"
            return f"{kind} (network {'on' if net else 'off'})"
        case FullAccess(granted_by=who):
            return f"full access (no sandbox; granted by {who})"
        case _:
            return "none"


__all__ = [
    "FullAccess",
    "ReadOnly",
    "RoleConfigError",
    "SandboxError",
    "SandboxFailed",
    "SandboxPolicy",
    "SandboxRefused",
    "SandboxUnavailable",
    "WorkspaceWrite",
    "policy_name",
]
