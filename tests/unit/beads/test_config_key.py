"""`[beads] repo` in the user config: where the bead store lives (an authority-bearing key)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from anvild.config import load
from anvild.config.schema import ConfigFileError
from anvild.config.trust import authority_of


def test_the_repo_key_sets_the_store_path(tmp_path: Path) -> None:
    user = tmp_path / "config.toml"
    user.write_text(f'[beads]\nrepo = "{tmp_path / "work-beads"}"\n')
    config = load(user_file=user, data_dir=tmp_path, project=False)
    assert config.beads_repo == tmp_path / "work-beads"


def test_no_key_means_the_default(tmp_path: Path) -> None:
    config = load(user_file=tmp_path / "none.toml", data_dir=tmp_path, project=False)
    assert config.beads_repo is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[beads]\nrepo = "relative/path"\n', "expected an absolute path"),
        ("[beads]\nrepo = 3\n", "expected a non-empty string"),
        (
            '[beads]\nrepository = "/x"\n',
            "unknown key; expected one of repo, remote, host in [beads]",
        ),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, problem: str) -> None:
    user = tmp_path / "config.toml"
    user.write_text(text)
    with pytest.raises(ConfigFileError, match=re.escape(problem)):
        load(user_file=user, data_dir=tmp_path, project=False)


def test_a_project_needs_a_grant_to_move_the_store() -> None:
    assert authority_of(("beads", "repo")) == "data location"
