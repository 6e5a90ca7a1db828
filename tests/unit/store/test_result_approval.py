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
from anvild.store.records import encode
from anvild.store.state import DecidedResult, PendingResult
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


def test_the_last_decision_of_each_asker_is_kept_until_it_asks_again() -> None:
    bead = "bead implement-oauth-002"
    records = [
        started(),
        ResultApprovalRequested("Added OAuth.", bead, "1"),
        ResultApprovalAnswered(Verdict.REJECT, "no tests", "user"),
        ResultApprovalRequested("done", "ctl"),
        ResultApprovalAnswered(Verdict.APPROVE, "", "e5f6a7b8"),
    ]
    state = replay(records)
    assert state.result_decision(bead) == DecidedResult(bead, "1", "reject", "no tests", "user")
    assert state.result_decision("ctl") == DecidedResult("ctl", "", "approve", "", "e5f6a7b8")
    assert state.result_decision("model") is None
    again = replay([*records, ResultApprovalRequested("With tests.", bead, "2")])
    assert again.result_approval == PendingResult("With tests.", bead, "2")
    assert again.result_decision(bead) is None  # a new request forgets the old decision
    assert again.result_decision("ctl") is not None


def test_ref_and_by_are_written_only_when_set() -> None:
    assert encode(3, ResultApprovalRequested("x", "ctl")) == (
        b'{"seq":3,"type":"result_approval_requested","summary":"x","asked_by":"ctl"}\n'
    )
    assert encode(4, ResultApprovalAnswered(Verdict.CANCELLED, "stopped")) == (
        b'{"seq":4,"type":"result_approval_answered","verdict":"cancelled","reason":"stopped"}\n'
    )
    line = encode(5, ResultApprovalAnswered(Verdict.APPROVE, "", "user"))
    assert line.endswith(b'"by":"user"}\n')
    assert b'"ref":"2"' in encode(6, ResultApprovalRequested("x", "bead a-001", "2"))
