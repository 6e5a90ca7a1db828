"""Dependency direction (DESIGN section 2): the sandbox is below the agent, and the agent's tools
do not know about the 9P service or the synthetic tree."""

from __future__ import annotations

from tests.unit.test_dependency_rules import violations


def test_sandbox_imports_nothing_of_the_agent_or_the_service() -> None:
    # anvild.data: the files shipped in the package (its built-in roles), a leaf
    assert violations("anvild.sandbox", ("anvild.sandbox", "anvild.data")) == []


def test_tools_import_only_the_agent_llm_and_sandbox() -> None:
    allowed = ("anvild.agent", "anvild.llm", "anvild.sandbox")
    assert violations("anvild.agent.tools", allowed) == []
