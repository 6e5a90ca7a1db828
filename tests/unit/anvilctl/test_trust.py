"""`anvilctl trust show|grant|revoke`: listing authority with its source, digest-bound grants,
voiding by edit, and the refusal to grant a file that changed since it was reviewed."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest

from anvilctl.__main__ import main
from anvild.config import TrustStore, load

PROJECT = """\
default_model = "tiny"
instructions = "Prefer small diffs."

[providers.local]
base_url = "http://127.0.0.1:9999/v1"

[hooks.format]
event = "PostToolUse"
command = ["ruff", "format"]
"""


@pytest.fixture(autouse=True)
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".anvil").mkdir()
    (root / ".anvil/config.toml").write_text(PROJECT)
    (root / "src").mkdir()
    return root


def trust(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["trust", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_show_lists_authority_with_source_and_state(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = (repo / ".anvil/config.toml").resolve()
    sha = hashlib.sha256(file.read_bytes()).hexdigest()
    status, out, err = trust(capsys, "show", str(repo / "src"))
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        f"project config: {file}",
        f"sha256: {sha}",
        "trust: not granted: authority-bearing keys below are ignored",
        "authority-bearing keys (2):",
        f'  providers.local.base_url = "http://127.0.0.1:9999/v1"    [endpoint; from {file}]',
        f'  hooks.format = {{"event": "PostToolUse", "command": ["ruff", "format"]}}    '
        f"[executable; from {file}]",
        "instruction and data keys (2):",
        f'  default_model = "tiny"    [from {file}]',
        f'  instructions = "Prefer small diffs."    [from {file}]',
    ]


def test_grant_records_the_digest_in_the_user_data_dir(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "xdg-config/anvil/config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[providers.local]\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:1/v1"\n')
    monkeypatch.chdir(repo / "src")
    status, out, _ = trust(capsys, "grant")
    assert status == 0
    assert "authority-bearing keys now applied (2): providers.local.base_url, hooks.format" in out
    store_file = tmp_path / "xdg-data/anvil/trust.toml"
    assert store_file.stat().st_mode & 0o777 == 0o600
    [grant] = tomllib.loads(store_file.read_text())["grant"]
    file = (repo / ".anvil/config.toml").resolve()
    assert grant["path"] == str(file)
    assert grant["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert grant["keys"] == ["providers.local.base_url", "hooks.format"]

    status, out, _ = trust(capsys, "show")
    assert "trust: granted " in out
    config = load(repo)
    assert config.hooks == {"format": {"event": "PostToolUse", "command": ["ruff", "format"]}}
    assert config.providers["local"].base_url == "http://127.0.0.1:9999/v1"

    # Any edit voids it, and `show` says so.
    file.write_text(PROJECT.replace("ruff", "rm"))
    status, out, _ = trust(capsys, "show")
    assert "trust: grant void: the file changed since it was granted" in out
    assert load(repo).hooks == {}


def test_grant_with_sha256_refuses_a_changed_file(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = repo / ".anvil/config.toml"
    reviewed = hashlib.sha256(file.read_bytes()).hexdigest()
    file.write_text(PROJECT + "\n[mcp_servers.x]\ncommand = ['evil']\n")
    status, _, err = trust(capsys, "grant", "--sha256", reviewed, str(repo))
    assert status == 1
    assert "changed since it was reviewed: its sha256 is " in err
    assert TrustStore(tmp_path / "xdg-data/anvil").grants() == []  # nothing recorded
    current = hashlib.sha256(file.read_bytes()).hexdigest()
    assert trust(capsys, "grant", "--sha256", current.upper(), str(file))[0] == 0


def test_revoke(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "grants")
    assert trust(capsys, "grant", "--data-dir", data, str(repo))[0] == 0
    assert TrustStore(Path(data)).grants() != []
    status, out, _ = trust(capsys, "revoke", "--data-dir", data, str(repo))
    assert status == 0
    assert out.startswith(f"revoked: {(repo / '.anvil/config.toml').resolve()}")
    assert TrustStore(Path(data)).grants() == []
    status, _, err = trust(capsys, "revoke", "--data-dir", data, str(repo))
    assert status == 1
    assert "no trust grant for" in err


def test_no_project_config_and_bad_files(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    status, _, err = trust(capsys, "show", str(empty))
    assert status == 1
    assert "no .anvil/config.toml found from" in err
    (repo / ".anvil/config.toml").write_text("[providers.local]\nbase_url = 7\n")
    status, _, err = trust(capsys, "grant", str(repo))
    assert status == 1
    assert "providers.local.base_url: expected a non-empty string, got integer 7" in err


def test_grants_for_several_projects_are_kept_apart(
    tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    (other / ".anvil").mkdir(parents=True)
    (other / ".anvil/config.toml").write_text(PROJECT)
    assert trust(capsys, "grant", str(repo / ".anvil/config.toml"))[0] == 0
    assert trust(capsys, "grant", str(other / ".anvil/config.toml"))[0] == 0
    assert trust(capsys, "revoke", str(repo / ".anvil/config.toml"))[0] == 0
    assert "trust: granted " in trust(capsys, "show", str(other / ".anvil/config.toml"))[1]
