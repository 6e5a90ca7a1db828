"""Agent definitions for `task`: named child roles kept as markdown files.

    .anvil/agents/NAME.md, .claude/agents/NAME.md   (the project: cwd up to its git root)
    <user config dir>/agents/NAME.md                (the user's)

Each file has YAML frontmatter (`name`, `description`, `role`, `model`, `tools`) and a body, the
child's extra instructions (Claude Code's subagent files read unchanged). A definition is data,
never authority: its `role` is checked against the parent's like any role (`task` refuses a
wider one), it sets no sandbox or mode, and `tools` only narrows the child's tools (Claude Code
names are mapped to anvild's; unknown ones add nothing). The nearest project directory wins over
a farther one and over the user's, `.anvil` over `.claude`. A file that cannot be used is skipped
and reported with its problem (`Definitions.problems`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import platformdirs
import yaml

__all__ = ["AgentDefinition", "Definitions", "discover", "parse_definition"]

NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_FILE_BYTES: Final = 64 * 1024
PROJECT_DIRS: Final = (".anvil/agents", ".claude/agents")
INHERIT: Final = "inherit"
"""`model: inherit` (Claude Code): the parent's model, as when no model is given."""
CLAUDE_TOOLS: Final[Mapping[str, str]] = {
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Bash": "bash",
    "Grep": "grep",
    "Glob": "glob",
    "LS": "glob",
    "TodoWrite": "todo_write",
    "Task": "task",
}
"""Claude Code's tool names and the anvild tool that does the same."""


@attrs.frozen
class AgentDefinition:
    name: str
    description: str
    role: str | None
    model: str | None  # None: the parent's
    tools: tuple[str, ...] | None  # anvild tool names; None: no narrowing
    instructions: str
    path: Path


@attrs.frozen
class Definitions:
    """What discovery found: the usable definitions by name and the skipped files' problems."""

    by_name: Mapping[str, AgentDefinition]
    problems: tuple[str, ...] = ()


class DefinitionError(ValueError):
    """A definition file that cannot be used; the message names the file and the problem."""


def _frontmatter(path: Path, text: str) -> tuple[Mapping[str, Any], str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise DefinitionError(f"{path}: no frontmatter (the file must start with a --- line)")
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            try:
                data = yaml.safe_load("".join(lines[1:index]))
            except yaml.YAMLError as exc:
                raise DefinitionError(f"{path}: the frontmatter is not YAML: {exc}") from exc
            if not isinstance(data, dict):
                raise DefinitionError(f"{path}: the frontmatter is not a mapping of keys")
            return data, "".join(lines[index + 1 :]).strip()
    raise DefinitionError(f"{path}: the frontmatter has no closing --- line")


def _text(path: Path, data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DefinitionError(f"{path}: {key} must be a non-empty string, got {value!r}")
    return value.strip()


def _tools(path: Path, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",")]
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        names = [str(item).strip() for item in value]
    else:
        raise DefinitionError(f"{path}: tools must be a list or a comma-separated string")
    return tuple(dict.fromkeys(CLAUDE_TOOLS.get(name, name) for name in names if name))


def parse_definition(path: Path) -> AgentDefinition:
    """One definition file; `DefinitionError` saying what is wrong otherwise."""
    try:
        raw = path.read_bytes()[: MAX_FILE_BYTES + 1]
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise DefinitionError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DefinitionError(f"{path}: not UTF-8 text") from exc
    data, body = _frontmatter(path, text)
    name = _text(path, data, "name") or path.stem
    if not NAME_RE.fullmatch(name):
        raise DefinitionError(
            f"{path}: name {name!r} is not usable: letters, digits, '_', '-' or '.', at most 64"
        )
    model = _text(path, data, "model")
    return AgentDefinition(
        name=name,
        description=" ".join((_text(path, data, "description") or "").split()),
        role=_text(path, data, "role"),
        model=None if model == INHERIT else model,
        tools=_tools(path, data.get("tools")),
        instructions=body,
        path=path,
    )


def project_dirs(cwd: Path) -> list[Path]:
    """The project's definition directories, nearest first: cwd and its parents up to the one
    holding `.git` (or the filesystem root)."""
    found = []
    for directory in (cwd, *cwd.parents):
        found += [directory / sub for sub in PROJECT_DIRS]
        if (directory / ".git").exists():
            break
    return found


def user_dir(user_config_dir: Path | None) -> Path:
    base = platformdirs.user_config_path("anvil") if user_config_dir is None else user_config_dir
    return base / "agents"


def discover(cwd: Path, user_config_dir: Path | None) -> Definitions:
    """Every definition a session in `cwd` may name, the first found per name winning."""
    return _collect([*project_dirs(cwd), user_dir(user_config_dir)])


def _collect(directories: Iterable[Path]) -> Definitions:
    by_name: dict[str, AgentDefinition] = {}
    problems: list[str] = []
    for directory in directories:
        try:
            files = sorted(p for p in directory.glob("*.md") if p.is_file())
        except OSError:
            continue
        for path in files:
            try:
                definition = parse_definition(path)
            except DefinitionError as exc:
                problems.append(str(exc))
                continue
            by_name.setdefault(definition.name, definition)
    return Definitions(by_name, tuple(problems))
