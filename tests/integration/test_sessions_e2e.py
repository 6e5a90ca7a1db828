"""End to end: sessions through the real `anvild` process, driven by `anvilctl`.

Each test runs the fake provider server as a subprocess (`python -m tests.support.fake_provider`)
and a real daemon whose user config (`--config`) points a provider at it, on a temporary
namespace and data directory; then it talks to the daemon as a user would, with `anvilctl`.
The last test uses the real embedded llama-server instead (skipped when it is not built, unless
ANVIL_REQUIRE_LLAMA=1).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anvilctl.headless import EXIT_CODES
from anvild.store import MessageAppended, SessionStore, StateChanged, TurnEnded
from tests.integration.test_daemon_cli import PROVIDER_KEYS, STARTUP_TIMEOUT, Anvild, isolated_env
from tests.support.llama import built_llama, llama_env

TURN_TIMEOUT = 30.0
LLAMA_TIMEOUT = 240.0  # loading the model and answering on two slow cores


class FakeServer:
    """The fake provider as a subprocess; `add` scripts more turns over HTTP."""

    def __init__(self, tmp_path: Path, turns: list[dict[str, Any]]) -> None:
        script = tmp_path / "turns.json"
        script.write_text(json.dumps({"turns": turns}))
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.support.fake_provider"),
                *("--port", "0", "--script", str(script)),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.url

    def requests(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url + "/_fake/requests", timeout=5) as reply:
            body: list[dict[str, Any]] = json.load(reply)
            return body

    def release(self) -> None:
        """Let one stream that a `hold` turn keeps (or will keep) waiting go on."""
        request = urllib.request.Request(self.url + "/_fake/release", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=5) as reply:
            reply.read()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def user_config(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        'default_model = "fake"\n\n'
        "[providers.fake]\n"
        'kind = "openai-chat"\n'
        f'base_url = "{url}/v1"\n\n'
        "[models.fake]\n"
        'provider = "fake"\n'
        'model = "fake-model"\n'
        "context_window = 8192\n"
        "max_output_tokens = 1024\n"
    )
    return config


def anvilctl(
    namespace: Path, *args: str, stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    slow = "--timeout" in args
    return subprocess.run(
        [sys.executable, "-m", "anvilctl", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=(LLAMA_TIMEOUT if slow else TURN_TIMEOUT) + STARTUP_TIMEOUT,
        env={**os.environ, "NAMESPACE": str(namespace)},
        cwd=cwd,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def read(namespace: Path, path: str) -> str:
    return ok(anvilctl(namespace, "read", path))


def start_daemon(namespace: Path, config: Path) -> Anvild:
    daemon = Anvild(namespace, "--config", str(config))
    daemon.wait_serving()
    return daemon


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(
        tmp_path,
        [
            {"contains": "slow", "text": "slowly", "chunk_delay": 1.0, "repeat": True},
            {"contains": "stuck", "text": "never finished", "chunk_delay": 30.0, "repeat": True},
            {"text": "pong", "repeat": True},
        ],
    )
    yield server
    server.stop()


def new_session_by_ctl(namespace: Path, workdir: Path, extra: str = "") -> str:
    out = ok(anvilctl(namespace, "rdwr", "agent/ctl", stdin=f"new cwd={workdir}{extra}\n"))
    lines = out.split("\n")
    assert lines[0] == "", out  # nothing before the write
    session_id = lines[1]
    assert session_id.isalnum(), out
    return session_id


def test_rdwr_new_then_in_wait_out_through_the_daemon(
    daemon: Anvild, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    session_id = new_session_by_ctl(namespace, workdir)
    assert session_id in ok(anvilctl(namespace, "ls", "agent"))
    assert read(namespace, f"agent/{session_id}/state") in ("starting\n", "idle\n")
    assert read(namespace, f"agent/{session_id}/cwd").strip() == str(workdir)

    ok(anvilctl(namespace, "write", f"agent/{session_id}/in", stdin="ping"))
    assert read(namespace, f"agent/{session_id}/wait") == "await\n"
    assert read(namespace, f"agent/{session_id}/state") == "await\n"
    assert read(namespace, f"agent/{session_id}/out") == "pong\n"
    assert read(namespace, f"agent/{session_id}/state") == "idle\n"
    assert read(namespace, f"agent/{session_id}/usage").strip() != "-"

    request = fake.requests()[0]
    assert request["protocol"] == "openai-chat"
    assert request["model"] == "fake-model"
    listing = read(namespace, "agent/list")
    assert session_id in listing

    models = read(namespace, "agent/models")
    assert models.split()[:3] == ["fake", "fake", "fake-model"]


def test_a_bad_new_says_what_to_do(daemon: Anvild, namespace: Path, workdir: Path) -> None:
    bad = anvilctl(namespace, "write", "agent/ctl", stdin="new model=nope cwd=/\n")
    assert bad.returncode == 1
    assert "unknown model 'nope' (known aliases: fake;" in bad.stderr
    missing = anvilctl(namespace, "write", "agent/ctl", stdin=f"new cwd={workdir}/gone\n")
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr


def test_session_events_reach_agent_events(daemon: Anvild, namespace: Path, workdir: Path) -> None:
    reader = subprocess.Popen(
        [sys.executable, "-m", "anvilctl", "read", "agent/events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NAMESPACE": str(namespace)},
    )
    try:
        session_id = new_session_by_ctl(namespace, workdir)
        ok(anvilctl(namespace, "write", f"agent/{session_id}/in", stdin="ping"))
        assert read(namespace, f"agent/{session_id}/wait") == "await\n"
        code, log = daemon.stop()  # the stream ends (EOF) when the daemon stops
        assert code == 0, log
        out, _ = reader.communicate(timeout=STARTUP_TIMEOUT)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    events = [json.loads(line) for line in out.splitlines() if line]
    kinds = [e.get("type") for e in events]
    created = [e for e in events if e.get("type") == "session_created"]
    assert [e["id"] for e in created] == [session_id], kinds
    assert "daemon_stopping" in kinds


def test_anvilctl_new_send_wait_out_models(
    daemon: Anvild, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    session_id = ok(anvilctl(namespace, "new", "alias=dev", cwd=workdir)).strip()
    assert session_id.isalnum()
    assert read(namespace, f"agent/{session_id}/cwd").strip() == str(workdir)  # the default
    assert read(namespace, "agent/dev/alias").strip() == "dev"

    assert ok(anvilctl(namespace, "send", session_id, "ping", "please")) == ""
    assert ok(anvilctl(namespace, "wait", session_id)) == "await\n"
    assert ok(anvilctl(namespace, "out", session_id)) == "pong\n"
    assert read(namespace, f"agent/{session_id}/state") == "idle\n"

    ok(anvilctl(namespace, "send", "dev", "-", stdin="from stdin\nsecond line\n"))
    assert ok(anvilctl(namespace, "wait", "dev", "--timeout", "20")) == "await\n"
    assert ok(anvilctl(namespace, "out", "dev")) == "pong\n"
    prompts = [r["body"]["messages"][-1]["content"] for r in fake.requests()]
    assert "ping please" in str(prompts[0])
    assert "from stdin\nsecond line" in str(prompts[1])

    models = ok(anvilctl(namespace, "models")).splitlines()
    assert [line.split() for line in models] == [
        ["ALIAS", "PROVIDER", "MODEL", "WINDOW", "KEY"],
        ["fake", "fake", "fake-model", "8192", "yes"],
    ]
    assert ok(anvilctl(namespace, "models", "--no-header")) == read(namespace, "agent/models")
    assert read(namespace, "agent/models") == "fake\tfake\tfake-model\t8192\tyes\n"


def test_wait_timeout_exits_1_and_a_later_wait_returns(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    session_id = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
    ok(anvilctl(namespace, "send", session_id, "slow please"))
    started = time.monotonic()
    late = anvilctl(namespace, "wait", session_id, "--timeout", "0.3")
    assert late.returncode == 1, late
    assert late.stdout == ""
    assert f"anvilctl wait {session_id}: still busy after 0.3 s" in late.stderr
    assert time.monotonic() - started < 10
    assert read(namespace, f"agent/{session_id}/state") == "running\n"
    assert ok(anvilctl(namespace, "wait", session_id)) == "await\n"
    assert ok(anvilctl(namespace, "out", session_id)) == "slowly\n"


def test_session_command_errors_print_the_servers_message(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    unknown = anvilctl(namespace, "send", "nosuch", "hello")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("anvilctl send nosuch: ")
    bad_model = anvilctl(namespace, "new", "model=nope", cwd=workdir)
    assert bad_model.returncode == 1
    assert "unknown model 'nope' (known aliases: fake;" in bad_model.stderr
    session_id = ok(anvilctl(namespace, "new", "ephemeral", cwd=workdir)).strip()
    ok(anvilctl(namespace, "send", session_id, "ping"))
    assert ok(anvilctl(namespace, "wait", session_id)) == "exited\n"
    second = anvilctl(namespace, "send", session_id, "again")
    assert second.returncode == 1
    assert second.stderr.startswith(f"anvilctl send {session_id}: ")
    assert ok(anvilctl(namespace, "out", session_id)) == "pong\n"


def test_a_restarted_daemon_lists_the_session_with_its_out(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    config = user_config(tmp_path, fake.url)
    first = start_daemon(namespace, config)
    try:
        session_id = ok(anvilctl(namespace, "new", "alias=keep", cwd=workdir)).strip()
        ok(anvilctl(namespace, "send", session_id, "ping"))
        assert ok(anvilctl(namespace, "wait", session_id)) == "await\n"
    finally:
        code, log = first.stop()
    assert code == 0, log

    second = start_daemon(namespace, config)
    try:
        assert session_id in read(namespace, "agent/list")
        assert session_id in ok(anvilctl(namespace, "ls", "agent")).split()
        assert ok(anvilctl(namespace, "out", "keep")) == "pong\n"
        assert read(namespace, f"agent/{session_id}/cwd").strip() == str(workdir)
        ok(anvilctl(namespace, "send", "keep", "ping again"))
        assert ok(anvilctl(namespace, "wait", "keep")) == "await\n"
        assert ok(anvilctl(namespace, "out", "keep")) == "pong\n"
    finally:
        code, log = second.stop()
    assert code == 0, log
    messages = fake.requests()[-1]["body"]["messages"]
    assert [m["role"] for m in messages if m["role"] != "system"] == ["user", "assistant", "user"]


BAD_KEY = "invalid x-api-key"


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[FakeServer]:
    """The first two prompts with FAILME are answered HTTP 401 (a bad key), slow ones slowly,
    the others pong (a failed turn leaves its prompt in the transcript without an answer, so
    the next request's last user text still contains FAILME)."""
    failure = {"contains": "FAILME", "status": 401, "message": BAD_KEY}
    server = FakeServer(
        tmp_path,
        [
            failure,
            failure,
            {"contains": "slow", "text": "slowly", "chunk_delay": 1.0, "repeat": True},
            {"text": "pong", "repeat": True},
        ],
    )
    yield server
    server.stop()


def sessions_row(namespace: Path, workdir: Path, session_id: str) -> list[str]:
    rows = [line.split() for line in ok(anvilctl(namespace, "sessions", cwd=workdir)).splitlines()]
    assert rows[0][:4] == ["ID", "ALIAS", "STATE", "OUTCOME"], rows
    return next(row for row in rows if row[0] == session_id)


def test_a_failed_turn_is_told_by_outcome_wait_send_and_sessions_and_survives_a_restart(
    namespace: Path, tmp_path: Path, workdir: Path, failing: FakeServer
) -> None:
    config = user_config(tmp_path, failing.url)
    first = start_daemon(namespace, config)
    try:
        session_id = ok(anvilctl(namespace, "new", "alias=dev", cwd=workdir)).strip()
        assert read(namespace, "agent/dev/outcome") == "-\n"  # no turn yet
        assert sessions_row(namespace, workdir, session_id)[3] == "-"

        # A turn that ends done: `done`, exit 0, nothing on stderr.
        done = anvilctl(namespace, "send", "--wait", "dev", "ping")
        assert (done.returncode, done.stdout, done.stderr) == (0, "await\n", "")
        assert read(namespace, "agent/dev/outcome") == "done\n"
        assert ok(anvilctl(namespace, "out", "dev")) == "pong\n"

        # A turn the provider refuses with HTTP 401.
        ok(anvilctl(namespace, "send", "dev", "FAILME please"))
        waited = anvilctl(namespace, "wait", "dev")
        assert waited.returncode == 1, waited  # headless's status for error
        assert waited.stdout == "await\n"  # the state, as before
        outcome = read(namespace, "agent/dev/outcome")
        assert outcome.startswith("error HttpError: HTTP 401: "), outcome
        assert BAD_KEY in outcome, outcome
        assert outcome.count("\n") == 1, outcome
        assert waited.stderr == f"anvilctl wait dev: turn ended: {outcome}"
        again = anvilctl(namespace, "wait", "dev")  # nothing ran since: the same last turn
        assert (again.returncode, again.stdout) == (1, "await\n")
        row = sessions_row(namespace, workdir, session_id)
        assert row[2:4] == ["await", "error"], row

        sent = anvilctl(namespace, "send", "--wait", "dev", "FAILME again")
        assert (sent.returncode, sent.stdout) == (1, "await\n"), sent
        assert sent.stderr == f"anvilctl send dev: turn ended: {outcome}"
    finally:
        code, log = first.stop()
    assert code == 0, log

    second = start_daemon(namespace, config)
    try:
        assert read(namespace, f"agent/{session_id}/outcome") == outcome  # from the records
        restored = anvilctl(namespace, "wait", "dev")
        assert (restored.returncode, restored.stdout) == (1, "await\n"), restored  # out unread
        assert sessions_row(namespace, workdir, session_id)[3] == "error"
        fixed = anvilctl(namespace, "send", "--wait", "dev", "ping again")
        assert (fixed.returncode, fixed.stdout, fixed.stderr) == (0, "await\n", "")
        assert read(namespace, "agent/dev/outcome") == "done\n"
        assert sessions_row(namespace, workdir, session_id)[3] == "done"
    finally:
        code, log = second.stop()
    assert code == 0, log


def test_a_cancelled_turn_makes_send_wait_exit_130(
    namespace: Path, tmp_path: Path, workdir: Path, failing: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, failing.url))
    try:
        session_id = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        waiting = subprocess.Popen(
            [sys.executable, "-m", "anvilctl", "send", "--wait", session_id, "slow please"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NAMESPACE": str(namespace)},
        )
        deadline = time.monotonic() + TURN_TIMEOUT
        while read(namespace, f"agent/{session_id}/state") != "running\n":
            assert time.monotonic() < deadline, "the turn never started"
            time.sleep(0.05)
        ok(anvilctl(namespace, "write", f"agent/{session_id}/ctl", stdin="cancel\n"))
        out, err = waiting.communicate(timeout=TURN_TIMEOUT)
        assert (waiting.returncode, out) == (130, "await\n"), err
        outcome = read(namespace, f"agent/{session_id}/outcome")
        assert outcome.split()[0] == "cancelled", outcome
        assert err == f"anvilctl send {session_id}: turn ended: {outcome}"
    finally:
        code, log = daemon.stop()
    assert code == 0, log


def test_kill_ends_a_session_and_a_mistyped_name_gets_a_suggestion(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    session_id = ok(anvilctl(namespace, "new", "alias=reviewer1", cwd=workdir)).strip()
    for command in (["send", "reveiwer1", "hi"], ["wait", "reveiwer1"], ["out", "reveiwer1"]):
        typo = anvilctl(namespace, *command)
        assert typo.returncode == 1, typo
        assert typo.stderr.startswith(f"anvilctl {command[0]} reveiwer1: "), typo.stderr
        assert typo.stderr.endswith("; did you mean reviewer1?\n"), typo.stderr
    unknown = anvilctl(namespace, "wait", "zzzzzzzz")
    assert unknown.returncode == 1
    assert unknown.stderr.endswith(
        "; no session has that id or alias (`anvilctl sessions --all` lists them)\n"
    ), unknown.stderr
    typo = anvilctl(namespace, "kill", session_id[:-1] + "x")
    assert typo.returncode == 1
    assert "no session" in typo.stderr
    assert typo.stderr.endswith(f"did you mean {session_id}?\n"), typo.stderr
    assert session_id in read(namespace, "agent/list")

    assert ok(anvilctl(namespace, "kill", "reviewer1")) == ""
    assert session_id not in read(namespace, "agent/list")
    gone = anvilctl(namespace, "kill", "reviewer1")
    assert gone.returncode == 1
    assert gone.stderr == (
        "anvilctl kill reviewer1: ctl: no session 'reviewer1': read agent/list for the live "
        "sessions\n"
    )


def test_sigterm_during_a_turn_leaves_every_record_on_disk(
    namespace: Path, tmp_path: Path, workdir: Path, fake: FakeServer
) -> None:
    daemon = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        session_id = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        ok(anvilctl(namespace, "send", session_id, "stuck here"))
        deadline = time.monotonic() + TURN_TIMEOUT
        while not fake.requests() or read(namespace, f"agent/{session_id}/state") != "running\n":
            assert time.monotonic() < deadline, "the turn never started"
            time.sleep(0.05)
        started = time.monotonic()
    finally:
        code, log = daemon.stop(signal.SIGTERM)
    assert code == 0, log
    assert time.monotonic() - started < 10  # the turn was ended, not waited for

    contents = SessionStore(daemon.data_dir / "sessions").read(session_id)
    assert contents.torn_bytes == 0
    records = contents.records
    prompts = [r for r in records if isinstance(r, MessageAppended)]
    assert "stuck here" in str(prompts[0].message)
    ended = [r for r in records if isinstance(r, TurnEnded)]
    assert [e.outcome for e in ended] == ["cancelled"], records
    assert isinstance(records[-1], StateChanged | TurnEnded), records[-1]

    again = start_daemon(namespace, user_config(tmp_path, fake.url))
    try:
        assert session_id in read(namespace, "agent/list")
        assert read(namespace, f"agent/{session_id}/state") in ("idle\n", "await\n")
    finally:
        code, log = again.stop()
    assert code == 0, log


@pytest.mark.slow
@pytest.mark.usefixtures("one_llama_at_a_time")
def test_the_embedded_local_model_answers_a_session(namespace: Path, workdir: Path) -> None:
    """No provider configured, no key in the environment: the default model is the real
    llama-server with SmolLM2-135M, and a session created while it loads waits for it."""
    paths = built_llama()
    assert not set(PROVIDER_KEYS) & set(isolated_env(namespace.parent))  # no key: the default
    daemon = Anvild(
        namespace,
        env=llama_env(paths),
    )
    try:
        assert daemon.wait_serving().endswith("; default model: local llama-server\n")
        assert ok(anvilctl(namespace, "models", "--no-header")).split() == [
            "local", "local", "smollm2-135m", "8192", "yes"
        ]  # fmt: skip
        session_id = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        assert read(namespace, f"agent/{session_id}/model").strip() == "local"
        ok(anvilctl(namespace, "send", session_id, "-", stdin="hi\n"))
        waited = anvilctl(namespace, "wait", session_id, "--timeout", str(LLAMA_TIMEOUT))
        # wait exits with the turn's outcome: 0 done, or 3 when the 135M model rambled to its
        # 256-token limit (max_tokens, allowed below); the state is await either way
        assert waited.returncode in (0, EXIT_CODES["max_tokens"]), (waited, waited.stderr)
        assert waited.stdout == "await\n", read(namespace, f"agent/{session_id}/out")
        answer = ok(anvilctl(namespace, "out", session_id))
        assert answer.strip(), answer
        # A real answer, not an error's partial text: `out` ends with "[turn ended: OUTCOME...]"
        # unless the turn ended done, or with max_tokens, which a 135M model may reach (a
        # provider timeout once passed the check above with only that note).
        tail = answer.rstrip().rsplit("\n", 1)[-1]
        assert not tail.startswith("[turn ended:") or tail.startswith("[turn ended: max_tokens"), (
            answer
        )
        # The 8,192-token window gets compact tool definitions: after "hi" about 2,900 tokens
        # are used, the answer included (5,400 with the full definitions).
        used, window = read(namespace, f"agent/{session_id}/usage").split()[0].split("/")
        assert int(window) == 8192
        assert int(used) < 3500, used
        # Context management on the real model (the long check is `make test-llama-long`): the
        # model writes a summary on `compact`, and the session answers on from it.
        compacted = subprocess.run(
            [sys.executable, "-m", "anvilctl", "write", f"agent/{session_id}/ctl"],
            input="compact\n",
            capture_output=True,
            text=True,
            timeout=LLAMA_TIMEOUT,
            env={**os.environ, "NAMESPACE": str(namespace)},
            check=False,
        )
        assert compacted.returncode == 0, (compacted.stdout, compacted.stderr)
        [line] = read(namespace, f"agent/{session_id}/compactions").splitlines()
        assert line.split("\t")[1] == "manual", line
        history = read(namespace, f"agent/{session_id}/history").splitlines()
        assert json.loads(history[0])["marker"] == "compacted", history[:2]
        ok(anvilctl(namespace, "send", session_id, "-", stdin="thanks\n"))
        again = anvilctl(namespace, "wait", session_id, "--timeout", str(LLAMA_TIMEOUT))
        assert again.returncode in (0, EXIT_CODES["max_tokens"]), (again, again.stderr)
        assert ok(anvilctl(namespace, "out", session_id)).strip()
    finally:
        code, log = daemon.stop()
    assert code == 0, log
