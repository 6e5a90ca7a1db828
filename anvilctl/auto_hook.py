"""`anvilctl auto`'s Stop hook: run the project's `init.sh` in the sandbox when a turn ends.

`python -m anvilctl.auto_hook STATE_DIR` is the command of the `[hooks.anvil-auto-tests]` table
that `anvilctl auto` writes into the project's `.anvil/config.toml` and grants. It reads the
Stop event on stdin and acts only for the session `STATE_DIR/current.json` names (any other
session in the project is left alone). It runs `./init.sh` exactly as the bash tool would run
it (workspace-write, no network; never unconfined), appends the result to
`STATE_DIR/checks.jsonl` (under `.anvil/`, which no session can write), and exits 2 (the turn
goes on, told why) when a worker marked its feature passing and the tests fail. A sandbox that
cannot be set up is recorded as such (`passed: null`), never as a pass or a fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

HOOK_NAME: Final = "anvil-auto-tests"
CURRENT: Final = "current.json"
CHECKS: Final = "checks.jsonl"
INIT: Final = "init.sh"
TEST_TIMEOUT: Final = 600.0  # seconds for init.sh
HOOK_TIMEOUT: Final = TEST_TIMEOUT + 60.0  # the hook table's timeout: the daemon's bound
MAX_BLOCKS: Final = 2  # failed runs a worker is sent back to fix, per turn
TAIL: Final = 2000  # characters of init.sh's output kept


def config_text(state: Path) -> str:
    """The `.anvil/config.toml` that grants this hook (written, then granted, by `auto`)."""
    argv = [sys.executable, "-m", "anvilctl.auto_hook", str(state)]
    return (
        "# Written by `anvilctl auto`, which granted it (`anvilctl trust show` reviews it): when\n"
        "# a turn of auto's session ends, run ./init.sh in the sandbox and record the result.\n"
        f"[hooks.{HOOK_NAME}]\n"
        'event = "Stop"\n'
        f"command = {json.dumps(argv)}\n"
        f"timeout = {HOOK_TIMEOUT:g}\n"
        f"max_blocks = {MAX_BLOCKS}\n"
    )


def run_tests(root: Path) -> tuple[int, str]:
    """`./init.sh` in `root`, confined as the bash tool confines commands: its exit status
    and output. Raises `SandboxError` when it cannot be confined."""
    from anvilctl.sandbox import run_launch
    from anvild.sandbox import SandboxError, WorkspaceWrite
    from anvild.sandbox.confine import Sandbox

    script = root / INIT
    command = ("./init.sh",) if os.access(script, os.X_OK) else ("bash", "./init.sh")
    launch = Sandbox(WorkspaceWrite(network=False)).prepare(command, root)
    try:
        ran = run_launch(launch, stdin=subprocess.DEVNULL, timeout=TEST_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        return 124, out.decode("utf-8", "replace") + f"\n[timed out after {TEST_TIMEOUT:g} s]"
    if ran.refusal is not None:
        raise SandboxError(ran.refusal)
    return ran.status, ran.stdout + ran.stderr


def _marked_passing(root: Path, feature: str) -> bool:
    try:
        features = json.loads((root / "features.json").read_text(encoding="utf-8"))
        return any(f.get("id") == feature and f.get("passes") is True for f in features)
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def check(payload: dict[str, Any], state: Path) -> tuple[int, str]:
    """Handle one Stop event: (exit status, stderr for the model)."""
    try:
        current = json.loads((state / CURRENT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0, ""  # no auto session in flight
    if not isinstance(current, dict) or payload.get("session_id") != current.get("session_id"):
        return 0, ""
    root = state.parent.parent
    record: dict[str, Any] = {
        "session_id": current["session_id"],
        "kind": current.get("kind"),
        "feature": current.get("feature"),
        "continued": bool(payload.get("stop_hook_active")),
        "at": time.time(),
    }
    started = time.monotonic()
    if not (root / INIT).is_file():
        record.update(ran=False, passed=False, detail=f"no {INIT}")
    else:
        from anvild.sandbox import SandboxError

        try:
            code, output = run_tests(root)
        except SandboxError as exc:
            record.update(ran=False, passed=None, infra=True, detail=f"sandbox unavailable: {exc}")
        else:
            record.update(ran=True, exit_code=code, passed=code == 0, tail=output[-TAIL:])
    record["duration_s"] = round(time.monotonic() - started, 3)
    with (state / CHECKS).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
    feature = current.get("feature")
    if (
        record.get("passed") is False
        and current.get("kind") == "worker"
        and isinstance(feature, str)
        and _marked_passing(root, feature)
    ):
        why = f"exit {record['exit_code']}" if record.get("ran") else record["detail"]
        return 2, (
            f"./init.sh failed ({why}) while {feature} is marked passing in "
            f"features.json: fix the feature, or set its passes back to false.\n"
            f"{record.get('tail', '')[-1000:]}"
        )
    return 0, ""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m anvilctl.auto_hook STATE_DIR (a Stop hook)", file=sys.stderr)
        return 1
    try:
        payload = json.load(sys.stdin)
    except ValueError as exc:
        print(f"anvil auto hook: stdin is not the hook's JSON: {exc}", file=sys.stderr)
        return 1
    code, message = check(payload if isinstance(payload, dict) else {}, Path(argv[0]))
    if message:
        print(message, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
