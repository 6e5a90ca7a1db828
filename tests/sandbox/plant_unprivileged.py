"""Every git planting vector (`tests.sandbox.planting`) as an unprivileged daemon would meet it:
run by `test_git_planting.py` as the sandbox uid, so bwrap makes its own user namespace with the
same uid inside and out, and the host's git afterwards runs as that user too. No pytest.

Usage: python plant_unprivileged.py TOP (a directory this uid owns). Prints a JSON object: each
vector's name and the evidence that its plant took effect (an empty list when it did not).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from anvilctl.sandbox import run_launch
from anvild.sandbox import WorkspaceWrite
from anvild.sandbox.bwrap import SandboxSettings
from anvild.sandbox.confine import Sandbox
from anvild.sandbox.roles import load_role
from tests.sandbox import planting


def run(sandbox: Sandbox, ws: Path, script: str) -> None:
    """As the bash tool runs a command: prepare, run, verdict, the check afterwards, close."""
    launch = sandbox.prepare(("bash", "-c", script), ws)
    ran = run_launch(launch, stdin=subprocess.DEVNULL, timeout=120)
    if ran.refusal is not None:
        raise SystemExit(ran.refusal)


def main(top: Path) -> dict[str, list[str]]:
    results = {}
    for vector in planting.VECTORS:
        here = top / vector.name
        (here / "markers").mkdir(parents=True)
        ws, marker = here / "ws", here / "markers" / "ran"
        planting.set_up(vector, ws)
        sandbox = Sandbox(
            WorkspaceWrite(), load_role("developer"), SandboxSettings(quarantine=here / "q")
        )
        run(sandbox, ws, planting.plant_script(vector, marker))
        results[vector.name] = planting.attack_worked(vector, ws, marker)
    return results


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
