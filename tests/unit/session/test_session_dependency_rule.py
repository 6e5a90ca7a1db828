"""DESIGN section 2: the tree observes sessions. `anvild.session` imports only the layers below
it (the agent, the llm layer, the sandbox, the store), never the 9P service, the synthetic tree
or the daemon. (`anvild.agent` has the same rule in tests/unit/agent.) One module may read the
configuration: `project_config`, whose job is a session's project config; `anvild.config` is
below the session layer (it never imports it, nor the tree, the 9P service or the daemon)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_dependency_rules import ROOT, violations

# anvild.data: the files shipped in the package (the built-in role texts), a leaf
ALLOWED = (
    "anvild.session",
    "anvild.agent",
    "anvild.llm",
    "anvild.sandbox",
    "anvild.store",
    "anvild.data",
    "anvild.lines",
    "anvild.mcp",  # the MCP client, below the sessions (tests/unit/test_dependency_rules.py)
    "anvild.hooks",  # user hooks, below the sessions too
    "anvild.checkpoints",  # workspace checkpoints, below the sessions too
    "anvild.skills",  # skills, below the sessions too
    "anvild.budget",  # spend budgets, below the sessions too
    "anvild.telemetry",  # OpenTelemetry, below the sessions too
)


CONFIG_READER = "anvild/session/project_config.py"


def session_violations(root: Path = ROOT) -> list[str]:
    return [
        found
        for found in violations("anvild.session", ALLOWED, root)
        if not (found.startswith(f"{CONFIG_READER}:") and " imports anvild.config" in found)
    ]


def test_the_supervisor_imports_only_the_layers_below_it() -> None:
    assert (ROOT / "anvild" / "session" / "session.py").exists()
    assert session_violations() == []


def test_the_config_layer_is_below_the_sessions() -> None:
    allowed = (
        "anvild.config",
        "anvild.llm",
        "anvild.agent.permissions.rules",
        "anvild.sandbox.secrets",
        "anvild.store.durable",  # replace_durably, for the trust file (imported when written)
    )
    assert violations("anvild.config", allowed) == []


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    package = tmp_path / "anvild" / "session"
    package.mkdir(parents=True)
    (package / "ok.py").write_text("from anvild.store import Journal\nfrom . import state\n")
    (package / "project_config.py").write_text("from anvild.config import load\n")
    (package / "other.py").write_text("import anvild.config\n")
    (package / "bad.py").write_text(
        "from anvild.fs.stream import LineStream\nfrom .. import daemon\nimport anvild.ninep\n"
    )
    assert session_violations(tmp_path) == [
        "anvild/session/bad.py:1 imports anvild.fs.stream",
        "anvild/session/bad.py:1 imports anvild.fs.stream.LineStream",
        "anvild/session/bad.py:2 imports anvild.daemon",
        "anvild/session/bad.py:3 imports anvild.ninep",
        "anvild/session/other.py:1 imports anvild.config",
    ]
