"""Subagents through a real daemon and the fake provider (openai-chat over HTTP).

- Two `task` calls in one step: both children's requests reach the provider while both are
  held (they run at the same time); each child is in `agent/list` with a `parent` file, the
  parent's `children` lists them, their answers are the parent's two tool results and their
  tokens are in the parent's `cost`, apart.
- kill -9 during a child's turn: after the restart the parent is restored and the child is
  ended (not in `agent/list`; `session_ended` on `agent/events` and its `SessionEnded` record
  give the reason; the parent's `children` keeps it, exited), also after a second restart; the
  parent's call is reported as outcome unknown, and nothing runs it again (the provider sees
  no new request for the child's prompt).
- A stop (SIGTERM) during a child's turn: the child's cancelled turn is its outcome after the
  restart (one `TurnEnded`), not an interrupted one added by recovery.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from anvild.session.manager import CHILD_ORPHANED
from anvild.store import SessionStore, TurnEnded
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_daemon_crash import read_stream_until
from tests.integration.test_interrupted_turns import kill_9
from tests.integration.test_sessions_e2e import (
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)

pytestmark = pytest.mark.slow

ALLOW_TASK = '\n[permissions]\nallow = ["task"]\n'


def config_for(tmp_path: Path, fake: FakeServer) -> Path:
    config = user_config(tmp_path, fake.url)
    config.write_text(config.read_text() + ALLOW_TASK)
    return config


def wait_requests(fake: FakeServer, count: int) -> None:
    url = f"{fake.url}/_fake/wait?requests={count}&timeout=30"
    with urllib.request.urlopen(url, timeout=40) as reply:
        assert reply.status == 200


def last_user_text(request: dict[str, Any]) -> str:
    """The messages after the request's last assistant message (each tool result is one)."""
    messages = request["body"]["messages"]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return json.dumps(messages[last + 1 :])


def listed(namespace: Path) -> dict[str, list[str]]:
    lines = read(namespace, "agent/list").splitlines()
    return {line.split("\t")[0]: line.split("\t") for line in lines}


def test_two_children_at_once_with_parent_answers_and_cost(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    fake = FakeServer(
        tmp_path,
        [
            {
                "contains": "alpha job",
                "text": "alpha answer",
                "hold": 1,
                "usage": {"input": 50, "output": 5},
            },
            {
                "contains": "beta job",
                "text": "beta answer",
                "hold": 1,
                "usage": {"input": 70, "output": 7},
            },
            {"contains": "alpha answer", "text": "both done"},
            {
                "contains": "delegate",
                "tool_calls": [
                    {"name": "task", "arguments": {"prompt": "alpha job: count"}},
                    {"name": "task", "arguments": {"prompt": "beta job: read"}},
                ],
            },
        ],
    )
    daemon: Anvild | None = None
    try:
        daemon = start_daemon(namespace, config_for(tmp_path, fake))
        parent = ok(anvilctl(namespace, "new", "alias=boss", cwd=workdir)).strip()
        ok(anvilctl(namespace, "send", parent, "delegate two jobs"))
        # the parent's request and both children's: both held, neither has answered
        wait_requests(fake, 3)
        prompts = [last_user_text(r) for r in fake.requests()]
        assert sum("job:" in p for p in prompts[1:]) == 2
        children = read(namespace, f"agent/{parent}/children").splitlines()
        assert len(children) == 2
        ids = [line.split("\t")[0] for line in children]
        sessions = listed(namespace)
        for child in ids:
            assert child in sessions  # in agent/list
            assert sessions[child][2] == "running"
            assert read(namespace, f"agent/{child}/parent") == f"{parent}\n"
        assert read(namespace, f"agent/{parent}/parent") == "-\n"
        fake.release()
        fake.release()
        assert ok(anvilctl(namespace, "wait", parent)) == "await\n"
        assert ok(anvilctl(namespace, "out", parent)) == "both done\n"
        results = last_user_text(fake.requests()[-1])
        assert "alpha answer" in results
        assert "beta answer" in results
        for line in read(namespace, f"agent/{parent}/children").splitlines():
            assert line.split("\t")[2:] == ["exited", "done"]
        cost = read(namespace, f"agent/{parent}/cost").splitlines()
        assert "children 2" in cost
        assert "children_input 120" in cost
        assert "children_output 12" in cost
    finally:
        if daemon is not None:
            code, log_text = daemon.stop()
            assert code == 0, log_text
        fake.stop()


def delegating(
    namespace: Path, workdir: Path, fake: FakeServer, config: Path
) -> tuple[Anvild, str, str]:
    """A daemon whose parent session `boss` delegated one job: the daemon, the parent's id and
    the child's, with the child's request held by the fake provider (its turn runs)."""
    daemon = start_daemon(namespace, config)
    try:
        parent = ok(anvilctl(namespace, "new", "alias=boss", cwd=workdir)).strip()
        ok(anvilctl(namespace, "send", parent, "delegate one job"))
        wait_requests(fake, 2)
        (line,) = read(namespace, f"agent/{parent}/children").splitlines()
    except BaseException:
        daemon.stop()
        raise
    return daemon, parent, line.split("\t")[0]


def test_kill_9_during_a_childs_turn_ends_the_child_and_never_reruns(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    fake = FakeServer(
        tmp_path,
        [
            {"contains": "gamma job", "text": "gamma answer", "hold": 1},
            {"contains": "go on", "text": "resumed"},
            {
                "contains": "delegate",
                "tool_calls": [{"name": "task", "arguments": {"prompt": "gamma job: slow"}}],
            },
        ],
    )
    config = config_for(tmp_path, fake)
    daemon: Anvild | None = None
    try:
        daemon, parent, child = delegating(namespace, workdir, fake, config)
        assert child in listed(namespace)
        kill_9(daemon)
        daemon = None

        daemon = start_daemon(namespace, config)
        sessions = listed(namespace)
        assert parent in sessions
        assert child not in sessions
        events = read_stream_until(namespace, "agent/events", CHILD_ORPHANED)
        ended = [json.loads(e) for e in events.splitlines() if '"session_ended"' in e]
        assert [(e["id"], e["reason"]) for e in ended] == [(child, CHILD_ORPHANED)]
        assert read(namespace, f"agent/{parent}/children").split("\t") == [
            child,
            "developer",
            "exited",
            "error\n",
        ]
        state = SessionStore(daemon.data_dir / "sessions").read(child).state
        assert state.ended == CHILD_ORPHANED
        assert state.last_turn is not None
        assert state.last_turn.interrupted  # its turn was cut, then it ended
        log = read_stream_until(namespace, f"agent/{parent}/log", "outcome unknown")
        assert "(task): outcome unknown" in log
        assert read(namespace, f"agent/{parent}/state") == "idle\n"

        ok(anvilctl(namespace, "send", parent, "go on"))
        assert ok(anvilctl(namespace, "wait", parent)) == "await\n"
        assert ok(anvilctl(namespace, "out", parent)) == "resumed\n"
        requests = fake.requests()
        assert "Outcome unknown: anvild stopped" in last_user_text(requests[-1])
        # the child's prompt reached the provider once: the call was never run again
        assert sum("gamma job" in last_user_text(r) for r in requests) == 1
        assert len(requests) == 3

        code, log_text = daemon.stop()
        daemon = None
        assert code == 0, log_text
        daemon = start_daemon(namespace, config)  # the end is recorded: it stays ended
        assert child not in listed(namespace)
        assert read(namespace, f"agent/{parent}/children").split("\t")[2] == "exited"
    finally:
        try:
            if daemon is not None:
                code, log_text = daemon.stop()
                assert code == 0, log_text
        finally:
            fake.stop()


def test_a_stop_during_a_childs_turn_keeps_the_outcome_it_recorded(
    namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    """A SIGTERM cancels the child's turn (`TurnEnded` cancelled) before its end is recorded:
    the restart ends the child and shows that outcome, not a second, interrupted turn."""
    fake = FakeServer(
        tmp_path,
        [
            {"contains": "delta job", "text": "delta answer", "hold": 1},
            {
                "contains": "delegate",
                "tool_calls": [{"name": "task", "arguments": {"prompt": "delta job: slow"}}],
            },
        ],
    )
    config = config_for(tmp_path, fake)
    daemon: Anvild | None = None
    try:
        daemon, parent, child = delegating(namespace, workdir, fake, config)
        code, log_text = daemon.stop()
        daemon = None
        assert code == 0, log_text

        daemon = start_daemon(namespace, config)
        assert child not in listed(namespace)
        assert read(namespace, f"agent/{parent}/children").split("\t") == [
            child,
            "developer",
            "exited",
            "cancelled\n",
        ]
        contents = SessionStore(daemon.data_dir / "sessions").read(child)
        turns = [r for r in contents.records if isinstance(r, TurnEnded)]
        assert [(t.outcome, t.interrupted) for t in turns] == [("cancelled", False)]
        assert contents.state.ended == CHILD_ORPHANED
    finally:
        try:
            if daemon is not None:
                code, log_text = daemon.stop()
                assert code == 0, log_text
        finally:
            fake.stop()
