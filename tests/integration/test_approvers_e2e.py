"""Approver sessions through the real daemon: `anvilctl` over the Unix socket, the fake
provider server scripting an approver session that answers a worker's result gate (after a
kill -9 of the daemon while the gate was open) and a bead's, with its `answer_approval` tool;
an intruder session is refused; approved_by, the session records and the bead git log."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvild.store import ResultApprovalAnswered, SessionStore, Verdict
from tests.integration.test_beads_e2e import git_log, new_bead
from tests.integration.test_sessions_e2e import (
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)

BEAD = "fix-parser-001"
SUMMARY = "Parser fixed; tests pass."
RESULT = "Bead done: parser fixed."


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    """A worker (alias w1) that asks for approval and completes a bead with its tools, an
    approver (alias boss) that answers w1's gates, an intruder (x1) that tries to."""
    approve_w1 = {"name": "answer_approval", "arguments": {"session": "w1", "verdict": "approve"}}
    server = FakeServer(
        tmp_path,
        [
            {"contains": "ask for approval", "tool_calls": [
                {"name": "request_approval", "arguments": {"summary": SUMMARY}}
            ]},
            {"contains": "Approval requested", "text": "Waiting for approval."},
            {"contains": "finish the bead", "tool_calls": [
                {"name": "complete", "arguments": {"bead_id": BEAD, "result": RESULT}}
            ]},
            {"contains": "waits for approval", "text": "Done; it waits for approval."},
            {"contains": "intrude", "tool_calls": [approve_w1]},
            {"contains": "Not answered", "text": "I may not.", "repeat": True},
            {"contains": "approve the worker", "tool_calls": [approve_w1]},
            {"contains": "approve the bead", "tool_calls": [approve_w1]},
            {"contains": "You approved", "text": "Approved.", "repeat": True},
        ],
    )  # fmt: skip
    yield server
    server.stop()


def new_session(namespace: Path, words: str) -> str:
    out = ok(anvilctl(namespace, "rdwr", "agent/ctl", stdin=f"new {words}\n"))
    return out.split()[-1]


def turn(namespace: Path, session: str, prompt: str) -> str:
    """Send `prompt`, wait for the turn; the state it ended in."""
    ok(anvilctl(namespace, "send", session, prompt))
    return ok(anvilctl(namespace, "wait", session)).strip()


def tool_results(fake: FakeServer) -> list[str]:
    """Every tool result the fake provider was sent, as JSON text (one per request)."""
    return [json.dumps(r["body"]) for r in fake.requests()]


def test_an_approver_session_answers_a_workers_gate_and_a_beads(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    config = user_config(tmp_path, fake.url)
    first = start_daemon(namespace, config)
    try:
        boss = new_session(namespace, f"cwd={workdir} alias=boss role=reviewer")
        worker = new_session(namespace, f"cwd={workdir} alias=w1 approver=boss")
        assert read(namespace, "agent/w1/approver") == f"{boss}\n"
        assert read(namespace, "agent/boss/approver") == "user\n"
        changed = anvilctl(namespace, "write", "agent/w1/ctl", stdin="approver user\n")
        assert changed.returncode != 0
        assert f"the approver of session {worker} is {boss}, fixed when" in changed.stderr
        assert turn(namespace, "w1", "ask for approval") == "await_approval"
        assert f"approver {boss}\n" in read(namespace, "agent/w1/approval")
    finally:
        code, _ = first.stop(signal.SIGKILL)  # the gate is open and recorded
    assert code == -signal.SIGKILL

    second = start_daemon(namespace, config)
    try:
        assert read(namespace, "agent/w1/approver") == f"{boss}\n"
        assert read(namespace, "agent/w1/state") == "await_approval\n"
        assert f"approver {boss}\n" in read(namespace, "agent/w1/approval")
        intruder = new_session(namespace, f"cwd={workdir} alias=x1")
        assert turn(namespace, "x1", "intrude") == "await"
        refusal = (
            f"Not answered: session {worker}'s result can be approved only by session {boss} "
            f"(its approver, named when the session was created) or a human, not by session "
            f"{intruder}"
        )
        assert any(refusal in body for body in tool_results(fake))
        assert read(namespace, "agent/w1/state") == "await_approval\n"

        assert turn(namespace, "boss", "approve the worker") == "await"
        assert read(namespace, "agent/boss/out") == "Approved.\n"
        assert read(namespace, "agent/w1/state") == "idle\n"
        assert read(namespace, "agent/w1/approval") == ""

        bead = new_bead(namespace, 'new "Fix parser" developer "x" requires_approval approver=boss')
        assert bead == BEAD
        assert read(namespace, f"agent/beads/{BEAD}/approver") == f"{boss}\n"
        ok(anvilctl(namespace, "write", f"agent/beads/{BEAD}/ctl", stdin="claim w1\n"))
        assert turn(namespace, "w1", "finish the bead") == "await_approval"
        approval = read(namespace, "agent/w1/approval")
        assert f"asked_by bead {BEAD}\napprover {boss}\n" in approval
        assert turn(namespace, "boss", "approve the bead") == "await"
        assert read(namespace, f"agent/beads/{BEAD}/status") == "completed\n"
        assert read(namespace, f"agent/beads/{BEAD}/approved_by") == f"{boss}\n"
        assert read(namespace, "agent/w1/state") == "idle\n"
    finally:
        code, log = second.stop()
    assert code == 0, log
    records = SessionStore(second.data_dir / "sessions").read(worker).records
    assert [r for r in records if isinstance(r, ResultApprovalAnswered)] == [
        ResultApprovalAnswered(Verdict.APPROVE, "", boss),
        ResultApprovalAnswered(Verdict.APPROVE, "", boss),
    ]
    subjects = git_log(second.data_dir / "beads")
    assert subjects[:2] == [
        f"approve {BEAD} through session {worker}'s result gate (by session {boss})",
        f"complete {BEAD}: pending approval (by session {worker})",
    ]
    assert f"new {BEAD}: Fix parser (role developer, approver {boss}) (by user)" in subjects
