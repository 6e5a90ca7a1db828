"""`[context]`: defaults, the keys read, bad values naming the key, and a project's keys held
back without a trust grant (they decide what compaction costs and which model reads history)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.config import ConfigFileError, ContextLimits, load


def _user(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "user.toml"
    path.write_text(text)
    return path


def test_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, user_file=tmp_path / "none.toml", data_dir=tmp_path / "data")
    assert config.context == ContextLimits(85.0, 60.0, None, 3)


def test_the_keys_are_read(tmp_path: Path) -> None:
    text = (
        '[context]\nauto_compact = 0\nclear_at = 50.5\ncompaction_model = "cheap"\n'
        "keep_tool_results = 5\n"
    )
    config = load(tmp_path, user_file=_user(tmp_path, text), data_dir=tmp_path / "data")
    assert config.context == ContextLimits(0.0, 50.5, "cheap", 5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("auto_compact = 100", "context.auto_compact: expected a percentage of the window"),
        ("clear_at = -1", "context.clear_at: expected a percentage of the window"),
        ('auto_compact = "85%"', "got string '85%'"),
        ("keep_tool_results = true", "context.keep_tool_results: expected an integer from 0"),
        ("compaction_model = 3", "context.compaction_model: expected a non-empty string"),
        ("compact = 1", "context.compact: unknown key; expected one of auto_compact, clear_at"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigFileError) as caught:
        load(tmp_path, user_file=_user(tmp_path, f"[context]\n{text}\n"), data_dir=tmp_path / "d")
    assert message in str(caught.value)


def test_a_project_cannot_set_them_without_a_grant(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".anvil").mkdir()
    (repo / ".anvil" / "config.toml").write_text('[context]\ncompaction_model = "theirs"\n')
    config = load(repo, user_file=tmp_path / "none.toml", data_dir=tmp_path / "data")
    assert config.context.compaction_model is None
    assert any("context.compaction_model" in str(w) for w in config.warnings)
