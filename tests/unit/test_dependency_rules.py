"""The layering rules of DESIGN section 2, checked by reading every module's imports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports_of(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in a file, relative imports resolved."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:  # `from anvild import fs` imports anvild.fs
                yield node.lineno, f"{module}.{alias.name}"


def violations(package: str, allowed_prefixes: tuple[str, ...], root: Path = ROOT) -> list[str]:
    """Imports of project modules from `package` that are outside `allowed_prefixes`."""
    found = []
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        for line, module in imports_of(path, root):
            if module == "anvild" or not module.startswith("anvild."):
                continue
            if not module.startswith(allowed_prefixes):
                found.append(f"{path.relative_to(root)}:{line} imports {module}")
    return found


def test_llm_imports_nothing_else_from_the_project() -> None:
    assert violations("anvild.llm", ("anvild.llm",)) == []


def test_beads_import_neither_the_daemon_nor_the_tree_nor_9p() -> None:
    """The bead store is driven by the tree, the agent tools and the conductor; it serves none."""
    forbidden = ("anvild.daemon", "anvild.fs", "anvild.ninep")
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "anvild" / "beads").rglob("*.py"))
        for line, module in imports_of(path)
        if module.startswith(forbidden)
    ]
    assert found == []
    assert (ROOT / "anvild" / "beads" / "store.py").exists()


def test_shipped_data_imports_nothing_of_the_project() -> None:
    """anvild.data (the files shipped in the package) is a leaf every layer may use."""
    assert violations("anvild.data", ()) == []


def test_rule_checker_catches_violations(tmp_path: Path) -> None:
    package = tmp_path / "anvild" / "llm"
    package.mkdir(parents=True)
    (package / "ok.py").write_text("from . import types\nimport anvild.llm.sse\n")
    (package / "bad.py").write_text(
        "import json\nfrom anvild.fs import tree\nfrom .. import ninep\n"
    )
    assert violations("anvild.llm", ("anvild.llm",), root=tmp_path) == [
        "anvild/llm/bad.py:2 imports anvild.fs",
        "anvild/llm/bad.py:2 imports anvild.fs.tree",
        "anvild/llm/bad.py:3 imports anvild.ninep",
    ]


@pytest.mark.parametrize("package", ["anvild", "anvilctl"])
def test_production_code_never_imports_test_doubles(package: str) -> None:
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if path.name == "testing.py":
            continue
        for line, module in imports_of(path):
            if module.endswith(".testing") or ".testing." in module:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert offenders == []


def test_mail_never_imports_the_tree_the_9p_service_or_the_daemon() -> None:
    forbidden = ("anvild.daemon", "anvild.fs", "anvild.ninep")
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "anvild/mail").rglob("*.py"))
        for line, module in imports_of(path)
        if module.startswith(forbidden)
    ]
    assert found == []


# The floors of DESIGN section 2, bottom first. A package imports only from floors below its own
# (and from itself); packages on one floor are independent of each other. anvild.data is a leaf
# every floor may read, and so is anvild.lines (line streams and JSON lines, shared by packages
# that may not import each other); `python -m anvild` (__main__) starts the daemon.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("data", "lines"),
    ("ninep", "llm", "sandbox"),
    ("store", "agent", "fs"),
    ("config",),
    ("mcp", "hooks", "skills", "checkpoints", "budget", "telemetry"),
    ("session",),
    ("beads", "mail"),
    ("tree", "coord", "web"),
    ("daemon",),
    ("__main__",),
)


def floor_of(package: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if package in floor)


def test_every_package_has_a_floor() -> None:
    packages = {
        path.name.removesuffix(".py")
        for path in (ROOT / "anvild").iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name != "__init__.py")
    }
    assert packages == {name for floor in FLOORS for name in floor}


@pytest.mark.parametrize("package", [name for floor in FLOORS for name in floor])
def test_packages_import_only_from_floors_below(package: str) -> None:
    mine = floor_of(package)
    allowed = (
        *(f"anvild.{name}" for floor in FLOORS[:mine] for name in floor),
        f"anvild.{package}",
        "anvild.__version__",
    )
    path = ROOT / "anvild" / package
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    found = [
        f"{file.relative_to(ROOT)}:{line} imports {module}"
        for file in files
        for line, module in imports_of(file)
        if module.startswith("anvild.") and not module.startswith(allowed)
    ]
    assert found == []


def test_floor_rule_catches_an_upward_import(tmp_path: Path) -> None:
    package = tmp_path / "anvild" / "session"
    package.mkdir(parents=True)
    (package / "bad.py").write_text("from anvild.tree import sessions\n")
    allowed = tuple(f"anvild.{name}" for floor in FLOORS[: floor_of("session")] for name in floor)
    assert violations("anvild.session", (*allowed, "anvild.session"), root=tmp_path) == [
        "anvild/session/bad.py:1 imports anvild.tree",
        "anvild/session/bad.py:1 imports anvild.tree.sessions",
    ]
