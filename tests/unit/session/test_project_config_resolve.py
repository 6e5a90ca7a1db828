"""`ProjectConfigs.resolve`: a config version builds each model once (a build makes the
provider's adapter); a new version builds again, and a name that does not resolve is refused
at every try."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.config import load
from anvild.llm.errors import ConfigError
from anvild.llm.registry import ResolvedModel
from anvild.llm.testing import ScriptedProvider
from anvild.session.project_config import ProjectConfigs
from tests.unit.session.support import Models, target


class Counting(Models):
    def __init__(self) -> None:
        super().__init__({"fake": target(ScriptedProvider([]))})
        self.calls: list[str | None] = []

    def __call__(self, name: str | None) -> ResolvedModel:
        self.calls.append(name)
        return super().__call__(name)


def test_a_version_resolves_each_name_once_and_a_new_version_again(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".anvil").mkdir()
    project = root / ".anvil" / "config.toml"
    project.write_text('default_model = "fake"\n')
    base = load(user_file=tmp_path / "none.toml", data_dir=tmp_path / "data", project=False)
    resolve, registry = Counting(), Counting()
    configs = ProjectConfigs(base, resolve=resolve, registry=lambda config: registry)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    first = configs.resolve(outside, "fake")
    assert configs.resolve(outside, "fake") is first
    assert configs.resolve(outside, None) is first  # the default: its own key, built once
    assert resolve.calls == ["fake", None]
    for _ in range(2):
        with pytest.raises(ConfigError, match="unknown model 'gone'"):
            configs.resolve(outside, "gone")
    assert resolve.calls == ["fake", None, "gone", "gone"]

    inside = configs.resolve(root, "fake")  # the project sets models: its registry's
    assert configs.resolve(root, "fake") is inside
    assert registry.calls == ["fake"]
    project.write_text('default_model = "fake"\n# edited\n')
    configs.resolve(root, "fake")  # a new version of the file: built again
    assert registry.calls == ["fake", "fake"]
