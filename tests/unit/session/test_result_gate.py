"""Result approval gates (`request_approval`): request, approve, reject, refusals, the model's
tool, cancellation by verbs, and a restart that brings the gate back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anvild.llm.errors import TransportError
from anvild.llm.testing import ScriptedProvider, script
from anvild.mail.tools import RequestApproval
from anvild.session import InvalidSessionRequest, SessionManager, SessionRefused, SessionStatus
from anvild.store import ResultApprovalAnswered, ResultApprovalRequested, Verdict
from tests.unit.session.support import Models, ask, new, running, target

S = SessionStatus


class Gate:
    """The daemon's `SessionResultGate`, reduced to what a test needs."""

    def __init__(self) -> None:
        self.manager: SessionManager | None = None

    def request_result_approval(self, session_id: str, summary: str, asked_by: str) -> str:
        assert self.manager is not None
        return self.manager.get(session_id).request_result_approval(summary, asked_by)


def gate_records(manager: SessionManager, sid: str) -> list[object]:
    records = manager.store.read(sid).records
    return [r for r in records if isinstance(r, ResultApprovalRequested | ResultApprovalAnswered)]


async def test_request_from_await_then_approve_goes_idle(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("Implemented OAuth.\nTests pass.")]) as manager:
        s = await new(manager)
        assert await ask(s, "do it") == "Implemented OAuth.\nTests pass.\n"
        assert s.status is S.AWAIT
        s.request_result_approval(asked_by="ctl")
        assert s.status is S.AWAIT_APPROVAL
        assert s.approval_text() == (
            "kind result\nasked_by ctl\napprover user\nsummary Implemented OAuth.\n  Tests pass.\n"
            "answer approve | reject REASON\n"
        )
        with pytest.raises(InvalidSessionRequest, match="always does not apply to a result"):
            s.answer_approval("always")
        with pytest.raises(InvalidSessionRequest, match="reject needs a reason"):
            s.answer_approval("reject")
        with pytest.raises(SessionRefused, match="already asked for approval"):
            s.request_result_approval("again")
        await s.control("approve")
        assert s.status is S.IDLE
        assert s.approval_text() == ""
        decided = s.result_decision("ctl")
        assert decided is not None
        assert (decided.verdict, decided.by, decided.ref) == ("approve", "user", "")
        assert gate_records(manager, s.id) == [
            ResultApprovalRequested("Implemented OAuth.\nTests pass.", "ctl"),
            ResultApprovalAnswered(Verdict.APPROVE, "", "user"),
        ]
        events = [json.loads(line) for line in manager.events.backlog()]
        decided_event = {
            "type": "result_decided",
            "id": s.id,
            "verdict": "approve",
            "reason": "",
            "asked_by": "ctl",
            "ref": "",
            "by": "user",
        }
        assert decided_event in [{k: v for k, v in e.items() if k != "ts"} for e in events]
        with pytest.raises(SessionRefused, match="no approval is pending"):
            s.answer_approval("approve")


async def test_reject_stops_with_the_reason_recorded_and_logged(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("done")]) as manager:
        s = await new(manager)
        await ask(s, "go")
        reader = s.log.open_reader()
        s.request_result_approval("Added the parser.")
        await s.control("reject the tests do not cover errors")
        assert s.status is S.STOPPED
        assert s.status_detail == "result rejected: the tests do not cover errors"
        log = reader.read_nowait(1 << 16).decode()
        assert "APPROVAL: result reject: the tests do not cover errors" in log
        assert gate_records(manager, s.id)[-1] == ResultApprovalAnswered(
            Verdict.REJECT, "the tests do not cover errors", "user"
        )
        with pytest.raises(SessionRefused, match="write start to its ctl first"):
            s.request_result_approval("x")


async def test_nothing_to_approve_and_ephemeral_sessions_are_refused(tmp_path: Path) -> None:
    async with running(tmp_path, []) as manager:
        s = await new(manager)
        with pytest.raises(InvalidSessionRequest, match="nothing to approve"):
            s.request_result_approval()
        e = await new(manager, ephemeral=True)
        with pytest.raises(SessionRefused, match="is ephemeral"):
            e.request_result_approval("x")


async def test_the_models_tool_gates_the_end_of_its_turn_and_prompts_queue(
    tmp_path: Path,
) -> None:
    gate = Gate()
    scripts = [
        script.tool_call("c1", "request_approval", {"summary": "Refactored the loop."}),
        script.text("Refactored the loop; please approve."),
        script.text("next step done"),
    ]
    async with running(
        tmp_path, scripts, tools=[RequestApproval(gate, "s1")], ids=["s1"]
    ) as manager:
        gate.manager = manager
        s = await new(manager)
        assert await ask(s, "refactor") == "Refactored the loop; please approve.\n"
        assert s.status is S.AWAIT_APPROVAL  # `wait` returned: nothing moves until a decision
        assert "summary Refactored the loop." in s.approval_text()
        assert "asked_by model" in s.approval_text()
        seq = s.submit("next")  # queued behind the gate
        assert await s.wait_handled(seq) is S.AWAIT_APPROVAL
        assert s.queue_text().startswith("p")
        s.answer_approval("approve")
        assert await s.wait_handled(seq) is S.AWAIT
        assert s.out == "next step done\n"


async def test_a_cancelled_turn_drops_the_request(tmp_path: Path) -> None:
    gate = Gate()
    scripts = [
        script.tool_call("c1", "request_approval", {"summary": "x"}),
        TransportError("boom", retryable=False),
    ]
    async with running(
        tmp_path, scripts, tools=[RequestApproval(gate, "s1")], ids=["s1"]
    ) as manager:
        gate.manager = manager
        s = await new(manager)
        reader = s.log.open_reader()
        await ask(s, "go")
        assert s.status is S.AWAIT
        assert "NOTE: approval request dropped" in reader.read_nowait(1 << 16).decode()
        assert gate_records(manager, s.id) == []


async def test_stop_cancels_the_gate(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("done")]) as manager:
        s = await new(manager)
        await ask(s, "go")
        s.request_result_approval("summary")
        await s.stop()
        assert s.status is S.STOPPED
        assert s.approval_text() == ""
        assert gate_records(manager, s.id)[-1] == ResultApprovalAnswered(
            Verdict.CANCELLED, "stopped by request"
        )
        await s.start()
        await s.kill()


async def test_a_restart_brings_the_gate_back(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("done")]) as manager:
        s = await new(manager)
        await ask(s, "go")
        s.request_result_approval("please check")
        sid = s.id
    models = Models({"fake": target(ScriptedProvider([]))})
    async with running(tmp_path, models) as again:
        s = again.get(sid)
        assert s.status is S.AWAIT_APPROVAL
        assert "summary please check" in s.approval_text()
        s.answer_approval("reject not yet")
        assert s.status is S.STOPPED
        assert s.status_detail == "result rejected: not yet"
