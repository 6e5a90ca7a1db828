"""`load(project=False)`: the daemon's own settings, which the cwd it runs in cannot change."""

from __future__ import annotations

from pathlib import Path

from anvild.config import Trust, load


def test_project_false_ignores_the_project_config_of_the_cwd(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".anvil").mkdir()
    (repo / ".anvil" / "config.toml").write_text('instructions = "from the project"\n')
    user = tmp_path / "user.toml"
    user.write_text('instructions = "from the user"\n')

    both = load(repo, user_file=user, data_dir=tmp_path / "data")
    assert [i.text for i in both.instructions] == ["from the user", "from the project"]
    assert both.project is not None

    mine = load(repo, user_file=user, data_dir=tmp_path / "data", project=False)
    assert [(i.text, i.source.trust) for i in mine.instructions] == [("from the user", Trust.USER)]
    assert mine.project is None
    explicit = load(
        repo,
        user_file=user,
        data_dir=tmp_path / "data",
        project_file=repo / ".anvil" / "config.toml",
        project=False,
    )
    assert explicit.project is None
