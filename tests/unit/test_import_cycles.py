"""No import cycles: the module graph of anvild/ and anvilctl/, read from the AST, is acyclic.

An edge is any import a module runs, at the top or inside a function (a lazy import only hides a
cycle until the wrong module is imported first). `from pkg import name` points at the submodule
`pkg.name` when there is one, else at `pkg`; imports under `if TYPE_CHECKING:` are left out
(they never run). Importing `pkg.sub` also runs `pkg/__init__`, but that is no edge: every
package would otherwise be in a cycle with the submodules its `__init__` re-exports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.unit.test_dependency_rules import ROOT

PACKAGES = ("anvild", "anvilctl")

Graph = dict[str, dict[str, int]]
"""Module -> {imported module: line of the first import}."""


def module_files(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every module below `packages`, by dotted name (a package by its own name)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements under `node` that can run (not under `if TYPE_CHECKING:`)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _run_imports(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from _run_imports(child)


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """(line, module of `modules`) for every import `name` runs."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _run_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, node.module] if node.module else parts)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a non-module name
                target = target.rpartition(".")[0]
            if target:
                yield node.lineno, target


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> Graph:
    modules = module_files(root, packages)
    graph: Graph = {name: {} for name in modules}
    for name, path in modules.items():
        for line, target in imported_modules(name, path, modules):
            if target != name:
                graph[name].setdefault(target, line)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def describe(graph: Graph, component: list[str]) -> str:
    """A cycle as its modules and the imports that close it, `module:line -> module`."""
    edges = [
        f"  {module}:{line} -> {target}"
        for module in component
        for target, line in sorted(graph[module].items())
        if target in component
    ]
    return "\n".join([" <-> ".join(component), *edges])


def test_anvild_and_anvilctl_have_no_import_cycles() -> None:
    graph = import_graph()
    assert "anvild.sandbox.bwrap" in graph
    assert "anvilctl" in graph
    found = cycles(graph)
    assert found == [], "import cycles (break each by moving what both sides need):\n" + "\n".join(
        describe(graph, component) for component in found
    )


def test_the_checker_finds_a_planted_cycle(tmp_path: Path) -> None:
    package = tmp_path / "anvild" / "pkg"
    package.mkdir(parents=True)
    (tmp_path / "anvild" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from anvild.pkg.a import A\n")
    (package / "a.py").write_text("from anvild.pkg import b\nA = 1\n")
    (package / "b.py").write_text("import json\n\ndef later():\n    from . import c\n")
    (package / "c.py").write_text("from anvild.pkg.a import A\n")
    (package / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from anvild.pkg import d\n"
        "else:\n    import anvild.pkg.e\n"
    )
    (package / "d.py").write_text("from anvild.pkg import typed\n")
    (package / "e.py").write_text("import anvild.pkg.typed.name\n")
    graph = import_graph(tmp_path, ("anvild",))
    assert graph["anvild.pkg.b"] == {"anvild.pkg.c": 4}  # a lazy import counts
    assert graph["anvild.pkg.typed"] == {"anvild.pkg.e": 5}  # TYPE_CHECKING imports do not
    assert cycles(graph) == [
        ["anvild.pkg.a", "anvild.pkg.b", "anvild.pkg.c"],
        ["anvild.pkg.e", "anvild.pkg.typed"],
    ]
    assert describe(graph, ["anvild.pkg.a", "anvild.pkg.b", "anvild.pkg.c"]) == (
        "anvild.pkg.a <-> anvild.pkg.b <-> anvild.pkg.c\n"
        "  anvild.pkg.a:1 -> anvild.pkg.b\n"
        "  anvild.pkg.b:4 -> anvild.pkg.c\n"
        "  anvild.pkg.c:1 -> anvild.pkg.a"
    )


def test_an_acyclic_tree_passes(tmp_path: Path) -> None:
    package = tmp_path / "anvilctl"
    package.mkdir()
    (package / "__init__.py").write_text("from .main import run\n")
    (package / "main.py").write_text(
        "import os\nfrom anvilctl.wire import frame\n\ndef run(): ...\n"
    )
    (package / "wire.py").write_text("import anvilctl.util.pad\n\ndef frame(): ...\n")
    (package / "util.py").write_text("def pad(): ...\n")
    graph = import_graph(tmp_path, ("anvilctl",))
    assert graph == {
        "anvilctl": {"anvilctl.main": 1},
        "anvilctl.main": {"anvilctl.wire": 2},
        "anvilctl.wire": {"anvilctl.util": 1},  # a name that is no module: its module
        "anvilctl.util": {},
    }
    assert cycles(graph) == []
