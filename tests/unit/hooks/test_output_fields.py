"""Claude Code's common output fields through real shell hooks, the real agent loop and a
real permission gate: `transcript_path` (input), `systemMessage`, `suppressOutput`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anvild.agent import events as ev
from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import script
from tests.unit.hooks.support import script as shell
from tests.unit.hooks.test_turn import bash, make


def says(tmp_path: Path, name: str, body: dict[str, Any]) -> str:
    """A hook that reads its input and prints `body` as its JSON output."""
    return shell(tmp_path, name, f"cat > /dev/null\ncat <<'EOF'\n{json.dumps(body)}\nEOF\n")


def reports(seen: list[ev.AgentEvent], outcome: str) -> list[tuple[str, str, str]]:
    return [
        (e.name, e.event, e.detail)
        for e in seen
        if isinstance(e, ev.HookReported) and e.outcome == outcome
    ]


# -- transcript_path ------------------------------------------------------------------------


async def test_transcript_path_names_a_file_the_hook_reads(tmp_path: Path) -> None:
    records = tmp_path / "s1.jsonl"
    records.write_text('{"seq":1,"type":"session_started","id":"s1"}\n')
    copy = tmp_path / "copy"
    body = f"""path=$(sed -n 's/.*"transcript_path": "\\([^"]*\\)".*/\\1/p')
cp "$path" {copy}
"""
    tables = {"read": {"event": "PreToolUse", "command": shell(tmp_path, "t.sh", body)}}
    agent, _, _, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], transcript=records, mode=Mode.BYPASS
    )
    await agent.run_turn("go")
    assert copy.read_text() == records.read_text()


# -- systemMessage and suppressOutput --------------------------------------------------------


async def test_system_message_reaches_the_user_and_never_the_model(tmp_path: Path) -> None:
    tables = {
        "warn": {
            "event": "PreToolUse",
            "command": says(tmp_path, "w.sh", {"systemMessage": "the linter is slow today"}),
        },
        "after": {
            "event": "PostToolUse",
            "command": says(tmp_path, "a.sh", {"systemMessage": "ls took long"}),
        },
    }
    agent, _, seen, _ = make(tmp_path, tables, [bash("ls"), script.text("ok")], mode=Mode.BYPASS)
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert reports(seen, "message") == [
        ("warn", "PreToolUse", "the linter is slow today"),
        ("after", "PostToolUse", "ls took long"),
    ]
    sent = repr(agent.provider.requests)
    assert "the linter is slow today" not in sent
    assert "ls took long" not in sent


async def test_stdout_is_shown_to_the_user_unless_suppress_output(tmp_path: Path) -> None:
    quiet = {"suppressOutput": True, "systemMessage": "checked quietly"}
    tables = {
        "loud": {"event": "PostToolUse", "command": "cat > /dev/null; echo 'formatted 2 files'"},
        "quiet": {"event": "PostToolUse", "command": says(tmp_path, "q.sh", quiet)},
        "start": {"event": "SessionStart", "command": "echo 'on branch main'"},
    }
    agent, hooks, seen, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], mode=Mode.BYPASS
    )
    await agent.run_turn("go")
    assert await hooks.session_start("startup") == "on branch main"  # context, not output
    assert reports(seen, "output") == [("loud", "PostToolUse", "formatted 2 files")]
    assert reports(seen, "message") == [("quiet", "PostToolUse", "checked quietly")]
    assert "formatted 2 files" not in repr(agent.provider.requests)
