"""Session files end to end through the real daemon and the fake provider server (issue 7,
"Checks"): exact `usage`, approve / reject / always on `approval` (what the model receives is
read back from the provider's recorded requests), `always` surviving a daemon restart, and
prompts queued behind a running turn (in order; `drop` discards them).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from anvild.store import ApprovalRequested, PermissionsRemembered, SessionStore
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
)

pytestmark = pytest.mark.slow


def config_32k(tmp_path: Path, url: str) -> Path:
    """The fake provider as model `fake` with a 32000-token window."""
    config = tmp_path / "config.toml"
    config.write_text(
        'default_model = "fake"\n\n'
        f'[providers.fake]\nkind = "openai-chat"\nbase_url = "{url}/v1"\n\n'
        '[models.fake]\nprovider = "fake"\nmodel = "fake-model"\n'
        "context_window = 32000\nmax_output_tokens = 1024\n"
    )
    return config


def wait_state(namespace: Path, sid: str, state: str) -> None:
    """Poll the `state` snapshot until it reads `state` (it has no blocking form)."""
    deadline = time.monotonic() + TURN_TIMEOUT
    while (now := read(namespace, f"agent/{sid}/state")) != f"{state}\n":
        assert time.monotonic() < deadline, f"still {now!r}, not {state}"
        time.sleep(0.05)


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    messages = request["body"]["messages"]
    return {m["tool_call_id"]: str(m["content"]) for m in messages if m["role"] == "tool"}


def write_call(call_id: str, path: str, content: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "name": "write_file",
        "arguments": {"file_path": path, "content": content},
    }


def test_usage_and_approvals_through_the_daemon(tmp_path: Path) -> None:
    namespace, work = tmp_path / "ns", tmp_path / "work"
    work.mkdir()
    fake = FakeServer(
        tmp_path,
        [
            {"contains": "count", "text": "counted", "usage": {"input": 100, "output": 20}},
            {"contains": "write a", "tool_calls": [write_call("wa", "a.txt", "a\n")]},
            {"contains": "because X", "text": "understood, not writing"},
            {"contains": "write b", "tool_calls": [write_call("wb", "b.txt", "b\n")]},
            {"contains": "Created", "text": "b written"},
            {"contains": "rewrite b", "tool_calls": [{"id": "rb", "name": "read_file",
                                                     "arguments": {"file_path": "b.txt"}}]},
            {"contains": "1\tb", "tool_calls": [write_call("wb2", "b.txt", "b2\n")]},
            {"contains": "Wrote", "text": "b rewritten"},
        ],
    )  # fmt: skip
    config = config_32k(tmp_path, fake.url)
    daemon = start_daemon(namespace, config)
    try:
        sid = ok(anvilctl(namespace, "new", "alias=v1", cwd=work)).strip()
        assert read(namespace, "agent/v1/usage") == "-\n"
        ok(anvilctl(namespace, "send", sid, "count"))
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert read(namespace, "agent/v1/usage") == "120/32000 (0.4%) compact at 85%\n"
        assert ok(anvilctl(namespace, "out", sid)) == "counted\n"

        # reject REASON: the call never runs, and the reason is the model's tool result.
        ok(anvilctl(namespace, "send", sid, "write a"))
        wait_state(namespace, sid, "await_approval")
        pending = read(namespace, "agent/v1/approval")
        assert "tool write_file\n" in pending
        assert '"file_path": "a.txt"' in pending
        ok(anvilctl(namespace, "write", "agent/v1/approval", stdin="reject because X\n"))
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert ok(anvilctl(namespace, "out", sid)) == "understood, not writing\n"
        assert tool_messages(fake.requests()[-1])["wa"] == (
            "ERROR: Permission denied for write_file: the user rejected this call and said: "
            "because X"
        )
        assert not (work / "a.txt").exists()
        assert read(namespace, "agent/v1/approval") == ""

        # always: the call runs, and what it allows is recorded.
        ok(anvilctl(namespace, "send", sid, "write b"))
        wait_state(namespace, sid, "await_approval")
        assert "always_adds allow write_file(b.txt)" in read(namespace, "agent/v1/approval")
        ok(anvilctl(namespace, "write", "agent/v1/approval", stdin="always\n"))
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert (work / "b.txt").read_text() == "b\n"
    finally:
        code, log = daemon.stop()
    assert code == 0, log

    # After a daemon restart the `always` still holds: the same write does not ask.
    daemon = start_daemon(namespace, config)
    try:
        ok(anvilctl(namespace, "send", "v1", "rewrite b"))
        assert ok(anvilctl(namespace, "wait", "v1")) == "await\n"
        assert ok(anvilctl(namespace, "out", "v1")) == "b rewritten\n"
        assert (work / "b.txt").read_text() == "b2\n"
    finally:
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log
    records = SessionStore(daemon.data_dir / "sessions").read(sid).records
    assert [r.call_id for r in records if isinstance(r, ApprovalRequested)] == ["wa", "wb"]
    assert [r.rules for r in records if isinstance(r, PermissionsRemembered)] == [
        ("write_file(b.txt)",)
    ]


def test_prompts_queued_behind_a_turn_run_in_order_and_drop_discards(tmp_path: Path) -> None:
    namespace, work = tmp_path / "ns", tmp_path / "work"
    work.mkdir()
    fake = FakeServer(
        tmp_path,
        [
            {"contains": "slow", "text": "slowly", "hold": 1, "repeat": True},
            {"contains": "second", "text": "two"},
            {"contains": "third", "text": "three"},
            {"text": "unexpected", "repeat": True},
        ],
    )
    daemon = start_daemon(namespace, config_32k(tmp_path, fake.url))
    try:
        sid = ok(anvilctl(namespace, "new", cwd=work)).strip()
        ok(anvilctl(namespace, "send", sid, "slow first"))
        wait_state(namespace, sid, "running")
        ok(anvilctl(namespace, "send", sid, "second"))
        ok(anvilctl(namespace, "send", sid, "third"))
        queued = read(namespace, f"agent/{sid}/queue").splitlines()
        assert [line.split("\t")[1] for line in queued] == ["second", "third"]
        fake.release()
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert ok(anvilctl(namespace, "out", sid)) == "three\n"
        prompts = [str(r["body"]["messages"][-1]["content"]) for r in fake.requests()]
        assert prompts == ["slow first", "second", "third"]

        ok(anvilctl(namespace, "send", sid, "slow again"))
        wait_state(namespace, sid, "running")
        ok(anvilctl(namespace, "send", sid, "dropped one"))
        ok(anvilctl(namespace, "send", sid, "dropped two"))
        ok(anvilctl(namespace, "write", f"agent/{sid}/queue", stdin="drop\n"))
        assert read(namespace, f"agent/{sid}/queue") == ""
        fake.release()
        assert ok(anvilctl(namespace, "wait", sid)) == "await\n"
        assert ok(anvilctl(namespace, "out", sid)) == "slowly\n"
        assert len(fake.requests()) == 4
        assert "DROPPED: 2 queued prompt(s)" in read_log(namespace, sid)
    finally:
        code, log = daemon.stop()
        fake.stop()
    assert code == 0, log


def read_log(namespace: Path, sid: str) -> str:
    from tests.integration.test_daemon_crash import read_stream_until

    return read_stream_until(namespace, f"agent/{sid}/log", "DROPPED:")
