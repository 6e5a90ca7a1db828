"""Authority boundaries for what an agent may touch.

`files.FileAccess` confines every native file tool. Subprocess policies: `ReadOnly(network)`,
`WorkspaceWrite(network)` (plus the role's writable roots, protected paths excluded), both run
under bubblewrap (`bwrap`, `roles`, `seccomp`, `probe`), and `FullAccess(granted_by)`: no
sandbox. A sandbox that cannot be set up refuses the command; it never runs unsandboxed.
Nothing defaults to `FullAccess` (`ToolContext` defaults to `ReadOnly()`); only the user grants
it, never a role or project file. Imports nothing from `anvild.agent` (tools depend on this).

    SandboxError
     ├── SandboxUnavailable   this machine cannot run the sandbox (says what to install)
     ├── SandboxRefused       this command cannot be confined as asked
     ├── SandboxFailed        bubblewrap never ran the command (no exit code)
     └── RoleConfigError      an invalid sandbox role file (file, key, what was expected)
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
