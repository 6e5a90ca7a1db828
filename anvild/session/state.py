"""The session lifecycle: its states and the one transition table (DESIGN section 4).

    starting -> idle -> running <-> await_approval;  running -> await -> running (next prompt)
    idle/await/running -> await_approval (result gate) -> idle (approve) | stopped (reject)
    any live state -> stopped (stop) -> idle (start);  -> error (record write failed) -> idle
    any live state -> exited (kill; an ephemeral session's turn ended)   [terminal]

The supervisor (`Session`) is the only owner of a session's state; no client or model writes
one. Every change goes through `check`; a change the table does not list raises
`IllegalTransition` (a bug; the tests walk the whole table). The states are the store's
`SessionStatus`: what is recorded and what is enforced are one vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from anvild.session.errors import IllegalTransition
from anvild.store import SessionStatus

S = SessionStatus

TRANSITIONS: Final[Mapping[SessionStatus, frozenset[SessionStatus]]] = {
    S.STARTING: frozenset({S.IDLE, S.STOPPED, S.EXITED, S.ERROR}),
    # -> await_approval: a result gate (request_approval) asked between turns.
    S.IDLE: frozenset({S.RUNNING, S.AWAIT_APPROVAL, S.STOPPED, S.EXITED, S.ERROR}),
    # -> await_approval: a tool call waits, or the turn ended with a result gate requested.
    S.RUNNING: frozenset({S.AWAIT, S.AWAIT_APPROVAL, S.STOPPED, S.EXITED, S.ERROR}),
    # A tool approval is answered (back to running), or the turn is cut while it waits; a
    # result gate is approved (idle; also restart), or rejected (stopped).
    S.AWAIT_APPROVAL: frozenset({S.RUNNING, S.AWAIT, S.IDLE, S.STOPPED, S.EXITED, S.ERROR}),
    S.AWAIT: frozenset({S.IDLE, S.RUNNING, S.AWAIT_APPROVAL, S.STOPPED, S.EXITED, S.ERROR}),
    S.STOPPED: frozenset({S.IDLE, S.EXITED, S.ERROR}),
    S.ERROR: frozenset({S.IDLE, S.EXITED}),
    S.EXITED: frozenset(),
}
"""Every legal change of state: `TRANSITIONS[old]` is the set of states `old` may become."""

LIVE: Final = frozenset(s for s in SessionStatus if s is not S.EXITED)
"""States of a session that still exists in the tree."""

BUSY: Final = frozenset({S.STARTING, S.RUNNING, S.AWAIT_APPROVAL})
"""States in which the session is working: `wait` does not return while in one of them."""

ACCEPTS_PROMPTS: Final = frozenset({S.STARTING, S.IDLE, S.RUNNING, S.AWAIT_APPROVAL, S.AWAIT})
"""States in which `in` accepts a prompt (it runs now, or waits in the queue)."""


def check(old: SessionStatus, new: SessionStatus) -> SessionStatus:
    """`new` if the table allows `old -> new`; `IllegalTransition` otherwise."""
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[old])) or "none (terminal)"
        raise IllegalTransition(
            f"illegal session transition {old.value} -> {new.value} (from {old.value}: {allowed})"
        )
    return new


__all__ = ["ACCEPTS_PROMPTS", "BUSY", "LIVE", "TRANSITIONS", "SessionStatus", "check"]
