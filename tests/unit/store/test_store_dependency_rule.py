"""DESIGN section 2: `anvild.store` is a low layer. It may use the canonical types of `anvild.llm`
(and the leaf `anvild.lines`) and nothing of the agent, the 9P service, the synthetic tree or the
daemon."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_dependency_rules import ROOT, violations

ALLOWED = ("anvild.store", "anvild.llm", "anvild.lines")  # lines: the JSON-lines encoding


def store_violations(root: Path = ROOT) -> list[str]:
    return violations("anvild.store", ALLOWED, root)


def test_store_imports_only_itself_and_the_llm_layer() -> None:
    assert (ROOT / "anvild" / "store" / "reducer.py").exists()
    assert store_violations() == []


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    package = tmp_path / "anvild" / "store"
    package.mkdir(parents=True)
    (package / "ok.py").write_text("from anvild.llm.types import Message\nfrom . import records\n")
    (package / "bad.py").write_text(
        "from anvild.agent.events import Todo\nimport anvild.fs.nodes\nfrom .. import daemon\n"
        "from anvild.ninep import server\n"
    )
    assert store_violations(tmp_path) == [
        "anvild/store/bad.py:1 imports anvild.agent.events",
        "anvild/store/bad.py:1 imports anvild.agent.events.Todo",
        "anvild/store/bad.py:2 imports anvild.fs.nodes",
        "anvild/store/bad.py:3 imports anvild.daemon",
        "anvild/store/bad.py:4 imports anvild.ninep",
        "anvild/store/bad.py:4 imports anvild.ninep.server",
    ]
