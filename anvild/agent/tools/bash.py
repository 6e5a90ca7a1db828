"""The bash tool: one `bash -c` per call, supervised so that it can never hang or outlive a turn.

- Authority first: a `CommandWrapper` from the session's sandbox policy wraps the command before
  anything spawns (`FullAccessWrapper` only for an explicit grant; `SandboxWrapper` for ReadOnly
  and WorkspaceWrite; no policy is refused). A sandbox failure refuses; never re-run unsandboxed.
- `bash -c` in the cwd, stdin /dev/null, in a new session (its own process group).
- Output is drained into bounded `HeadTailBuffer`s: memory bounded, a pipe never blocks.
- The leader is held by a pidfd (its pid, the group id, is never reused while signalled); at
  exit, timeout or cancel the group gets SIGTERM+SIGCONT, `KILL_GRACE`, then SIGKILL. Readers get
  `READER_GRACE`; a descendant that left the group is abandoned (only the sandbox reaches it).
- Cleanup is shielded and time-bounded, so a cancelled call still kills and reaps.
A non-zero exit is an ordinary result; a spawn failure or a timeout is `Failed`.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

import attrs
import trio

from anvild.agent.tools.base import (
    Args,
    Cancellation,
    Effects,
    Failed,
    ToolContext,
    ToolOutput,
    object_schema,
)
from anvild.sandbox import FullAccess, ReadOnly, SandboxError, SandboxPolicy, WorkspaceWrite
from anvild.sandbox.confine import Sandbox
from anvild.sandbox.supervisor import proc_stats

DEFAULT_TIMEOUT_MS: Final = 120_000
MAX_TIMEOUT_MS: Final = 600_000
KILL_GRACE: Final = 2.0  # seconds between SIGTERM and SIGKILL while group members remain
READER_GRACE: Final = 0.5  # seconds the readers may keep draining after the group is gone
CLEANUP_LIMIT: Final = KILL_GRACE + 3.0  # upper bound on the shielded cleanup of one call
STDOUT_KEEP: Final = (8192, 8192)  # bytes kept from the head and the tail of stdout
STDERR_KEEP: Final = (4096, 4096)
_CHUNK: Final = 65536
_POLL: Final = 0.02


# -- sandbox hook ------------------------------------------------------------------------------


def _to_argv(argv: Iterable[str]) -> tuple[str, ...]:
    return tuple(argv)


class RunGuard(Protocol):
    """What a wrapper set up for one run besides the command line (descriptors, mount points).
    `verdict` is asked after the process ended: None if the wrapper's sandbox ran the command,
    else the message refusing it. `close` is called exactly once, after the process is reaped or
    when it never started."""

    def verdict(self, returncode: int, stderr: str) -> str | None: ...

    def inspect(self) -> str | None:
        """After the process ended, however it ended: undo what the command must not leave
        behind (the sandbox quarantines planted git configuration) and say what was done."""
        ...

    def close(self) -> None: ...


@attrs.frozen
class Command:
    """What will be executed: argv, working directory and environment (`None`: inherited), the
    descriptors the child inherits, and the wrapper's guard."""

    argv: tuple[str, ...] = attrs.field(converter=_to_argv)
    cwd: Path = attrs.field(converter=Path)
    env: Mapping[str, str] | None = None
    pass_fds: tuple[int, ...] = ()
    guard: RunGuard | None = attrs.field(default=None, eq=False)


class CommandWrapper(Protocol):
    """Turns a command into the command that actually runs (e.g. under bubblewrap). A wrapper
    that cannot enforce its policy raises `Failed` instead of running anything."""

    def wrap(self, command: Command) -> Command: ...


@attrs.frozen
class FullAccessWrapper:
    """No sandbox: the command runs as is. Only for an explicit `FullAccess` grant."""

    def wrap(self, command: Command) -> Command:
        return command


@attrs.frozen
class SandboxWrapper:
    """Runs the command under bubblewrap (`anvild.sandbox.confine.Sandbox`). A sandbox that cannot
    be set up raises `Failed` with what to install or enable; nothing runs unconfined."""

    sandbox: Sandbox

    def wrap(self, command: Command) -> Command:
        try:
            launch = self.sandbox.prepare(command.argv, command.cwd)
        except SandboxError as exc:
            raise Failed(
                f"{exc}\n\nUntil then, use the read_file, glob and grep tools to inspect files, "
                "and edit_file or write_file to change them. If a command is really needed, tell "
                "the user: only they can grant full access."
            ) from exc
        return Command(launch.argv, launch.cwd, launch.env, launch.pass_fds, launch)


WrapperFor = Callable[[SandboxPolicy | None], CommandWrapper]


def default_wrapper_for(policy: SandboxPolicy | None) -> CommandWrapper:
    """The wrapper for a policy: FullAccess runs commands as is, the sandboxed policies run
    them under bubblewrap with the default role (a session with a role passes its own
    `wrapper_for`), and no policy is refused."""
    match policy:
        case FullAccess():
            return FullAccessWrapper()
        case ReadOnly() | WorkspaceWrite():
            return SandboxWrapper(Sandbox(policy))
        case _:
            raise Failed(
                "The bash tool is unavailable: no sandbox policy was configured for this "
                "session, and commands never run without one."
            )


# -- bounded output ----------------------------------------------------------------------------


class HeadTailBuffer:
    """Keeps the first `head` and the last `tail` bytes written, and counts everything."""

    def __init__(self, head: int, tail: int) -> None:
        self._head_limit = head
        self._tail_limit = tail
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self._tail_limit:
            self._tail = bytearray(data[len(data) - self._tail_limit :])
        else:
            self._tail += data
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]

    @property
    def retained(self) -> int:
        return len(self._head) + len(self._tail)

    @property
    def omitted(self) -> int:
        return self.total - self.retained

    def render(self, label: str) -> str:
        """The kept text, with a marker in the middle saying how much was cut and how to see
        it. Cuts never split a UTF-8 sequence (undecodable bytes become U+FFFD)."""
        if not self.omitted:
            return bytes(self._head + self._tail).decode("utf-8", "replace")
        head = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(self._head))
        tail = bytes(self._tail)
        skip = 0
        while skip < min(3, len(tail)) and tail[skip] & 0xC0 == 0x80:
            skip += 1  # continuation bytes of a character whose start was cut
        marker = (
            f"\n[... {self.omitted:,} bytes of {label} cut from the middle; redirect the output "
            "to a file and read it in parts, or filter it (grep, head, tail), to see more ...]\n"
        )
        return head + marker + tail[skip:].decode("utf-8", "replace")


# -- process supervision -----------------------------------------------------------------------


@attrs.frozen
class CommandResult:
    returncode: int  # negative: killed by that signal (subprocess convention)
    stdout: HeadTailBuffer
    stderr: HeadTailBuffer
    timed_out: bool
    output_abandoned: bool  # a process outside the group still held a pipe when we stopped


def signal_group(pgid: int, signum: int) -> None:
    """Send `signum` to process group `pgid`; a group that is gone (or not ours) is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _live_members(pgid: int) -> bool:
    """Whether any process of group `pgid` is alive (zombies excluded), from /proc."""
    try:
        stats = proc_stats()
    except OSError:  # no procfs: fall back to "the group exists", zombies included
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return any(
        len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X")
        for _, fields in stats
    )


async def _terminate_group(pgid: int) -> None:
    """SIGTERM the group, wait up to KILL_GRACE for its members to go, then SIGKILL."""
    signal_group(pgid, signal.SIGTERM)
    signal_group(pgid, signal.SIGCONT)
    with trio.move_on_after(KILL_GRACE):
        # No event says "the last member of a group exited" (only the leader has a pidfd), so
        # the group is polled through /proc.
        while _live_members(pgid):  # noqa: ASYNC110
            await trio.sleep(_POLL)
    signal_group(pgid, signal.SIGKILL)


async def _drain(stream: trio.abc.ReceiveStream, into: HeadTailBuffer) -> None:
    while chunk := await stream.receive_some(_CHUNK):
        into.write(chunk)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: see _wait_exited
        return None


async def _wait_exited(process: trio.Process, pidfd: int | None) -> None:
    """Wait until the leader has exited, leaving it unreaped where the OS lets us (a pidfd
    turns readable at exit), so that its pid, the group id, stays reserved while we signal the
    group. Without pidfds the leader is reaped here; a later group signal could then, in
    principle, reach a new group that reused the id after every old member was gone."""
    if pidfd is not None:
        await trio.lowlevel.wait_readable(pidfd)
    else:
        await process.wait()


async def spawn(command: Command, *, stdin: int) -> trio.Process:
    """Start `command` in a session (process group) of its own, its stdout and stderr piped and
    `stdin` as given (`subprocess.PIPE` or `DEVNULL`). Raises OSError when it cannot start."""
    return await trio.lowlevel.open_process(
        list(command.argv),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=command.cwd,
        env=command.env,
        pass_fds=command.pass_fds,
        start_new_session=True,
    )


async def run_command(command: Command, *, time_limit: float) -> CommandResult:
    """Run `command` under the supervision described in the module docstring. Raises OSError
    when it cannot be started; re-raises `trio.Cancelled` after killing and reaping."""
    process = await spawn(command, stdin=subprocess.DEVNULL)
    pidfd = _pidfd(process.pid)
    stdout, stderr = HeadTailBuffer(*STDOUT_KEEP), HeadTailBuffer(*STDERR_KEEP)
    group_ended = False
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        async with trio.open_nursery() as readers:
            readers.start_soon(_drain, process.stdout, stdout)
            readers.start_soon(_drain, process.stderr, stderr)
            with trio.move_on_after(time_limit) as deadline:
                await _wait_exited(process, pidfd)
            await _terminate_group(process.pid)
            group_ended = True
            # The readers end at EOF; one held open by an escaped descendant is abandoned.
            readers.cancel_scope.deadline = trio.current_time() + READER_GRACE
        returncode = await process.wait()
        return CommandResult(
            returncode=returncode,
            stdout=stdout,
            stderr=stderr,
            timed_out=deadline.cancelled_caught,
            output_abandoned=readers.cancel_scope.cancelled_caught,
        )
    finally:
        with trio.CancelScope(shield=True) as cleanup:
            cleanup.deadline = trio.current_time() + CLEANUP_LIMIT
            if not group_ended:
                await _terminate_group(process.pid)
            await process.wait()
        with trio.CancelScope(shield=True):
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    await pipe.aclose()
        if pidfd is not None:
            os.close(pidfd)


# -- the tool ----------------------------------------------------------------------------------

DESCRIPTION: Final = f"""\
Run a shell command with `bash -c` in the session's working directory and get back its exit \
code, stdout and stderr.

- Each call runs in a fresh shell: `cd`, exported variables and shell functions do not carry \
over to the next call. Chain dependent steps in one command with `&&`, or use absolute paths.
- stdin is closed, so anything that waits for input gets end-of-file. Use non-interactive \
options (`git --no-pager`, `-y`, `--yes`).
- The command runs in its own process group. When it finishes, times out or the turn is \
cancelled, the whole group is killed: background jobs (`&`) do not outlive the call, so do not \
start servers or watchers you expect to keep running.
- `timeout_ms` defaults to {DEFAULT_TIMEOUT_MS} (2 minutes) and may be at most \
{MAX_TIMEOUT_MS} (10 minutes). A command that runs out of time is killed and reported as an error.
- Long output keeps the beginning and the end of each stream and cuts the middle. To see all of \
it, redirect it to a file and read the file in parts, or filter it (grep, head, tail).
- A non-zero exit code is a normal result, not a failure of the tool: read it (grep exits 1 when \
nothing matched).

Prefer the dedicated tools over shell equivalents: read_file instead of cat, head or tail; grep \
instead of grep or rg; glob instead of find or ls to locate files; edit_file and write_file \
instead of sed, awk or echo redirections. They are faster, follow the workspace's access rules \
and keep track of which files you have read. Use bash for what needs a shell: running tests and \
builds, git, package managers and other programs.
"""

SCHEMA: Final[Mapping[str, Any]] = object_schema(
    {
        "command": {
            "type": "string",
            "minLength": 1,
            "description": "The command line, run as `bash -c COMMAND`.",
        },
        "timeout_ms": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TIMEOUT_MS,
            "description": (
                f"Milliseconds before the command is killed (default {DEFAULT_TIMEOUT_MS}, "
                f"at most {MAX_TIMEOUT_MS})."
            ),
        },
    },
    required=("command",),
)


def _exit_line(returncode: int) -> str:
    if returncode >= 0:
        return f"Exit code: {returncode}"
    signum = -returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return f"Exit code: {128 + signum} (killed by {name})"


def _section(label: str, buffer: HeadTailBuffer) -> str:
    if not buffer.total:
        return f"{label}: (empty)"
    return f"{label}:\n{buffer.render(label).rstrip(chr(10))}"


def format_result(result: CommandResult) -> str:
    parts = [
        _exit_line(result.returncode),
        _section("stdout", result.stdout),
        _section("stderr", result.stderr),
    ]
    if result.output_abandoned:
        parts.append(
            "Note: a process that left the command's process group still held its output open; "
            "output it wrote after the command ended is not shown."
        )
    return "\n\n".join(parts)


class BashTool:
    """`bash`: see DESCRIPTION. `wrapper_for` maps the session's sandbox policy to the wrapper
    that runs commands under it; the sandbox issue supplies one for the sandboxed policies."""

    name: Final = "bash"
    description: Final = DESCRIPTION
    summary: Final = (
        "Run `bash -c COMMAND` in the working directory, sandboxed, in a fresh shell each "
        "call with stdin closed; returns the exit code, stdout and stderr. `timeout_ms` "
        "defaults to 120000. Use the file tools instead of cat, sed, find or grep."
    )
    input_schema: Final = SCHEMA
    cancellation: Final = Cancellation.KILLS_CHILDREN

    def __init__(self, wrapper_for: WrapperFor = default_wrapper_for) -> None:
        self._wrapper_for = wrapper_for

    def effects(self, args: Args) -> Effects:
        # What a shell command touches cannot be known from its text: a subprocess whose reads,
        # writes and network use are unknown.
        return Effects(subprocess=True, unknown=True)

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        timeout_ms = int(args.get("timeout_ms", DEFAULT_TIMEOUT_MS))
        wrapper = self._wrapper_for(ctx.sandbox)
        command = wrapper.wrap(Command(("bash", "-c", str(args["command"])), ctx.cwd))
        report: str | None = None
        try:
            try:
                result = await run_command(command, time_limit=timeout_ms / 1000)
            except OSError as exc:
                raise Failed(f"Could not start the command: {exc}") from exc
            if command.guard is not None:
                refusal = command.guard.verdict(result.returncode, result.stderr.render("stderr"))
                if refusal is not None:
                    raise Failed(refusal)
        finally:
            if command.guard is not None:
                # Also after a timeout or a cancel: what the command planted must not outlive it.
                with trio.CancelScope(shield=True):
                    report = await trio.to_thread.run_sync(command.guard.inspect)
                command.guard.close()
        output = format_result(result)
        if report:
            output += f"\n\n{report}"
        if result.timed_out:
            raise Failed(
                f"The command timed out after {timeout_ms} ms and was killed together with its "
                f"process group. Output so far:\n\n{output}"
            )
        return ToolOutput(output)
