"""Hook scripts for the tests: real shell scripts in a tmp dir."""

from __future__ import annotations

from pathlib import Path


def script(tmp_path: Path, name: str, body: str) -> str:
    """An executable `sh` script `name` in tmp_path; its path (a hook's command)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)
