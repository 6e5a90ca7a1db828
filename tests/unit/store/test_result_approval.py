"""Result approval records: the reducer's rules and crash recovery (a gate is a rest)."""

from __future__ import annotations

import pytest

from anvild.llm.types import ToolCall
from anvild.store import (
    ApprovalRequested,
    MessageAppended,
    RecordError,
    ResultApprovalAnswered,
    ResultApprovalRequested,
    SessionStatus,
    StateChanged,
    Verdict,
    recover,
    replay,
)
from anvild.store.state import PendingResult
from tests.unit.store.support import assistant, started, user

S = SessionStatus


def test_request_then_answer() -> None:
    state = replay([started(), ResultApprovalRequested("did it", "ctl")])
    assert state.result_approval == PendingResult("did it", "ctl")
    assert replay([started(), ResultApprovalRequested("x"), ResultApprovalAnswered("approve")])
    with pytest.raises(RecordError, match="another approval is pending"):
        replay([started(), ResultApprovalRequested("x"), ResultApprovalRequested("y")])
    with pytest.raises(RecordError, match="no result approval pending"):
        replay([started(), ResultApprovalAnswered(Verdict.REJECT, "no")])
    with pytest.raises(RecordError, match="never answered `always`"):
        replay([started(), ResultApprovalRequested("x"), ResultApprovalAnswered("always")])


def test_not_while_a_tool_call_waits() -> None:
    records = [
        started(),
        MessageAppended(user("go")),
        MessageAppended(assistant("", ToolCall("c1", "bash", {}))),
        ApprovalRequested("c1", "bash", {}, "asks"),
    ]
    with pytest.raises(RecordError, match="another approval is pending"):
        replay([*records, ResultApprovalRequested("x")])


def test_a_session_waiting_on_its_result_gate_needs_no_recovery() -> None:
    state = replay(
        [
            started(),
            MessageAppended(user("go")),
            MessageAppended(assistant("done")),
            StateChanged(S.AWAIT),
            ResultApprovalRequested("done", "model"),
            StateChanged(S.AWAIT_APPROVAL),
        ]
    )
    assert recover(state).records == ()


def test_a_gate_cut_before_its_state_change_is_cancelled() -> None:
    records = [started(), StateChanged(S.IDLE), ResultApprovalRequested("x", "ctl")]
    found = recover(replay(records))
    assert found.records[0] == ResultApprovalAnswered(
        Verdict.CANCELLED, "anvild restarted before the approval was answered"
    )
    after = replay([*records, *found.records])
    assert (after.result_approval, after.status) == (None, S.IDLE)
