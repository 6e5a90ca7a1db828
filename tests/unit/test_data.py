"""anvild.data: the files shipped in the package are found through importlib.resources, where
the package is, and `anvil-llama-server` runs the shipped recipe with bash."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import anvild
from anvild import data
from anvild.daemon import llama
from anvild.sandbox import roles as sandbox_roles
from anvild.session import roles

PACKAGE = Path(anvild.__file__).parent


def test_the_shipped_files_are_in_the_package() -> None:
    assert data.path(data.ROLES) == PACKAGE / "data" / "roles"
    assert data.path(data.ROLES) == roles.BUILTIN_TEXT_DIR
    assert data.path(data.SANDBOX_ROLES) == sandbox_roles.BUILTIN_DIR
    assert data.path(data.LLAMA_SERVER) == llama.SCRIPT
    for role in roles.ROLES:
        assert (data.path(data.ROLES) / f"{role}.txt").read_text().strip()
        assert sandbox_roles.load_role(role, user_dir=Path("/nonexistent")).source == (
            data.path(data.SANDBOX_ROLES) / f"{role}.yaml"
        )
    assert (data.path("llama-server.d") / "tool-choice-required.patch").is_file()
    scripts = PACKAGE / "data" / "scripts"
    assert data.path(data.SCRIPTS) == scripts
    for name in data.WORKFLOW_SCRIPTS:
        assert (scripts / name).read_text().startswith("#!")
        # In a checkout, scripts/NAME is the same file (a symlink), not a copy that could drift.
        in_checkout = PACKAGE.parent / "scripts" / name
        if in_checkout.exists():
            assert in_checkout.resolve() == (scripts / name).resolve()


def test_anvil_llama_server_runs_the_recipe_with_bash(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(sys, "argv", ["anvil-llama-server", "setup"])
    monkeypatch.setattr(data.os, "execvp", lambda file, args: ran.append((file, args)))
    data.main()
    assert ran == [("bash", ["bash", str(data.path(data.LLAMA_SERVER)), "setup"])]
