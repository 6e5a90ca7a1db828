"""Replay of a session recorded by a real daemon: ten steps (nine read_file calls against the
fake provider, then an answer); `anvilctl replay` re-runs it with every request byte for byte
(the daemon's tools it cannot build keep their recorded definitions), and a read_file whose
output format changed in the code is reported at the step whose call it changed, with a diff."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvilctl import rerun
from anvild.agent.tools.base import ToolOutput
from anvild.agent.tools.files import ReadFile
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    new_session_by_ctl,
    ok,
    start_daemon,
    user_config,
)

STEPS = 10


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's records, made once for the module's tests (each only reads them)."""
    tmp_path = tmp_path_factory.mktemp("replay")
    namespace, workdir = tmp_path / "ns", tmp_path / "work"
    workdir.mkdir()
    reads: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_file", "arguments": {"file_path": f"f{i % 3}.txt"}}]}
        for i in range(STEPS - 1)
    ]
    fake = FakeServer(tmp_path, [*reads, {"text": "read them all"}])
    try:
        yield record(tmp_path, namespace, workdir, fake)
    finally:
        fake.stop()


def record(tmp_path: Path, namespace: Path, workdir: Path, fake: FakeServer) -> Path:
    for i in range(3):
        (workdir / f"f{i}.txt").write_text(f"line one of {i}\nline two\n")
    daemon: Anvild = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        session = new_session_by_ctl(namespace, workdir)
        ok(anvilctl(namespace, "send", session, "read the files"))
        ok(anvilctl(namespace, "wait", session))
        assert ok(anvilctl(namespace, "read", f"agent/{session}/out")) == "read them all\n"
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    assert len(fake.requests()) == STEPS
    return daemon.data_dir / "sessions" / f"{session}.jsonl"


def test_a_daemon_session_replays_byte_for_byte(recorded: Path) -> None:
    usages = [json.loads(line) for line in recorded.read_text().splitlines()]
    usages = [u for u in usages if u["type"] == "usage"]
    assert len(usages) == STEPS
    assert all(len(u["request"]) == 64 for u in usages)
    assert sum("head_body" in u for u in usages) == 1
    data_dir = recorded.parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "anvilctl", "replay", recorded.stem, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=TURN_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(
        f"turn 1: {STEPS} requests reproduced (every request byte for byte"
    ), result.stdout


def test_a_changed_output_format_is_reported_at_its_step(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ReadFile.call

    async def numbered_differently(self: ReadFile, args: Any, ctx: Any) -> ToolOutput:
        output = await original(self, args, ctx)
        return ToolOutput(output.content.replace("\t", " | "))

    monkeypatch.setattr(ReadFile, "call", numbered_differently)
    out = io.StringIO()
    assert rerun.replay(recorded, out=out) == 1
    text = out.getvalue()
    assert text.startswith("DIVERGED turn 1 step 1: the result of ")
    assert "(read_file) differs\n" in text
    assert "+     1 | line one of 0" in text
