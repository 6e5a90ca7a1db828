"""The eval runner with the real embedded model: `anvilctl eval run --models local` runs one
shipped task for one trial against a daemon on llama-server (SmolLM2-135M) and writes one
complete, honest record. Whether the 135M model passes is its business (so far it fails the grader,
ending done or at its 256-token output limit); the record must still have every field the README
lists, a graded `pass` (true or false, never an infrastructure failure), real steps and tokens,
and the cost marked unknown (the local model has no pricing). It runs with `make
test-llama-long` (about a minute of llama-server work); `make test` checks the runner with
scripted models (tests/integration/test_eval_e2e.py). Skipped with the command to run when
`make llama-server` has not been run; with ANVIL_REQUIRE_LLAMA=1 it fails instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anvild.daemon.llama import LOCAL
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_eval_e2e import TASKS
from tests.integration.test_headless import env_for
from tests.support.llama import built_llama, llama_env

TASK = "fix-failing-test"
EVAL_TIMEOUT = 900.0  # the task's own 300 s, model loading and grading, on two busy cores
ANVILCTL_EVAL = (sys.executable, "-m", "anvilctl", "eval", "run")
FIELDS = {
    "task",
    "model",
    "trial",
    "pass",
    "outcome",
    "turn_outcome",
    "infra_error",
    "grader",
    "steps",
    "tokens",
    "cost_usd",
    "cost_known",
    "duration_s",
    "session_id",
    "anvil_git_sha",
    "task_digest",
    "grader_digest",
    "config_digest",
}


@pytest.mark.slow
@pytest.mark.usefixtures("one_llama_at_a_time")
@pytest.mark.skipif(
    os.environ.get("ANVIL_LLAMA_LONG") != "1",
    reason="about a minute of llama-server work: `make test-llama-long`",
)
def test_one_eval_trial_on_the_embedded_model(namespace: Path, tmp_path: Path) -> None:
    paths = built_llama()
    # The default models (the embedded one is `local`); eval trials run in bypass mode.
    config = tmp_path / "config.toml"
    config.write_text('[permissions]\nmax_mode = "bypass"\n')
    daemon = Anvild(
        namespace,
        "--config",
        str(config),
        env=llama_env(paths),
    )
    out = tmp_path / "results.jsonl"
    try:
        daemon.wait_serving()
        done = subprocess.run(
            [
                *ANVILCTL_EVAL,
                "--tasks-dir",
                str(TASKS),
                "--models",
                LOCAL,
                "--trials",
                "1",
                "--tasks",
                TASK,
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=EVAL_TIMEOUT,
            env=env_for(namespace),
            cwd=tmp_path,
            check=False,
        )
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = out.read_text().splitlines()
    assert len(lines) == 1, lines
    record = json.loads(lines[0])
    print("\neval record:", json.dumps(record, indent=1))
    assert record.keys() >= FIELDS, FIELDS - record.keys()
    assert (record["task"], record["model"], record["trial"]) == (TASK, LOCAL, 1)
    # Graded, not an infrastructure failure: pass or fail is the model's business.
    assert record["outcome"] in ("pass", "fail"), record
    assert record["infra_error"] is None, record
    assert isinstance(record["pass"], bool)
    assert record["pass"] == (record["outcome"] == "pass")
    assert record["turn_outcome"] in ("done", "max_tokens"), record
    assert isinstance(record["grader"], str)
    assert record["grader"].startswith(("exit ", "grader timed out")), record["grader"]
    assert isinstance(record["steps"], int)
    assert record["steps"] >= 1
    tokens = record["tokens"]
    assert set(tokens) == {"input", "output", "cache_read", "cache_write"}, tokens
    assert tokens["input"] > 0, tokens
    assert tokens["output"] > 0, tokens
    # No pricing for the local model: the cost is unknown, not zero.
    assert record["cost_known"] is False, record
    assert record["cost_usd"] is None, record
    assert record["duration_s"] > 0
    assert record["session_id"]
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", record["anvil_git_sha"]), record
    for digest in ("task_digest", "grader_digest", "config_digest"):
        assert re.fullmatch(r"[0-9a-f]{16}", record[digest]), (digest, record[digest])
    passes = int(record["pass"])
    assert f"{LOCAL}: {passes}/1 graded trials passed, 0 infra errors" in done.stderr, done.stderr
