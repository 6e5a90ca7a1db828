"""A session's `outcome` file (read-only, a `SessionExtension`): how its last turn ended, one line.

    9p read agent/ID/outcome   ->  done | error HttpError: HTTP 401: ... | - (no turn ended yet)

The first word is the outcome (`anvild.agent.events.TurnOutcome`, the vocabulary of
`anvilctl -p`'s exit statuses); the rest is the detail, white space folded to single spaces.
Read from the records (`SessionState.last_turn`), so it survives a restart; a turn a crash cut
reads `error anvild stopped during the turn; ...`. While a turn runs it holds the previous one's:
read it after `wait`.
"""

from __future__ import annotations

from collections.abc import Iterable

from anvild.fs import SnapshotFile
from anvild.ninep.backend import Node
from anvild.session import Session
from anvild.store import TurnEnded
from anvild.tree.sessions import SessionExtension

NAME = "outcome"
NONE = "-"
"""The file's line before any turn has ended."""


def outcome_line(turn: TurnEnded | None) -> str:
    """The `outcome` file's text for a session whose last ended turn is `turn`."""
    if turn is None:
        return f"{NONE}\n"
    detail = " ".join(turn.detail.split())
    return f"{turn.outcome} {detail}\n" if detail else f"{turn.outcome}\n"


def outcome_file() -> SessionExtension:
    """The extension that adds `outcome` to every session directory."""

    def files(session: Session) -> Iterable[Node]:
        return [SnapshotFile(NAME, lambda: outcome_line(session.record.last_turn))]

    return SessionExtension(files=files)


__all__ = ["NAME", "NONE", "outcome_file", "outcome_line"]
