"""Recovery of a session whose last turn has its `TurnEnded` but whose status is still running
(stopped before its next state): the turn keeps its outcome, only the status goes to rest."""

from __future__ import annotations

from anvild.store import (
    MessageAppended,
    Note,
    PromptQueued,
    PromptTaken,
    Record,
    SessionStatus,
    StateChanged,
    TurnEnded,
)
from anvild.store.recovery import INTERRUPTED_NOTE, RECOVERED_DETAIL, TURN_DETAIL
from tests.unit.store.support import assistant, user
from tests.unit.store.test_recovery import recovered

S = SessionStatus


def _turn(number: int, ended: TurnEnded | None) -> list[Record]:
    records: list[Record] = [
        PromptQueued(f"p{number}", f"prompt {number}"),
        PromptTaken(f"p{number}"),
        StateChanged(S.RUNNING),
        MessageAppended(user(f"prompt {number}")),
    ]
    if ended is not None:
        records += [MessageAppended(assistant(f"answer {number}")), ended]
    return records


def test_a_turn_that_ended_keeps_its_outcome_and_only_its_status_is_recovered() -> None:
    records, messages = recovered(*_turn(1, TurnEnded("done")))
    assert records == [
        StateChanged(S.IDLE, RECOVERED_DETAIL),
        Note(
            "recovered after a restart: the session was running (its turn had ended: done), "
            "now idle"
        ),
    ]
    assert messages == [user("prompt 1"), assistant("answer 1")]
    # a later turn cut before its end is interrupted, as always
    records, messages = recovered(
        *_turn(1, TurnEnded("cancelled", "the turn was cancelled")),
        StateChanged(S.AWAIT),
        *_turn(2, None),
    )
    assert TurnEnded("error", TURN_DETAIL, interrupted=True) in records
    assert messages[-1] == user("prompt 2", INTERRUPTED_NOTE)
