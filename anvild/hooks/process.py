"""Running one hook: its command on the host, the event's JSON on stdin, bounded in time.

A hook is the user's own authority (it comes from the user config or a granted project file),
so it runs on the host, not in the session's sandbox, with the daemon's environment plus
`CLAUDE_PROJECT_DIR` and `ANVIL_PROJECT_DIR` (the session's cwd) and `ANVIL_SESSION_ID`. It
runs in a new session (its own process group): at its timeout, or when what waits for it is
cancelled, the whole group gets SIGKILL, children included. What it writes is kept up to
`OUTPUT_LIMIT` characters per stream.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from anvild.hooks.spec import HookSpec

OUTPUT_LIMIT: Final = 64 * 1024


@attrs.frozen
class HookRun:
    """How one hook ran: `exit_code` None when it did not finish (`problem` says why)."""

    spec: HookSpec
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    problem: str = ""

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None and self.problem.startswith("timed out")


def _text(data: bytes | None) -> str:
    text = (data or b"").decode("utf-8", errors="replace")
    if len(text) > OUTPUT_LIMIT:
        return text[:OUTPUT_LIMIT] + f"\n[... cut at {OUTPUT_LIMIT} characters]"
    return text


async def _kill_group(process: trio.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


async def run_hook(
    spec: HookSpec, payload: Mapping[str, Any], *, cwd: Path, env: Mapping[str, str]
) -> HookRun:
    """Run `spec` once with `payload` as JSON on stdin; never raises but `trio.Cancelled`."""
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    start = time.monotonic()
    completed = None
    try:
        with trio.move_on_after(spec.timeout):
            completed = await trio.run_process(
                spec.argv,
                stdin=data,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                deliver_cancel=_kill_group,
            )
    except OSError as exc:
        return HookRun(spec, None, seconds=time.monotonic() - start, problem=f"not run: {exc}")
    seconds = time.monotonic() - start
    if completed is None:
        return HookRun(
            spec,
            None,
            seconds=seconds,
            problem=f"timed out after {spec.timeout:g} s: its process group was killed",
        )
    return HookRun(
        spec, completed.returncode, _text(completed.stdout), _text(completed.stderr), seconds
    )


def hook_env(base: Mapping[str, str], cwd: Path, session_id: str) -> dict[str, str]:
    """The environment of a session's hooks."""
    return {
        **base,
        "CLAUDE_PROJECT_DIR": str(cwd),
        "ANVIL_PROJECT_DIR": str(cwd),
        "ANVIL_SESSION_ID": session_id,
    }


__all__ = ["OUTPUT_LIMIT", "HookRun", "hook_env", "run_hook"]
