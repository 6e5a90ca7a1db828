"""SessionHooks at the agent loop's points, in front of a real permission gate."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from anvild.agent import events as ev
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.permissions.approval import ApproveOnce
from anvild.agent.permissions.gate import PermissionGate
from anvild.agent.permissions.policy import CEILINGS, Mode, Policy
from anvild.agent.permissions.testing import ScriptedApprover
from anvild.agent.tools.base import Args, Cancellation, Effects, ToolContext, ToolOutput
from anvild.agent.tools.files import WriteFile
from anvild.agent.tools.registry import ToolRegistry
from anvild.hooks import PromptBlocked, SessionHooks
from anvild.hooks.process import run_hook
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ToolCall, ToolResult
from anvild.sandbox import WorkspaceWrite
from tests.unit.hooks.support import script as shell


class FakeBash:
    """Named like the shell tool (the policy analyses its command); records what it ran."""

    name = "bash"
    description = "Run a command."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    }
    cancellation = Cancellation.KILLS_CHILDREN

    def __init__(self) -> None:
        self.ran: list[str] = []

    def effects(self, args: Args) -> Effects:
        return Effects(subprocess=True, unknown=True)

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        self.ran.append(args["command"])
        return ToolOutput(f"ran {args['command']}")


BLOCK_RM = """input=$(cat)
case "$input" in
  *'rm -rf'*) echo "rm -rf is not allowed here: use git clean -n first" >&2; exit 2 ;;
esac
exit 0
"""


def make(
    tmp_path: Path,
    tables: Mapping[str, Mapping[str, Any]],
    scripts: list[Any],
    *,
    approver: ScriptedApprover | None = None,
    tools: list[Any] | None = None,
    transcript: Path | None = None,
    **policy: Any,
) -> tuple[Agent, SessionHooks, list[ev.AgentEvent], ScriptedApprover]:
    approver = approver or ScriptedApprover()
    registry = ToolRegistry(tools if tools is not None else [FakeBash()])
    context = ToolContext(cwd=tmp_path)
    policy.setdefault("sandbox", WorkspaceWrite())
    gate = PermissionGate(Policy(tmp_path.resolve(), **policy), approver, registry, context)
    seen: list[ev.AgentEvent] = []
    hooks = SessionHooks(
        lambda: tables,
        session_id="s1",
        cwd=tmp_path,
        role=lambda: "developer",
        mode=lambda: gate.policy.mode.value,
        emit=seen.append,
        bead=lambda: "b-7",
        transcript=transcript,
    )
    gate.approver = hooks.approver(approver)
    agent = Agent(
        ScriptedProvider(scripts),
        registry,
        AgentConfig(model="m"),
        context,
        emit=seen.append,
        decide=gate,
        hooks=hooks,
    )
    return agent, hooks, seen, approver


def results(agent: Agent) -> list[ToolResult]:
    return [r for m in agent.messages for r in m.tool_results()]


def bash(command: str, call_id: str = "c1") -> Any:
    return script.tool_calls([(call_id, "bash", {"command": command})])


async def test_pre_tool_use_exit_2_refuses_the_call_with_the_hooks_stderr(tmp_path: Path) -> None:
    tables = {
        "no-rm": {
            "event": "PreToolUse",
            "matcher": "Bash",
            "command": shell(tmp_path, "g", BLOCK_RM),
        }
    }
    tool = FakeBash()
    agent, _, seen, _ = make(
        tmp_path,
        tables,
        [bash("rm -rf x"), bash("ls", "c2"), script.text("ok")],
        tools=[tool],
        mode=Mode.BYPASS,
    )
    await agent.run_turn("clean up")
    first, second = results(agent)
    assert first.is_error
    assert first.content == (
        "Blocked by a hook before bash ran: PreToolUse hook no-rm: "
        "rm -rf is not allowed here: use git clean -n first"
    )
    assert second.content == "ran ls"
    assert tool.ran == ["ls"]
    assert (
        ev.HookReported(
            "no-rm", "PreToolUse", "blocked", "rm -rf is not allowed here: use git clean -n first"
        )
        in seen
    )


async def test_the_payload_carries_claude_codes_fields_and_ours(tmp_path: Path) -> None:
    log = tmp_path / "payload.json"
    tables = {"log": {"event": "PreToolUse", "command": f"cat > {log}"}}
    records = tmp_path / "s1.jsonl"
    agent, _, _, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], transcript=records, mode=Mode.BYPASS
    )
    await agent.run_turn("go")
    assert json.loads(log.read_text()) == {
        "session_id": "s1",
        "transcript_path": str(records),
        "cwd": str(tmp_path),
        "permission_mode": "bypass",
        "hook_event_name": "PreToolUse",
        "role": "developer",
        "bead": "b-7",
        "tool_name": "bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "c1",
    }


def decision(tmp_path: Path, answer: str) -> str:
    body = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": answer,
            "permissionDecisionReason": f"hook says {answer}",
        }
    }
    return shell(tmp_path, f"{answer}.sh", f"cat > /dev/null; echo '{json.dumps(body)}'\n")


async def test_an_allow_answers_the_question_the_gate_would_ask(tmp_path: Path) -> None:
    tables = {"ok": {"event": "PreToolUse", "command": decision(tmp_path, "allow")}}
    tool = FakeBash()
    agent, _, seen, approver = make(
        tmp_path, tables, [bash("make build"), script.text("ok")], tools=[tool]
    )
    await agent.run_turn("build")
    assert tool.ran == ["make build"]
    assert approver.requests == []  # nobody was asked
    assert any(isinstance(e, ev.HookReported) and e.outcome == "approved" for e in seen)


async def test_an_allow_never_passes_the_roles_ceiling(tmp_path: Path) -> None:
    tables = {"ok": {"event": "PreToolUse", "command": decision(tmp_path, "allow")}}
    call = script.tool_calls([("c1", "write_file", {"file_path": "a.txt", "content": "x"})])
    agent, _, _, approver = make(
        tmp_path,
        tables,
        [call, script.text("ok")],
        tools=[WriteFile()],
        mode=Mode.BYPASS,
        ceiling=CEILINGS["reviewer"],
    )
    await agent.run_turn("write")
    (result,) = results(agent)
    assert result.is_error
    assert result.content.startswith("Permission denied for write_file: The reviewer role")
    assert not (tmp_path / "a.txt").exists()
    assert approver.requests == []


async def test_an_allow_never_passes_a_deny_rule_or_plan_mode(tmp_path: Path) -> None:
    tables = {"ok": {"event": "PreToolUse", "command": decision(tmp_path, "allow")}}
    tool = FakeBash()
    agent, _, _, _ = make(
        tmp_path, tables, [bash("touch x"), script.text("ok")], tools=[tool], mode=Mode.PLAN
    )
    await agent.run_turn("go")
    (result,) = results(agent)
    assert result.content.startswith("Permission denied for bash:")
    assert tool.ran == []


async def test_a_deny_refuses_and_an_ask_asks_a_person_even_when_allowed(tmp_path: Path) -> None:
    tables = {
        "no": {"event": "PreToolUse", "matcher": "bash", "command": decision(tmp_path, "deny")}
    }
    tool = FakeBash()
    agent, _, _, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], tools=[tool], mode=Mode.BYPASS
    )
    await agent.run_turn("go")
    assert results(agent)[0].content == (
        "Blocked by a hook before bash ran: PreToolUse hook no: hook says deny"
    )
    tables = {"ask": {"event": "PreToolUse", "command": decision(tmp_path, "ask")}}
    approver = ScriptedApprover([ApproveOnce()])
    agent, _, _, _ = make(
        tmp_path,
        tables,
        [bash("ls"), script.text("ok")],
        tools=[tool],
        approver=approver,
        mode=Mode.BYPASS,
    )
    await agent.run_turn("go")
    assert [r.reason for r in approver.requests] == ["hook ask asks: hook says ask"]
    assert tool.ran == ["ls"]


async def test_post_tool_use_sees_the_response_and_can_tell_the_model(tmp_path: Path) -> None:
    seen_file = tmp_path / "post.json"
    body = {"decision": "block", "reason": "the output mentions a secret"}
    hook = shell(tmp_path, "post.sh", f"cat > {seen_file}; echo '{json.dumps(body)}'\n")
    tables = {"post": {"event": "PostToolUse", "matcher": "bash", "command": hook}}
    agent, _, _, _ = make(tmp_path, tables, [bash("ls"), script.text("ok")], mode=Mode.BYPASS)
    await agent.run_turn("go")
    payload = json.loads(seen_file.read_text())
    assert payload["hook_event_name"] == "PostToolUse"
    assert payload["tool_response"] == {"content": "ran ls", "is_error": False}
    assert results(agent)[0].content == (
        "ran ls\n\nPostToolUse hook post: the output mentions a secret"
    )


async def test_stop_with_decision_block_continues_the_turn_up_to_max_blocks(
    tmp_path: Path,
) -> None:
    body = {"decision": "block", "reason": "run the tests before you stop"}
    hook = shell(tmp_path, "stop.sh", f"cat >> {tmp_path}/stops; echo '{json.dumps(body)}'\n")
    tables = {"tests": {"event": "Stop", "command": hook, "max_blocks": 1}}
    agent, _, seen, _ = make(
        tmp_path, tables, [script.text("done"), script.text("really done")], mode=Mode.BYPASS
    )
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert finished.steps == 2
    texts = [b.text for m in agent.messages for b in m.content if hasattr(b, "text")]
    assert texts == ["go", "done", "Stop hook tests: run the tests before you stop", "really done"]
    actives = [
        json.loads(line)["stop_hook_active"]
        for line in (tmp_path / "stops").read_text().replace("}{", "}\n{").splitlines()
    ]
    assert actives == [False, True]
    last = [e for e in seen if isinstance(e, ev.HookReported)][-1]
    assert last.outcome == "error"
    assert "max_blocks = 1" in last.detail


async def test_a_failing_hook_is_reported_and_the_turn_goes_on(tmp_path: Path) -> None:
    tables = {
        "broken": {"event": "PreToolUse", "command": "echo oops >&2; exit 1"},
        "slow": {"event": "PostToolUse", "command": "sleep 30", "timeout": 0.3},
    }
    tool = FakeBash()
    agent, _, seen, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], tools=[tool], mode=Mode.BYPASS
    )
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert tool.ran == ["ls"]
    reports = [(e.name, e.outcome, e.detail) for e in seen if isinstance(e, ev.HookReported)]
    assert reports == [
        ("broken", "error", "exit 1: oops"),
        ("slow", "timeout", "timed out after 0.3 s: its process group was killed"),
    ]


async def test_user_prompt_submit_rejects_or_adds_context(tmp_path: Path) -> None:
    gate = shell(
        tmp_path,
        "p.sh",
        """input=$(cat)
case "$input" in
  *password*) echo "no secrets in prompts" >&2; exit 2 ;;
esac
echo "branch: main"
""",
    )
    tables = {"prompts": {"event": "UserPromptSubmit", "command": gate}}
    _, hooks, _, _ = make(tmp_path, tables, [])
    with pytest.raises(
        PromptBlocked, match="the UserPromptSubmit hook prompts rejected it: no secrets"
    ):
        await hooks.prompt_submit("my password is hunter2")
    assert await hooks.prompt_submit("fix the build") == "branch: main"


async def test_pre_compact_runs_with_its_trigger(tmp_path: Path) -> None:
    log = tmp_path / "compact.json"
    tables = {"c": {"event": "PreCompact", "matcher": "manual", "command": f"cat > {log}"}}
    _, hooks, _, _ = make(tmp_path, tables, [])
    await hooks.before_compact("auto", "")
    assert not log.exists()
    await hooks.before_compact("manual", "the parser")
    payload = json.loads(log.read_text())
    assert (payload["trigger"], payload["custom_instructions"]) == ("manual", "the parser")


async def test_an_approval_request_runs_the_notification_hooks_first(tmp_path: Path) -> None:
    log = tmp_path / "note.json"
    tables = {"note": {"event": "Notification", "command": f"cat > {log}"}}
    tool = FakeBash()
    approver = ScriptedApprover([ApproveOnce()])
    agent, _, _, _ = make(
        tmp_path, tables, [bash("make build"), script.text("ok")], tools=[tool], approver=approver
    )
    await agent.run_turn("build")
    assert tool.ran == ["make build"]
    assert len(approver.requests) == 1
    payload = json.loads(log.read_text())
    assert payload["hook_event_name"] == "Notification"
    assert payload["notification_type"] == "permission_prompt"
    assert payload["message"].startswith("anvil needs your permission to use bash: ")
    assert payload["tool_input"] == {"command": "make build"}


async def test_session_start_adds_context_and_session_end_runs(tmp_path: Path) -> None:
    ended = tmp_path / "ended.json"
    tables = {
        "start-json": {
            "event": "SessionStart",
            "matcher": "startup",
            "command": """echo '{"hookSpecificOutput": {"additionalContext": "on branch main"}}'""",
        },
        "start-text": {"event": "SessionStart", "command": "echo 'open issues: 3'"},
        "end": {"event": "SessionEnd", "command": f"cat > {ended}"},
    }
    _, hooks, _, _ = make(tmp_path, tables, [])
    assert await hooks.session_start("startup") == "on branch main\n\nopen issues: 3"
    assert await hooks.session_start("resume") == "open issues: 3"
    await hooks.session_end("killed")
    payload = json.loads(ended.read_text())
    assert (payload["hook_event_name"], payload["reason"]) == ("SessionEnd", "killed")


async def test_hooks_follow_the_config_as_it_is_now(tmp_path: Path) -> None:
    """Each point asks the source: a new config version (a grant, an edit) applies at once."""
    versions: list[Mapping[str, Mapping[str, Any]]] = [{}]
    hooks = SessionHooks(
        lambda: versions[-1],
        session_id="s1",
        cwd=tmp_path,
        role=lambda: "developer",
        mode=lambda: "default",
        emit=lambda event: None,
    )
    call = ToolCall("c0", "bash", {"command": "rm -rf a"})
    assert await hooks.before_call(call) is None
    versions.append({"no-rm": {"event": "PreToolUse", "command": shell(tmp_path, "g", BLOCK_RM)}})
    refused = await hooks.before_call(call)
    assert refused is not None
    assert "rm -rf is not allowed here" in refused
    versions.append({})
    assert await hooks.before_call(call) is None


async def test_tables_the_schema_did_not_check_run_nothing_and_say_so(tmp_path: Path) -> None:
    tables = {"odd": {"event": "BeforeTool", "command": "touch ran"}}
    tool = FakeBash()
    agent, _, seen, _ = make(
        tmp_path, tables, [bash("ls"), script.text("ok")], tools=[tool], mode=Mode.BYPASS
    )
    finished = await agent.run_turn("go")
    assert finished.outcome is ev.TurnOutcome.DONE
    assert tool.ran == ["ls"]
    reports = [e for e in seen if isinstance(e, ev.HookReported)]
    assert len(reports) == 1  # once, not at every point
    assert reports[0].detail.startswith("the hooks are not valid (ValueError(")
    assert not (tmp_path / "ran").exists()


async def test_a_hook_runs_with_the_environment_and_the_sessions_variables(tmp_path: Path) -> None:
    """The environment is copied when a hook first runs, once: every hook sees the same one."""
    seen_env: list[Mapping[str, str]] = []

    async def runner(spec: Any, payload: Any, *, cwd: Path, env: Mapping[str, str]) -> Any:
        seen_env.append(env)
        return await run_hook(spec, payload, cwd=cwd, env=env)

    tables = {"start": {"event": "SessionStart", "command": "echo $ANVIL_SESSION_ID $MARK"}}
    hooks = SessionHooks(
        lambda: tables,
        session_id="s9",
        cwd=tmp_path,
        role=lambda: "developer",
        mode=lambda: "default",
        emit=lambda event: None,
        environ={"MARK": "from-the-daemon", "PATH": "/usr/bin:/bin"},
        runner=runner,
    )
    assert await hooks.session_start("startup") == "s9 from-the-daemon"
    assert await hooks.session_start("resume") == "s9 from-the-daemon"
    assert seen_env[0] is seen_env[1]
    assert seen_env[0]["CLAUDE_PROJECT_DIR"] == seen_env[0]["ANVIL_PROJECT_DIR"] == str(tmp_path)
