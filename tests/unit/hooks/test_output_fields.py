"""Claude Code's output fields through real shell hooks, the real agent loop and a real
permission gate: `transcript_path` (input)."""

from __future__ import annotations

from pathlib import Path

from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import script
from tests.unit.hooks.support import script as shell
from tests.unit.hooks.test_turn import bash, make

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
