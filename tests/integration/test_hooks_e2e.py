"""End to end: hooks (README "Hooks") through the real `anvild`, the fake provider server and
real shell hook scripts in the test's tmp dir.

- PreToolUse exit 2 refuses `bash(rm -rf x)`: the hook's stderr is the call's result, x stays;
- PostToolUse sees the call's `tool_response`; Stop with `decision: block` continues the turn
  once (the script goes on only when `stop_hook_active` is false);
- UserPromptSubmit exit 2 fails the write to `in` with the hook's stderr, and queues nothing;
- a project `.anvil/config.toml` hook is ignored (reported) until `anvilctl trust grant`, after
  which it runs;
- Claude Code's output fields: `updatedInput` runs in the model's call's place and is refused
  exactly as the model's own call of it would be (a deny rule, a credential file, the schema),
  both kept in the records; `systemMessage` reaches the log, never the model; `continue: false`
  ends the turn with its `stopReason` in `out`; `transcript_path` is the session's records file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_daemon_crash import read_stream_until
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, read, user_config

BLOCK_RM = """#!/bin/sh
input=$(cat)
case "$input" in
  *'rm -rf'*) echo "rm -rf is refused by policy: list what you would delete instead" >&2; exit 2 ;;
esac
exit 0
"""

STOP_ONCE = """#!/bin/sh
if grep -q '"stop_hook_active": true'; then exit 0; fi
echo '{"decision": "block", "reason": "check the result once more"}'
"""

NO_SECRETS = """#!/bin/sh
if grep -q password; then echo "prompts must not carry passwords" >&2; exit 2; fi
"""

CURL = "curl -s http://127.0.0.1:9/"
CONTRACT_CALLS = [  # (prompt, the model's call): what the `contract` hook makes of each
    ("read notes", "read_file", {"file_path": "notes.txt"}),  # other.txt, with a systemMessage
    ("read plain", "read_file", {"file_path": "plain.txt"}),  # .env, a credential file
    ("read dotenv", "read_file", {"file_path": ".env"}),  # the model's own
    ("list it", "bash", {"command": "ls"}),  # curl, which a deny rule refuses
    ("curl it", "bash", {"command": CURL}),  # the model's own
    ("print dir", "bash", {"command": "pwd"}),  # {"command": 42}: not the tool's schema
    ("halt now", "read_file", {"file_path": "halt.txt"}),  # continue: false
]

CONTRACT = f"""#!/bin/sh
input=$(cat)
allow() {{
  printf '{{"hookSpecificOutput": {{"hookEventName": "PreToolUse", "permissionDecision": '
  printf '"allow", "updatedInput": %s}}%s}}\\n' "$1" "$2"
}}
case "$input" in
  *'"notes.txt"'*) allow '{{"file_path": "other.txt"}}' ', "systemMessage": "SYS: other read"' ;;
  *'"plain.txt"'*) allow '{{"file_path": ".env"}}' '' ;;
  *'"command": "ls"'*) allow '{{"command": "{CURL}"}}' '' ;;
  *'"command": "pwd"'*) allow '{{"command": 42}}' '' ;;
  *'"halt.txt"'*) echo '{{"continue": false, "stopReason": "STOP: the hook says so"}}' ;;
esac
exit 0
"""

TRANSCRIPT = """#!/bin/sh
path=$(sed -n 's/.*"transcript_path": "\\([^"]*\\)".*/\\1/p')
echo "$path" > "$0.path"
head -n 1 "$path" > "$0.head"
"""


def executable(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(
        tmp_path,
        [
            {
                "contains": "clean up",
                "tool_calls": [{"name": "bash", "arguments": {"command": "rm -rf x"}}],
                "repeat": True,
            },
            {
                "contains": "list it",
                "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
                "repeat": True,
            },
            *(
                {"contains": prompt, "tool_calls": [{"name": tool, "arguments": arguments}]}
                for prompt, tool, arguments in CONTRACT_CALLS
            ),
            {"text": "done", "repeat": True},
        ],
    )
    yield server
    server.stop()


@pytest.fixture
def hooks_dir(tmp_path: Path) -> Path:
    path = tmp_path / "hooks"
    path.mkdir()
    return path


@pytest.fixture
def config(tmp_path: Path, fake: FakeServer, hooks_dir: Path) -> Path:
    path = user_config(tmp_path, fake.url)
    guard = executable(hooks_dir / "guard.sh", BLOCK_RM)
    stop = executable(hooks_dir / "stop.sh", STOP_ONCE)
    prompts = executable(hooks_dir / "prompts.sh", NO_SECRETS)
    post = hooks_dir / "post.json"
    path.write_text(
        path.read_text()
        + f"""
[permissions]
allow = ["bash(ls)"]

[hooks.no-rm]
event = "PreToolUse"
matcher = "Bash"
command = "{guard}"

[hooks.log-results]
event = "PostToolUse"
matcher = "bash|write_file"
command = "cat > {post}"
timeout = 10

[hooks.stop-once]
event = "Stop"
command = "{stop}"

[hooks.no-secrets]
event = "UserPromptSubmit"
command = "{prompts}"
"""
    )
    return path


@pytest.fixture
def daemon(namespace: Path, config: Path) -> Iterator[Anvild]:
    d = Anvild(namespace, "--config", str(config))
    d.wait_serving()
    yield d
    code, log = d.stop()
    assert code == 0, log


def new(namespace: Path, cwd: Path) -> str:
    out = ok(anvilctl(namespace, "rdwr", "agent/ctl", stdin=f"new cwd={cwd} headless\n"))
    return out.split("\n")[1]


def turn(namespace: Path, session: str, prompt: str) -> str:
    ok(anvilctl(namespace, "write", f"agent/{session}/in", stdin=prompt))
    assert read(namespace, f"agent/{session}/wait") == "await\n"
    return read(namespace, f"agent/{session}/out")


def last_user_text(request: dict[str, Any]) -> str:
    return json.dumps(request["body"]["messages"][-1]["content"])


def test_pre_tool_use_refuses_post_tool_use_sees_and_stop_continues_once(
    daemon: Anvild, namespace: Path, workdir: Path, fake: FakeServer, hooks_dir: Path
) -> None:
    (workdir / "x").mkdir()
    session = new(namespace, workdir)
    assert turn(namespace, session, "clean up").strip() == "done"
    assert (workdir / "x").is_dir()
    requests = fake.requests()
    refused = last_user_text(requests[1])
    assert "Blocked by a hook before bash ran: PreToolUse hook no-rm: " in refused
    assert "rm -rf is refused by policy: list what you would delete instead" in refused
    # The model said done; the Stop hook continued the turn once, then let it end.
    assert len(requests) == 3
    assert "Stop hook stop-once: check the result once more" in last_user_text(requests[2])
    assert not (hooks_dir / "post.json").exists()  # the refused call never ran

    assert turn(namespace, session, "list it").strip() == "done"
    posted = json.loads((hooks_dir / "post.json").read_text())
    assert posted["hook_event_name"] == "PostToolUse"
    assert posted["session_id"] == session
    assert posted["tool_name"] == "bash"
    assert posted["tool_input"] == {"command": "ls"}
    # What the hook saw is what the model got (the sandbox may refuse ls where pytest's tmp
    # dir is private: either way the result reaches both).
    response = posted["tool_response"]
    assert set(response) == {"content", "is_error"}
    assert response["content"]
    seen_by_model = last_user_text(fake.requests()[-2])
    assert json.dumps(response["content"])[1:40] in seen_by_model


def test_user_prompt_submit_exit_2_fails_the_write_to_in(
    daemon: Anvild, namespace: Path, workdir: Path, fake: FakeServer
) -> None:
    session = new(namespace, workdir)
    refused = anvilctl(namespace, "write", f"agent/{session}/in", stdin="my password is hunter2")
    assert refused.returncode != 0
    assert "prompts must not carry passwords" in refused.stderr, refused.stderr
    assert "UserPromptSubmit hook no-secrets" in refused.stderr
    assert read(namespace, f"agent/{session}/queue") == ""
    assert fake.requests() == []
    assert turn(namespace, session, "hello").strip() == "done"


def test_a_project_hook_runs_only_after_the_reported_grant(
    daemon: Anvild, namespace: Path, tmp_path: Path, fake: FakeServer
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".anvil").mkdir()
    marker = tmp_path / "project-hook-ran"
    (repo / ".anvil" / "config.toml").write_text(
        f'[hooks.mark]\nevent = "Stop"\ncommand = "touch {marker}"\n'
    )
    session = new(namespace, repo)
    assert turn(namespace, session, "hello").strip() == "done"
    assert not marker.exists()
    shown = read(namespace, f"agent/{session}/config")
    assert "hooks.mark" in shown
    assert "not granted: anvilctl trust grant" in shown
    log_lines = (daemon.data_dir / "logs" / "anvild.log").read_text()
    command = next(
        json.loads(line)["message"].split("apply it with `")[1].rstrip("`")
        for line in log_lines.splitlines()
        if "config.session_note" in line and "hooks.mark" in line
    )
    words = shlex.split(command)
    assert words[:3] == ["anvilctl", "trust", "grant"]
    ok(anvilctl(namespace, *words[1:]))
    assert turn(namespace, session, "hello again").strip() == "done"
    assert marker.exists()


SLEEPER = """#!/bin/sh
sleep 1000 &
echo $! > "$0.pids"
echo $$ >> "$0.pids"
sleep 1000
"""


@pytest.fixture
def lifecycle(tmp_path: Path, fake: FakeServer, hooks_dir: Path) -> Path:
    """A user config with a sleeping PreToolUse hook (timeout 1 s), SessionStart and End."""
    path = user_config(tmp_path, fake.url)
    sleeper = executable(hooks_dir / "sleeper.sh", SLEEPER)
    path.write_text(
        path.read_text()
        + f"""
[permissions]
allow = ["bash(ls)"]

[hooks.sleeper]
event = "PreToolUse"
command = "{sleeper}"
timeout = 1

[hooks.start]
event = "SessionStart"
command = "echo 'START-CONTEXT: the build is green'"

[hooks.end]
event = "SessionEnd"
command = "cat > {hooks_dir / "end.json"}"
"""
    )
    return path


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_sleeping_hook_is_killed_at_its_timeout_and_the_session_goes_on(
    namespace: Path, lifecycle: Path, workdir: Path, fake: FakeServer, hooks_dir: Path
) -> None:
    daemon = Anvild(namespace, "--config", str(lifecycle))
    daemon.wait_serving()
    try:
        session = new(namespace, workdir)
        assert turn(namespace, session, "list it").strip() == "done"
        first = json.dumps(fake.requests()[0]["body"]["messages"])
        assert "START-CONTEXT: the build is green" in first  # SessionStart's context
        pids = [int(p) for p in (hooks_dir / "sleeper.sh.pids").read_text().split()]
        assert len(pids) == 2
        assert all(gone(pid) for pid in pids)  # the hook and its child, killed at 1 s
        ok(anvilctl(namespace, "write", f"agent/{session}/ctl", stdin="kill\n"))
    finally:
        code, log = daemon.stop()
    assert code == 0, log
    ended = json.loads((hooks_dir / "end.json").read_text())
    assert (ended["hook_event_name"], ended["session_id"]) == ("SessionEnd", session)


@pytest.fixture
def contract(tmp_path: Path, fake: FakeServer, hooks_dir: Path) -> Path:
    """A user config with the `contract` PreToolUse hook, a Stop hook that reads its
    `transcript_path`, and a deny rule for curl."""
    path = user_config(tmp_path, fake.url)
    rewrite = executable(hooks_dir / "contract.sh", CONTRACT)
    transcript = executable(hooks_dir / "transcript.sh", TRANSCRIPT)
    path.write_text(
        path.read_text()
        + f"""
[permissions]
allow = ["bash(ls)"]
deny = ["bash(curl:*)"]

[hooks.contract]
event = "PreToolUse"
command = "{rewrite}"

[hooks.transcript]
event = "Stop"
command = "{transcript}"
"""
    )
    return path


def tool_result(fake: FakeServer) -> str:
    """The last tool result the model was sent (openai-chat: a `tool` message)."""
    messages = fake.requests()[-1]["body"]["messages"]
    content = next(m["content"] for m in reversed(messages) if m["role"] == "tool")
    assert isinstance(content, str)
    return content


def test_updated_input_runs_in_place_and_is_refused_as_the_models_call_would_be(
    namespace: Path, contract: Path, workdir: Path, fake: FakeServer, hooks_dir: Path
) -> None:
    (workdir / "notes.txt").write_text("NOTES\n")
    (workdir / "other.txt").write_text("OTHER\n")
    (workdir / "plain.txt").write_text("PLAIN\n")
    (workdir / ".env").write_text("TOKEN=SECRET\n")
    daemon = Anvild(namespace, "--config", str(contract))
    daemon.wait_serving()
    try:
        session = new(namespace, workdir)

        # A rewrite that the policy allows runs in the model's call's place.
        assert turn(namespace, session, "read notes").strip() == "done"
        assert "OTHER" in tool_result(fake)
        assert "SYS: other read" not in json.dumps(fake.requests())  # the user's, only
        log = read_stream_until(namespace, f"agent/{session}/log", "SYS: other read")
        assert "NOTE: PreToolUse hook contract: SYS: other read" in log
        assert "NOTE: PreToolUse hook contract changed the input of read_file call" in log
        records = [
            json.loads(line)
            for line in (daemon.data_dir / "sessions" / f"{session}.jsonl").read_text().splitlines()
        ]
        calls = [
            block
            for r in records
            if r["type"] == "message_appended"
            for block in r["message"]["content"]
            if block.get("type") == "tool_call"
        ]
        assert calls[0]["arguments"] == {"file_path": "notes.txt"}  # the model's call
        notes = [r["text"] for r in records if r["type"] == "note"]
        assert any(n.endswith(' to {"file_path": "other.txt"}') for n in notes)  # what ran

        # The Stop hook read the session's records at its transcript_path.
        where = Path((hooks_dir / "transcript.sh.path").read_text().strip())
        assert where == daemon.data_dir / "sessions" / f"{session}.jsonl"
        first = json.loads((hooks_dir / "transcript.sh.head").read_text())
        assert (first["type"], first["id"]) == ("session_started", session)

        # Rewrites the policy or the boundary refuses are refused as the model's own call.
        hooked = " with the input PreToolUse hook contract gave it"
        for rewritten, own in (("read plain", "read dotenv"), ("list it", "curl it")):
            turn(namespace, session, rewritten)
            refused = tool_result(fake)
            turn(namespace, session, own)
            assert refused.replace(hooked, "") == tool_result(fake), (rewritten, refused)
            assert "SECRET" not in refused
        assert "deny(bash(curl:*))" in refused

        # A rewrite that breaks the tool's schema is an error result; the session goes on.
        assert turn(namespace, session, "print dir").strip() == "done"
        schema = "Permission denied for bash" + hooked + ": Invalid value for `command`: 42 "
        assert schema in tool_result(fake)
    finally:
        code, log = daemon.stop()
    assert code == 0, log


def test_continue_false_ends_the_turn_with_its_reason_for_the_user_only(
    namespace: Path, contract: Path, workdir: Path, fake: FakeServer
) -> None:
    (workdir / "halt.txt").write_text("HALT\n")
    daemon = Anvild(namespace, "--config", str(contract))
    daemon.wait_serving()
    try:
        session = new(namespace, workdir)
        out = turn(namespace, session, "halt now")
        reason = "stopped by PreToolUse hook contract: STOP: the hook says so"
        assert out.endswith(f"[turn ended: cancelled: {reason}]\n"), out
        assert read(namespace, f"agent/{session}/outcome") == f"cancelled {reason}\n"
        assert len(fake.requests()) == 1  # the model was not asked again
        assert turn(namespace, session, "hello").strip() == "done"
        sent = json.dumps(fake.requests()[-1]["body"]["messages"])
        assert "Not run: the turn was stopped before read_file started." in sent
        assert "STOP: the hook says so" not in sent
        assert "HALT" not in sent
    finally:
        code, log = daemon.stop()
    assert code == 0, log
