"""Fixture skills for the skills tests: copies of tests/unit/skills/fixtures in a tmp dir."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def skill_md(name: str, description: str, body: str = "Do it well.", extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n"


def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A user config dir holding the user fixtures as `skills/`, and a git repository holding
    the project fixtures (`.claude/skills`, `.anvil/skills`): (config dir, repository)."""
    config = tmp_path / "config"
    shutil.copytree(FIXTURES / "user", config / "skills")
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "project", repo)
    (repo / ".git").mkdir()
    return config, repo


def add_skill(directory: Path, name: str, description: str, **kw: str) -> Path:
    folder = directory / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(skill_md(name, description, **kw))
    return folder
