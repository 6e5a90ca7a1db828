"""The pure bead board (`anvild.beads.board`): the status table, deps, cycles, convoys."""

from __future__ import annotations

import re

import pytest

from anvild.beads import (
    TRANSITIONS,
    BeadConflict,
    BeadNotFound,
    BeadStatus,
    Board,
    ConvoyStatus,
    GateDecision,
    InvalidBeadRequest,
    NewBead,
    NewConvoy,
)
from anvild.beads.model import next_id, slug

NOW = "2026-11-30T21:00:00Z"
B = BeadStatus


def build(*specs: NewBead) -> Board:
    board = Board()
    for spec in specs:
        board = board.new_bead(spec, by="user", now=NOW).board
    return board


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Research auth system", "research-auth"),
        ("Implement OAuth", "implement-oauth"),
        ("  Fix   the bug!!", "fix-the"),
        ("Ünïcode títle", "unicode-title"),
        ("日本語", "bead"),
        ("x" * 60, "x" * 24),
    ],
)
def test_slug(title: str, expected: str) -> None:
    assert slug(title, "bead") == expected


def test_ids_count_across_all_beads() -> None:
    assert next_id("Research auth", [], "bead") == "research-auth-001"
    assert next_id("Implement OAuth", ["research-auth-001"], "bead") == "implement-oauth-002"
    assert next_id("a", ["x-009", "y-1000"], "bead") == "a-1001"


def test_new_bead_and_its_dependencies() -> None:
    board = build(NewBead("Research auth system", "researcher", "Analyze"))
    change = board.new_bead(
        NewBead("Implement OAuth", "developer", "", ("research-auth-001",)), by="user", now=NOW
    )
    assert change.answer == "implement-oauth-002"
    assert change.message == (
        "new implement-oauth-002: Implement OAuth (role developer, after research-auth-001) "
        "(by user)"
    )
    bead = change.board.bead("implement-oauth-002")
    assert bead.depends_on == ("research-auth-001",)
    assert [b.id for b in change.board.ready()] == ["research-auth-001"]
    assert change.board.ready(role="developer") == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (NewBead("", "dev"), "the bead title is empty; give one in quotes"),
        (NewBead("T", "bad role"), "bad role 'bad role'"),
        (NewBead("T", "developer\n"), "bad role 'developer\\n'"),
        (NewBead("Fix \x1b[2Jit", "dev"), "the bead title holds the control character U+001B"),
        (NewBead("Fix\x9bit", "dev"), "may not contain control characters"),
        (NewBead("T", "dev", "", ("nope-001",)), "dependency 'nope-001' is not a bead"),
        (NewBead("T", "dev", convoy="c-001"), "no convoy 'c-001'"),
    ],
)
def test_new_bead_refusals(spec: NewBead, message: str) -> None:
    with pytest.raises((InvalidBeadRequest, BeadNotFound)) as info:
        Board().new_bead(spec, by="user", now=NOW)
    assert message in str(info.value)


def test_a_cycle_is_refused_with_the_path() -> None:
    board = build(
        NewBead("A", "dev"),
        NewBead("B", "dev", "", ("a-001",)),
        NewBead("C", "dev", "", ("b-002",)),
    )
    with pytest.raises(InvalidBeadRequest) as info:
        board.add_dep("a-001", "c-003", by="user", now=NOW)
    assert str(info.value) == (
        "bead a-001 cannot depend on c-003: that would make a cycle "
        "(a-001 -> c-003 -> b-002 -> a-001); remove one of these dependencies first"
    )
    with pytest.raises(InvalidBeadRequest, match="cannot depend on itself"):
        board.add_dep("a-001", "a-001", by="user", now=NOW)
    with pytest.raises(InvalidBeadRequest, match="already depends on a-001"):
        board.add_dep("b-002", "a-001", by="user", now=NOW)
    with pytest.raises(BeadNotFound, match="no bead 'zz-001'"):
        board.add_dep("zz-001", "a-001", by="user", now=NOW)
    with pytest.raises(InvalidBeadRequest, match="does not depend on 'c-003'"):
        board.remove_dep("a-001", "c-003", by="user", now=NOW)
    after = board.add_dep("c-003", "a-001", by="user", now=NOW).board
    assert after.bead("c-003").depends_on == ("b-002", "a-001")
    assert after.remove_dep("c-003", "b-002", by="u", now=NOW).board.bead("c-003").depends_on == (
        "a-001",
    )


def test_claim_is_refused_until_dependencies_complete_and_names_the_holder() -> None:
    board = build(NewBead("A", "dev"), NewBead("B", "dev", "", ("a-001",)))
    with pytest.raises(BeadConflict) as info:
        board.claim("b-002", "s2", by="user", now=NOW)
    assert "bead b-002 is not ready: it depends on a-001 (pending)" in str(info.value)
    board = board.claim("a-001", "s1", by="user", now=NOW).board
    with pytest.raises(BeadConflict) as info:
        board.claim("a-001", "s2", by="user", now=NOW)
    assert str(info.value).startswith("bead a-001 is already claimed by s1 (in_progress since")
    board = board.complete("a-001", "notes.md", by="user", now=NOW).board
    assert board.bead("a-001").result == "notes.md"
    assert [b.id for b in board.ready()] == ["b-002"]
    board.claim("b-002", "s2", by="user", now=NOW)


def test_every_transition_of_the_table_and_a_refusal_for_the_rest() -> None:
    verbs = {verb for verb, _ in TRANSITIONS}
    assert verbs == {"claim", "fail", "complete", "submit", "release", "approve", "reject"}
    board = build(NewBead("A", "dev", requires_approval=True))
    with pytest.raises(BeadConflict, match="approve needs a bead that is pending_approval"):
        board.approve("a-001", by="user", now=NOW)
    board = board.claim("a-001", "s1", by="user", now=NOW).board
    with pytest.raises(BeadConflict, match="assigned to s1, not to you"):
        board.complete("a-001", None, by="session s2", now=NOW, only_session="s2")
    board = board.complete("a-001", "done", by="session s1", now=NOW, only_session="s1").board
    assert board.bead("a-001").status is B.PENDING_APPROVAL
    rejected = board.reject("a-001", "tests fail", by="user", now=NOW).board
    assert rejected.bead("a-001").status is B.FAILED
    assert rejected.bead("a-001").reason == "tests fail"
    assert rejected.bead("a-001").result == "done"
    again = rejected.release("a-001", by="user", now=NOW).board
    assert again.bead("a-001").status is B.PENDING
    assert again.bead("a-001").assigned_to is None
    assert again.bead("a-001").reason == "tests fail"  # for the next worker
    approved = board.approve("a-001", by="user", now=NOW).board
    assert approved.bead("a-001").status is B.COMPLETED
    assert approved.bead("a-001").approved_by == "user"
    with pytest.raises(BeadConflict, match="release needs a bead that is in_progress or failed"):
        approved.release("a-001", by="user", now=NOW)
    with pytest.raises(InvalidBeadRequest, match="reject needs a reason"):
        board.reject("a-001", "  ", by="user", now=NOW)


def test_a_convoy_follows_its_beads_and_completes_by_itself() -> None:
    board = build(NewBead("A", "dev"), NewBead("B", "dev"))
    change = board.new_convoy(NewConvoy("Auth system", "Add OAuth"), by="user", now=NOW)
    assert change.answer == "auth-system-001"
    board = change.board
    board = board.add_bead("auth-system-001", "a-001", by="user", now=NOW).board
    board = board.add_bead("auth-system-001", "b-002", by="user", now=NOW).board
    with pytest.raises(BeadConflict, match="bead a-001 is in convoy auth-system-001"):
        Board(board.beads, board.convoys).new_convoy(
            NewConvoy("Other"), by="user", now=NOW
        ).board.add_bead("other-002", "a-001", by="user", now=NOW)
    assert board.convoy("auth-system-001").status is ConvoyStatus.PLANNING
    board = board.claim("a-001", "s1", by="user", now=NOW).board
    assert board.convoy("auth-system-001").status is ConvoyStatus.IN_PROGRESS
    change = board.complete("a-001", None, by="user", now=NOW)
    board = change.board
    assert board.progress(board.convoy("auth-system-001")).text() == "1/2 50%\n"
    board = board.claim("b-002", "s2", by="user", now=NOW).board
    change = board.complete("b-002", None, by="user", now=NOW)
    assert change.message == "complete b-002; convoy auth-system-001 completed (by user)"
    assert change.board.convoy("auth-system-001").status is ConvoyStatus.COMPLETED
    assert [type(e).__name__ for e in change.events] == ["BeadChanged", "ConvoyChanged"]
    with pytest.raises(BeadConflict, match="convoy auth-system-001 is completed"):
        change.board.add_bead("auth-system-001", "a-001", by="user", now=NOW)


def test_convoy_context_for_a_session_working_on_one_of_its_beads() -> None:
    board = build(NewBead("A", "dev"), NewBead("B", "dev"))
    board = board.new_convoy(
        NewConvoy("Auth", "Add OAuth", context="OWASP top 10 applies."), by="u", now=NOW
    ).board
    board = board.add_bead("auth-001", "a-001", by="u", now=NOW).board
    assert board.context_for("s1") == ""
    board = board.claim("a-001", "s1", by="u", now=NOW).board
    text = board.context_for("s1")
    assert text.startswith("# Convoy context\n")
    assert "## Convoy auth-001: Auth\n\nGoal: Add OAuth\n\nOWASP top 10 applies." in text
    assert board.context_for("s2") == ""


def submitted(board: Board, bead_id: str, session: str) -> Board:
    board = board.claim(bead_id, session, by="user", now=NOW).board
    return board.complete(bead_id, "the result", by="user", now=NOW).board


def test_each_completion_into_pending_approval_is_one_more_approval_round() -> None:
    board = submitted(build(NewBead("A", "dev", requires_approval=True)), "a-001", "s1")
    assert board.bead("a-001").submissions == 1
    board = board.reject("a-001", "no", by="user", now=NOW).board
    board = board.release("a-001", by="user", now=NOW).board
    board = submitted(board, "a-001", "s1")
    assert board.bead("a-001").submissions == 2
    plain = submitted(build(NewBead("B", "dev")), "b-001", "s1")
    assert plain.bead("b-001").status is B.COMPLETED
    assert plain.bead("b-001").submissions == 0


def test_decide_applies_a_gate_verdict_only_in_its_round_and_only_once() -> None:
    spec = NewBead("A", "dev", requires_approval=True, approver="s9")
    board = submitted(build(spec), "a-001", "s1")
    with pytest.raises(BeadConflict, match="for round 0 does not apply"):
        board.decide("a-001", GateDecision("s1", 0, "approve", "", "user"), now=NOW)
    with pytest.raises(BeadConflict, match="decision of session s2's gate"):
        board.decide("a-001", GateDecision("s2", 1, "approve", "", "user"), now=NOW)
    change = board.decide("a-001", GateDecision("s1", 1, "approve", "", "s9"), now=NOW)
    bead = change.board.bead("a-001")
    assert (bead.status, bead.approved_by) == (B.COMPLETED, "s9")
    assert change.message == "approve a-001 through session s1's result gate (by session s9)"
    with pytest.raises(BeadConflict, match="a-001 is completed"):
        change.board.decide("a-001", GateDecision("s1", 1, "approve", "", "user"), now=NOW)
    rejected = board.decide("a-001", GateDecision("s1", 1, "reject", "no tests", "user"), now=NOW)
    assert rejected.board.bead("a-001").status is B.FAILED
    assert rejected.board.bead("a-001").reason == "no tests"
    assert rejected.message == "reject a-001 through session s1's result gate: no tests (by user)"


def test_the_assigned_session_never_approves_or_rejects_its_own_bead() -> None:
    spec = NewBead("A", "dev", requires_approval=True, approver="s2")
    board = submitted(build(spec), "a-001", "s1")
    expected = "session s1 cannot approve bead a-001: it is assigned to that session"
    with pytest.raises(BeadConflict, match=expected):
        board.approve("a-001", by="session s1", now=NOW, approver="s1")
    with pytest.raises(BeadConflict, match="session s1 cannot reject bead a-001"):
        board.reject("a-001", "meh", by="session s1", now=NOW, approver="s1")
    with pytest.raises(BeadConflict, match="cannot approve bead a-001"):
        board.decide("a-001", GateDecision("s1", 1, "approve", "", "s1"), now=NOW)
    other = board.approve("a-001", by="session s2", now=NOW, approver="s2").board
    assert other.bead("a-001").approved_by == "s2"
    # A person may approve work a person claimed.
    mine = submitted(build(NewBead("B", "dev", requires_approval=True)), "b-001", "user")
    assert mine.approve("b-001", by="user", now=NOW).board.bead("b-001").approved_by == "user"


def test_only_the_beads_approver_or_a_person_answers_its_approval() -> None:
    with pytest.raises(InvalidBeadRequest, match="does not require approval: add requires_app"):
        build(NewBead("A", "dev", approver="s9"))
    mine = build(NewBead("A", "dev", requires_approval=True, approver="s9"))
    assert mine.bead("a-001").approver == "s9"
    assert build(NewBead("A", "dev")).bead("a-001").approver == "user"
    board = submitted(mine, "a-001", "s1")
    expected = (
        "session s2 cannot approve bead a-001: only session s9 or user may (the approver named "
        "when the bead was created); ask a human to write approve or reject REASON to "
        "agent/beads/a-001/ctl"
    )
    with pytest.raises(BeadConflict, match=re.escape(expected)):
        board.approve("a-001", by="session s2", now=NOW, approver="s2")
    with pytest.raises(BeadConflict, match="session s2 cannot reject bead a-001: only session s9"):
        board.decide("a-001", GateDecision("s1", 1, "reject", "no", "s2"), now=NOW)
    users = submitted(build(NewBead("A", "dev", requires_approval=True)), "a-001", "s1")
    with pytest.raises(BeadConflict, match="only user may"):
        users.approve("a-001", by="session s9", now=NOW, approver="s9")
    assert (
        board.approve("a-001", by="session s9", now=NOW, approver="s9")
        .board.bead("a-001")
        .approved_by
        == "s9"
    )
    assert users.approve("a-001", by="user", now=NOW).board.bead("a-001").approved_by == "user"
