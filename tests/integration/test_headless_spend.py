"""`anvilctl -p` without a daemon spends the same budgets and sends the same telemetry as the
daemon: its spend goes to the ledger in the user's data dir (a daemon started there afterwards
starts from it), a request over the day's limit is not sent, a locked data dir with a budget is
refused (a temporary ledger would forget the day's spend), and its turn's spans reach the
configured OTLP receiver."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from anvild.budget import Ledger
from anvild.budget.ledger import day_of
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_headless import (
    fake,
    headless,
    in_process_config,
    locked_elsewhere,
    turn_ends,
)
from tests.integration.test_sessions_e2e import FakeServer, read
from tests.unit.telemetry.test_traces import Receiver, receiver

__all__ = ["fake", "receiver"]  # fixtures


def with_section(config: Path, section: str) -> None:
    config.write_text(config.read_text() + f"\n{section}\n")


def ledger_tokens(data_dir: Path) -> int:
    day = day_of(dt.datetime.now(dt.UTC))
    return sum(entry.tokens for entry in Ledger(data_dir / "budget").read(day))


def test_in_process_spend_is_the_daemons_and_a_request_over_the_limit_is_not_sent(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    config = in_process_config(tmp_path, fake.url)
    base = config.read_text()
    with_section(config, "[budget]\ndaily_tokens = 1000000")
    namespace.mkdir(mode=0o700)
    result = headless(namespace, "-p", "say-pong", cwd=workdir)
    assert (result.returncode, result.stdout) == (0, "pong\n"), result.stderr
    data_dir = tmp_path / "xdg-data" / "anvil"
    spent = ledger_tokens(data_dir)
    assert spent > 0

    daemon = Anvild(namespace, "--config", str(config), platform_data_dir=True)
    daemon.wait_serving()
    try:
        budget = read(namespace, "agent/budget")
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    assert re.search(rf"^daemon daily_tokens limit=1000000 spent={spent} reserved=0 ", budget, re.M)

    config.write_text(base)
    with_section(config, f"[budget]\ndaily_tokens = {spent + 1}")
    asked = len(fake.requests())
    refused = headless(namespace, "-p", "say-pong", cwd=workdir)
    assert refused.returncode == 5, refused.stderr
    assert "daemon budget" in refused.stderr
    assert f"{spent} tokens spent" in refused.stderr
    assert len(fake.requests()) == asked  # never sent
    assert sorted(outcome for outcome, _ in turn_ends(data_dir)) == ["budget_exceeded", "done"]


def test_a_locked_data_dir_with_a_budget_is_refused(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    config = in_process_config(tmp_path, fake.url)
    with_section(config, "[budget]\ndaily_tokens = 1000000")
    with locked_elsewhere(tmp_path):
        result = headless(namespace, "-p", "say-pong", cwd=workdir)
    assert result.returncode == 1
    assert "a [budget] is configured" in result.stderr
    assert "start anvild" in result.stderr
    assert fake.requests() == []


def test_in_process_turns_send_their_spans(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path, receiver: Receiver
) -> None:
    config = in_process_config(tmp_path, fake.url)
    with_section(config, f'[telemetry]\notlp_endpoint = "{receiver.url}"')
    namespace.mkdir(mode=0o700)
    result = headless(namespace, "-p", "say-pong", cwd=workdir)
    assert (result.returncode, result.stdout) == (0, "pong\n"), result.stderr
    names = sorted({span.name for span in receiver.spans()})
    assert names == ["chat fake-model", "invoke_agent anvild"]  # flushed before the exit
