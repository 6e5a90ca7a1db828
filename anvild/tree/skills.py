"""A session's `skills` file (read-only, a `SessionExtension`): the skills it sees, one a line.

    9p read agent/ID/skills
    pdf-forms	user	/home/me/.config/anvil/skills/pdf-forms
    release	project	/src/app/.claude/skills/release
    -	project	/src/app/.anvil/skills/broken/SKILL.md	the frontmatter has no `description`

Tab-separated: name, source (role, user or project), the skill's folder; a skipped folder is
`-`, its source, its SKILL.md and why. Discovered at each open for the session's cwd and role
(`anvild.skills.SkillCatalog`), the way its prompt's list was at session start; empty when the
daemon has no skill catalog.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from anvild.fs import SnapshotFile
from anvild.ninep.backend import Node
from anvild.session import Session
from anvild.skills import SkillCatalog
from anvild.tree.sessions import SessionExtension

NAME = "skills"


def skills_file(catalog: SkillCatalog | None) -> SessionExtension:
    """The extension that adds `skills` to every session directory."""

    def files(session: Session) -> Iterable[Node]:
        async def text() -> str:
            if catalog is None:
                return ""
            cwd, role = session.cwd, session.role
            found = await trio.to_thread.run_sync(catalog.for_session, cwd, role)
            return found.text()

        return [SnapshotFile(NAME, text)]

    return SessionExtension(files=files)


__all__ = ["NAME", "skills_file"]
