"""Authority boundaries for what an agent may touch.

`anvild.sandbox.files.FileAccess` is the one boundary every native file tool (read, write, edit,
glob, grep) goes through. The policies below say how a subprocess (the bash tool) may run. Until
the bubblewrap sandbox lands, only `FullAccess` can run a command at all, and nothing defaults to
it: `ToolContext` defaults to `ReadOnly()`, under which the shell tool fails closed. Only the user
(user config or command line) may grant `FullAccess`, never a role or a project file
(DESIGN section 5); `granted_by` records who did, for the session record.

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

__all__ = ["FullAccess", "ReadOnly", "SandboxPolicy", "WorkspaceWrite"]
