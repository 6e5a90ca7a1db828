"""End to end: the workflow scripts (scripts/fanout, fanout.rc, DevReview, Planning, conductor)
through the real `anvild` process, with the fake provider server scripting every agent.

Each agent gets its own model alias (`dev`, `rev`, `fake`, ...) that maps to its own model id
on the fake server, so the script of turns says which agent answers what (`model` condition);
`contains` conditions tell prompts of one model apart. The scripts run as a user runs them:
`anvilctl` on PATH (plan9port's `9p` is not installed here; one test puts a `9p` on PATH that
records its calls and hands them to anvilctl, to check the scripts prefer it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, start_daemon

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
RC = Path("/usr/lib/plan9/bin/rc")
SCRIPT_TIMEOUT = 120.0

MODELS = ("fake", "dev", "rev", "cond")


def models_config(tmp_path: Path, url: str) -> Path:
    """A user config with one alias per agent: alias `X` is model `X-model` on the fake server.
    The conductor's tools that start and drive sessions are allowed without asking."""
    config = tmp_path / "config.toml"
    text = (
        'default_model = "fake"\n\n[permissions]\n'
        'allow = ["start_session", "send_prompt", "kill_session"]\n\n'
        f'[providers.fake]\nkind = "openai-chat"\nbase_url = "{url}/v1"\n'
    )
    for alias in MODELS:
        text += (
            f'\n[models.{alias}]\nprovider = "fake"\nmodel = "{alias}-model"\n'
            "context_window = 8192\nmax_output_tokens = 1024\n"
        )
    config.write_text(text)
    return config


class Rig:
    """A fake provider server and a daemon on it, and a way to run scripts against them."""

    def __init__(self, tmp_path: Path, turns: list[dict[str, Any]]) -> None:
        self.tmp_path = tmp_path
        self.namespace = tmp_path / "ns"
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)
        self.fake = FakeServer(tmp_path, turns)
        self.config = models_config(tmp_path, self.fake.url)
        self.daemon: Anvild | None = start_daemon(self.namespace, self.config)

    def env(self, **extra: str) -> dict[str, str]:
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return {**os.environ, "NAMESPACE": str(self.namespace), "PATH": path, **extra}

    def run(
        self, *argv: str | Path, stdin: str = "", env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
            env=env or self.env(),
            cwd=self.work,
            check=False,
        )

    def requests(self) -> list[dict[str, Any]]:
        return self.fake.requests()

    def models_asked(self) -> list[str]:
        return [r["model"] for r in self.requests()]

    def sessions(self) -> list[list[str]]:
        text = ok(anvilctl(self.namespace, "read", "agent/list"))
        return [line.split("\t") for line in text.splitlines()]

    def restart(self) -> None:
        self.daemon = start_daemon(self.namespace, self.config)

    def stop(self) -> None:
        if self.daemon is not None:
            code, log = self.daemon.stop()
            self.daemon = None
            assert code == 0, log
        self.fake.stop()


@pytest.fixture
def rig_factory(tmp_path: Path) -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(turns: list[dict[str, Any]]) -> Rig:
        rig = Rig(tmp_path, turns)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.stop()


def assert_ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


# -- fanout ----------------------------------------------------------------------------------------


def fanout_turns() -> list[dict[str, Any]]:
    # five distinct answers, one per request, in the order the requests arrive
    return [{"model": "fake-model", "text": f"answer {n}"} for n in range(1, 6)]


def check_fanout_output(stdout: str, count: int) -> list[str]:
    headers = [line for line in stdout.splitlines() if line.startswith("=== ")]
    assert len(headers) == count, stdout
    ids = []
    for n, header in enumerate(headers, 1):
        words = header.split()
        assert words[1] == f"{n}/{count}", header
        assert words[3] == "await", header
        ids.append(words[2])
    answers = sorted(line for line in stdout.splitlines() if line.startswith("answer "))
    assert answers == [f"answer {n}" for n in range(1, count + 1)], stdout
    return ids


def test_fanout_to_five_sessions_collects_five_outs_and_kills_them(rig_factory: Any) -> None:
    rig = rig_factory(fanout_turns())
    result = rig.run(SCRIPTS / "fanout", "-n", "5", "-m", "fake", "Say", "your", "answer.")
    ids = check_fanout_output(assert_ok(result), 5)
    assert len(set(ids)) == 5
    prompts = [r["body"]["messages"][-1]["content"] for r in rig.requests()]
    assert len(prompts) == 5
    assert all("Say your answer." in str(p) for p in prompts), prompts
    assert rig.sessions() == []  # killed at the end


def test_fanout_keeps_sessions_with_k_and_writes_outs_to_a_directory(
    rig_factory: Any, tmp_path: Path
) -> None:
    rig = rig_factory(fanout_turns())
    outs = tmp_path / "outs"
    empty = rig.run(SCRIPTS / "fanout", "-n", "2", "-r", "planner", "-")
    assert empty.returncode == 1
    assert "the prompt is empty" in empty.stderr
    result = rig.run(
        SCRIPTS / "fanout", "-k", "-n", "2", "-o", outs, "-r", "planner", "-", stdin="Plan.\n"
    )
    ids = check_fanout_output(assert_ok(result), 2)
    assert "kept sessions" in result.stderr
    listed = rig.sessions()
    assert [row[0] for row in listed] == ids
    assert {row[3] for row in listed} == {"planner"}
    assert sorted(p.name for p in outs.iterdir()) == ["1.out", "2.out"]


def test_fanout_rc_runs_under_plan9_rc(rig_factory: Any) -> None:
    if not RC.exists():
        pytest.skip("Plan 9 rc is not installed: apt-get install 9base")
    rig = rig_factory(fanout_turns())
    result = rig.run(RC, SCRIPTS / "fanout.rc", "-n", "5", "-m", "fake", "Say", "your", "answer.")
    check_fanout_output(assert_ok(result), 5)
    assert len(rig.requests()) == 5
    assert rig.sessions() == []
    bad = rig.run(RC, SCRIPTS / "fanout.rc", "-x")
    assert bad.returncode == 2
    assert "usage: fanout.rc" in bad.stderr
    refused = rig.run(RC, SCRIPTS / "fanout.rc", "-m", "nope", "hi")
    assert refused.returncode == 1
    assert "unknown model 'nope'" in refused.stderr


def test_scripts_use_9p_when_it_is_on_path(rig_factory: Any, tmp_path: Path) -> None:
    rig = rig_factory(fanout_turns())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "9p-calls"
    fake_9p = bindir / "9p"
    fake_9p.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {sys.executable} -m anvilctl "$@"\n')
    fake_9p.chmod(0o755)
    env = rig.env()
    env["PATH"] = f"{bindir}:{env['PATH']}"
    result = rig.run(SCRIPTS / "fanout", "-n", "2", "-m", "fake", "hi", env=env)
    check_fanout_output(assert_ok(result), 2)
    lines = calls.read_text().splitlines()
    assert lines[0] == "rdwr agent/ctl"
    assert sum(line.endswith("/wait") for line in lines) == 2
    if RC.exists():
        calls.unlink()
        result = rig.run(RC, SCRIPTS / "fanout.rc", "-n", "1", "-m", "fake", "hi", env=env)
        assert_ok(result)
        assert calls.read_text().splitlines()[0] == "rdwr agent/ctl"


@pytest.mark.parametrize("script", ["fanout", "DevReview", "Planning"])
def test_scripts_refuse_bad_arguments_with_usage(rig_factory: Any, script: str) -> None:
    rig = rig_factory([])
    for argv in ([], ["-n"], ["-Z", "x"]):
        result = rig.run(SCRIPTS / script, *argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert f"usage: {script}" in result.stderr
    refused = rig.run(SCRIPTS / script, "-c", "/nonexistent-dir", "hi")
    assert refused.returncode == 1
    assert "cwd=/nonexistent-dir does not exist" in refused.stderr
    assert rig.requests() == []


def test_fanout_reports_a_session_that_ended_in_error(rig_factory: Any) -> None:
    rig = rig_factory([{"model": "fake-model", "status": 400, "message": "no such thing"}])
    result = rig.run(SCRIPTS / "fanout", "-n", "1", "-m", "fake", "hi")
    # a refused request ends the turn with the provider's message in out
    assert "no such thing" in result.stdout, result


# -- DevReview -----------------------------------------------------------------------------------


def test_devreview_ends_on_lgtm_after_exactly_two_developer_turns(rig_factory: Any) -> None:
    rig = rig_factory(
        [
            {"model": "dev-model", "text": "Implemented the parser in parse.py."},
            {"model": "rev-model", "text": "parse.py:3 has no tests.\nVERDICT: CHANGES"},
            {"model": "dev-model", "contains": "parse.py:3 has no tests", "text": "Added tests."},
            {"model": "rev-model", "contains": "Added tests.", "text": "Good.\n**VERDICT: LGTM**"},
        ]
    )
    result = rig.run(SCRIPTS / "DevReview", "-d", "dev", "-r", "rev", "Write", "a", "parser.")
    out = assert_ok(result)
    assert rig.models_asked() == ["dev-model", "rev-model", "dev-model", "rev-model"]
    assert "round 1: reviewer says changes" in result.stderr
    assert "round 2: reviewer says lgtm" in result.stderr
    assert "Added tests." in out
    assert "VERDICT: LGTM" in out
    first_review = rig.requests()[1]["body"]["messages"][-1]["content"]
    assert "Write a parser." in str(first_review)
    assert "Implemented the parser in parse.py." in str(first_review)
    assert rig.sessions() == []


def test_devreview_stops_after_the_round_limit(rig_factory: Any) -> None:
    rig = rig_factory(
        [
            {"model": "dev-model", "text": "done", "repeat": True},
            {"model": "rev-model", "text": "VERDICT: changes", "repeat": True},
        ]
    )
    result = rig.run(SCRIPTS / "DevReview", "-n", "2", "-d", "dev", "-r", "rev", "task")
    assert result.returncode == 3, result
    assert "no lgtm after 2 rounds" in result.stderr
    assert rig.models_asked() == ["dev-model", "rev-model"] * 2


def test_devreview_fails_on_a_review_without_a_verdict(rig_factory: Any) -> None:
    rig = rig_factory(
        [
            {"model": "dev-model", "text": "done"},
            {"model": "rev-model", "text": "Looks fine to me."},
        ]
    )
    result = rig.run(SCRIPTS / "DevReview", "-d", "dev", "-r", "rev", "task")
    assert result.returncode == 1, result
    assert "the reviewer gave no verdict" in result.stderr
    assert rig.sessions() == []


# -- Planning ------------------------------------------------------------------------------------


def test_planning_feeds_each_stage_the_previous_answer(rig_factory: Any, tmp_path: Path) -> None:
    rig = rig_factory(
        [
            {"model": "fake-model", "contains": "Research what", "text": "FACTS: two modules."},
            {"model": "fake-model", "contains": "FACTS: two modules.", "text": "PLAN: step 1."},
            {"model": "fake-model", "contains": "PLAN: step 1.", "text": "FINAL: step 1, edited."},
        ]
    )
    outdir = tmp_path / "plan"
    result = rig.run(SCRIPTS / "Planning", "-o", outdir, "-m", "fake", "Add", "caching.")
    assert assert_ok(result) == "FINAL: step 1, edited.\n"
    assert len(rig.requests()) == 3
    systems = [str(r["body"]["messages"][0]["content"]) for r in rig.requests()]
    assert "researcher" in systems[0]
    assert "engineer" in systems[1]
    assert "technical editor" in systems[2]
    assert (outdir / "research.md").read_text() == "FACTS: two modules.\n"
    assert rig.sessions() == []


# -- the LLM conductor's tools -------------------------------------------------------------------


def test_a_conductor_session_starts_and_drives_a_reviewer_and_is_refused_full_access(
    rig_factory: Any,
) -> None:
    def cond(contains: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        call = {"name": name, "arguments": arguments}
        return {"model": "cond-model", "contains": contains, "tool_calls": [call]}

    rig = rig_factory(
        [
            cond("Coordinate", "start_session", {"role": "developer", "sandbox": "full-access"}),
            cond("full-access is refused", "start_session", {"role": "reviewer", "name": "rev"}),
            cond("Started session", "send_prompt", {"session": "rev", "prompt": "Review it."}),
            cond("accepted", "wait_sessions", {"sessions": ["rev"]}),
            cond(": await", "read_out", {"session": "rev"}),
            {"model": "cond-model", "contains": "VERDICT: LGTM", "text": "Reviewed: LGTM."},
            {"model": "fake-model", "contains": "Review it.", "text": "Fine.\nVERDICT: LGTM"},
        ]
    )
    boss = ok(anvilctl(rig.namespace, "new", "role=conductor", "model=cond", cwd=rig.work))
    boss = boss.strip()
    ok(anvilctl(rig.namespace, "send", boss, "Coordinate a review.", cwd=rig.work))
    assert ok(anvilctl(rig.namespace, "wait", boss)) == "await\n"
    assert ok(anvilctl(rig.namespace, "out", boss)) == "Reviewed: LGTM.\n"
    requests = rig.requests()
    refusal = requests[1]["body"]["messages"][-1]
    assert refusal["role"] == "tool"
    assert "sandbox=full-access is refused" in refusal["content"]
    assert "Only the user grants full access" in refusal["content"]
    rows = {row[1]: row for row in rig.sessions()}
    reviewer = rows[f"rev.{boss}"]
    assert reviewer[3] == "reviewer"
    assert reviewer[2] == "idle"  # its out was read by the conductor
    assert len(rows) == 2  # no developer was started
