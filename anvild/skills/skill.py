"""One skill: a folder with a `SKILL.md` in the Agent Skills format, parsed and checked.

`SKILL.md` starts with YAML frontmatter between `---` lines: `name` (1 to 64 lowercase letters,
digits and single hyphens), `description` (what it does and when to use it), optional
`allowed-tools` (a string of names separated by spaces or commas, or a list), `license`,
`compatibility` (strings) and `metadata` (a mapping); other keys are ignored, so folders made
for other agents load unchanged. The markdown after it is the body, which only the `skill` tool
shows. `allowed-tools` is recorded and shown, never granted. A file that breaks these rules
raises `SkillError` naming the file and the problem. Reads block: call from a worker thread.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import yaml

SKILL_FILE: Final = "SKILL.md"
MAX_SKILL_BYTES: Final = 256 * 1024
MAX_NAME_CHARS: Final = 64
MAX_DESCRIPTION_CHARS: Final = 1024  # the format's limit; longer ones are cut in the prompt
MAX_LISTED_FILES: Final = 200
NAME_RE: Final = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_FENCE: Final = "---"


class SkillError(ValueError):
    """A skill that cannot be used; the message names the file and what to fix."""


@attrs.frozen
class Skill:
    """A discovered skill. `directory` is canonical; `source` is where it was found
    (`role`, `user` or `project`)."""

    name: str
    description: str
    directory: Path
    source: str
    allowed_tools: tuple[str, ...] = ()
    license: str = ""
    compatibility: str = ""
    metadata: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def file(self) -> Path:
        return self.directory / SKILL_FILE


def _read(path: Path) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_SKILL_BYTES + 1)
    except OSError as exc:
        raise SkillError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if len(data) > MAX_SKILL_BYTES:
        raise SkillError(
            f"{path}: larger than {MAX_SKILL_BYTES // 1024} KB; move the details into files "
            "beside it and keep SKILL.md short"
        )
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise SkillError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc


def split_frontmatter(path: Path, text: str) -> tuple[Mapping[str, Any], str]:
    """The frontmatter mapping and the body of a SKILL.md's `text`."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != _FENCE:
        raise SkillError(
            f"{path}: no frontmatter; the file must start with a '---' line, then `name:` and "
            "`description:`, then another '---' line"
        )
    end = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() == _FENCE), None)
    if end is None:
        raise SkillError(f"{path}: the frontmatter has no closing '---' line")
    try:
        data = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 2}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SkillError(f"{path}: the frontmatter is not valid YAML{at}: {problem}") from exc
    if not isinstance(data, dict):
        raise SkillError(f"{path}: the frontmatter must be a mapping of keys to values")
    return data, "".join(lines[end + 1 :])


def _string(path: Path, data: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    value = data.get(key)
    if value is None:
        if required:
            raise SkillError(f"{path}: the frontmatter has no `{key}`")
        return ""
    if not isinstance(value, str):
        raise SkillError(f"{path}: `{key}` must be a string, not {type(value).__name__}")
    value = " ".join(value.split())
    if required and not value:
        raise SkillError(f"{path}: `{key}` is empty")
    return value


def _tools(path: Path, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(t for t in re.split(r"[\s,]+", value) if t)
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return tuple(t.strip() for t in value if t.strip())
    raise SkillError(f"{path}: `allowed-tools` must be a string or a list of strings")


def parse_skill(directory: Path, source: str) -> Skill:
    """The skill in `directory` (which holds SKILL.md); `SkillError` when it is not valid."""
    path = directory / SKILL_FILE
    data, _ = split_frontmatter(path, _read(path))
    name = _string(path, data, "name", required=True)
    if len(name) > MAX_NAME_CHARS or not NAME_RE.match(name):
        raise SkillError(
            f"{path}: `name` {name[:80]!r} must be 1 to {MAX_NAME_CHARS} lowercase letters, "
            "digits and single hyphens (e.g. pdf-forms), not starting or ending with a hyphen"
        )
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise SkillError(f"{path}: `metadata` must be a mapping of keys to values")
    return Skill(
        name=name,
        description=_string(path, data, "description", required=True),
        directory=Path(os.path.realpath(directory)),
        source=source,
        allowed_tools=_tools(path, data.get("allowed-tools")),
        license=_string(path, data, "license"),
        compatibility=_string(path, data, "compatibility"),
        metadata={str(k): str(v) for k, v in (metadata or {}).items()},
    )


def read_body(skill: Skill) -> str:
    """The markdown body of `skill`'s SKILL.md as it is now (`SkillError` if it broke)."""
    _, body = split_frontmatter(skill.file, _read(skill.file))
    return body.strip()


def list_files(skill: Skill, limit: int = MAX_LISTED_FILES) -> tuple[list[str], bool]:
    """The files in the skill's folder besides SKILL.md, relative and sorted, hidden ones,
    Python's `__pycache__` and symlinked directories skipped; and whether there were more than
    `limit`."""
    found: list[str] = []
    for root, dirs, files in os.walk(skill.directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        base = Path(root).relative_to(skill.directory)
        for name in sorted(files):
            rel = (base / name).as_posix()
            if name.startswith(".") or rel == SKILL_FILE:
                continue
            found.append(rel)
            if len(found) > limit:
                return found[:limit], True
    return found, False


__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "SKILL_FILE",
    "Skill",
    "SkillError",
    "list_files",
    "parse_skill",
    "read_body",
    "split_frontmatter",
]
