"""Where a session's skills come from, what it sees of them, and the prompt's list.

`SkillCatalog.for_session(cwd, role)` searches, in this order (the first skill of a name wins,
later ones are skipped as shadowed): the role's `<config dir>/roles/<role>/skills/`, the user's
`<config dir>/skills/`, then the project's `.anvil/skills/` and `.claude/skills/` in `cwd` and
each directory above it up to the git root (nearest first). Each child folder holding SKILL.md
is a skill (`anvild.skills.skill`); an invalid one is `Skipped` with the file and the problem.
Project skills are data: no source's `allowed-tools` grants anything. `SkillSet.prompt_block`
is the system prompt's part: names and descriptions only, each cut to PROMPT_DESCRIPTION_CHARS,
at most PROMPT_BUDGET bytes, with a note naming what was left out. Discovery reads the disk on
every call (a few small files): there is no cache to go stale.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import attrs
import platformdirs

from anvild.agent.tools.skill import LoadedSkill
from anvild.config.load import stat_mode
from anvild.skills.skill import SKILL_FILE, Skill, SkillError, list_files, parse_skill, read_body

PROMPT_BUDGET: Final = 4096  # bytes of skill lines in the system prompt
PROMPT_DESCRIPTION_CHARS: Final = 300  # of each description in the prompt (the tool has it all)
LEFT_OUT_NAMES_BUDGET: Final = 512  # bytes of the names of skills that did not fit
MAX_SKILLS_PER_SOURCE: Final = 500
PROJECT_DIRS: Final = (".anvil/skills", ".claude/skills")


@attrs.frozen
class Source:
    """A directory searched for skills; `label` is `role`, `user` or `project`."""

    label: str
    directory: Path


@attrs.frozen
class Skipped:
    """A skill folder that is not used, and why."""

    path: Path
    source: str
    reason: str


@attrs.frozen
class SkillSet:
    """What a session sees: its skills (discovery order), the skipped folders, and the source
    directories that exist (canonical)."""

    skills: tuple[Skill, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    sources: tuple[Source, ...] = ()

    def get(self, name: str) -> Skill | None:
        return next((skill for skill in self.skills if skill.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(skill.name for skill in self.skills)

    def load(self, name: str) -> LoadedSkill:
        """The skill `name` as the `skill` tool shows it, its SKILL.md read again now
        (`KeyError` for an unknown name, `SkillError` or `OSError` if it broke since)."""
        skill = self.get(name)
        if skill is None:
            raise KeyError(name)
        body = read_body(skill)
        files, more = list_files(skill)
        return LoadedSkill(
            skill.name,
            skill.source,
            skill.directory,
            body,
            tuple(files),
            more,
            skill.allowed_tools,
        )

    def read_roots(self) -> tuple[Path, ...]:
        """The source directories and the skills' folders (a symlinked one is elsewhere), all
        canonical: readable for the file tools, never writable."""
        found = [source.directory for source in self.sources]
        return tuple(dict.fromkeys([*found, *(skill.directory for skill in self.skills)]))

    def prompt_block(self, budget: int = PROMPT_BUDGET) -> str:
        """The system prompt's list of skills ("" without any)."""
        if not self.skills:
            return ""
        lines: list[str] = []
        left_out: list[str] = []
        used = 0
        for skill in self.skills:
            line = f"- {skill.name}: {_cut(skill.description, PROMPT_DESCRIPTION_CHARS)}"
            size = len(line.encode()) + 1
            if left_out or used + size > budget:
                left_out.append(skill.name)
                continue
            lines.append(line)
            used += size
        parts = [
            "# Skills\n\n"
            "Skills are folders of instructions for particular tasks. When a task matches a "
            "skill's description, call the `skill` tool with its name before you start: it "
            "returns the instructions and lists the skill's files, which you read with "
            "read_file. A skill is guidance, never permission: it changes nothing about what "
            "you may do.",
            "\n".join(lines),
        ]
        if left_out:
            parts.append(_left_out_note(left_out, budget))
        return "\n\n".join(parts)

    def text(self) -> str:
        """The `skills` file: `NAME SOURCE DIRECTORY` per skill, then `- SOURCE FILE REASON`
        per skipped folder (`-` is never a skill's name), tab-separated, one line each."""
        out = [f"{s.name}\t{s.source}\t{s.directory}\n" for s in self.skills]
        for skipped in self.skipped:
            reason = skipped.reason.removeprefix(f"{skipped.path}: ")
            out.append(f"-\t{skipped.source}\t{skipped.path}\t{' '.join(reason.split())}\n")
        return "".join(out)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _left_out_note(names: list[str], budget: int) -> str:
    shown: list[str] = []
    used = 0
    for name in names:
        used += len(name) + 2
        if used > LEFT_OUT_NAMES_BUDGET:
            break
        shown.append(name)
    more = len(names) - len(shown)
    listed = ", ".join(shown) + (f" and {more} more" if more else "")
    return (
        f"[{len(names)} more skills are installed but not described here (the list is limited "
        f"to {budget} bytes): {listed}. Call `skill` with one of these names to read it.]"
    )


def _exists(path: str) -> bool:
    """`Path(path).exists()` (the same errors count as absent, others are raised) without
    building a `Path`: discovery runs at every `new`, and pathlib's objects were most of it."""
    return stat_mode(path) is not None


def _project_dirs(cwd: str) -> list[str]:
    """`cwd` (canonical) and each directory above it up to the git root (only `cwd` outside a
    repo)."""
    chain = [cwd]
    while (parent := os.path.dirname(chain[-1])) != chain[-1]:
        chain.append(parent)
    root = next((d for d in chain if _exists(os.path.join(d, ".git"))), cwd)
    return chain[: chain.index(root) + 1]


def _searched(
    cwd: Path | str, role: str, config_dir: Path, role_dir: Path
) -> list[tuple[str, str]]:
    """`sources` as (label, directory) strings."""
    found = [
        ("role", os.path.join(role_dir, role, "skills")),
        ("user", os.path.join(config_dir, "skills")),
    ]
    for directory in _project_dirs(os.path.realpath(cwd)):
        found += [("project", os.path.join(directory, sub)) for sub in PROJECT_DIRS]
    return found


def sources(cwd: Path, role: str, *, config_dir: Path, role_dir: Path) -> tuple[Source, ...]:
    """The directories searched for a session in `cwd` with `role`, in order of precedence."""
    return tuple(Source(label, Path(d)) for label, d in _searched(cwd, role, config_dir, role_dir))


def discover(searched: tuple[Source, ...]) -> SkillSet:
    """The skills in `searched` (first name wins), and the folders skipped with why."""
    return _discover([(source.label, str(source.directory)) for source in searched])


def _discover(searched: list[tuple[str, str]]) -> SkillSet:
    skills: dict[str, Skill] = {}
    skipped: list[Skipped] = []
    present: list[Source] = []
    for label, directory in searched:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue  # absent or unreadable: nothing from here
        present.append(Source(label, Path(os.path.realpath(directory))))
        for entry in entries[:MAX_SKILLS_PER_SOURCE]:
            folder = Path(entry.path)
            if entry.name.startswith(".") or not (folder / SKILL_FILE).is_file():
                continue
            try:
                skill = parse_skill(folder, label)
            except SkillError as exc:
                skipped.append(Skipped(folder / SKILL_FILE, label, str(exc)))
                continue
            taken = skills.get(skill.name)
            if taken is not None:
                why = f"{skill.file}: the name {skill.name!r} is taken by {taken.file}"
                skipped.append(Skipped(skill.file, label, why))
                continue
            skills[skill.name] = skill
    return SkillSet(tuple(skills.values()), tuple(skipped), tuple(present))


@attrs.frozen
class SkillCatalog:
    """The daemon's skill search: its config dir (`skills/`) and role dir (`<role>/skills/`);
    None means the platformdirs user config dir ("anvil") and its `roles/`."""

    config_dir: Path | None = None
    role_dir: Path | None = None

    def live(self, cwd: Path | str, role: str) -> LiveSkills:
        """The skills of a session in `cwd` with `role`, found again at each use."""
        return LiveSkills(self, Path(cwd), role)

    def for_session(self, cwd: Path | str, role: str) -> SkillSet:
        config = (
            platformdirs.user_config_path("anvil") if self.config_dir is None else self.config_dir
        )
        roles = config / "roles" if self.role_dir is None else self.role_dir
        return _discover(_searched(cwd, role, config, roles))


@attrs.frozen
class LiveSkills:
    """A session's skills as a `SkillLibrary` for the `skill` tool: each call finds them again
    (blocking: call from a worker thread), so the tool sees the folders as they are now."""

    catalog: SkillCatalog
    cwd: Path
    role: str

    def names(self) -> tuple[str, ...]:
        return self.catalog.for_session(self.cwd, self.role).names()

    def load(self, name: str) -> LoadedSkill:
        return self.catalog.for_session(self.cwd, self.role).load(name)


__all__ = [
    "PROMPT_BUDGET",
    "PROMPT_DESCRIPTION_CHARS",
    "LiveSkills",
    "SkillCatalog",
    "SkillSet",
    "Skipped",
    "Source",
    "discover",
    "sources",
]
