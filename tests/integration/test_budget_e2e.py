"""Budgets through the daemon: `agent/budget` shows the day's spend, which survives a restart
(the ledger in the data dir), and a request that no longer fits is never sent: the turn ends
`budget_exceeded` and the fake provider sees nothing more. An unpriced model under a USD
budget is refused at `new`."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.test_sessions_e2e import (
    FakeServer,
    anvilctl,
    new_session_by_ctl,
    ok,
    read,
    start_daemon,
    user_config,
)


def budget_config(tmp_path: Path, url: str, budget: str) -> Path:
    config = user_config(tmp_path, url)
    config.write_text(config.read_text() + f"\n[budget]\n{budget}\n")
    return config


def spent(namespace: Path) -> int:
    text = read(namespace, "agent/budget")
    match = re.search(r"^daemon daily_tokens limit=\d+ spent=(\d+) reserved=0 resets=", text, re.M)
    assert match, text
    return int(match[1])


def test_spend_survives_a_restart_and_a_request_that_does_not_fit_is_not_sent(
    tmp_path: Path, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    config = budget_config(tmp_path, fake.url, "daily_tokens = 1000000")
    daemon = start_daemon(namespace, config)
    try:
        session = new_session_by_ctl(namespace, workdir)
        ok(anvilctl(namespace, "send", session, "ping"))
        assert ok(anvilctl(namespace, "wait", session)) == "await\n"
        used = spent(namespace)
        assert used > 0
    finally:
        assert daemon.stop()[0] == 0
    asked = len(fake.requests())
    # Again, with a limit one token above what the day has spent: nothing more fits.
    config = budget_config(tmp_path, fake.url, f"daily_tokens = {used + 1}")
    daemon = start_daemon(namespace, config)
    try:
        assert spent(namespace) == used  # from the ledger, not from zero
        session = new_session_by_ctl(namespace, workdir)
        ok(anvilctl(namespace, "send", session, "ping"))
        anvilctl(namespace, "wait", session)
        outcome = read(namespace, f"agent/{session}/outcome")
        assert outcome.startswith("budget_exceeded the daemon budget of")
        assert f"{used} tokens spent" in outcome
        assert len(fake.requests()) == asked
    finally:
        assert daemon.stop()[0] == 0


def test_an_unpriced_model_under_a_usd_budget_is_refused_at_new(
    tmp_path: Path, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    config = budget_config(tmp_path, fake.url, "daily_usd = 5")
    daemon = start_daemon(namespace, config)
    try:
        result = anvilctl(namespace, "rdwr", "agent/ctl", stdin=f"new cwd={workdir}\n")
        assert "no input and output pricing" in result.stdout + result.stderr
        assert "daily_tokens" in result.stdout + result.stderr
        assert "daemon daily_usd limit=5.000000 spent=0.000000" in read(namespace, "agent/budget")
    finally:
        assert daemon.stop()[0] == 0
