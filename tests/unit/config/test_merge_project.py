"""`merge_project`: a project file merged onto a config loaded with `project=False`, by the
rules of `load`; and `report.settings`, each effective setting with where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.config import ConfigFileError, Trust, TrustStore, digest, load, merge_project
from anvild.config.report import settings
from tests.unit.store.support import record_fsyncs

USER = """\
instructions = "from the user"
default_model = "fake"

[providers.fake]
kind = "openai-chat"
base_url = "http://127.0.0.1:1/v1"

[models.fake]
provider = "fake"
model = "m"

[permissions]
deny = ["bash(rm:*)"]
"""

PROJECT = """\
instructions = "from the project"
default_model = "mine"

[providers.theirs]
kind = "openai-chat"
base_url = "http://127.0.0.1:2/v1"

[models.mine]
provider = "theirs"
model = "x"

[models.kept]
provider = "fake"
model = "y"

[permissions]
allow = ["bash(make:*)"]
ask = ["bash(git push:*)"]
deny = ["read_file(.env)", "bash(rm:*)"]
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    user = tmp_path / "user.toml"
    user.write_text(USER)
    project = tmp_path / "repo" / ".anvil" / "config.toml"
    project.parent.mkdir(parents=True)
    project.write_text(PROJECT)
    return user, project


def test_ungranted_the_project_adds_data_and_narrowing_rules_only(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    user, project = files
    base = load(user_file=user, data_dir=tmp_path / "data", project=False)
    merged = merge_project(base, project)
    assert [i.text for i in merged.instructions] == ["from the user", "from the project"]
    assert merged.permissions.allow == ()
    assert merged.permissions.ask == ("bash(git push:*)",)  # ask only narrows: it applies
    assert merged.permissions.deny == ("bash(rm:*)", "read_file(.env)")
    # A model on an ignored provider (and the default naming it) cannot apply: dropped, with a
    # warning, instead of an unknown-provider error; a model on the user's provider stays.
    assert "mine" not in merged.models
    assert "kept" in merged.models
    assert merged.default_model == "fake"
    assert {w.key for w in merged.warnings} >= {"models.mine.provider", "default_model"}
    assert merge_project(base, None) is base


def test_granted_the_project_provider_and_model_apply(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    user, project = files
    TrustStore(tmp_path / "data").grant(project, digest(project.read_bytes()))
    base = load(user_file=user, data_dir=tmp_path / "data", project=False)
    merged = merge_project(base, project)
    assert merged.models["mine"].provider == "theirs"
    assert merged.default_model == "mine"
    assert merged.permissions.allow == ("bash(make:*)",)
    source = merged.source_of("providers.theirs.base_url")
    assert source is not None
    assert source.trust is Trust.PROJECT_GRANTED


def test_a_bad_project_file_names_itself(files: tuple[Path, Path], tmp_path: Path) -> None:
    user, project = files
    project.write_text("[permissions\n")
    base = load(user_file=user, data_dir=tmp_path / "data", project=False)
    with pytest.raises(ConfigFileError, match="not valid TOML"):
        merge_project(base, project)


def test_settings_say_where_each_came_from(files: tuple[Path, Path], tmp_path: Path) -> None:
    user, project = files
    base = load(user_file=user, data_dir=tmp_path / "data", project=False)
    lines = {s.line() for s in settings(merge_project(base, project))}
    path = project.resolve()
    assert f'instructions = "from the user"\tuser {user}' in lines
    assert f'instructions = "from the project"\tproject {path}' in lines
    assert f'permissions.deny = "bash(rm:*)"\tuser {user}' in lines  # the user's, first
    assert f'permissions.deny = "read_file(.env)"\tproject {path}' in lines
    assert f'permissions.allow = "bash(make:*)"\tproject ignored (permission) {path}' in lines
    assert 'providers.anthropic.kind = "anthropic"\tbuilt-in' in lines


def test_a_grant_and_a_revoke_are_synced_with_their_directory_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TrustStore(tmp_path / "data")
    project = tmp_path / "config.toml"
    project.write_text("instructions = 'x'\n")
    synced = record_fsyncs(monkeypatch)
    store.grant(project, digest(project.read_bytes()))
    directory = store.file.parent.stat().st_ino
    assert synced == [store.file.stat().st_ino, directory]  # the file, then the rename
    synced.clear()
    assert store.revoke(project) is not None
    assert synced == [store.file.stat().st_ino, directory]
    assert store.grants() == []
