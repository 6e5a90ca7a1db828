"""The gate in the loop: Agent.run_turn with ScriptedProvider and a ScriptedApprover (11.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import trio
import trio.testing

from anvild.agent import events as ev
from anvild.agent.loop import Agent, AgentConfig
from anvild.agent.permissions.approval import (
    HEADLESS_MESSAGE,
    ApproveAlways,
    ApproveOnce,
    HeadlessApprover,
    Reject,
)
from anvild.agent.permissions.gate import PermissionGate
from anvild.agent.permissions.policy import Allow, Decision, Mode, Policy
from anvild.agent.permissions.rules import RuleSet
from anvild.agent.permissions.testing import HANG, ScriptedApprover
from anvild.agent.tools.base import Args, Cancellation, Effects, ToolContext, ToolOutput
from anvild.agent.tools.files import ReadFile
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ToolCall, ToolResult
from anvild.sandbox import WorkspaceWrite
from anvild.sandbox.secrets import Redactor

KEY = "sk-proj-PLANTED0123456789abcdefghijklmnop"


class FakeBash:
    """Named like the shell tool, so the policy analyses its command; records what it ran."""

    name = "bash"
    description = "Run a command."
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    }
    cancellation = Cancellation.KILLS_CHILDREN

    def __init__(self, output: str = "ok") -> None:
        self.ran: list[str] = []
        self.output = output

    def effects(self, args: Args) -> Effects:
        return Effects(subprocess=True, unknown=True)

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        self.ran.append(args["command"])
        return ToolOutput(self.output)


def canonical(path: Path) -> Path:
    return path.resolve()


def bash_calls(*commands: str, prefix: str = "c") -> list[Any]:
    return [
        script.tool_calls([(f"{prefix}{i}", "bash", {"command": c})])
        for i, c in enumerate(commands, 1)
    ]


def make(
    tmp_path: Path,
    scripts: list[Any],
    approver: Any,
    *,
    tools: list[Any],
    redact: Any = None,
    **policy: Any,
) -> tuple[Agent, PermissionGate, list[ev.AgentEvent]]:
    registry = ToolRegistry(tools)
    context = ToolContext(cwd=tmp_path)
    policy.setdefault("sandbox", WorkspaceWrite())
    gate = PermissionGate(Policy(canonical(tmp_path), **policy), approver, registry, context)
    seen: list[ev.AgentEvent] = []
    agent = Agent(
        ScriptedProvider(scripts),
        registry,
        AgentConfig(model="m"),
        context,
        emit=seen.append,
        decide=gate,
        redact=redact,
    )
    return agent, gate, seen


def results(agent: Agent) -> list[ToolResult]:
    return [r for m in agent.messages for r in m.tool_results()]


async def test_a_denied_call_never_runs_and_the_model_gets_the_reason(tmp_path: Path) -> None:
    bash = FakeBash()
    approver = ScriptedApprover()
    agent, _, _ = make(
        tmp_path,
        [*bash_calls("cargo test && rm -rf /"), script.text("done")],
        approver,
        tools=[bash],
        rules=RuleSet.parse(allow=["bash(cargo test:*)"]),
    )
    finished = await agent.run_turn("test it")
    assert finished.outcome is ev.TurnOutcome.DONE
    (result,) = results(agent)
    assert result.is_error
    assert result.content.startswith("Permission denied for bash: `rm -rf /` is never run")
    assert bash.ran == []
    assert approver.requests == []  # a deny is not a question


async def test_a_rejection_with_feedback_reaches_the_model_and_the_tool_never_runs(
    tmp_path: Path,
) -> None:
    bash = FakeBash()
    approver = ScriptedApprover([Reject("use cargo check instead")])
    agent, _, _ = make(
        tmp_path, [*bash_calls("cargo build"), script.text("ok")], approver, tools=[bash]
    )
    await agent.run_turn("build")
    (result,) = results(agent)
    assert result == ToolResult(
        "c1",
        "Permission denied for bash: the user rejected this call and said: use cargo check instead",
        is_error=True,
    )
    assert bash.ran == []
    (request,) = approver.requests
    assert (request.id, request.tool, request.arguments) == (
        "c1",
        "bash",
        {"command": "cargo build"},
    )
    assert "`cargo build`" in request.reason
    assert request.always == ("allow bash(cargo build:*)",)


async def test_a_rejection_without_feedback_says_not_to_retry(tmp_path: Path) -> None:
    bash = FakeBash()
    agent, _, _ = make(
        tmp_path, [*bash_calls("ls"), script.text("ok")], ScriptedApprover([Reject()]), tools=[bash]
    )
    await agent.run_turn("go")
    assert "Do not retry it as it is" in results(agent)[0].content
    assert bash.ran == []


async def test_headless_denies_with_the_actionable_message(tmp_path: Path) -> None:
    bash = FakeBash()
    agent, _, _ = make(
        tmp_path, [*bash_calls("make"), script.text("ok")], HeadlessApprover(), tools=[bash]
    )
    await agent.run_turn("go")
    assert results(agent)[0].content == f"Permission denied for bash: {HEADLESS_MESSAGE}"
    assert bash.ran == []


async def test_always_on_cargo_test_lib_stops_the_next_prompt(tmp_path: Path) -> None:
    bash = FakeBash()
    approver = ScriptedApprover([ApproveAlways()])
    agent, gate, _ = make(
        tmp_path,
        [
            *bash_calls("cargo test --lib", "cargo test --lib", "cargo test --doc"),
            script.text("ok"),
        ],
        approver,
        tools=[bash],
    )
    await agent.run_turn("go")
    assert bash.ran == ["cargo test --lib", "cargo test --lib", "cargo test --doc"]
    assert len(approver.requests) == 1
    assert [str(r) for r in gate.policy.session_rules] == ["bash(cargo test:*)"]


async def test_approve_once_does_not_remember(tmp_path: Path) -> None:
    bash = FakeBash()
    approver = ScriptedApprover([ApproveOnce(), ApproveOnce()])
    agent, gate, _ = make(
        tmp_path, [*bash_calls("ls", "ls"), script.text("ok")], approver, tools=[bash]
    )
    await agent.run_turn("go")
    assert bash.ran == ["ls", "ls"]
    assert len(approver.requests) == 2
    assert gate.policy.session_rules == ()


async def test_cancel_while_waiting_for_approval_cancels_the_turn_cleanly(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    bash = FakeBash()
    approver = ScriptedApprover([HANG])
    agent, _, seen = make(
        tmp_path, [*bash_calls("cargo build"), script.text("never")], approver, tools=[bash]
    )
    outcome: list[ev.TurnFinished] = []

    async def run() -> None:
        outcome.append(await agent.run_turn("go"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        # The gate resolves paths in a worker thread before it asks, and a task waiting on a
        # thread counts as blocked: wait for the question itself. (No fail_after here: the
        # autojump clock would jump past any deadline while the thread runs.)
        await approver.wait_asked()
        await trio.testing.wait_all_tasks_blocked()
        assert len(approver.requests) == 1
        assert agent.cancel()
    assert outcome[0].outcome is ev.TurnOutcome.CANCELLED
    assert bash.ran == []
    (result,) = results(agent)
    assert result.is_error
    assert result.content.startswith("Not run")
    assert seen[-1] == outcome[0]


async def test_invalid_arguments_are_denied_with_the_validation_message(tmp_path: Path) -> None:
    bash = FakeBash()
    approver = ScriptedApprover()
    agent, _, _ = make(
        tmp_path,
        [script.tool_calls([("c1", "bash", {"cmd": "ls"})]), script.text("ok")],
        approver,
        tools=[bash],
        mode=Mode.BYPASS,
    )
    await agent.run_turn("go")
    content = results(agent)[0].content
    assert content.startswith("Permission denied for bash: Invalid value for `command`")
    assert approver.requests == []
    assert bash.ran == []


async def test_reads_run_without_asking_and_outside_reads_ask(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    approver = ScriptedApprover([Reject("stay in the workspace")])
    agent, _, _ = make(
        tmp_path,
        [
            script.tool_calls(
                [
                    ("r1", "read_file", {"file_path": "a.txt"}),
                    ("r2", "read_file", {"file_path": "/etc/hostname"}),
                ]
            ),
            script.text("ok"),
        ],
        approver,
        tools=[ReadFile()],
        rules=RuleSet.parse(allow=["read_file"]),
    )
    await agent.run_turn("read")
    inside, outside = results(agent)
    assert "hello" in inside.content
    assert not inside.is_error
    assert outside.is_error
    assert "stay in the workspace" in outside.content
    (request,) = approver.requests
    assert "outside the workspace" in request.reason


async def test_a_planted_key_never_appears_in_a_tool_result(tmp_path: Path) -> None:
    bash = FakeBash(output=f"OPENAI_API_KEY={KEY}\nPATH=/usr/bin\n")
    redactor = Redactor.from_environ({"OPENAI_API_KEY": KEY})
    agent, _, seen = make(
        tmp_path,
        [*bash_calls("env"), script.text("ok")],
        ScriptedApprover(),
        tools=[bash],
        redact=redactor.redact,
        mode=Mode.BYPASS,
    )
    await agent.run_turn("show env")
    assert bash.ran == ["env"]
    (result,) = results(agent)
    assert KEY not in result.content
    assert "[redacted:OPENAI_API_KEY]" in result.content
    assert all(KEY not in repr(event) for event in seen)


async def test_decisions_can_be_observed(tmp_path: Path) -> None:
    seen: list[tuple[str, Decision]] = []
    registry = ToolRegistry([FakeBash()])
    gate = PermissionGate(
        Policy(canonical(tmp_path), mode=Mode.BYPASS, sandbox=WorkspaceWrite()),
        ScriptedApprover(),
        registry,
        ToolContext(cwd=tmp_path),
        on_decision=lambda call, decision: seen.append((call.id, decision)),
    )
    await gate(ToolCall("x1", "bash", {"command": "ls"}))
    assert seen == [("x1", Allow())]
