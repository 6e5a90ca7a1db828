"""Claude Code's common output fields and `updatedInput`, through real shell hooks, the real
agent loop and a real permission gate: `transcript_path` (input), `continue`/`stopReason`,
`systemMessage`, `suppressOutput`, and PreToolUse `updatedInput` decided like the model's call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from anvild.agent import events as ev
from anvild.agent.context import ContextSettings, ContextWindow
from anvild.agent.hookpoints import TurnStopped
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.permissions.approval import ApproveOnce
from anvild.agent.permissions.policy import Mode
from anvild.agent.permissions.rules import RuleSet
from anvild.agent.permissions.testing import ScriptedApprover
from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.files import ReadFile
from anvild.agent.tools.registry import ToolRegistry
from anvild.hooks import PromptBlocked
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ToolCall
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


def model_calls(agent: Any) -> list[ToolCall]:
    return [b for m in agent.messages for b in m.content if isinstance(b, ToolCall)]


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


# -- updatedInput ---------------------------------------------------------------------------


async def test_updated_input_runs_in_place_of_the_models_and_both_are_kept(
    tmp_path: Path,
) -> None:
    posted = tmp_path / "post.json"
    fix = says(tmp_path, "fix.sh", pre("allow", updatedInput={"command": "ls -la"}))
    tables = {
        "fix": {"event": "PreToolUse", "matcher": "bash", "command": fix},
        "post": {"event": "PostToolUse", "command": f"cat > {posted}"},
    }
    tool = FakeBash()
    agent, _, seen, approver = make(tmp_path, tables, [bash("ls"), script.text("ok")], tools=[tool])
    await agent.run_turn("go")
    assert tool.ran == ["ls -la"]
    assert approver.requests == []  # the hook's allow answered the gate's question
    assert [c.arguments for c in model_calls(agent)] == [{"command": "ls"}]  # the model's call
    assert reports(seen, "updated") == [
        ("fix", "PreToolUse", 'changed the input of bash call c1 to {"command": "ls -la"}')
    ]
    assert json.loads(posted.read_text())["tool_input"] == {"command": "ls -la"}
    assert ev.ToolCallStarted(1, "c1", "bash", {"command": "ls"}) in seen


async def test_updated_input_to_a_denied_command_is_refused_as_the_model_would_be(
    tmp_path: Path,
) -> None:
    rules = RuleSet.parse(allow=["bash(ls)"], deny=["bash(curl:*)"])
    fix = says(tmp_path, "fix.sh", pre("allow", updatedInput={"command": "curl -s http://x/"}))
    tables = {"fix": {"event": "PreToolUse", "command": fix}}
    tool = FakeBash()
    agent, _, _, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], tools=[tool], rules=rules
    )
    await agent.run_turn("go")
    assert tool.ran == []
    (rewritten,) = results(agent)
    prefix = "Permission denied for bash with the input PreToolUse hook fix gave it: "
    assert rewritten.is_error
    assert rewritten.content.startswith(prefix)
    # The model's own call of that command gets the same refusal.
    own, _, _, _ = make(
        tmp_path, {}, [bash("curl -s http://x/"), script.text("ok")], tools=[tool], rules=rules
    )
    await own.run_turn("go")
    (direct,) = results(own)
    assert direct.content == "Permission denied for bash: " + rewritten.content.removeprefix(prefix)
    assert "deny(bash(curl:*))" in direct.content
    assert tool.ran == []


@pytest.mark.parametrize("target", ["secrets/key.txt", ".env"])
async def test_updated_input_to_a_protected_file_is_refused_as_the_model_would_be(
    tmp_path: Path, target: str
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "secrets").mkdir(parents=True)
    (workspace / "notes.txt").write_text("plain notes\n")
    (workspace / "secrets" / "key.txt").write_text("TOPSECRET\n")
    (workspace / ".env").write_text("TOKEN=TOPSECRET\n")
    rules = RuleSet.parse(deny=["read_file(secrets/**)"])
    fix = says(tmp_path, "fix.sh", pre("allow", updatedInput={"file_path": target}))
    tables = {"fix": {"event": "PreToolUse", "matcher": "read_file", "command": fix}}

    def read(path: str) -> Any:
        return script.tool_calls([("c1", "read_file", {"file_path": path})])

    agent, _, _, _ = make(
        workspace, tables, [read("notes.txt"), script.text("ok")], tools=[ReadFile()], rules=rules
    )
    await agent.run_turn("go")
    own, _, _, _ = make(
        workspace, {}, [read(target), script.text("ok")], tools=[ReadFile()], rules=rules
    )
    await own.run_turn("go")
    (rewritten,), (direct,) = results(agent), results(own)
    assert rewritten.is_error
    assert direct.is_error
    assert "TOPSECRET" not in rewritten.content + direct.content
    hooked = "with the input PreToolUse hook fix gave it"
    assert rewritten.content.replace(f" {hooked}", "") == direct.content


async def test_updated_input_that_breaks_the_schema_is_an_error_result(tmp_path: Path) -> None:
    tables = {
        "fix": {
            "event": "PreToolUse",
            "command": says(tmp_path, "fix.sh", pre("allow", updatedInput={"command": 42})),
        }
    }
    tool = FakeBash()
    agent, _, _, _ = make(
        tmp_path,
        tables,
        [bash("ls"), bash("pwd", "c2"), script.text("ok")],
        tools=[tool],
        mode=Mode.BYPASS,
    )
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.DONE  # the turn goes on; the model is told
    assert tool.ran == []
    first = results(agent)[0]
    assert first.is_error
    assert first.content.startswith(
        "Permission denied for bash with the input PreToolUse hook fix gave it: "
    )
    assert "command" in first.content

    not_object = says(tmp_path, "odd.sh", pre("allow", updatedInput="ls -la"))
    agent, _, _, _ = make(
        tmp_path,
        {"odd": {"event": "PreToolUse", "command": not_object}},
        [bash("ls"), script.text("ok")],
        tools=[tool],
        mode=Mode.BYPASS,
    )
    await agent.run_turn("go")
    assert results(agent)[0].content == (
        "Blocked by a hook before bash ran: PreToolUse hook odd: its updatedInput is not a "
        'JSON object: "ls -la"'
    )
    assert tool.ran == []


async def test_another_hooks_allow_does_not_approve_a_rewrite(tmp_path: Path) -> None:
    """`ok` allowed the model's `make build`; `fix` changed it without a decision: the gate asks
    a person about what will run, and shows it."""
    tables = {
        "ok": {"event": "PreToolUse", "command": says(tmp_path, "ok.sh", pre("allow"))},
        "fix": {
            "event": "PreToolUse",
            "command": says(tmp_path, "fix.sh", pre(updatedInput={"command": "make deploy"})),
        },
    }
    tool = FakeBash()
    agent, _, _, approver = make(
        tmp_path, tables, [bash("make build"), script.text("ok")], tools=[tool]
    )
    await agent.run_turn("go")
    assert [r.arguments for r in approver.requests] == [{"command": "make deploy"}]
    assert tool.ran == []  # nobody answered (headless)
    assert results(agent)[0].content.startswith(
        "Permission denied for bash with the input PreToolUse hook fix gave it: "
    )


async def test_an_ask_with_updated_input_shows_the_person_what_will_run(tmp_path: Path) -> None:
    fix = says(tmp_path, "fix.sh", pre("ask", updatedInput={"command": "make test"}))
    tool = FakeBash()
    approver = ScriptedApprover([ApproveOnce()])
    agent, _, _, _ = make(
        tmp_path,
        {"fix": {"event": "PreToolUse", "command": fix}},
        [bash("make"), script.text("ok")],
        tools=[tool],
        approver=approver,
    )
    await agent.run_turn("go")
    assert [r.arguments for r in approver.requests] == [{"command": "make test"}]
    assert tool.ran == ["make test"]


async def test_two_hooks_that_change_the_input_differently_refuse_the_call(
    tmp_path: Path,
) -> None:
    tables = {
        name: {
            "event": "PreToolUse",
            "command": says(tmp_path, f"{name}.sh", pre("allow", updatedInput={"command": name})),
        }
        for name in ("a", "b")
    }
    tool = FakeBash()
    agent, _, _, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], tools=[tool], mode=Mode.BYPASS
    )
    await agent.run_turn("go")
    assert tool.ran == []
    assert results(agent)[0].content == (
        "Blocked by a hook before bash ran: PreToolUse hooks a and b each changed its input "
        "differently"
    )
