"""Beads and convoys through the real daemon: `anvilctl` over the Unix socket, a real git
store in the data dir, the fake provider server scripting the agent that claims a bead."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from anvild.store import (
    ResultApprovalAnswered,
    SessionStatus,
    SessionStore,
    StateChanged,
    Verdict,
)
from tests.integration.test_daemon_cli import STARTUP_TIMEOUT, Anvild
from tests.integration.test_sessions_e2e import (
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(
        tmp_path,
        [
            {"contains": "take the bead", "tool_calls": [
                {"name": "claim", "arguments": {"bead_id": "implement-oauth-002"}}
            ]},
            {"contains": "You hold bead", "text": "claimed"},
            {"contains": "do the work", "text": "working on it"},
            {"text": "pong", "repeat": True},
        ],
    )  # fmt: skip
    yield server
    server.stop()


def git_log(repo: Path) -> list[str]:
    done = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def new_sessions(namespace: Path, workdir: Path, count: int) -> list[str]:
    """`count` sessions from one `rdwr agent/ctl` (a blank line, then each new id)."""
    out = ok(
        anvilctl(
            namespace,
            "rdwr",
            "agent/ctl",
            stdin="".join(f"new cwd={workdir}\n" for _ in range(count)),
        )
    )
    ids = [line for line in out.splitlines() if line]
    assert len(ids) == count, out
    return ids


def new_bead(namespace: Path, line: str) -> str:
    out = ok(anvilctl(namespace, "rdwr", "agent/beads/ctl", stdin=line + "\n"))
    return out.split()[-1]


def test_twenty_concurrent_claims_through_the_daemon(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        sessions = new_sessions(namespace, workdir, 20)
        bead = new_bead(namespace, 'new "Contended work" developer "only one may do it"')
        assert bead == "contended-work-001"

        def claim(session: str) -> subprocess.CompletedProcess[str]:
            return anvilctl(
                namespace, "write", f"agent/beads/{bead}/ctl", stdin=f"claim {session}\n"
            )

        with ThreadPoolExecutor(max_workers=20) as pool:
            results = list(pool.map(claim, sessions))
        winners = [s for s, r in zip(sessions, results, strict=True) if r.returncode == 0]
        assert len(winners) == 1, [r.stderr for r in results]
        losers = [r.stderr for r in results if r.returncode != 0]
        assert len(losers) == 19
        assert all(f"already claimed by {winners[0]} " in text for text in losers), losers
        assert read(namespace, f"agent/beads/{bead}/assigned_to") == f"{winners[0]}\n"
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    claims = [s for s in git_log(daemon.data_dir / "beads") if s.startswith("claim")]
    assert claims == [f"claim {bead} for {winners[0]} (by user)"]


def test_bad_writes_fail_with_a_message_and_leave_the_store_clean(
    namespace: Path, tmp_path: Path, fake: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        a = new_bead(namespace, 'new "A" dev')
        b = new_bead(namespace, f'new "B" dev "" {a}')
        repo = daemon.data_dir / "beads"
        before = git_log(repo)
        for path, line, expected in [
            ("agent/beads/ctl", f"dep add {a} {b}", f"that would make a cycle ({a} -> {b} -> {a})"),
            ("agent/beads/ctl", 'new "C" dev "" nope-404', "dependency 'nope-404' is not a bead"),
            ("agent/beads/ctl", "dep add nope-404 a-001", "no bead 'nope-404'"),
            (f"agent/beads/{a}/ctl", "claim ghost", "no live session 'ghost'"),
            (f"agent/beads/{a}/ctl", "frobnicate", "unknown command 'frobnicate'"),
        ]:
            result = anvilctl(namespace, "write", path, stdin=line + "\n")
            assert result.returncode != 0
            assert expected in result.stderr, (line, result.stderr)
        unknown = anvilctl(namespace, "read", "agent/beads/nope-404/status")
        assert unknown.returncode != 0
        assert git_log(repo) == before
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
        )
        assert status.stdout == ""
    finally:
        code, log = daemon.stop()
    assert code == 0, log


def test_kill_9_keeps_beads_and_convoy_progress(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    config = user_config(tmp_path, fake.url)
    first = start_daemon(namespace, config)
    try:
        (worker,) = new_sessions(namespace, workdir, 1)
        convoy = ok(
            anvilctl(
                namespace, "rdwr", "agent/convoys/ctl", stdin='new "Auth system" "Add OAuth"\n'
            )
        ).split()[-1]
        a = new_bead(namespace, f'new "Research auth" researcher "Analyze" convoy={convoy}')
        b = new_bead(namespace, f'new "Implement OAuth" developer "Add it" {a} convoy={convoy}')
        c = new_bead(namespace, f'new "Write tests" tester "" {b} convoy={convoy}')
        ok(
            anvilctl(
                namespace,
                "write",
                f"agent/convoys/{convoy}/context",
                stdin="Security: OWASP top 10.\n",
            )
        )
        ok(anvilctl(namespace, "write", f"agent/beads/{a}/ctl", stdin=f"claim {worker}\n"))
        ok(anvilctl(namespace, "write", f"agent/beads/{a}/ctl", stdin="complete notes.md\n"))
        ok(anvilctl(namespace, "write", f"agent/beads/{b}/ctl", stdin=f"claim {worker}\n"))
        list_before = read(namespace, "agent/beads/list")
    finally:
        code, _ = first.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL

    second = start_daemon(namespace, config)
    try:
        assert read(namespace, "agent/beads/list") == list_before
        assert read(namespace, f"agent/beads/{b}/status") == "in_progress\n"
        assert read(namespace, f"agent/beads/{b}/assigned_to") == f"{worker}\n"
        assert read(namespace, f"agent/convoys/{convoy}/progress") == "1/3 33%\n"
        assert read(namespace, f"agent/convoys/{convoy}/status") == "in_progress\n"
        assert read(namespace, f"agent/convoys/{convoy}/context") == "Security: OWASP top 10.\n"
        ok(anvilctl(namespace, "write", f"agent/beads/{b}/ctl", stdin="release\n"))
        assert read(namespace, f"agent/beads/{b}/assigned_to") == "-\n"
        ok(anvilctl(namespace, "write", f"agent/beads/{b}/ctl", stdin=f"claim {worker}\n"))
        ok(anvilctl(namespace, "write", f"agent/beads/{b}/ctl", stdin="complete\n"))
        ok(anvilctl(namespace, "write", f"agent/beads/{c}/ctl", stdin="claim user\ncomplete\n"))
        assert read(namespace, f"agent/convoys/{convoy}/status") == "completed\n"
        assert read(namespace, f"agent/convoys/{convoy}/progress") == "3/3 100%\n"
    finally:
        code, log = second.stop()
    assert code == 0, log


def test_a_killed_session_orphans_its_bead(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    reader = subprocess.Popen(
        [sys.executable, "-m", "anvilctl", "read", "agent/events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NAMESPACE": str(namespace)},
    )
    try:
        (worker,) = new_sessions(namespace, workdir, 1)
        bead = new_bead(namespace, 'new "Long job" developer')
        ok(anvilctl(namespace, "write", f"agent/beads/{bead}/ctl", stdin=f"claim {worker}\n"))
        ok(anvilctl(namespace, "write", "agent/ctl", stdin=f"kill {worker}\n"))
        assert read(namespace, "agent/beads/list") == (
            f"{bead}\tin_progress\tdeveloper\t{worker}\tLong job\torphaned\n"
        )
        ok(anvilctl(namespace, "write", f"agent/beads/{bead}/ctl", stdin="release\n"))
        assert read(namespace, "agent/beads/ready") == f"{bead}\tpending\tdeveloper\t-\tLong job\n"
        code, log = daemon.stop()  # the events stream ends (EOF) when the daemon stops
        assert code == 0, log
        out, _ = reader.communicate(timeout=STARTUP_TIMEOUT)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        daemon.stop()
    events = [json.loads(line) for line in out.splitlines() if line]
    orphaned = [e for e in events if e["type"] == "bead_orphaned"]
    assert [(e["id"], e["session"], e["reason"]) for e in orphaned] == [(bead, worker, "killed")]
    actions = [e.get("action") for e in events if e["type"] == "bead_changed"]
    assert actions == ["claim", "release"]


def test_an_agent_claims_with_its_tool_and_gets_the_convoy_context(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    daemon: Anvild = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        convoy = ok(
            anvilctl(
                namespace, "rdwr", "agent/convoys/ctl", stdin='new "Auth system" "Add OAuth"\n'
            )
        ).split()[-1]
        ok(
            anvilctl(
                namespace,
                "write",
                f"agent/convoys/{convoy}/context",
                stdin="Target: the React frontend.\n",
            )
        )
        first = new_bead(namespace, f'new "Research auth" researcher "" convoy={convoy}')
        bead = new_bead(namespace, f'new "Implement OAuth" developer "" {first} convoy={convoy}')
        assert bead == "implement-oauth-002"
        ok(anvilctl(namespace, "write", f"agent/beads/{first}/ctl", stdin="claim user\n"))
        ok(anvilctl(namespace, "write", f"agent/beads/{first}/ctl", stdin="complete notes\n"))
        worker = ok(anvilctl(namespace, "new", "role=developer", cwd=workdir)).strip()
        ok(anvilctl(namespace, "send", worker, "take the bead"))
        assert ok(anvilctl(namespace, "wait", worker)) == "await\n"
        assert ok(anvilctl(namespace, "out", worker)) == "claimed\n"
        assert read(namespace, f"agent/beads/{bead}/assigned_to") == f"{worker}\n"
        ok(anvilctl(namespace, "send", worker, "do the work"))
        assert ok(anvilctl(namespace, "wait", worker)) == "await\n"
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    assert f"claim {bead} for {worker} (by session {worker})" in git_log(daemon.data_dir / "beads")
    requests = fake.requests()

    def system(request: dict[str, object]) -> str:
        body = request["body"]
        assert isinstance(body, dict)
        return str(body["messages"][0]["content"])

    tool_result = str(requests[1]["body"])
    assert "Target: the React frontend." in tool_result  # the claim's brief
    assert "Convoy context" not in system(requests[0])
    last = system(requests[-1])
    assert f"## Convoy {convoy}: Auth system" in last
    assert "Goal: Add OAuth" in last
    assert "Target: the React frontend." in last


RC = shutil.which("rc") or "/usr/lib/plan9/bin/rc"


@pytest.mark.skipif(not Path(RC).exists(), reason="Plan 9's rc is not installed (Debian: 9base)")
def test_the_same_quoting_works_from_rc_and_bash(
    namespace: Path, tmp_path: Path, fake: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    ctl = f"{sys.executable} -m anvilctl write agent/beads/ctl"
    env = {**os.environ, "NAMESPACE": str(namespace)}
    lines = [
        # rc: a quote inside rc's single quotes is doubled; double quotes pass through.
        (RC, f"""echo 'new "Fix it" developer "Don''t panic"' | {ctl}"""),
        (RC, f"""echo 'new ''Fix it'' developer ''Don''''t panic''' | {ctl}"""),
        ("bash", f"""echo 'new "Fix it" developer "Don'"'"'t panic"' | {ctl}"""),
        ("bash", f"""echo "new 'Fix it' developer 'Don''t panic'" | {ctl}"""),
    ]
    try:
        for shell, line in lines:
            done = subprocess.run(
                [shell, "-c", line], env=env, capture_output=True, text=True, timeout=60
            )
            assert (done.returncode, done.stderr) == (0, ""), (shell, line)
        ids = [line.split("\t")[0] for line in read(namespace, "agent/beads/list").splitlines()]
        assert ids == ["fix-it-001", "fix-it-002", "fix-it-003", "fix-it-004"]
        for bead in ids:
            assert read(namespace, f"agent/beads/{bead}/title") == "Fix it\n"
            assert read(namespace, f"agent/beads/{bead}/description") == "Don't panic\n"
    finally:
        code, log = daemon.stop()
    assert code == 0, log


# -- requires_approval through the session result gate -------------------------------------

GATED = "implement-oauth-001"
RESULT = "OAuth login added; tests pass."


@pytest.fixture
def gated_fake(tmp_path: Path) -> Iterator[FakeServer]:
    """A developer agent that claims the gated bead, then completes it with its tools."""
    server = FakeServer(
        tmp_path,
        [
            {"contains": "take the bead", "tool_calls": [
                {"name": "claim", "arguments": {"bead_id": GATED}}
            ]},
            {"contains": "You hold bead", "text": "claimed"},
            {"contains": "finish the bead", "tool_calls": [
                {"name": "complete", "arguments": {"bead_id": GATED, "result": RESULT}}
            ]},
            {"contains": "waits for approval", "text": "Done; it waits for approval."},
            {"text": "pong", "repeat": True},
        ],
    )  # fmt: skip
    yield server
    server.stop()


def gated_bead_done_by_agent(namespace: Path, workdir: Path) -> str:
    """A requires_approval bead, claimed and completed by a session's own tools; the session
    is left waiting on its result gate. Returns the session id."""
    assert (
        new_bead(namespace, 'new "Implement OAuth" developer "Add it" requires_approval') == GATED
    )
    worker = ok(anvilctl(namespace, "new", "role=developer", cwd=workdir)).strip()
    ok(anvilctl(namespace, "send", worker, "take the bead"))
    assert ok(anvilctl(namespace, "wait", worker)) == "await\n"
    ok(anvilctl(namespace, "send", worker, "finish the bead"))
    assert ok(anvilctl(namespace, "wait", worker)) == "await_approval\n"
    assert read(namespace, f"agent/beads/{GATED}/status") == "pending_approval\n"
    assert read(namespace, f"agent/{worker}/approval") == (
        f"kind result\nasked_by bead {GATED}\napprover user\nsummary {RESULT}\n"
        "answer approve | reject REASON\n"
    )
    return worker


def test_approve_on_the_session_completes_its_bead(
    namespace: Path, tmp_path: Path, workdir: Path, gated_fake: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, gated_fake.url))
    try:
        worker = gated_bead_done_by_agent(namespace, workdir)
        ok(anvilctl(namespace, "write", f"agent/{worker}/approval", stdin="approve\n"))
        # The write returns once the bead has its verdict too.
        assert read(namespace, f"agent/beads/{GATED}/status") == "completed\n"
        assert read(namespace, f"agent/beads/{GATED}/approved_by") == "user\n"
        assert read(namespace, f"agent/beads/{GATED}/result") == f"{RESULT}\n"
        assert read(namespace, f"agent/{worker}/state") == "idle\n"
        assert read(namespace, f"agent/{worker}/approval") == ""
        refused = anvilctl(namespace, "write", f"agent/beads/{GATED}/ctl", stdin="approve\n")
        assert refused.returncode != 0
        assert "approve needs a bead that is pending_approval" in refused.stderr
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    subjects = git_log(daemon.data_dir / "beads")
    assert subjects[:2] == [
        f"approve {GATED} through session {worker}'s result gate (by user)",
        f"complete {GATED}: pending approval (by session {worker})",
    ]


def test_reject_on_the_bead_ctl_stops_the_session_with_the_reason(
    namespace: Path, tmp_path: Path, workdir: Path, gated_fake: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, gated_fake.url))
    try:
        worker = gated_bead_done_by_agent(namespace, workdir)
        ok(
            anvilctl(
                namespace,
                "write",
                f"agent/beads/{GATED}/ctl",
                stdin="reject 'the tests do not cover errors'\n",
            )
        )
        assert read(namespace, f"agent/beads/{GATED}/status") == "failed\n"
        assert read(namespace, f"agent/beads/{GATED}/reason") == "the tests do not cover errors\n"
        assert read(namespace, f"agent/{worker}/state") == "stopped\n"
        assert read(namespace, f"agent/{worker}/approval") == ""
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    records = SessionStore(daemon.data_dir / "sessions").read(worker).records
    reason = "the tests do not cover errors"
    assert [r for r in records if isinstance(r, ResultApprovalAnswered)] == [
        ResultApprovalAnswered(Verdict.REJECT, reason, "user")
    ]
    stopped = [r for r in records if isinstance(r, StateChanged)][-1]
    assert stopped == StateChanged(SessionStatus.STOPPED, f"result rejected: {reason}")
    rejects = [s for s in git_log(daemon.data_dir / "beads") if s.startswith("reject")]
    assert rejects == [
        f"reject {GATED} through session {worker}'s result gate: the tests do not cover errors "
        "(by user)"
    ]


def test_kill_9_with_the_gate_open_then_the_answer_lands_on_both(
    namespace: Path, tmp_path: Path, workdir: Path, gated_fake: FakeServer
) -> None:
    config = user_config(tmp_path, gated_fake.url)
    first = start_daemon(namespace, config)
    try:
        worker = gated_bead_done_by_agent(namespace, workdir)
    finally:
        code, _ = first.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL

    second = start_daemon(namespace, config)
    try:
        assert read(namespace, f"agent/{worker}/state") == "await_approval\n"
        assert f"asked_by bead {GATED}\n" in read(namespace, f"agent/{worker}/approval")
        ok(anvilctl(namespace, "write", f"agent/{worker}/approval", stdin="approve\n"))
        assert read(namespace, f"agent/beads/{GATED}/status") == "completed\n"
        assert read(namespace, f"agent/beads/{GATED}/approved_by") == "user\n"
        assert read(namespace, f"agent/{worker}/state") == "idle\n"
    finally:
        code, log = second.stop()
    assert code == 0, log


def test_a_decision_recorded_before_a_kill_9_reaches_the_bead_at_restart(
    namespace: Path, tmp_path: Path, workdir: Path, gated_fake: FakeServer
) -> None:
    config = user_config(tmp_path, gated_fake.url)
    first = start_daemon(namespace, config)
    try:
        worker = gated_bead_done_by_agent(namespace, workdir)
    finally:
        code, _ = first.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL
    # What a kill -9 right after the session recorded `reject` (and before the bead's commit)
    # leaves: the session's records say how its gate for the bead ended; the bead still waits.
    with SessionStore(first.data_dir / "sessions").open(worker) as journal:
        journal.append(ResultApprovalAnswered(Verdict.REJECT, "needs a migration", "user"))
        journal.append(
            StateChanged(SessionStatus.STOPPED, "result rejected: needs a migration"), sync=True
        )

    second = start_daemon(namespace, config)
    try:
        assert read(namespace, f"agent/beads/{GATED}/status") == "failed\n"
        assert read(namespace, f"agent/beads/{GATED}/reason") == "needs a migration\n"
        assert read(namespace, f"agent/{worker}/state") == "stopped\n"
    finally:
        code, log = second.stop()
    assert code == 0, log
    third = start_daemon(namespace, config)  # nothing left to do: no second commit
    try:
        assert read(namespace, f"agent/beads/{GATED}/status") == "failed\n"
    finally:
        code, log = third.stop()
    assert code == 0, log
    rejects = [s for s in git_log(first.data_dir / "beads") if s.startswith("reject")]
    assert rejects == [
        f"reject {GATED} through session {worker}'s result gate: needs a migration (by user)"
    ]
