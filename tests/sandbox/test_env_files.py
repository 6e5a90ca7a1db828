"""Every `.env*` file at the top of the workspace is masked in the sandbox, not only `.env`; the
committed templates (`.env.example`, ...) stay readable. Through the real sandbox."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from anvild.sandbox import ReadOnly, WorkspaceWrite
from anvild.sandbox.roles import BUILTIN_ROLES, DEFAULT_ROLE, Role, load_role
from tests.sandbox.conftest import give, run_in

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

SECRETS = (".env", ".env.local", ".env.production", ".envrc")


@pytest.mark.parametrize(
    "role", [DEFAULT_ROLE, *map(load_role, BUILTIN_ROLES)], ids=lambda r: r.name
)
def test_env_files_are_masked(base_dir: Path, role: Role) -> None:
    ws = base_dir / f"env-{uuid.uuid4().hex[:8]}"
    ws.mkdir()
    for name in SECRETS:
        (ws / name).write_text(f"SECRET_{name.replace('.', '_').upper()}=1\n")
    (ws / ".envs").mkdir()
    (ws / ".envs" / "prod").write_text("SECRET_DIR=1\n")
    (ws / ".env.example").write_text("TEMPLATE=1\n")
    give(ws)
    policy = WorkspaceWrite() if role.read_write else ReadOnly()
    done = run_in(policy, role, ws, "cat .env* .envs/* 2>/dev/null; echo end")
    assert "SECRET" not in done.stdout
    assert "TEMPLATE=1" in done.stdout
    assert done.stdout.endswith("end\n")
    assert (ws / ".env.local").read_text().startswith("SECRET")  # masked, not changed


def test_a_linked_env_file_is_masked_through_its_target(base_dir: Path) -> None:
    ws = base_dir / f"envlink-{uuid.uuid4().hex[:8]}"
    ws.mkdir()
    (ws / ".env.development").write_text("SECRET_DEV=1\n")
    (ws / ".env").symlink_to(".env.development")
    give(ws)
    done = run_in(WorkspaceWrite(), load_role("developer"), ws, "cat .env; echo end")
    assert done.stdout == "end\n"
