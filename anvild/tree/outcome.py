"""A session's `outcome` file (read-only): how its last turn ended, as one line a script can
test without parsing prose. Added to every session directory as a `SessionExtension`
(`anvild.daemon.wiring`).

    9p read agent/ID/outcome      done
                                  error HttpError: HTTP 401: {"error": {"message": ...}}
                                  max_steps stopped after 50 steps
                                  cancelled the turn was cancelled
                                  -                  (no turn has ended yet)

The first word is the outcome, the vocabulary of `anvilctl -p`'s exit statuses
(`anvilctl.headless.EXIT_CODES`, from `anvild.agent.events.TurnOutcome`): done, error,
max_steps, max_tokens, refused, budget_exceeded, protocol_stopped, cancelled. The rest of the
line, when there is one, is the turn's detail (for an error `KIND: message`), its white space
(newlines included) folded to single spaces. A turn a crash cut is ended by recovery at the
next start as `error anvild stopped during the turn; ...`.

It reads the session's records (`SessionState.last_turn`, the `TurnEnded` of the last turn),
so it survives a daemon restart. While a turn runs it still holds the previous turn's outcome:
read it after `wait` (which returns once no turn runs), as `anvilctl wait` does for its exit
status.
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
