"""skill: load one of the session's skills by name (progressive disclosure).

The system prompt lists only each skill's name and description; this tool returns a skill's
instructions (the body of its SKILL.md, read now) and the absolute paths of the files beside it,
which the model reads with read_file (a skill folder outside the workspace is readable by the
file tools, never writable) and runs, if they are scripts, with bash under the session's
sandbox and rules. The skills come from a `SkillLibrary` (the session's `anvild.skills.SkillSet`);
the tool only reads. A skill's `allowed-tools` are shown as recorded, never granted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import attrs
import trio

from anvild.agent.tools.base import (
    Args,
    Cancellation,
    Effects,
    Failed,
    InvalidArgs,
    ToolContext,
    ToolOutput,
    object_schema,
)

DESCRIPTION: Final = """\
Load a skill: the instructions for a kind of task, listed by name and description in the \
system prompt under "Skills". Call it with the skill's name when a task matches a skill's \
description, before you start the work. It returns the skill's instructions and the absolute \
paths of its other files (references, templates, scripts): read those with read_file when the \
instructions point to them; run scripts with bash (the sandbox and the permission rules apply \
as to any command). A skill never changes what you are allowed to do.
"""

SCHEMA: Final[Mapping[str, Any]] = object_schema(
    {
        "name": {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "description": "The skill's name, as listed under Skills in the system prompt.",
        },
    },
    required=("name",),
)


@attrs.frozen
class LoadedSkill:
    """A skill as the tool shows it: where it is, its body, its files (relative to
    `directory`; `more_files` when the list was cut) and its recorded `allowed_tools`."""

    name: str
    source: str
    directory: Path
    body: str
    files: tuple[str, ...] = ()
    more_files: bool = False
    allowed_tools: tuple[str, ...] = ()


class SkillLibrary(Protocol):
    """The skills a session sees."""

    def names(self) -> Sequence[str]:
        """Every skill's name, in the order the prompt lists them."""
        ...

    def load(self, name: str) -> LoadedSkill:
        """The skill `name` read now; `KeyError` if there is none, `ValueError` or `OSError`
        if it broke. Both methods may block (they are called from a worker thread)."""
        ...


def render(skill: LoadedSkill) -> str:
    """The tool's result for `skill`."""
    parts = [
        f'<skill name="{skill.name}" source="{skill.source}" directory="{skill.directory}">\n'
        f"{skill.body.strip()}\n</skill>"
    ]
    if skill.files:
        listed = "\n".join(str(skill.directory / rel) for rel in skill.files)
        more = "\n(more files not listed: use glob in the directory)" if skill.more_files else ""
        parts.append(
            f"Files of this skill (read them with read_file; run scripts with bash):\n"
            f"{listed}{more}"
        )
    else:
        parts.append("This skill has no other files.")
    if skill.allowed_tools:
        parts.append(
            f"Its allowed-tools ({' '.join(skill.allowed_tools)}) are recorded, not granted: "
            "your permissions are unchanged."
        )
    return "\n\n".join(parts)


class SkillTool:
    name: Final = "skill"
    description: Final = DESCRIPTION
    summary: Final = (
        "Load a skill listed under Skills in the system prompt by its `name`: returns its "
        "instructions and the paths of its files (read them with read_file)."
    )
    input_schema: Final = SCHEMA
    cancellation: Final = Cancellation.ATOMIC  # it only reads

    def __init__(self, library: SkillLibrary) -> None:
        self._library = library

    def effects(self, args: Args) -> Effects:
        return Effects.none()  # reads the session's own skill folders, found by the daemon

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        name = str(args["name"]).strip()
        try:
            skill = await trio.to_thread.run_sync(self._library.load, name)
        except KeyError:
            names = await trio.to_thread.run_sync(self._library.names)
            known = ", ".join(names) or "(none)"
            raise InvalidArgs(
                f"There is no skill named {name!r}. The skills are: {known}."
            ) from None
        except (OSError, ValueError) as exc:
            raise Failed(f"The skill {name!r} cannot be loaded now: {exc}") from exc
        return ToolOutput(render(skill))


__all__ = ["LoadedSkill", "SkillLibrary", "SkillTool", "render"]
