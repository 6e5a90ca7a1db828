"""`Sandbox`: a policy and a role, ready to confine commands (`prepare(command, cwd)` per command).

`prepare` is the only way from a command to a launch: the startup probe (`anvild.sandbox.probe`,
cached) must have passed, `plan` lays the filesystem out, `check_access` refuses what the
dropped uid cannot reach, and `bwrap_argv` builds the command line behind the supervisor
(`anvild.sandbox.bwrap` has the layout and the threat model). It raises `SandboxUnavailable` or
`SandboxRefused` and never returns something that would run unconfined. It lives apart from
`bwrap` because it needs the probe, and the probe runs `bwrap`'s own plan.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

from anvild.sandbox import ReadOnly, WorkspaceWrite, policy_name, probe, seccomp
from anvild.sandbox.bwrap import (
    HostFacts,
    Launch,
    LiveFacts,
    Plan,
    SandboxSettings,
    SandboxSpec,
    bwrap_argv,
    check_access,
    default_hidden,
    plan,
    sandbox_env,
    supervisor_argv,
    user_git_configs,
    which,
)
from anvild.sandbox.roles import DEFAULT_ROLE, Role

DEFAULT_SETTINGS: Final = SandboxSettings()


@attrs.frozen
class Sandbox:
    """A policy and a role, ready to confine commands: `prepare(command, cwd)` per command."""

    policy: ReadOnly | WorkspaceWrite
    role: Role = DEFAULT_ROLE
    settings: SandboxSettings = DEFAULT_SETTINGS

    def describe(self) -> str:
        return f"{policy_name(self.policy)}, role {self.role.name}"

    def plan_for(self, cwd: Path, *, facts: HostFacts | None = None) -> Plan:
        home = Path(os.path.expanduser("~"))
        canonical_cwd = Path(os.path.realpath(cwd))
        resolved = self.role.resolve(cwd=canonical_cwd, home=home)
        resolved = attrs.evolve(
            resolved,
            read_only=tuple(Path(os.path.realpath(p)) for p in resolved.read_only),
            read_write=tuple(Path(os.path.realpath(p)) for p in resolved.read_write),
        )
        spec = SandboxSpec(
            policy=self.policy,
            role=resolved,
            cwd=canonical_cwd,
            home=home,
            hidden=default_hidden(home),
            nested_git_limit=self.settings.nested_git_limit,
            git_configs=user_git_configs(home),
        )
        return plan(spec, facts if facts is not None else LiveFacts())

    def prepare(self, command: Sequence[str], cwd: Path) -> Launch:
        """Everything needed to run `command` in the sandbox. Raises `SandboxUnavailable`
        (the machine cannot sandbox) or `SandboxRefused` (this command cannot be confined as
        asked); never returns something that would run unconfined."""
        probe.ensure_available(self.settings)
        bwrap = which(self.settings.bwrap)
        setpriv = which(self.settings.setpriv) or self.settings.setpriv
        if bwrap is None:  # removed since the probe passed: probe again, which says why
            probe.clear_cache()
            probe.ensure_available(self.settings)
            bwrap = self.settings.bwrap
        drop = self.settings.drop()
        the_plan = self.plan_for(cwd)
        check_access(the_plan, drop)
        env = sandbox_env(Path(os.path.expanduser("~")), passthrough=self.settings.passthrough)
        seccomp_fd = seccomp.filter_fd()
        opened = [seccomp_fd]
        try:
            status_read, status_write = os.pipe()
            opened += (status_read, status_write)
            lifeline_read, lifeline_write = os.pipe()
            opened += (lifeline_read, lifeline_write)
            supervisor = supervisor_argv(lifeline_read)
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise
        argv = supervisor + bwrap_argv(
            the_plan,
            command,
            bwrap=bwrap,
            seccomp_fd=seccomp_fd,
            status_fd=status_write,
            drop=drop,
            setpriv=setpriv,
        )
        return Launch(
            argv,
            env,
            the_plan,
            seccomp_fd=seccomp_fd,
            status_read=status_read,
            status_write=status_write,
            lifeline_read=lifeline_read,
            lifeline_write=lifeline_write,
            settings=self.settings,
        )


__all__ = ["Sandbox"]
