"""The bash tool (course 10.4): real processes, so real time. Each command carries a unique marker
(an odd sleep duration or a comment) so the tests can look for leftovers in /proc without
touching anything they did not start."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest
import trio

from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.tools import bash as bash_module
from anvild.agent.tools.base import Failed, ToolContext
from anvild.agent.tools.bash import (
    BashTool,
    Command,
    CommandResult,
    FullAccessWrapper,
    HeadTailBuffer,
    default_wrapper_for,
    format_result,
)
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.integrity import validate_transcript
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ToolCall
from anvild.sandbox import FullAccess, ReadOnly, WorkspaceWrite, probe


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path, sandbox=FullAccess(granted_by="test"))


PROMPTLY = 10.0
"""Seconds within which a call that must not wait for a marker's 100 s sleep returns: far
below the sleep, far above what a loaded machine adds."""


def marker() -> str:
    """A sleep duration nobody else uses, e.g. 100.4821937."""
    return f"{100 + int(uuid.uuid4().int % 10**7) / 10**7:.7f}"


def pids_with(text: str) -> list[int]:
    """Live processes whose command line contains `text` (zombies excluded)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmdline and state != b"Z":
            found.append(int(name))
    return found


def kill_leftovers(text: str) -> None:
    for pid in pids_with(text):
        os.kill(pid, signal.SIGKILL)


async def run(ctx: ToolContext, command: str, **extra: object) -> str:
    return (await BashTool().call({"command": command, **extra}, ctx)).content


async def test_exit_code_and_labelled_streams(ctx: ToolContext) -> None:
    out = await run(ctx, "echo out; echo err >&2; pwd; exit 3")
    assert out == f"Exit code: 3\n\nstdout:\nout\n{ctx.cwd}\n\nstderr:\nerr"


async def test_empty_streams_and_stdin_closed(ctx: ToolContext) -> None:
    assert await run(ctx, "cat") == "Exit code: 0\n\nstdout: (empty)\n\nstderr: (empty)"


async def test_each_call_is_a_fresh_shell(ctx: ToolContext, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    await run(ctx, "cd sub && export X=1")
    assert await run(ctx, 'pwd; echo "x=$X"') == (
        f"Exit code: 0\n\nstdout:\n{tmp_path}\nx=\n\nstderr: (empty)"
    )


async def test_runs_in_its_own_process_group(ctx: ToolContext) -> None:
    out = await run(ctx, "ps -o pgid= -p $$; ps -o sid= -p $$; echo $$")
    pgid, sid, pid = out.split("stdout:\n")[1].split("\n\n")[0].split()
    assert pgid == sid == pid
    assert int(pgid) != os.getpgid(0)


async def test_timeout_kills_the_whole_group_without_orphans(ctx: ToolContext) -> None:
    tag = marker()
    start = time.monotonic()
    with pytest.raises(Failed, match="timed out after 500 ms") as info:
        await run(ctx, f"sleep {tag} & sleep {tag}; echo done", timeout_ms=500)
    elapsed = time.monotonic() - start
    assert 0.45 < elapsed < PROMPTLY
    assert "Exit code: 143 (killed by SIGTERM)" in str(info.value)
    assert "done" not in str(info.value)
    assert pids_with(f"sleep {tag}") == []


async def test_members_ignoring_sigterm_get_sigkill_after_the_grace(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bash_module, "KILL_GRACE", 0.3)
    tag = marker()
    start = time.monotonic()
    with pytest.raises(Failed, match="timed out"):
        await run(ctx, f"trap '' TERM; sleep {tag}", timeout_ms=200)
    assert time.monotonic() - start < PROMPTLY
    assert pids_with(f"sleep {tag}") == []


async def test_background_jobs_do_not_outlive_the_call(ctx: ToolContext) -> None:
    tag = marker()
    start = time.monotonic()
    out = await run(ctx, f"sleep {tag} & echo started")
    assert time.monotonic() - start < PROMPTLY
    assert "started" in out
    assert pids_with(f"sleep {tag}") == []


async def test_a_child_holding_the_pipe_cannot_hang_the_call(ctx: ToolContext) -> None:
    tag = marker()
    start = time.monotonic()
    out = await run(ctx, f"(sleep {tag} &); echo x")
    assert time.monotonic() - start < PROMPTLY
    assert out.startswith("Exit code: 0\n\nstdout:\nx")
    assert pids_with(f"sleep {tag}") == []


async def test_a_descendant_that_left_the_group_is_abandoned_not_waited_for(
    ctx: ToolContext,
) -> None:
    tag = marker()
    try:
        start = time.monotonic()
        # setsid: a new session the group kill cannot reach; it still holds stdout open.
        out = await run(ctx, f"setsid sleep {tag} & sleep 0.2; echo y")
        assert time.monotonic() - start < PROMPTLY
        assert "stdout:\ny" in out
        assert "still held its output open" in out
        assert pids_with(f"sleep {tag}")  # beyond a process-group kill: documented limit
    finally:
        kill_leftovers(f"sleep {tag}")


async def test_huge_output_is_truncated_without_deadlock(ctx: ToolContext) -> None:
    start = time.monotonic()
    out = await run(ctx, "yes | head -c 10000000; yes err | head -c 300000 >&2")
    assert time.monotonic() - start < PROMPTLY  # a deadlock would never return
    assert out.startswith("Exit code: 0\n\nstdout:\ny\ny\n")
    assert "bytes of stdout cut from the middle" in out
    assert "bytes of stderr cut from the middle" in out
    assert len(out) < 30_000  # within the registry's default limit: nothing cut twice
    omitted = 10_000_000 - sum(bash_module.STDOUT_KEEP)
    assert f"[... {omitted:,} bytes of stdout" in out


async def test_non_zero_exit_is_a_normal_result(ctx: ToolContext) -> None:
    registry = ToolRegistry([BashTool()])
    result = await registry.dispatch(
        ToolCall("c1", "bash", {"command": "grep -q x /dev/null"}), ctx
    )
    assert not result.is_error
    assert result.content.startswith("Exit code: 1")


async def test_spawn_failure_is_an_error(tmp_path: Path) -> None:
    ctx = ToolContext(cwd=tmp_path / "missing", sandbox=FullAccess(granted_by="test"))
    with pytest.raises(Failed, match="Could not start the command"):
        await run(ctx, "true")


async def test_cancellation_kills_the_group(ctx: ToolContext) -> None:
    tag = marker()
    start = time.monotonic()
    with trio.move_on_after(0.3) as scope:
        await run(ctx, f"sleep {tag} & sleep {tag}")
    assert scope.cancelled_caught
    assert time.monotonic() - start < PROMPTLY
    assert pids_with(f"sleep {tag}") == []


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        (ReadOnly(), "install bubblewrap"),
        (WorkspaceWrite(network=True), "install bubblewrap"),
        (None, "no sandbox policy"),
    ],
)
async def test_refuses_to_run_without_a_sandbox_or_a_full_access_grant(
    tmp_path: Path, policy: object, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sandboxed policies on a machine without bwrap: refused, never run unsandboxed.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    probe.clear_cache()
    witness = tmp_path / "ran"
    ctx = ToolContext(cwd=tmp_path)
    ctx.sandbox = policy  # type: ignore[assignment]
    try:
        with pytest.raises(Failed, match=words):
            await run(ctx, f"touch {witness}")
    finally:
        probe.clear_cache()
    assert not witness.exists()


async def test_default_context_refuses(tmp_path: Path) -> None:
    with pytest.raises(Failed, match="only they can grant full access"):
        await run(ToolContext(cwd=tmp_path), "true")


async def test_a_sandbox_wraps_commands_without_touching_the_tool(ctx: ToolContext) -> None:
    seen: list[object] = []

    class Prefix:
        def wrap(self, command: Command) -> Command:
            return Command(("env", "WRAPPED=1", *command.argv), command.cwd, command.env)

    def wrapper_for(policy: object) -> Prefix:
        seen.append(policy)
        return Prefix()

    ctx.sandbox = ReadOnly()
    result = await BashTool(wrapper_for).call({"command": 'echo "$WRAPPED"'}, ctx)
    assert result.content.startswith("Exit code: 0\n\nstdout:\n1\n")
    assert seen == [ReadOnly()]


def test_wrappers_and_effects() -> None:
    assert isinstance(default_wrapper_for(FullAccess(granted_by="user")), FullAccessWrapper)
    command = Command(("bash", "-c", "x"), "/tmp")
    assert FullAccessWrapper().wrap(command) is command
    effects = BashTool().effects({"command": "ls"})
    assert effects.subprocess
    assert effects.unknown
    assert not effects.read_only


async def test_timeout_bounds_are_validated(ctx: ToolContext) -> None:
    registry = ToolRegistry([BashTool()])
    for bad in (0, 600_001, "5"):
        call = ToolCall("c", "bash", {"command": "true", "timeout_ms": bad})
        result = await registry.dispatch(call, ctx)
        assert result.is_error
        assert "timeout_ms" in result.content


def test_description_steers_the_model() -> None:
    text = BashTool().description
    assert "fresh shell" in text
    assert "`cd`" in text
    for tool in ("read_file", "grep", "glob", "edit_file"):
        assert tool in text


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"abc"], "abc"),
        ([b"01234", b"567"], "01234567"),
        ([b"0123", b"456789AB"], "0123\n[... 4 bytes of out cut from the middle;"),
    ],
)
def test_head_tail_buffer(chunks: list[bytes], expected: str) -> None:
    buffer = HeadTailBuffer(4, 4)
    for chunk in chunks:
        buffer.write(chunk)
    rendered = buffer.render("out")
    assert rendered.startswith(expected)
    assert buffer.retained <= 8
    if buffer.omitted == 0:
        assert rendered == expected


def test_head_tail_buffer_keeps_the_last_bytes_and_never_splits_characters() -> None:
    buffer = HeadTailBuffer(5, 5)
    for _ in range(1000):
        buffer.write("é€".encode())  # 2 + 3 bytes
    assert buffer.total == 5000
    assert buffer.retained == 10
    text = buffer.render("stdout")
    assert "\ufffd" not in text
    assert text.startswith("é")
    assert text.endswith("é€")
    assert "[... 4,990 bytes of stdout cut" in text


def test_signal_deaths_use_the_shell_convention() -> None:
    result = CommandResult(-9, HeadTailBuffer(1, 1), HeadTailBuffer(1, 1), False, False)
    assert format_result(result).startswith("Exit code: 137 (killed by SIGKILL)")


async def test_cancelling_a_turn_mid_command_kills_it_and_says_so(ctx: ToolContext) -> None:
    tag = marker()
    provider = ScriptedProvider([script.tool_call("c1", "bash", {"command": f"sleep {tag}"})])
    agent = Agent(provider, ToolRegistry([BashTool()]), AgentConfig(model="m"), ctx)
    start = time.monotonic()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.run_turn, "sleep")
        await trio.sleep(0.3)
        assert pids_with(f"sleep {tag}")
        agent.cancel()
    assert time.monotonic() - start < PROMPTLY
    assert pids_with(f"sleep {tag}") == []
    validate_transcript(agent.messages)
    (result,) = agent.messages[-1].tool_results()
    assert "process group was killed" in result.content
    assert "uncertain" in result.content
