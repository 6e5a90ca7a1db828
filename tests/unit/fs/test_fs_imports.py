"""Dependency direction (DESIGN.md section 2): `anvild.fs` sits on `anvild.ninep` (and the leaf
`anvild.lines`) and nothing else of the project; its pure modules do no I/O and need no trio;
`anvild.daemon` is never imported by the layers below it."""

from __future__ import annotations

import ast
import pathlib

import pytest

ANVILD = pathlib.Path(__file__).resolve().parents[3] / "anvild"
FS = sorted((ANVILD / "fs").glob("*.py"))
PURE = ["ctl.py", "body.py"]
IO_MODULES = {"socket", "os", "subprocess", "trio", "httpx", "asyncio", "select", "selectors"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", FS, ids=lambda p: p.name)
def test_fs_imports_only_ninep_from_the_project(path: pathlib.Path) -> None:
    for name in _imports(path):
        if name == "anvild" or name.startswith(("anvild.", "anvilctl")):
            allowed = ("anvild.fs", "anvild.ninep", "anvild.lines")
            assert name.startswith(allowed), f"{path.name} imports {name}"


@pytest.mark.parametrize("name", PURE)
def test_pure_fs_modules_do_no_io(name: str) -> None:
    imported = {n.split(".")[0] for n in _imports(ANVILD / "fs" / name)}
    assert not imported & IO_MODULES, f"{name} imports {imported & IO_MODULES}"


@pytest.mark.parametrize(
    "path",
    sorted(p for p in ANVILD.rglob("*.py") if p.parent.name in {"fs", "ninep"}),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_lower_layers_never_import_the_daemon(path: pathlib.Path) -> None:
    for name in _imports(path):
        assert not name.startswith("anvild.daemon"), f"{path} imports {name}"
    if path.parent.name == "ninep":
        for name in _imports(path):
            assert not name.startswith("anvild.fs"), f"{path} imports {name}"
