"""End to end: mail and result approval gates through the real `anvild`, driven by `anvilctl`.

The fake provider server (a subprocess) scripts every model; the daemon runs on a temporary
namespace and data directory. Everything is plain file reads and writes, as a script would do.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from anvild.store import (
    ResultApprovalAnswered,
    ResultApprovalRequested,
    SessionStatus,
    SessionStore,
    StateChanged,
    Verdict,
)
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import (
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)


def new(namespace: Path, workdir: Path, *words: str) -> str:
    return ok(anvilctl(namespace, "new", *words, cwd=workdir)).strip()


def send(namespace: Path, outbox: str, message: dict[str, Any] | str) -> Any:
    data = message if isinstance(message, str) else json.dumps(message)
    return anvilctl(namespace, "write", outbox, stdin=data)


def inbox(namespace: Path, mailbox: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads(read(namespace, f"agent/{mailbox}/inbox"))
    return messages


def names(namespace: Path, path: str) -> list[str]:
    return ok(anvilctl(namespace, "ls", path)).split()


def test_a_claimed_from_is_replaced_by_the_real_sender(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    dev = new(namespace, workdir, "alias=dev")
    rev = new(namespace, workdir, "alias=rev")
    message = {"from": "user", "to": "rev", "type": "REVIEW_REQUEST", "body": "diff staged"}
    ok(send(namespace, "agent/dev/outbox", message))
    [got] = inbox(namespace, "rev")
    assert (got["from"], got["to"], got["type"]) == (dev, rev, "REVIEW_REQUEST")
    # reading the inbox archived it
    assert inbox(namespace, rev) == []
    assert names(namespace, f"agent/{rev}/mail/received") == [f"{got['id']}.json"]
    assert names(namespace, f"agent/{dev}/mail/sent") == [f"{got['id']}.json"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"to": "rev", "type": "QUESTION", "body": "x"', "outbox: malformed JSON at line 1"),
        ('{"to": "rev", "type": "GOSSIP", "body": "x"}', 'unknown message type "GOSSIP"'),
        ('{"type": "QUESTION", "body": "x"}', 'the message has no recipient: add "to"'),
    ],
)
def test_bad_messages_fail_the_write_precisely_and_write_nothing(
    daemon: Anvild, namespace: Path, workdir: Path, text: str, expected: str
) -> None:
    dev = new(namespace, workdir, "alias=dev")
    new(namespace, workdir, "alias=rev")
    result = send(namespace, "agent/dev/outbox", text)
    assert result.returncode != 0
    assert expected in result.stderr
    assert inbox(namespace, "rev") == []
    assert names(namespace, f"agent/{dev}/mail/sent") == []
    if text.endswith("}"):
        assert inbox(namespace, "dev") == []  # refused on a Twrite: every client shows it
    else:
        # The body ended before its JSON value: only the clunk knows, and plan9port's `9p write`
        # never shows a clunk's reply, so the refusal also comes back as mail.
        [report] = inbox(namespace, "dev")
        assert report["type"] == "ERROR_REPORT"
        assert expected.removeprefix("outbox: ") in report["body"]


def test_mail_to_a_session_that_has_exited_fails_the_write(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    gone = new(namespace, workdir, "alias=gone")
    ok(anvilctl(namespace, "write", "agent/ctl", stdin=f"kill {gone}\n"))
    result = send(namespace, "agent/user/outbox", {"to": gone, "type": "QUESTION", "body": "x"})
    assert result.returncode == 1
    assert f"no live session has the id or alias {gone!r}" in result.stderr
    assert "nothing was sent" in result.stderr
    assert inbox(namespace, "user") == []
    assert names(namespace, "agent/user/mail/sent") == []


def test_mail_survives_kill_9_and_a_restart(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    config = user_config(tmp_path, fake.url)
    first = start_daemon(namespace, config)
    try:
        rev = new(namespace, workdir, "alias=rev")
        ok(send(namespace, "agent/user/outbox", {"to": "rev", "type": "QUESTION", "body": "1"}))
        ok(send(namespace, "agent/user/outbox", {"to": rev, "type": "QUESTION", "body": "2"}))
        [one, _] = inbox(namespace, "rev")  # both read: archived
        ok(send(namespace, "agent/user/outbox", {"to": rev, "type": "QUESTION", "body": "3"}))
    finally:
        code, _ = first.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL
    second = start_daemon(namespace, config)
    try:
        received = names(namespace, f"agent/{rev}/mail/received")
        assert len(received) == 2
        assert f"{one['id']}.json" in received
        assert [m["body"] for m in inbox(namespace, "rev")] == ["3"]
        assert len(names(namespace, f"agent/{rev}/mail/received")) == 3
        assert len(names(namespace, "agent/user/mail/sent")) == 3
    finally:
        code, log = second.stop()
    assert code == 0, log


def test_a_scripted_reviewer_sends_a_verdict_the_developer_reads(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    review = {
        "to": "dev",
        "type": "REVIEW_RESPONSE",
        "subject": "Re: parser",
        "body": "Handle the empty input.",
        "metadata": {"verdict": "changes", "bead_id": "b7"},
    }
    fake = FakeServer(
        tmp_path,
        [
            {
                "contains": "Review the parser",
                "tool_calls": [{"name": "send_message", "arguments": review}],
            },
            {"contains": "Sent REVIEW_RESPONSE", "text": "Sent my review."},
        ],
    )
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        dev = new(namespace, workdir, "alias=dev")
        rev = new(namespace, workdir, "alias=rev", "role=reviewer")
        ok(anvilctl(namespace, "send", "rev", "Review the parser"))
        assert ok(anvilctl(namespace, "wait", "rev")) == "await\n"
        assert ok(anvilctl(namespace, "out", "rev")) == "Sent my review.\n"
        [got] = inbox(namespace, "dev")
        assert (got["from"], got["to"], got["type"]) == (rev, dev, "REVIEW_RESPONSE")
        assert got["metadata"] == {"verdict": "changes", "bead_id": "b7"}
        tools = fake.requests()[0]["body"]["tools"]
        names_offered = {t["function"]["name"] for t in tools}
        assert {"list_sessions", "send_message", "read_inbox", "request_approval"} <= names_offered
    finally:
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log


def test_auto_prompt_fires_once_for_new_mail(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    fake = FakeServer(
        tmp_path,
        [
            {
                "contains": "You have new mail",
                "tool_calls": [{"name": "read_inbox", "arguments": {}}],
            },
            {"contains": "auto-ping", "text": "Read it: auto-ping."},
        ],
    )
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        sid = new(namespace, workdir, "alias=bot", "mail=auto")
        ok(
            send(
                namespace,
                "agent/user/outbox",
                {"to": "bot", "type": "QUESTION", "body": "auto-ping"},
            )
        )
        assert ok(anvilctl(namespace, "wait", "bot")) == "await\n"
        assert ok(anvilctl(namespace, "out", "bot")) == "Read it: auto-ping.\n"
        # the out read made it idle; the mail was read by the tool, so nothing is prompted again
        assert read(namespace, f"agent/{sid}/state") == "idle\n"
        assert read(namespace, f"agent/{sid}/queue") == ""
        assert inbox(namespace, sid) == []
        prompts = [
            r
            for r in fake.requests()
            if "You have new mail" in json.dumps(r["body"]["messages"][-1])
        ]
        assert len(prompts) == 1
        assert len(fake.requests()) == 2
        assert len(names(namespace, f"agent/{sid}/mail/received")) == 1
    finally:
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log


def test_result_gate_approve_reject_always_and_restart(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    config = user_config(tmp_path, fake.url)
    first = start_daemon(namespace, config)
    try:
        sid = new(namespace, workdir, "alias=dev")
        ok(anvilctl(namespace, "send", "dev", "implement"))
        assert ok(anvilctl(namespace, "wait", "dev")) == "await\n"
        ok(anvilctl(namespace, "write", "agent/dev/ctl", stdin="request_approval\n"))
        assert read(namespace, "agent/dev/state") == "await_approval\n"
        assert read(namespace, "agent/dev/approval") == (
            "kind result\nasked_by ctl\napprover user\nsummary pong\n"
            "answer approve | reject REASON\n"
        )
        always = anvilctl(namespace, "write", "agent/dev/approval", stdin="always\n")
        assert always.returncode != 0
        assert "always does not apply to a result approval" in always.stderr
        assert ok(anvilctl(namespace, "wait", "dev")) == "await_approval\n"  # returns at a gate
        ok(anvilctl(namespace, "write", "agent/dev/approval", stdin="approve\n"))
        assert read(namespace, "agent/dev/state") == "idle\n"
        ok(anvilctl(namespace, "write", "agent/dev/ctl", stdin="request_approval Ready to merge\n"))
        assert read(namespace, "agent/dev/state") == "await_approval\n"
    finally:
        code, _ = first.stop(signal.SIGKILL)
    assert code == -signal.SIGKILL
    second = start_daemon(namespace, config)
    try:
        assert read(namespace, "agent/dev/state") == "await_approval\n"
        assert "summary Ready to merge\n" in read(namespace, "agent/dev/approval")
        ok(
            anvilctl(
                namespace, "write", "agent/dev/approval", stdin="reject the tests are missing\n"
            )
        )
        assert read(namespace, "agent/dev/state") == "stopped\n"
        assert read(namespace, "agent/dev/approval") == ""
    finally:
        code, log = second.stop()
    assert code == 0, log
    records = SessionStore(second.data_dir / "sessions").read(sid).records
    gate = [r for r in records if isinstance(r, ResultApprovalRequested | ResultApprovalAnswered)]
    assert gate == [
        ResultApprovalRequested("pong", "ctl"),
        ResultApprovalAnswered(Verdict.APPROVE, "", "user"),
        ResultApprovalRequested("Ready to merge", "ctl"),
        ResultApprovalAnswered(Verdict.REJECT, "the tests are missing", "user"),
    ]
    stopped = [r for r in records if isinstance(r, StateChanged)][-1]
    assert stopped == StateChanged(SessionStatus.STOPPED, "result rejected: the tests are missing")
