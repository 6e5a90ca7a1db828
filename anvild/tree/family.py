"""A session's `parent` and `children` files (read-only, a `SessionExtension`): subagents.

    9p read agent/ID/parent     ->  3f2a9c1d   (the session whose `task` started it; - if none)
    9p read agent/ID/children   ->  one line per child: id role state outcome, tab-separated

Both come from the manager's family index, which the records rebuild after a restart (the
child's `SessionStarted.parent`): a child that ended, reaped or not, keeps its line with the
state `exited` and how its last turn ended (`-` before one has).
"""

from __future__ import annotations

from collections.abc import Iterable

from anvild.fs import SnapshotFile
from anvild.ninep.backend import Node
from anvild.session import Session, SessionManager
from anvild.tree.sessions import SessionExtension

__all__ = ["children_text", "family_files"]

NONE = "-"


def children_text(manager: SessionManager, session_id: str) -> str:
    """The `children` file of a session: id, role, state, outcome per child, oldest first."""
    return "".join(
        f"{child.id}\t{child.role}\t{child.state}\t{child.outcome}\n"
        for child in manager.children(session_id)
    )


def family_files(manager: SessionManager) -> SessionExtension:
    """The extension that adds `parent` and `children` to every session directory."""

    def files(session: Session) -> Iterable[Node]:
        return [
            SnapshotFile("parent", lambda: f"{manager.parent_of(session.id) or NONE}\n"),
            SnapshotFile("children", lambda: children_text(manager, session.id)),
        ]

    return SessionExtension(files=files)
