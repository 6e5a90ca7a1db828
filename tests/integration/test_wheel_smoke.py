"""The distribution is the product: `uv build` makes the sdist and, from it, the wheel; the wheel
holds every built-in role, sandbox role and the llama-server recipe, and installed away from the
checkout it runs a session with a tool call (tests/support/wheel_smoke.py, which `make dist` also
runs on the sdist).

The build happens once per test session (a session fixture; pytest-xdist keeps this file's tests
on one worker).
"""

from __future__ import annotations

import os
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import anvild
from anvild import data
from anvild.sandbox.roles import BUILTIN_ROLES
from anvild.session.roles import ROLES
from tests.support.wheel_smoke import REPO, run, smoke, uv

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
SHIPPED = REPO / "anvild" / "data"


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([uv(), "build", "--quiet", "--out-dir", str(out), str(REPO)], cwd=REPO, env=os.environ)
    return out


@pytest.fixture(scope="session")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob(f"anvild-{VERSION}-py3-none-any.whl")
    return found


def test_the_version_is_written_once_and_read_back_from_the_metadata() -> None:
    assert anvild.__version__ == VERSION


def test_the_wheel_holds_every_built_in_role_sandbox_role_script_and_the_llama_recipe(
    dist: Path, wheel: Path
) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"anvild-{VERSION}.dist-info/entry_points.txt").decode()
        recipe_mode = archive.getinfo("anvild/data/llama-server").external_attr >> 16
    expected = {
        *(f"anvild/data/roles/{role}.txt" for role in ROLES),
        *(f"anvild/data/sandbox-roles/{role}.yaml" for role in BUILTIN_ROLES),
        *(f"anvild/data/scripts/{name}" for name in data.WORKFLOW_SCRIPTS),
        "anvild/data/llama-server",
        "anvild/data/llama-server.d/tool-choice-required.patch",
    }
    assert expected <= names
    shipped = {
        path.relative_to(REPO).as_posix()
        for path in SHIPPED.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert shipped <= names  # whatever else lands in anvild/data/ ships too
    assert recipe_mode & 0o111
    for command in ("anvild", "anvilctl", "anvil-llama-server"):
        assert f"\n{command} = " in entry_points

    (sdist,) = dist.glob(f"anvild-{VERSION}.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert expected | {"pyproject.toml", "README.md", "CHANGELOG.md", "uv.lock"} <= members


@pytest.mark.slow
def test_the_wheel_installed_away_from_the_checkout_runs_a_session(wheel: Path) -> None:
    assert smoke(wheel, VERSION) == "smoke done\n"
