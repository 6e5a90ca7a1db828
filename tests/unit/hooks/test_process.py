"""Running one hook: the event's JSON on stdin, exit codes, the timeout that kills the group."""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio

from anvild.hooks import Event, HookSpec, run_hook
from tests.unit.hooks.support import script


def spec(command: str, timeout: float = 60.0) -> HookSpec:
    return HookSpec("h", Event.PRE_TOOL_USE, command, timeout=timeout)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def test_the_hook_reads_the_payload_and_its_outputs_come_back(tmp_path: Path) -> None:
    hook = script(tmp_path, "h.sh", 'cat > "$0.in"; echo out; echo err >&2; exit 3\n')
    run = await run_hook(spec(hook), {"tool_name": "bash"}, cwd=tmp_path, env=os.environ)
    assert (run.exit_code, run.stdout, run.stderr) == (3, "out\n", "err\n")
    payload = await trio.Path(hook + ".in").read_text()
    assert json.loads(payload) == {"tool_name": "bash"}


async def test_a_hook_runs_in_the_cwd_with_the_project_dir_set(tmp_path: Path) -> None:
    env = {**os.environ, "CLAUDE_PROJECT_DIR": str(tmp_path)}
    run = await run_hook(spec('pwd; echo "$CLAUDE_PROJECT_DIR"'), {}, cwd=tmp_path, env=env)
    assert run.stdout.split() == [str(tmp_path), str(tmp_path)]


async def test_a_command_that_cannot_start_is_reported_not_raised(tmp_path: Path) -> None:
    missing = HookSpec("h", Event.STOP, ("/no/such/hook",))
    run = await run_hook(missing, {}, cwd=tmp_path, env=os.environ)
    assert run.exit_code is None
    assert run.problem.startswith("not run: ")


async def test_a_hook_that_sleeps_forever_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hook = script(
        tmp_path, "sleeper.sh", f"sleep 1000 & echo $! > {pids}; echo $$ >> {pids}; sleep 1000\n"
    )
    start = trio.current_time()
    run = await run_hook(spec(hook, timeout=0.5), {}, cwd=tmp_path, env=os.environ)
    assert trio.current_time() - start < 5
    assert run.exit_code is None
    assert run.timed_out
    assert run.problem == "timed out after 0.5 s: its process group was killed"
    child, shell = (int(p) for p in pids.read_text().split())
    for _ in range(100):  # the group was killed; the reaping may lag a little
        if gone(child) and gone(shell):
            break
        await trio.sleep(0.05)
    assert gone(child)
    assert gone(shell)
