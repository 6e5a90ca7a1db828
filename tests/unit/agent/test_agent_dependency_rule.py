"""DESIGN section 2: the agent never knows it is served. `anvild.agent` imports nothing of the 9P
service (`anvild.ninep`) or the synthetic tree (`anvild.fs`), nor of the daemon that wires them."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_dependency_rules import ROOT, violations

FORBIDDEN = ("anvild.ninep", "anvild.fs", "anvild.daemon")


def forbidden_imports(root: Path = ROOT) -> list[str]:
    """Project imports of `anvild.agent` that reach a forbidden package."""
    found = violations("anvild.agent", ("anvild.agent",), root)
    return [line for line in found if line.split()[-1].startswith(FORBIDDEN)]


def test_agent_imports_nothing_of_the_9p_service_or_the_tree() -> None:
    assert (ROOT / "anvild" / "agent" / "loop.py").exists()
    assert forbidden_imports() == []


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    package = tmp_path / "anvild" / "agent"
    package.mkdir(parents=True)
    (package / "ok.py").write_text("from anvild.llm.types import Message\nfrom . import events\n")
    (package / "bad.py").write_text("import anvild.ninep.server\nfrom ..fs import nodes\n")
    assert forbidden_imports(tmp_path) == [
        "anvild/agent/bad.py:1 imports anvild.ninep.server",
        "anvild/agent/bad.py:2 imports anvild.fs",
        "anvild/agent/bad.py:2 imports anvild.fs.nodes",
    ]
