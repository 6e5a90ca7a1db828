"""Skills: folders of know-how in the Agent Skills format, loaded by the model on demand.

    skill.py    Skill, parse_skill (SKILL.md frontmatter and body), list_files, SkillError
    catalog.py  SkillCatalog (where a session's skills come from), SkillSet (what it sees,
                the prompt's list within its byte budget, the `skills` file), Skipped,
                LiveSkills (the `skill` tool's view, found again at each call)

Only names and descriptions enter the system prompt; the `skill` tool
(`anvild.agent.tools.skill`) returns a body and lists a skill's files. A skill is data, never
authority: its `allowed-tools` are recorded and shown, and grant nothing.
"""

from anvild.skills.catalog import (
    PROMPT_BUDGET,
    LiveSkills,
    SkillCatalog,
    SkillSet,
    Skipped,
    Source,
    discover,
    sources,
)
from anvild.skills.skill import (
    SKILL_FILE,
    Skill,
    SkillError,
    list_files,
    parse_skill,
    read_body,
)

__all__ = [
    "PROMPT_BUDGET",
    "SKILL_FILE",
    "LiveSkills",
    "Skill",
    "SkillCatalog",
    "SkillError",
    "SkillSet",
    "Skipped",
    "Source",
    "discover",
    "list_files",
    "parse_skill",
    "read_body",
    "sources",
]
