"""End to end: the workflow scripts (scripts/fanout, fanout.rc, DevReview, Planning, conductor)
through the real `anvild` process, with the fake provider server scripting every agent.

Each agent gets its own model alias (`dev`, `rev`, `fake`, ...) that maps to its own model id
on the fake server, so the script of turns says which agent answers what (`model` condition);
`contains` conditions tell prompts of one model apart. The scripts run as a user runs them:
`anvilctl` on PATH (plan9port's `9p` is not installed here; one test puts a `9p` on PATH that
records its calls and hands them to anvilctl, to check the scripts prefer it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvilctl.ninep_client import Client, dial
from anvild.ninep.constants import OREAD
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


def test_fanout_reports_a_turn_that_did_not_finish(rig_factory: Any) -> None:
    rig = rig_factory(
        [
            {
                "model": "fake-model",
                "contains": "FAILME",
                "status": 400,
                "message": "no such",
                "repeat": True,
            },
            {"model": "fake-model", "text": "fine", "repeat": True},
        ]
    )
    result = rig.run(SCRIPTS / "fanout", "-n", "1", "-m", "fake", "FAILME")
    assert result.returncode == 1, result
    assert "no such" in result.stdout  # the out is printed all the same
    said = "did not finish its turn: error HttpError: HTTP 400: "
    assert said in result.stderr, result.stderr
    assert '"message": "no such"' in result.stderr.split(said)[1]  # the outcome's whole line
    assert rig.sessions() == []
    if RC.exists():
        rc = rig.run(RC, SCRIPTS / "fanout.rc", "-n", "1", "-m", "fake", "FAILME")
        assert rc.returncode == 1, rc
        assert said in rc.stderr, rc.stderr
        assert '"message": "no such"' in rc.stderr.split(said)[1]


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


def test_devreview_takes_the_verdict_from_the_review_response_mail(rig_factory: Any) -> None:
    def mail(verdict: str) -> dict[str, Any]:
        message = {
            "to": "user",
            "type": "REVIEW_RESPONSE",
            "subject": "review",
            "body": f"verdict {verdict}",
            "metadata": {"verdict": verdict},
        }
        return {
            "model": "rev-model",
            "tool_calls": [{"name": "send_message", "arguments": message}],
        }

    rig = rig_factory(
        [
            {"model": "dev-model", "text": "first try"},
            mail("changes"),
            # the mail says changes: it wins over a contradicting verdict line
            {"model": "rev-model", "text": "Sent.\nVERDICT: LGTM"},
            {"model": "dev-model", "text": "second try"},
            mail("lgtm"),
            {"model": "rev-model", "text": "Sent my review."},
        ]
    )
    result = rig.run(SCRIPTS / "DevReview", "-d", "dev", "-r", "rev", "task")
    assert_ok(result)
    assert "round 1: reviewer says changes" in result.stderr
    assert "round 2: reviewer says lgtm" in result.stderr
    assert rig.models_asked().count("dev-model") == 2
    first_review = rig.requests()[1]["last_user_text"]
    assert "REVIEW_RESPONSE message with metadata.verdict" in first_review


def test_devreview_stops_on_a_failed_turn_with_its_message(rig_factory: Any) -> None:
    rig = rig_factory([{"model": "dev-model", "status": 401, "message": "invalid x-api-key"}])
    result = rig.run(SCRIPTS / "DevReview", "-d", "dev", "-r", "rev", "task")
    assert result.returncode == 1, result
    lines = [line for line in result.stderr.splitlines() if "did not finish" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("DevReview: session "), lines
    assert " did not finish its turn: error HttpError: HTTP 401: " in lines[0]
    assert '"message": "invalid x-api-key"' in lines[0]  # the provider's message
    assert lines[0].endswith("(read agent/" + lines[0].split()[2] + "/log)"), lines
    assert "round 1" not in result.stderr  # it stopped before any review
    assert rig.models_asked() == ["dev-model"]  # the reviewer was never asked
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


def test_planning_stops_at_a_stage_whose_turn_failed(rig_factory: Any, tmp_path: Path) -> None:
    rig = rig_factory(
        [{"model": "fake-model", "contains": "Research what", "status": 401, "message": "nope"}]
    )
    result = rig.run(SCRIPTS / "Planning", "-m", "fake", "Add", "caching.")
    assert (result.returncode, result.stdout) == (1, ""), result
    assert " did not finish its turn: error HttpError: HTTP 401: " in result.stderr
    assert '"message": "nope"' in result.stderr
    assert len(rig.requests()) == 1  # engineering and editing never ran
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


# -- scripts/conductor ---------------------------------------------------------------------------

CHAIN = """\
name: chain3
sessions:
  p:
    role: planner
steps:
  - id: a
    session: p
    prompt: "STEP-A: begin."
  - id: b
    needs: [a]
    session: p
    prompt: "STEP-B: continue from {{out.a}}"
  - id: c
    needs: [b]
    session: p
    prompt: "STEP-C: finish from {{out.b}}"
"""


def conductor(rig: Rig, workflow: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return rig.run(sys.executable, SCRIPTS / "conductor", *args, workflow)


def read_files(rig: Rig, paths: list[str]) -> list[str]:
    """Read files of the agent/ tree on one 9P connection (anvilctl's client, in process)."""
    with Client(dial(f"unix!{rig.namespace / 'agent'}")) as client:
        root = client.mount()
        texts = []
        for path in paths:
            fid = client.open(root, path, OREAD)
            parts = []
            while data := fid.read(8192):
                parts.append(data)
            fid.clunk()
            texts.append(b"".join(parts).decode())
        return texts


BEAD_FIELDS = ("title", "status", "depends_on", "assigned_to", "result", "convoy")


def beads_of(rig: Rig) -> dict[str, dict[str, str]]:
    """Every bead by title: its id, status, depends_on, assigned_to, result and convoy."""
    beads = {}
    (listing,) = read_files(rig, ["beads/list"])
    for line in listing.splitlines():
        bead_id = line.split("\t")[0]
        texts = read_files(rig, [f"beads/{bead_id}/{name}" for name in BEAD_FIELDS])
        files = dict(zip(BEAD_FIELDS, texts, strict=True))
        beads[files["title"].strip()] = {"id": bead_id, **files}
    return beads


def chain_turns() -> list[dict[str, Any]]:
    return [
        {"model": "fake-model", "contains": "STEP-A", "text": "alpha"},
        {"model": "fake-model", "contains": "STEP-B: continue from alpha", "text": "beta"},
        {"model": "fake-model", "contains": "STEP-C: finish from beta", "text": "gamma"},
    ]


def test_conductor_runs_a_chain_of_three_beads_in_order(rig_factory: Any, tmp_path: Path) -> None:
    rig = rig_factory(chain_turns())
    workflow = tmp_path / "chain.yaml"
    workflow.write_text(CHAIN)
    nothing = conductor(rig, workflow, "--status")
    assert nothing.returncode == 1
    assert "no run chain3" in nothing.stderr
    assert beads_of(rig) == {}  # --status creates nothing
    result = conductor(rig, workflow)
    assert assert_ok(result) == "=== c ===\ngamma\n"
    texts = [r["last_user_text"] for r in rig.requests()]
    assert [t.split(":")[0] for t in texts] == ["STEP-A", "STEP-B", "STEP-C"]
    beads = beads_of(rig)
    a, b, c = (beads[f"{k} (workflow chain3)"] for k in "abc")
    assert [x["status"].strip() for x in (a, b, c)] == ["completed"] * 3
    assert (a["result"], b["result"], c["result"]) == ("alpha\n", "beta\n", "gamma\n")
    assert b["depends_on"].split() == [a["id"]]
    assert c["depends_on"].split() == [b["id"]]
    assert beads["finish (workflow chain3)"]["status"].strip() == "completed"
    convoy = a["convoy"].strip()
    (convoys,) = read_files(rig, ["convoys/list"])
    assert f"{convoy}\tcompleted\t4/4" in convoys
    assert rig.sessions() == []  # killed at the end
    # a second run of the finished workflow sends nothing and prints the same
    again = conductor(rig, workflow)
    assert assert_ok(again) == "=== c ===\ngamma\n"
    assert len(rig.requests()) == 3
    status = assert_ok(conductor(rig, workflow, "--status"))
    assert status.count("\tcompleted\t") == 4


def test_conductor_after_kill_9_finishes_without_redoing_completed_beads(
    rig_factory: Any, tmp_path: Path
) -> None:
    turns = chain_turns()
    stuck = {"model": "fake-model", "contains": "STEP-B", "text": "never", "chunk_delay": 60}
    rig = rig_factory([turns[0], stuck, turns[1], turns[2]])
    workflow = tmp_path / "chain.yaml"
    workflow.write_text(CHAIN)
    first = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "conductor"), str(workflow)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=rig.env(),
        cwd=rig.work,
    )
    try:
        # block until the provider has the request of step b (the stuck turn), then kill -9
        with urllib.request.urlopen(rig.fake.url + "/_fake/wait?requests=2", timeout=60) as r:
            assert json.load(r)["requests"] == 2
        assert rig.daemon is not None
        rig.daemon.stop(signal.SIGKILL)
        rig.daemon = None
        _, err = first.communicate(timeout=SCRIPT_TIMEOUT)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 1, err
    assert "b: bead" in err
    assert "prompt sent" in err
    rig.restart()
    before = len(rig.requests())
    midway = beads_of(rig)
    assert midway["a (workflow chain3)"]["status"] == "completed\n"
    assert midway["b (workflow chain3)"]["status"] == "in_progress\n"
    assert midway["b (workflow chain3)"]["assigned_to"].strip()

    second = conductor(rig, workflow)
    assert assert_ok(second) == "=== c ===\ngamma\n"
    after = [r["last_user_text"] for r in rig.requests()[before:]]
    # b again (its turn was cut by the crash) and c; a completed before: zero requests
    assert [t.split(":")[0] for t in after] == ["STEP-B", "STEP-C"]
    assert "a: bead" in second.stderr
    assert "already completed" in second.stderr
    final = beads_of(rig)
    assert {final[f"{k} (workflow chain3)"]["status"] for k in "abc"} == {"completed\n"}
    assert final["b (workflow chain3)"]["result"] == "beta\n"


REVIEW_LOOP = """\
name: loop
vars:
  task: Write the parser
sessions:
  dev: {role: developer, model: dev}
  reviewers: {role: reviewer, model: rev, count: 2}
steps:
  - id: implement
    session: dev
    prompt: "IMPLEMENT: {{var.task}}"
  - id: cycle
    needs: [implement]
    loop:
      max_rounds: MAX
      until: {step: review, verdict: lgtm}
      steps:
        - id: review
          session: reviewers
          prompt: "REVIEW round {{round}} of: {{last.dev}}"
        - id: fix
          needs: [review]
          session: dev
          prompt: "FIX: {{out.review}}"
  - id: summary
    needs: [cycle]
    session: dev
    prompt: "SUMMARY please"
"""


def test_conductor_fans_out_to_reviewers_and_loops_until_every_verdict_is_lgtm(
    rig_factory: Any, tmp_path: Path
) -> None:
    rig = rig_factory(
        [
            {"model": "dev-model", "contains": "IMPLEMENT: Write the parser", "text": "v1"},
            {"model": "rev-model", "contains": "round 1 of: v1", "text": "Bad.\nVERDICT: CHANGES"},
            {"model": "rev-model", "contains": "round 1 of: v1", "text": "OK.\nVERDICT: LGTM"},
            {"model": "dev-model", "contains": "FIX: --- reviewers 1 ---", "text": "v2"},
            {"model": "rev-model", "contains": "round 2 of: v2", "text": "VERDICT: LGTM"},
            {"model": "rev-model", "contains": "round 2 of: v2", "text": "VERDICT: LGTM"},
            {"model": "dev-model", "contains": "SUMMARY", "text": "Parser written."},
        ]
    )
    workflow = tmp_path / "loop.yaml"
    workflow.write_text(REVIEW_LOOP.replace("MAX", "3"))
    result = conductor(rig, workflow, "--set", "task=Write the parser")
    assert assert_ok(result) == "=== summary ===\nParser written.\n"
    models = rig.models_asked()
    assert models.count("dev-model") == 3  # implement, one fix, summary
    assert models.count("rev-model") == 4  # two reviewers, two rounds
    assert "cycle: done in round 2" in result.stderr
    fix = next(r for r in rig.requests() if r["last_user_text"].startswith("FIX"))
    assert "Bad." in fix["last_user_text"]
    assert "OK." in fix["last_user_text"]
    titles = set(beads_of(rig))
    assert {
        "implement (workflow loop)",
        "cycle.1.review/1 (workflow loop)",
        "cycle.1.review/2 (workflow loop)",
        "cycle.1.fix (workflow loop)",
        "cycle.2.review/1 (workflow loop)",
        "cycle.2.review/2 (workflow loop)",
        "summary (workflow loop)",
        "finish (workflow loop)",
    } == titles  # no fix in round 2: the loop ended at the review


def test_conductor_exits_3_when_a_loop_runs_out_of_rounds(rig_factory: Any, tmp_path: Path) -> None:
    rig = rig_factory(
        [
            {"model": "dev-model", "text": "v", "repeat": True},
            {"model": "rev-model", "text": "VERDICT: CHANGES", "repeat": True},
        ]
    )
    workflow = tmp_path / "loop.yaml"
    workflow.write_text(REVIEW_LOOP.replace("MAX", "1"))
    result = conductor(rig, workflow)
    assert result.returncode == 3, result
    assert "cycle: not done after 1 rounds" in result.stderr
    assert rig.models_asked().count("dev-model") == 2  # implement and the round's fix
    assert "summary (workflow loop)" not in beads_of(rig)


def test_conductor_fails_a_bead_whose_turn_did_not_finish_and_a_rerun_redoes_it(
    rig_factory: Any, tmp_path: Path
) -> None:
    turns = chain_turns()
    broken = {"model": "fake-model", "contains": "STEP-B", "status": 400, "message": "boom"}
    rig = rig_factory([turns[0], broken, turns[1], turns[2]])
    workflow = tmp_path / "chain.yaml"
    workflow.write_text(CHAIN)
    first = conductor(rig, workflow)
    assert first.returncode == 1, first
    assert "b: session" in first.stderr
    assert "did not finish its turn: error HttpError: HTTP 400: " in first.stderr
    assert '"message": "boom"' in first.stderr
    b = beads_of(rig)["b (workflow chain3)"]
    assert b["status"] == "failed\n"
    assert len(rig.sessions()) == 1  # kept after a failure
    second = conductor(rig, workflow)
    assert assert_ok(second) == "=== c ===\ngamma\n"
    assert "released (failed before)" in second.stderr
    texts = [r["last_user_text"].split(":")[0] for r in rig.requests()]
    assert texts == ["STEP-A", "STEP-B", "STEP-B", "STEP-C"]  # a was not asked again
    assert rig.sessions() == []
