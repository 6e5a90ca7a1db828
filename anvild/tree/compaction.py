"""A session's `compact [FOCUS...]` ctl verb and its `compactions` file (read-only), added to
every session directory as a `SessionExtension` (`anvild.daemon.wiring`). The work is the
session's compaction collaborator's (`anvild.session.compaction`); this only serves it.

    echo 'compact focus on the parser' | 9p write agent/ID/ctl
    9p read agent/ID/compactions        TIME TRIGGER BEFORE AFTER DROPPED MODEL, one a line
"""

from __future__ import annotations

from collections.abc import Iterable

from anvild.fs import Command, CommandSpec, SnapshotFile
from anvild.ninep.backend import Node
from anvild.session import Session
from anvild.session.errors import SessionError
from anvild.tree.refusals import kind_of
from anvild.tree.sessions import SessionExtension

NAME = "compactions"
MAX_FOCUS_WORDS = 200


def compaction_files() -> SessionExtension:
    """The extension that adds `compact` to every session's ctl and `compactions` beside it."""

    def files(session: Session) -> Iterable[Node]:
        return [SnapshotFile(NAME, lambda: session.compaction.text())]

    def verbs(session: Session) -> Iterable[CommandSpec]:
        async def compact(command: Command) -> str:
            focus = command.line.strip().partition(" ")[2].strip()
            try:
                await session.compaction.compact(focus)
            except SessionError as exc:
                raise kind_of(exc)(str(exc)) from exc
            return ""

        return [
            CommandSpec("compact", compact, usage="compact [FOCUS...]", max_args=MAX_FOCUS_WORDS)
        ]

    return SessionExtension(files=files, verbs=verbs)


__all__ = ["NAME", "compaction_files"]
