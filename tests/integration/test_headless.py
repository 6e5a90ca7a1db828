"""End to end: `anvilctl -p` as a real process, against a real daemon (or in process), with the
fake provider server as the model.

Every exit status of the README's table is produced here by a real `anvilctl -p` run: 0 done,
1 error, 2 max_steps, 3 max_tokens, 4 refused, 5 budget_exceeded, 6 protocol_stopped, 130
cancelled. The scripted turns are chosen by a word of the prompt (`contains`), so one fake
server serves every case of a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvild.daemon.datadir import DataDirLock, prepare_data_dir
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from anvild.store import SessionStore
from tests.integration.test_daemon_cli import STARTUP_TIMEOUT, Anvild, isolated_env
from tests.integration.test_sessions_e2e import TURN_TIMEOUT, FakeServer, anvilctl, user_config

TIMEOUT = TURN_TIMEOUT + STARTUP_TIMEOUT

TURNS: list[dict[str, Any]] = [
    {"contains": "say-pong", "text": "pong", "repeat": True},
    {"contains": "colour-me", "text": "\x1b[31mred\x1b[0m", "repeat": True},
    {"contains": "cut-me", "text": "half an ans", "finish": "max_tokens", "repeat": True},
    {"contains": "refuse-me", "text": "", "finish": "refusal", "repeat": True},
    {"contains": "pause-me", "text": "paused", "finish": "pause_turn", "repeat": True},
    # A model that keeps looking for files: max_steps ends it; its usage spends a budget. (The
    # glob's result, "No files match 'loop-*' ...", is the next request's last user text.)
    {
        "contains": "loop-",
        "tool_calls": [{"name": "glob", "arguments": {"pattern": "loop-*"}}],
        "usage": {"input": 100, "output": 20, "cache_read": 0},
        "repeat": True,
    },
    {"contains": "slow-", "text": "s l o w l y", "chunk_delay": 5.0, "repeat": True},
    # Usage as an openai-chat server without a prompt cache reports it: no cached_tokens.
    {
        "contains": "priced-",
        "text": "counted",
        "usage": {"input": 1000, "output": 500},
        "repeat": True,
    },
    # A call that needs approval; the second request carries the refusal as the tool result.
    {"contains": "headless session", "text": "understood", "repeat": True},
    {
        "contains": "touch-it",
        "tool_calls": [{"name": "bash", "arguments": {"command": "touch made-by-tool"}}],
        "repeat": True,
    },
    # A command that says it started (on a FIFO the test reads), then runs until killed.
    {
        "contains": "run-forever",
        "tool_calls": [
            {
                "name": "bash",
                "arguments": {"command": "echo started > ready.fifo; sleep 127.5"},
            }
        ],
        "repeat": True,
    },
]
# (any other prompt gets an HTTP 400 from the fake: the turn ends in error)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, TURNS)
    yield server
    server.stop()


def write_config(tmp_path: Path, url: str, extra: str = "") -> Path:
    config = user_config(tmp_path, url)
    config.write_text(config.read_text() + extra)
    return config


@pytest.fixture
def daemon(namespace: Path, tmp_path: Path, fake: FakeServer) -> Iterator[Anvild]:
    config = write_config(tmp_path, fake.url, '\n[permissions]\nmax_mode = "bypass"\n')
    d = Anvild(namespace, "--config", str(config))
    d.wait_serving()
    yield d
    code, log = d.stop()
    assert code == 0, log


def env_for(namespace: Path) -> dict[str, str]:
    return {**isolated_env(namespace.parent), "NAMESPACE": str(namespace)}


def headless(
    namespace: Path,
    *args: str,
    stdin: str | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**env_for(namespace), **(env or {})},
        cwd=cwd,
        check=False,
    )


def turn_ends(data_dir: Path) -> list[tuple[str, str]]:
    """(outcome, detail) of every recorded turn of every session in the data dir."""
    store = SessionStore(data_dir / "sessions")
    ends = []
    for session_id in store.ids():
        journal = store.open(session_id)
        try:
            state = journal.state
            assert state.last_turn is not None
            ends.append((state.last_turn.outcome, state.last_turn.detail))
        finally:
            journal.close()
    return ends


def read_fifo(path: Path, timeout: float) -> bytes:
    """The first line written to the FIFO, waiting at most `timeout` for it. (Opened read-write,
    so that no writer yet is not end-of-file: Linux fifo(7).)"""
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        data = b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not data.endswith(b"\n") and sel.select(timeout):
                data += os.read(fd, 4096)
        return data
    finally:
        os.close(fd)


def processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(int(entry.name))
    return found


# -- exit statuses -----------------------------------------------------------------------------


def test_every_exit_status_row(daemon: Anvild, namespace: Path, workdir: Path) -> None:
    rows = [
        (["-p", "say-pong please"], 0),
        (["-p", "nothing scripted answers this"], 1),
        (["-p", "loop-forever", "--max-steps", "2"], 2),
        (["-p", "cut-me short"], 3),
        (["-p", "refuse-me"], 4),
        (["-p", "loop-spend", "--max-budget-tokens", "50"], 5),
        (["-p", "pause-me"], 6),
    ]
    for args, status in rows:
        result = headless(namespace, *args, "-C", str(workdir))
        assert result.returncode == status, (args, result.stdout, result.stderr)
    ok = headless(namespace, "-p", "say-pong", "-C", str(workdir))
    assert (ok.stdout, ok.stderr) == ("pong\n", "")
    coloured = headless(namespace, "-p", "colour-me", "-C", str(workdir))
    assert (coloured.returncode, coloured.stdout) == (0, "red\n")
    cut = headless(namespace, "-p", "cut-me", "-C", str(workdir))
    assert cut.stdout == "half an ans\n"
    assert cut.stderr.startswith("anvilctl -p: turn ended: max_tokens")
    budget = headless(
        namespace, "-p", "loop-spend", "--max-budget-tokens", "50", "-C", str(workdir)
    )
    assert "120 tokens used of a 50-token budget" in budget.stderr


def test_ctrl_c_cancels_the_turn_and_exits_130(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "anvilctl", "-p", "slow-answer", "--output-format", "stream-json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=env_for(namespace),
    )
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["subtype"] == "init"
    first = json.loads(proc.stdout.readline())  # the turn runs (its first event came)
    assert first["type"] == "step_started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, err
    end, result = (json.loads(line) for line in out.splitlines()[-2:])
    assert (end["type"], end["outcome"]) == ("turn_finished", "cancelled")
    assert (result["type"], result["outcome"], result["exit_code"]) == ("result", "cancelled", 130)
    assert [outcome for outcome, _ in turn_ends(daemon.data_dir)] == ["cancelled"]


# -- output formats and input ------------------------------------------------------------------


def test_stdin_is_appended_to_the_prompt(
    daemon: Anvild, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    result = headless(
        namespace, "-p", "say-pong for this diff:", stdin="+added line\n", cwd=workdir
    )
    assert (result.returncode, result.stdout) == (0, "pong\n")
    sent = fake.requests()[-1]["last_user_text"]
    assert sent.startswith("say-pong for this diff:\n\n+added line")


def test_json_is_one_object(daemon: Anvild, namespace: Path, workdir: Path) -> None:
    result = headless(namespace, "-p", "say-pong", "--output-format", "json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert obj["type"] == "result"
    assert (obj["outcome"], obj["is_error"], obj["exit_code"]) == ("done", False, 0)
    assert obj["result"] == "pong"
    assert obj["session_id"].isalnum()
    assert (obj["model"], obj["cwd"], obj["steps"]) == ("fake", str(workdir), 1)
    assert obj["usage"]["input"] > 0
    assert obj["usage"]["output"] > 0
    assert obj["total_cost_usd"] is None  # this config has no pricing: unknown, never 0
    assert isinstance(obj["duration_ms"], int)
    assert obj["duration_ms"] >= 0
    assert "\x1b" not in result.stdout


def test_stream_json_names_the_session_first_and_ends_with_the_result(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    result = headless(
        namespace, "-p", "loop-x", "--max-steps", "2", "--output-format", "stream-json", cwd=workdir
    )
    assert result.returncode == 2, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    init, *events, last = events
    assert (init["type"], init["subtype"], init["resumed"]) == ("system", "init", False)
    assert init["session_id"].isalnum()
    assert (init["model"], init["cwd"]) == ("fake", str(workdir))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "step_started"
    assert kinds.count("tool_call_started") == 2
    assert kinds.count("tool_call_finished") == 2
    assert kinds[-1] == "turn_finished"
    assert kinds.count("turn_finished") == 1
    assert (events[-1]["outcome"], events[-1]["steps"]) == ("max_steps", 2)
    assert (last["type"], last["session_id"], last["exit_code"]) == (
        "result",
        init["session_id"],
        2,
    )
    assert last["usage"] == events[-1]["usage"]
    assert "\x1b" not in result.stdout


def test_over_tcp_with_the_token(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    d = Anvild(
        namespace, "--listen", "tcp!127.0.0.1!0", "--config", str(write_config(tmp_path, fake.url))
    )
    line = d.wait_serving()
    try:
        address = re.search(r"tcp!127\.0\.0\.1!\d+", line)
        assert address is not None, line
        token = (namespace / "agent.token").read_text().strip()
        elsewhere = tmp_path / "no-daemon-here"  # the namespace socket is not used with -a
        elsewhere.mkdir(mode=0o700)
        base = [sys.executable, "-m", "anvilctl", "-a", address.group()]
        env = {**env_for(namespace), "NAMESPACE": str(elsewhere)}

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*base, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                env=env,
                cwd=workdir,
                check=False,
            )

        ok = run("-A", token, "-p", "say-pong")
        refused = run("-p", "say-pong")  # no token: refused, and no fallback in process
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert (ok.returncode, ok.stdout) == (0, "pong\n"), ok.stderr
    assert refused.returncode == 1
    assert refused.stderr.startswith("anvilctl -p: ")
    assert not (tmp_path / "xdg-data" / "anvil" / "sessions").exists()


def test_stdin_is_the_prompt_when_p_has_none(
    daemon: Anvild, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    result = headless(namespace, "-p", stdin="say-pong from stdin\n", cwd=workdir)
    assert (result.returncode, result.stdout) == (0, "pong\n"), result.stderr
    assert fake.requests()[-1]["last_user_text"].startswith("say-pong from stdin")


# -- cost, and going on in a live session ------------------------------------------------------

PRICED = "\n[models.fake.pricing]\ninput = 1.0\noutput = 2.0\n"  # USD per million tokens


def test_json_has_the_turns_cost_when_the_provider_reports_no_cache(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    """The fake answers as an openai-chat server without a prompt cache does: no
    cached_tokens. That no longer makes the cost unknown: 1000 input and 500 output tokens at
    $1 and $2 per million are $0.002."""
    d = Anvild(namespace, "--config", str(write_config(tmp_path, fake.url, PRICED)))
    d.wait_serving()
    try:
        result = headless(namespace, "-p", "priced-one", "--output-format", "json", cwd=workdir)
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert result.returncode == 0, result.stderr
    obj = json.loads(result.stdout)
    assert obj["usage"]["cache_read"] is None  # not reported
    assert (obj["usage"]["input"], obj["usage"]["output"]) == (1000, 500)
    assert obj["total_cost_usd"] == pytest.approx(0.002)
    assert obj["session_id"].isalnum()
    assert isinstance(obj["duration_ms"], int)


def test_continue_and_resume_go_on_in_a_live_session(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    d = Anvild(namespace, "--config", str(write_config(tmp_path, fake.url, PRICED)))
    d.wait_serving()
    try:
        made = anvilctl(namespace, "new", "alias=dev", cwd=workdir)
        assert made.returncode == 0, made.stderr
        session_id = made.stdout.strip()
        elsewhere = tmp_path  # --resume works from any directory
        first = headless(
            namespace, "-p", "--resume", "dev", "priced-first", "--output-format", "json",
            cwd=elsewhere,
        )  # fmt: skip
        second = headless(
            namespace, "-p", "--continue", "priced-second", "--output-format", "stream-json",
            cwd=workdir,
        )  # fmt: skip
        request = fake.requests()[-1]
        states = session_states(namespace)
        nowhere = headless(namespace, "-p", "-c", "say-pong", cwd=elsewhere)
        typo = headless(namespace, "-p", "-r", "deb", "say-pong", cwd=workdir)
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert first.returncode == 0, first.stderr
    obj = json.loads(first.stdout)
    assert (obj["session_id"], obj["result"], obj["cwd"]) == (session_id, "counted", str(workdir))
    assert obj["total_cost_usd"] == pytest.approx(0.002)

    assert second.returncode == 0, second.stderr
    init, *events, result = (json.loads(line) for line in second.stdout.splitlines())
    assert init == {
        "type": "system",
        "subtype": "init",
        "session_id": session_id,
        "model": "fake",
        "cwd": str(workdir),
        "resumed": True,
    }
    # Only this turn's events: the first turn's, in the backlog of `events`, are skipped.
    assert events[0]["type"] == "step_started"
    assert [e["type"] for e in events].count("turn_finished") == 1
    assert result["session_id"] == session_id
    assert result["total_cost_usd"] == pytest.approx(0.002)  # this turn's, of the session's 0.004
    # The model saw the earlier turn: its prompt and its answer are in the second request.
    sent = json.dumps(request["body"]["messages"])
    assert "priced-first" in sent
    assert "counted" in sent
    assert request["last_user_text"] == "priced-second"
    assert states[session_id] in ("idle", "await")  # the session stays for the next prompt

    assert nowhere.returncode == 1
    assert nowhere.stderr.startswith(
        f"anvilctl -p: ctl: from=latest: no session (live or exited) has the cwd {elsewhere}"
    )
    assert typo.returncode == 1
    assert "from=deb: no session has that id or alias; did you mean 'dev'?" in typo.stderr


def test_continue_and_resume_go_on_from_an_exited_p_session_in_a_new_one(
    namespace: Path, daemon: Anvild, fake: FakeServer, workdir: Path
) -> None:
    json_out = ("--output-format", "json")
    first = headless(namespace, "-p", "say-pong one", *json_out, cwd=workdir)
    assert first.returncode == 0, first.stderr
    old_id = json.loads(first.stdout)["session_id"]
    second = headless(
        namespace, "-p", "--continue", "say-pong two", "--output-format", "stream-json",
        cwd=workdir,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    sent = json.dumps(fake.requests()[-1]["body"]["messages"])
    assert "say-pong one" in sent
    assert "pong" in sent.replace("say-pong", "")  # the first answer
    init, *_, result = (json.loads(line) for line in second.stdout.splitlines())
    new_id = result["session_id"]
    assert new_id != old_id
    assert (init["session_id"], init["resumed"], init["cwd"]) == (new_id, True, str(workdir))
    assert (result["result"], result["is_error"]) == ("pong", False)

    # --resume names the first (exited) session: its conversation, not the second's.
    third = headless(namespace, "-p", "--resume", old_id, "say-pong three", *json_out, cwd=workdir)
    assert third.returncode == 0, third.stderr
    obj = json.loads(third.stdout)
    assert obj["session_id"] not in (old_id, new_id)
    assert obj["cwd"] == str(workdir)
    sent = json.dumps(fake.requests()[-1]["body"]["messages"])
    assert "say-pong one" in sent
    assert "say-pong two" not in sent
    # --continue goes on from the latest: the third, which had the first's conversation.
    fourth = headless(namespace, "-p", "-c", "say-pong four", *json_out, cwd=workdir)
    assert fourth.returncode == 0, fourth.stderr
    sent = json.dumps(fake.requests()[-1]["body"]["messages"])
    assert "say-pong three" in sent
    assert "say-pong two" not in sent
    assert "-p: no session" not in fourth.stderr


def test_without_a_daemon_continue_goes_on_in_a_restored_session(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    in_process_config(tmp_path, fake.url)
    d = Anvild(namespace, platform_data_dir=True)  # the data dir the in-process path uses
    d.wait_serving()
    try:
        made = anvilctl(namespace, "new", cwd=workdir)
        assert made.returncode == 0, made.stderr
        session_id = made.stdout.strip()
        first = headless(namespace, "-p", "-c", "say-pong first", cwd=workdir)
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert (first.returncode, first.stdout) == (0, "pong\n"), first.stderr
    second = headless(
        namespace, "-p", "-c", "say-pong second", "--output-format", "json", cwd=workdir
    )
    assert second.returncode == 0, second.stderr
    obj = json.loads(second.stdout)
    assert (obj["session_id"], obj["result"]) == (session_id, "pong")
    sent = json.dumps(fake.requests()[-1]["body"]["messages"])
    assert "say-pong first" in sent


def test_a_key_only_anvilctl_has_is_reported_as_missing_from_anvilds_environment(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    keyed = (
        f'\n[providers.keyed]\nkind = "openai-chat"\nbase_url = "{fake.url}/v1"\n'
        'api_key_env = "ANVIL_TEST_KEY"\n'
    )
    d = Anvild(namespace, "--config", str(write_config(tmp_path, fake.url, keyed)))
    d.wait_serving()
    try:
        result = headless(
            namespace, "-p", "-m", "keyed:some-model", "say-pong", cwd=workdir,
            env={"ANVIL_TEST_KEY": "sk-only-in-anvilctls-environment"},
        )  # fmt: skip
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert result.returncode == 1
    assert (
        "ANVIL_TEST_KEY is not set in anvild's environment (needed by provider 'keyed')"
        in result.stderr
    )
    assert "restart it with the key (`ANVIL_TEST_KEY=... anvild`)" in result.stderr
    assert "sk-only" not in result.stderr


# -- permissions -------------------------------------------------------------------------------


def test_a_call_needing_approval_is_refused_saying_what_would_allow_it(
    daemon: Anvild, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    result = headless(namespace, "-p", "touch-it", "--output-format", "json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "understood"
    assert not (workdir / "made-by-tool").exists()
    refusal = fake.requests()[-1]["last_user_text"]
    assert "nobody can approve it in a headless session" in refusal
    assert "--permission-mode bypass" in refusal


def test_a_mode_above_the_ceiling_is_refused(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    d = Anvild(namespace, "--config", str(write_config(tmp_path, fake.url)))
    d.wait_serving()
    try:
        result = headless(namespace, "-p", "say-pong", "--permission-mode", "bypass", cwd=workdir)
        accepted = headless(
            namespace, "-p", "say-pong", "--permission-mode", "accept-edits", cwd=workdir
        )
    finally:
        code, log = d.stop()
    assert code == 0, log
    assert result.returncode == 1
    assert "permission=bypass is wider than this daemon allows: its ceiling is accept-edits" in (
        result.stderr
    )
    assert "permissions.max_mode" in result.stderr
    assert (accepted.returncode, accepted.stdout) == (0, "pong\n")


# -- a closed stdout ---------------------------------------------------------------------------


@pytest.fixture
def sandbox_workdir() -> Iterator[Path]:
    """A workspace the sandbox's command can use: as root the command runs as uid 65534, which
    cannot enter pytest's 0700 tmp dir (see tests/sandbox/conftest.py), so it lives under
    /var/tmp and belongs to that uid."""
    top = Path(tempfile.mkdtemp(prefix="anvil-headless-", dir="/var/tmp"))
    top.chmod(0o755)
    work = top / "work"
    work.mkdir()
    os.mkfifo(work / "ready.fifo")
    if os.geteuid() == 0:
        for path in (work, work / "ready.fifo"):
            os.chown(path, DEFAULT_UID, DEFAULT_GID)
    yield work
    shutil.rmtree(top)


def test_a_closed_stdout_cancels_the_turn_and_reaps_its_tools(
    daemon: Anvild, namespace: Path, sandbox_workdir: Path
) -> None:
    workdir = sandbox_workdir
    fifo = workdir / "ready.fifo"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "anvilctl", "-p", "run-forever"),
            *("--permission-mode", "bypass", "--output-format", "stream-json"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=env_for(namespace),
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    try:
        assert json.loads(proc.stdout.readline())["subtype"] == "init"
        assert json.loads(proc.stdout.readline())["type"] == "step_started"
        assert read_fifo(fifo, TIMEOUT) == b"started\n", "the tool's command did not start"
        assert processes_with("127.5"), "the tool's command is not running"
        proc.stdout.close()  # the reader goes away, as `| head -1` does
        status = proc.wait(timeout=TIMEOUT)
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert status == 130, err
    assert "Traceback" not in err
    assert [outcome for outcome, _ in turn_ends(daemon.data_dir)] == ["cancelled"]
    assert processes_with("127.5") == []


# -- in process --------------------------------------------------------------------------------


def in_process_config(home: Path, url: str) -> Path:
    config_dir = home / "xdg-config" / "anvil"
    config_dir.mkdir(parents=True)
    return write_config(config_dir, url)


def test_without_a_daemon_the_turn_runs_in_process(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    in_process_config(tmp_path, fake.url)
    namespace.mkdir(mode=0o700)
    result = headless(namespace, "-p", "say-pong", "--output-format", "json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "pong"
    assert result.stderr == ""
    data_dir = tmp_path / "xdg-data" / "anvil"
    assert turn_ends(data_dir) == [("done", "")]  # on the user's data dir, records kept
    assert not (data_dir / "anvild.lock").exists()

    maxed = headless(namespace, "-p", "loop-y", "--max-steps", "1", cwd=workdir)
    assert maxed.returncode == 2, maxed.stderr

    proc = subprocess.Popen(
        [sys.executable, "-m", "anvilctl", "-p", "slow-x", "--output-format", "stream-json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=env_for(namespace),
    )
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["subtype"] == "init"
    assert json.loads(proc.stdout.readline())["type"] == "step_started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, err
    assert json.loads(out.splitlines()[-1])["outcome"] == "cancelled"
    assert sorted(outcome for outcome, _ in turn_ends(data_dir)) == [
        "cancelled",
        "done",
        "max_steps",
    ]


# `anvilctl -p` whose standard output sends it a SIGINT the moment its first line (`init`) is
# written: a person pressing Ctrl-C as soon as anything shows, before the process yields.
INTERRUPT_ON_STEP = """
import io, signal, sys
from anvilctl.headless import main

class Stdout(io.FileIO):
    sent = False

    def write(self, data):
        written = super().write(data)
        if not self.sent and b'"init"' in bytes(data):
            self.sent = True
            signal.raise_signal(signal.SIGINT)
        return written

sys.exit(main(sys.argv[1:], stdout=Stdout(1, "w", closefd=False)))
"""


def test_in_process_a_ctrl_c_as_soon_as_the_session_shows_cancels_its_turn(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    in_process_config(tmp_path, fake.url)
    namespace.mkdir(mode=0o700)
    result = subprocess.run(
        [sys.executable, "-c", INTERRUPT_ON_STEP, "-p", "slow-x", "--output-format", "stream-json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=workdir,
        env=env_for(namespace),
        timeout=TIMEOUT,
    )
    assert result.returncode == 130, result.stderr.decode()
    assert b"Traceback" not in result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["outcome"] == "cancelled"
    assert turn_ends(tmp_path / "xdg-data" / "anvil") == [("cancelled", "the turn was cancelled")]


@contextlib.contextmanager
def locked_elsewhere(tmp_path: Path) -> Iterator[Path]:
    """The data dir `-p` would use, locked by another daemon (its namespace elsewhere) while
    the block runs."""
    data_dir = prepare_data_dir(tmp_path / "xdg-data" / "anvil")
    lock = DataDirLock(data_dir)
    lock.acquire(tmp_path / "elsewhere" / "agent")
    try:
        yield data_dir
    finally:
        lock.release()


def test_a_locked_data_dir_runs_in_a_temporary_one(
    namespace: Path, tmp_path: Path, fake: FakeServer, workdir: Path
) -> None:
    in_process_config(tmp_path, fake.url)
    with locked_elsewhere(tmp_path) as data_dir:
        result = headless(namespace, "-p", "say-pong", cwd=workdir)
    assert (result.returncode, result.stdout) == (0, "pong\n"), result.stderr
    assert "running in process on the temporary data dir" in result.stderr
    assert "records are not kept" in result.stderr
    assert not (data_dir / "sessions").exists() or turn_ends(data_dir) == []


# -- stopped while the session is being created -----------------------------------------------


class HoldingProxy:
    """A Unix socket in front of the daemon's: the first connection (the one that writes `new`)
    and any after the second are passed through both ways; the second (the events connection
    `anvilctl -p` dials after `new`) is accepted and held unanswered, so the command sits
    between `new` and its prompt for as long as the test likes (`release` passes it through,
    `break_held` breaks it). `held` is set once that second connection is waiting."""

    def __init__(self, listen: Path, target: Path) -> None:
        self.listen = listen
        self.target = target
        self.held = threading.Event()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(listen))
        self._server.listen(4)
        self._sockets: list[socket.socket] = [self._server]
        self._held: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"unix!{self.listen}"

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            self._forward(self._server.accept()[0])
            self._held, _ = self._server.accept()
            self._sockets.append(self._held)
            self.held.set()
            while True:  # any later connection (the kill's) is passed through
                self._forward(self._server.accept()[0])

    def _forward(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(str(self.target))
        self._sockets += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def release(self) -> None:
        """Pass the held connection through from now on."""
        assert self._held is not None
        self._forward(self._held)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)

    def break_held(self) -> None:
        """Close the held connection (the daemon went away, as its client sees it)."""
        assert self._held is not None
        self._held.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._thread.join(timeout=5)


def session_states(namespace: Path) -> dict[str, str]:
    """Every session of the daemon's `agent/list`: id -> state."""
    listing = anvilctl(namespace, "read", "agent/list")
    assert listing.returncode == 0, listing.stderr
    rows = [line.split("\t") for line in listing.stdout.splitlines() if line]
    return {row[0]: row[2] for row in rows}


@pytest.mark.parametrize(
    ("stop", "status"), [("ctrl-c", 130), ("closed-stdout", 130), ("broken-connection", 1)]
)
def test_stopped_between_new_and_the_prompt_leaves_no_idle_session(
    daemon: Anvild,
    namespace: Path,
    workdir: Path,
    fake: FakeServer,
    stop: str,
    status: int,
) -> None:
    """Ctrl-C, a closed stdout or a failure after `new` and before the prompt: the session it
    created is killed (never left idle), and the prompt never reaches the model."""
    proxy = HoldingProxy(namespace.parent / "proxy.sock", namespace / "agent")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "anvilctl", "-a", proxy.address, "-p", "say-pong"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=env_for(namespace),
        )
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            assert proxy.held.wait(TIMEOUT), "anvilctl -p never dialled its events connection"
            assert list(session_states(namespace).values()) == ["idle"]  # created, no prompt
            if stop == "ctrl-c":
                proc.send_signal(signal.SIGINT)
            elif stop == "closed-stdout":
                proc.stdout.close()  # the reader goes away
                proxy.release()  # and the command goes on towards its prompt
            else:
                proxy.break_held()  # the events connection breaks
            code = proc.wait(timeout=TIMEOUT)
            err = proc.stderr.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
    finally:
        proxy.close()
    assert code == status, err
    assert "Traceback" not in err
    assert "idle" not in session_states(namespace).values()
    assert not [r for r in fake.requests() if "say-pong" in r["last_user_text"]]
