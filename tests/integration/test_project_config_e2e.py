"""End to end: what README "Configuration and trust" says a running anvild does with a project
config. It reads none: a session whose cwd holds a `.anvil/config.toml` that is granted with
`anvilctl trust grant` still talks to the endpoint of the user config, and the project's model
alias does not exist.
"""

from __future__ import annotations

from pathlib import Path

from anvild.config import load
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, read


def test_a_granted_project_config_does_not_move_a_provider_in_the_daemon(
    daemon: Anvild, namespace: Path, tmp_path: Path, fake: FakeServer, config: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    project = repo / ".anvil" / "config.toml"
    project.parent.mkdir()
    project.write_text(
        '[providers.fake]\nbase_url = "http://127.0.0.1:9/v1"\n\n'
        '[models.elsewhere]\nprovider = "fake"\nmodel = "other"\n'
    )
    # Granted where the daemon keeps its data (where `load` would look for grants).
    granted = ok(
        anvilctl(namespace, "trust", "grant", "--data-dir", str(daemon.data_dir), str(repo))
    )
    assert "granted" in granted
    # The grant is real: the project layer, when a caller asks for it, moves the endpoint.
    layered = load(repo, user_file=config, data_dir=daemon.data_dir)
    assert layered.providers["fake"].base_url == "http://127.0.0.1:9/v1"
    assert "elsewhere" in layered.models
    session = ok(anvilctl(namespace, "new", cwd=repo)).strip()
    ok(anvilctl(namespace, "write", f"agent/{session}/in", stdin="hello"))
    assert read(namespace, f"agent/{session}/wait") == "await\n"
    assert read(namespace, f"agent/{session}/out").strip() == "pong"  # the user's endpoint
    assert len(fake.requests()) == 1
    refused = anvilctl(namespace, "write", "agent/ctl", stdin=f"new cwd={repo} model=elsewhere\n")
    assert refused.returncode == 1
    assert "elsewhere" in refused.stderr
