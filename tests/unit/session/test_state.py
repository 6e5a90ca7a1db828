"""The lifecycle table: every legal transition is accepted, every other one raises."""

from __future__ import annotations

import itertools

import pytest

from anvild.session.errors import IllegalTransition, SessionError
from anvild.session.state import BUSY, LIVE, TRANSITIONS, SessionStatus, check

S = SessionStatus
LEGAL = sorted(
    ((old, new) for old, targets in TRANSITIONS.items() for new in targets),
    key=lambda pair: (pair[0].value, pair[1].value),
)
ILLEGAL = sorted(
    (
        (old, new)
        for old, new in itertools.product(SessionStatus, repeat=2)
        if new not in TRANSITIONS[old]
    ),
    key=lambda pair: (pair[0].value, pair[1].value),
)


def test_the_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(SessionStatus)


@pytest.mark.parametrize(("old", "new"), LEGAL, ids=lambda s: s.value)
def test_legal_transitions(old: SessionStatus, new: SessionStatus) -> None:
    assert check(old, new) is new


@pytest.mark.parametrize(("old", "new"), ILLEGAL, ids=lambda s: s.value)
def test_illegal_transitions_raise(old: SessionStatus, new: SessionStatus) -> None:
    with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}") as info:
        check(old, new)
    assert isinstance(info.value, SessionError)


def test_the_lifecycle_of_design_section_4() -> None:
    path = [S.STARTING, S.IDLE, S.RUNNING, S.AWAIT_APPROVAL, S.RUNNING, S.AWAIT, S.IDLE]
    for old, new in itertools.pairwise(path):
        check(old, new)
    # exited is terminal; every live state can be killed or fail
    assert TRANSITIONS[S.EXITED] == frozenset()
    for state in LIVE:
        assert S.EXITED in TRANSITIONS[state]
        if state is not S.ERROR:
            assert S.ERROR in TRANSITIONS[state]
    # a session cannot report itself idle in the middle of a turn (await_approval -> idle is a
    # result gate approved between turns: the supervisor takes it only when no turn runs)
    for state in BUSY - {S.STARTING, S.AWAIT_APPROVAL}:
        assert S.IDLE not in TRANSITIONS[state]


def test_the_result_gate_of_design_section_4() -> None:
    for start in (S.IDLE, S.AWAIT, S.RUNNING):
        check(start, S.AWAIT_APPROVAL)  # request_approval (running: when its turn ends)
    check(S.AWAIT_APPROVAL, S.IDLE)  # approve
    check(S.AWAIT_APPROVAL, S.STOPPED)  # reject REASON
