"""A session's `turns/` directory and its `undo` and `rewind` ctl verbs, added to every session
directory as a `SessionExtension` (`anvild.daemon.wiring`). The work is the session's
(`anvild.session.turns`, `anvild.checkpoints`); this only serves it.

    9p ls agent/ID/turns                 1 2 3 ... last
    9p read agent/ID/turns/N/changes     A|M|D +ADDED -DELETED PATH [mode OLD -> NEW], S lines
    echo undo | 9p write agent/ID/ctl    (undo force, rewind N [conversation] [force])

`N/prompt` is the prompt's first line, `N/diff` the unified diff, `N/outcome` how the turn
ended; `last` is the latest turn. A turn without changes has an empty `changes` and `diff`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from anvild.checkpoints import Step
from anvild.fs import Command, CommandSpec, Directory, DynamicChildren, SnapshotFile
from anvild.ninep.backend import Node
from anvild.session import Session
from anvild.session.errors import SessionError
from anvild.session.turns import parse_rewind
from anvild.tree.refusals import kind_of
from anvild.tree.sessions import SessionExtension

NAME = "turns"
LAST = "last"


def _turn_directory(session: Session, name: str, step: Step) -> Directory:
    async def diff() -> bytes:
        return await session.turns.diff(step)

    return Directory(
        name,
        [
            SnapshotFile("prompt", lambda: f"{step.label}\n"),
            SnapshotFile("changes", lambda: step.changes),
            SnapshotFile("diff", diff),
            SnapshotFile("outcome", lambda: f"{step.outcome or '-'}\n"),
        ],
    )


class _Turns(DynamicChildren):
    """One directory per recorded turn, and `last`; made on demand from the session's steps."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def entries(self) -> Sequence[Node]:
        steps = [s for s in self._session.turns.steps() if not s.pending]
        found: list[Node] = [_turn_directory(self._session, str(s.number), s) for s in steps]
        if steps:
            found.append(_turn_directory(self._session, LAST, steps[-1]))
        return found


def turn_files() -> SessionExtension:
    """The extension that adds `turns/` to every session directory, `undo` and `rewind` to its
    ctl."""

    def files(session: Session) -> Iterable[Node]:
        return [Directory(NAME, dynamic=_Turns(session))]

    def verbs(session: Session) -> Iterable[CommandSpec]:
        async def undo(command: Command) -> str:
            try:
                return await session.turns.undo(force="force" in command.flags)
            except SessionError as exc:
                raise kind_of(exc)(str(exc)) from exc

        async def rewind(command: Command) -> str:
            try:
                number, conversation, force = parse_rewind([*command.args, *command.flags])
                return await session.turns.rewind(number, conversation, force)
            except SessionError as exc:
                raise kind_of(exc)(str(exc)) from exc

        return [
            CommandSpec("undo", undo, usage="undo [force]", flags={"force"}),
            CommandSpec(
                "rewind",
                rewind,
                usage="rewind N [conversation] [force]",
                min_args=1,
                max_args=1,
                flags={"conversation", "force"},
            ),
        ]

    return SessionExtension(files=files, verbs=verbs)


__all__ = ["LAST", "NAME", "turn_files"]
