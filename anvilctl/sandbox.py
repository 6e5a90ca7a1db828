"""`anvilctl sandbox [--policy P | --role R] [--cwd D] [--network] -- CMD ...`

Runs a command exactly as the bash tool would (the same `anvild.sandbox.confine.Sandbox.prepare`:
probe, layout, privilege drop, seccomp, environment, status stream), with the terminal's stdin
and stdout, and prints the policy in force, the role as read (a file in AnviLLM's schema shows
here in anvil's keys) and the filesystem layout on stderr first. Users debug their sandbox role
files with it. It never runs the command unsandboxed: a sandbox that cannot be
set up is reported and the exit status is 125. `full-access` is not offered: there is nothing to
debug without a sandbox.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from anvilctl import add_command
from anvild.sandbox import ReadOnly, SandboxError, WorkspaceWrite, policy_name
from anvild.sandbox.bwrap import Launch, describe_plan
from anvild.sandbox.confine import Sandbox
from anvild.sandbox.roles import DEFAULT_ROLE, Role, load_role

SANDBOX_FAILED = 125


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        sub,
        "sandbox",
        __doc__,
        1,
        help="run a command in the bash tool's sandbox (debug role files)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--policy", choices=("read-only", "workspace-write"), help="a bare policy (default role)"
    )
    which.add_argument("--role", help="a sandbox role (sandbox-roles/ROLE.yaml)")
    parser.add_argument("--cwd", type=Path, default=Path.cwd(), help="the workspace (default .)")
    parser.add_argument("--network", action="store_true", help="allow the network")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ...")


class Ran(NamedTuple):
    """A confined command's end: its output as text (stdout is "" when not captured), the
    sandbox's refusal (`Launch.verdict`) and the report of the check after it (`Launch.inspect`)."""

    returncode: int
    stdout: str
    stderr: str
    refusal: str | None
    report: str | None

    @property
    def status(self) -> int:
        """The exit status as a shell gives it (128 + N for a death by signal N)."""
        return self.returncode if self.returncode >= 0 else 128 - self.returncode


def run_launch(
    launch: Launch,
    *,
    capture_stdout: bool = True,
    stdin: int | None = None,
    timeout: float | None = None,
) -> Ran:
    """Run a prepared launch to its end as the bash tool does (the process, the verdict, the
    check after the command) and close it. A timeout raises `subprocess.TimeoutExpired` (with
    the output so far), the launch closed."""
    with launch:
        done = subprocess.run(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            cwd=launch.cwd,
            stdin=stdin,
            stdout=subprocess.PIPE if capture_stdout else None,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
        stderr = done.stderr.decode("utf-8", "replace")
        refusal = launch.verdict(done.returncode, stderr)
        report = launch.inspect()
    stdout = done.stdout.decode("utf-8", "replace") if capture_stdout else ""
    return Ran(done.returncode, stdout, stderr, refusal, report)


def describe_role(role: Role) -> str:
    """The role as the loader read it, in anvil's keys, whatever schema its file used."""
    source = role.source or "built in"
    return "\n".join(
        [
            f"role {role.name} ({source}):",
            f"  network: {'true' if role.network else 'false'}",
            f"  git: {role.git.value}",
            f"  filesystem.read_only: {list(role.read_only)}",
            f"  filesystem.read_write: {list(role.read_write)}",
            f"  filesystem.hidden: {list(role.hidden)}",
        ]
    )


def run(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("anvilctl sandbox: give the command after --", file=sys.stderr)
        return 2
    try:
        role = load_role(args.role) if args.role else DEFAULT_ROLE
        if args.role:
            policy: ReadOnly | WorkspaceWrite = role.default_policy()
            if args.network:
                policy = type(policy)(network=True)
        elif args.policy == "read-only":
            policy = ReadOnly(network=args.network)
        else:
            policy = WorkspaceWrite(network=args.network)
        sandbox = Sandbox(policy, role)
        print(f"policy: {policy_name(policy)}; role: {role.name}", file=sys.stderr)
        print(describe_role(role), file=sys.stderr)
        print(describe_plan(sandbox.plan_for(args.cwd)), file=sys.stderr)
        launch = sandbox.prepare(("bash", "-c", 'exec "$@"', "sandbox", *argv), args.cwd)
    except SandboxError as exc:
        print(f"anvilctl sandbox: {exc}", file=sys.stderr)
        return SANDBOX_FAILED
    ran = run_launch(launch, capture_stdout=False)
    sys.stderr.write(ran.stderr)
    if ran.report is not None:
        print(f"anvilctl sandbox: {ran.report}", file=sys.stderr)
    if ran.refusal is not None:
        print(f"anvilctl sandbox: {ran.refusal}", file=sys.stderr)
        return SANDBOX_FAILED
    return ran.status
