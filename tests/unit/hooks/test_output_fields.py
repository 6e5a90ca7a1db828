"""Claude Code's common output fields through real shell hooks, the real agent loop and a
real permission gate: `transcript_path` (input), `continue`/`stopReason`, `systemMessage`,
`suppressOutput`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anvild.agent import events as ev
from anvild.agent.context import ContextSettings, ContextWindow
from anvild.agent.hookpoints import TurnStopped
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.permissions.policy import Mode
from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.hooks import PromptBlocked
from anvild.llm.testing import ScriptedProvider, script
from tests.unit.hooks.support import script as shell
from tests.unit.hooks.test_turn import FakeBash, bash, make, results


def says(tmp_path: Path, name: str, body: dict[str, Any]) -> str:
    """A hook that reads its input and prints `body` as its JSON output."""
    return shell(tmp_path, name, f"cat > /dev/null\ncat <<'EOF'\n{json.dumps(body)}\nEOF\n")


def pre(decision: str = "", **fields: Any) -> dict[str, Any]:
    specific: dict[str, Any] = {"hookEventName": "PreToolUse", **fields}
    if decision:
        specific["permissionDecision"] = decision
    return {"hookSpecificOutput": specific}


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


# -- continue / stopReason ------------------------------------------------------------------


async def test_continue_false_at_pre_tool_use_ends_the_turn_over_an_allow(tmp_path: Path) -> None:
    halt = says(
        tmp_path, "halt.sh", {"continue": False, "stopReason": "the build is red"} | pre("allow")
    )
    tables = {"halt": {"event": "PreToolUse", "command": halt}}
    tool = FakeBash()
    two = script.tool_calls([("c1", "bash", {"command": "ls"}), ("c2", "bash", {"command": "pwd"})])
    agent, _, seen, _ = make(
        tmp_path, tables, [two, script.text("never")], tools=[tool], mode=Mode.BYPASS
    )
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.CANCELLED
    assert finished.detail == "stopped by PreToolUse hook halt: the build is red"
    assert tool.ran == []
    assert [r.content for r in results(agent)] == [
        "Not run: the turn was stopped before bash started.",
        "Not run: the turn was stopped before bash started.",
    ]
    assert ("halt", "PreToolUse", "the build is red") in reports(seen, "stopped")
    assert len(agent.provider.requests) == 1  # the model is not asked again
    # The reason is the user's: nothing of it is in the transcript the model gets next.
    assert "the build is red" not in repr(agent.messages)


async def test_continue_false_at_post_tool_use_keeps_the_result_and_runs_no_more(
    tmp_path: Path,
) -> None:
    halt = says(tmp_path, "halt.sh", {"continue": False, "stopReason": "enough for today"})
    tables = {"halt": {"event": "PostToolUse", "command": halt}}
    tool = FakeBash()
    two = script.tool_calls([("c1", "bash", {"command": "ls"}), ("c2", "bash", {"command": "pwd"})])
    agent, _, _, _ = make(
        tmp_path, tables, [two, script.text("never")], tools=[tool], mode=Mode.BYPASS
    )
    finished = await agent.run_turn("go")
    assert (finished.outcome, finished.detail) == (
        ev.TurnOutcome.CANCELLED,
        "stopped by PostToolUse hook halt: enough for today",
    )
    assert tool.ran == ["ls"]
    assert [r.content for r in results(agent)] == [
        "ran ls",
        "Not run: the turn was stopped before bash started.",
    ]


async def test_continue_false_at_stop_wins_over_decision_block(tmp_path: Path) -> None:
    body = {"decision": "block", "reason": "go on", "continue": False, "stopReason": "stop here"}
    tables = {"stop": {"event": "Stop", "command": says(tmp_path, "stop.sh", body)}}
    agent, _, _, _ = make(tmp_path, tables, [script.text("done"), script.text("more")])
    finished = await agent.run_turn("go")
    assert (finished.outcome, finished.detail) == (
        ev.TurnOutcome.CANCELLED,
        "stopped by Stop hook stop: stop here",
    )
    assert len(agent.provider.requests) == 1  # not continued


async def test_continue_false_at_user_prompt_submit_and_pre_compact(tmp_path: Path) -> None:
    tables = {
        "gate": {
            "event": "UserPromptSubmit",
            "command": says(tmp_path, "p.sh", {"continue": False, "stopReason": "frozen"}),
        },
        "hold": {"event": "PreCompact", "command": says(tmp_path, "c.sh", {"continue": False})},
    }
    _, hooks, _, _ = make(tmp_path, tables, [])
    with pytest.raises(PromptBlocked, match=r"^stopped by UserPromptSubmit hook gate: frozen$"):
        await hooks.prompt_submit("fix the build")
    with pytest.raises(TurnStopped, match=r"^PreCompact hook hold: no reason given$"):
        await hooks.before_compact("manual", "")


async def test_continue_false_at_pre_compact_refuses_a_compaction_between_turns(
    tmp_path: Path,
) -> None:
    tables = {
        "hold": {
            "event": "PreCompact",
            "command": says(tmp_path, "c.sh", {"continue": False, "stopReason": "not now"}),
        }
    }
    _, hooks, seen, _ = make(tmp_path, tables, [])
    provider = ScriptedProvider([script.text("hi")])
    agent = Agent(
        provider,
        ToolRegistry([]),
        AgentConfig(model="m"),
        ToolContext(cwd=tmp_path),
        emit=seen.append,
        window=ContextWindow(ContextSettings(window=8000)),
        hooks=hooks,
    )
    await agent.run_turn("hello")
    before = agent.messages
    assert await agent.compact() == "stopped by PreCompact hook hold: not now"
    assert agent.messages == before
    assert len(provider.requests) == 1  # no summary was asked for
    (finished,) = [e for e in seen if isinstance(e, ev.CompactionFinished)]
    assert (finished.ok, finished.detail) == (False, "stopped by PreCompact hook hold: not now")


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
