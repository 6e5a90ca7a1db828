"""The `task` tool over a real `SessionManager` with scripted providers: two calls of one step
run two children at the same time, each with `parent`, answers as the results, tokens in the
parent's `cost`; cancelling the parent cancels both; depth and fan-out limits; a child never
has more authority than its parent; agent definitions; the family survives a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from anvild.agent.tools.base import Failed, InvalidArgs, ToolContext
from anvild.config import ConfigFileError, load
from anvild.config.load import SubagentLimits
from anvild.config.trust import authority_of
from anvild.coord.agents import discover, parse_definition
from anvild.coord.subagents import SubagentTools, TaskTool, within
from anvild.llm.stream import StreamEvent, Usage
from anvild.llm.testing import Pause, Script, ScriptedProvider, script
from anvild.llm.types import ChatRequest, Text, ToolResult
from anvild.sandbox import ReadOnly
from anvild.session import NewSession, Session, SessionManager, SessionStatus, ToolSetup
from anvild.session import roles as session_roles
from anvild.session.manager import CHILD_ORPHANED, chain_tools
from anvild.store import PromptQueued, SessionStore
from anvild.tree.family import children_text
from tests.unit.session.support import Models, file_tools, settings, target, workspace

USAGE = Usage(input=100, output=10, cache_read=0, cache_write=0)


def last_text(request: ChatRequest) -> str:
    """The text of the request's last message (tool results included)."""
    parts = []
    for block in request.messages[-1].content:
        if isinstance(block, Text):
            parts.append(block.text)
        elif isinstance(block, ToolResult):
            parts.append(block.content)
    return "\n".join(parts)


class Recording(ScriptedProvider):
    """A scripted provider that logs when each request's stream opens and closes, by a key."""

    def __init__(self, respond: Callable[[ChatRequest], Script], key: Callable[[str], str]):
        super().__init__([], respond=respond)
        self.log: list[str] = []
        self._key = key
        self._logged = trio.Event()

    def _append(self, line: str) -> None:
        self.log.append(line)
        self._logged.set()
        self._logged = trio.Event()

    async def until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._logged.wait()

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        key = self._key(last_text(request))
        self._append(f"open {key}")
        try:
            async with super().stream(request) as events:
                yield events
        finally:
            self._append(f"close {key}")


@asynccontextmanager
async def delegating(
    tmp_path: Path, provider: ScriptedProvider, **limits: Any
) -> AsyncIterator[tuple[SessionManager, SubagentTools]]:
    subagents = SubagentTools(user_config_dir=tmp_path / "config", **limits)
    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        Models({"fake": target(provider, pricing=None)}),
        settings=settings(tmp_path, reap_delay=300.0),
        tools=chain_tools(file_tools(), subagents.tools),
        default_cwd=workspace(tmp_path),
    )
    subagents.bind(manager)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager, subagents
        nursery.cancel_scope.cancel()


def task_of(subagents: SubagentTools, session: Session, tmp_path: Path) -> TaskTool:
    sandbox_role = session_roles.sandbox_role(session.role, user_dir=tmp_path / "none")
    setup = ToolSetup(
        Path(session.cwd), session.role, ReadOnly(), sandbox_role, session_id=session.id
    )
    tools = subagents.tools(setup)
    assert [tool.name for tool in tools] == ["task"]
    tool = tools[0]
    assert isinstance(tool, TaskTool)
    return tool


def two_tasks_then(final: str) -> Script:
    return script.tool_calls(
        [
            ("t1", "task", {"prompt": "alpha: count the files"}),
            ("t2", "task", {"prompt": "beta: read the readme"}),
        ],
        usage=USAGE,
    )


def kind(text: str) -> str:
    for word in ("alpha", "beta"):
        if text.startswith(word):
            return word
    return "parent"


async def test_two_calls_in_one_step_run_two_children_at_once(tmp_path: Path) -> None:
    def respond(request: ChatRequest) -> Script:
        text = last_text(request)
        if text.startswith("alpha"):
            return [Pause(0.3), *script.text("alpha answer: 3 files", usage=USAGE)]
        if text.startswith("beta"):
            return [Pause(0.3), *script.text("beta answer: it says hi", usage=USAGE)]
        if "alpha answer" in text:
            return script.text("both answered", usage=USAGE)
        return two_tasks_then("both answered")

    provider = Recording(respond, kind)
    async with delegating(tmp_path, provider) as (manager, _):
        parent = await manager.create(NewSession(role="developer"))
        seq = parent.submit("delegate two things")
        await parent.wait_handled(seq)
        assert parent.out == "both answered\n"
        # Both children's requests opened before either closed: they ran at the same time.
        children_log = [line for line in provider.log if not line.endswith("parent")]
        assert [line.split()[0] for line in children_log] == ["open", "open", "close", "close"]
        children = manager.children(parent.id)
        assert [c.role for c in children] == ["developer", "developer"]
        for child in children:
            session = manager.get(child.id)
            assert session.record.parent == parent.id
            assert manager.parent_of(child.id) == parent.id
            assert session.ephemeral
            assert child.outcome == "done"
        # the answers are the two results the parent's next request carried
        results = last_text(provider.requests[-1])
        assert "alpha answer: 3 files" in results
        assert "beta answer: it says hi" in results
        assert f"agent/{children[0].id}/out" in results
        # the children's tokens in the parent's cost, shown apart
        cost = parent.cost_text()
        assert "children 2\n" in cost
        assert "children_input 200\n" in cost
        assert "children_output 20\n" in cost
        assert "input 200\n" in cost  # the parent's own two requests
        lines = children_text(manager, parent.id).splitlines()
        assert [line.split("\t")[0] for line in lines] == [c.id for c in children]
        assert all(line.endswith("\tdone") for line in lines)


async def test_cancelling_the_parent_cancels_both_children(tmp_path: Path) -> None:
    def respond(request: ChatRequest) -> Script:
        text = last_text(request)
        if text.startswith(("alpha", "beta")):
            return [Pause(1000), *script.text("never")]
        if "Interrupted" in text or "cancelled" in text:
            return script.text("unused")
        return two_tasks_then("unused")

    provider = Recording(respond, kind)
    async with delegating(tmp_path, provider) as (manager, _):
        parent = await manager.create(NewSession(role="developer"))
        parent.submit("delegate and wait")
        with trio.fail_after(10):
            await provider.until(lambda: sum(line.startswith("open") for line in provider.log) == 3)
        children = [manager.get(c.id) for c in manager.children(parent.id)]
        assert [c.status for c in children] == [SessionStatus.RUNNING] * 2
        with trio.fail_after(20):
            await parent.cancel()
        assert parent.record.last_turn is not None
        assert parent.record.last_turn.outcome == "cancelled"
        for child in children:
            turn = child.record.last_turn
            assert turn is not None
            assert turn.outcome == "cancelled"
        with trio.fail_after(10):
            for child in children:  # each then exits (ephemeral), listed until it is reaped
                assert await child.wait_handled(child.accepted_seq()) is SessionStatus.EXITED
        assert [c.outcome for c in manager.children(parent.id)] == ["cancelled", "cancelled"]


async def test_depth_and_fan_out_limits_refuse_clearly(tmp_path: Path) -> None:
    provider = ScriptedProvider([])
    async with delegating(tmp_path, provider, max_depth=2, max_per_turn=1) as (manager, subs):
        top = await manager.create(NewSession(role="developer"))
        one = await manager.create(NewSession(role="developer", parent=top.id))
        two = await manager.create(NewSession(role="developer", parent=one.id))
        assert (manager.depth(top.id), manager.depth(one.id), manager.depth(two.id)) == (0, 1, 2)
        ctx = ToolContext(cwd=Path(two.cwd))
        with pytest.raises(Failed, match=r"would be 3 deep, deeper than \[subagents\] max_depth"):
            await task_of(subs, two, tmp_path).call({"prompt": "go deeper"}, ctx)
        assert len(manager.sessions()) == 3  # nothing started
        # max_per_turn = 1: the second child of the same turn is refused before it starts
        subs.count(top)
        with pytest.raises(Failed, match=r"already started 1 child sessions.*max_per_turn = 1"):
            subs.count(top)


async def test_a_child_never_has_more_authority_than_its_parent(tmp_path: Path) -> None:
    target_file = workspace(tmp_path) / "written.txt"

    def respond(request: ChatRequest) -> Script:
        text = last_text(request)
        if text.startswith("write"):
            args = {"file_path": "written.txt", "content": "x"}
            return script.tool_call("w1", "write_file", args)
        if "written.txt" in text or "Permission denied" in text or "role" in text:
            return script.text(f"child saw: {text[:300]}")
        return script.text("?")

    provider = ScriptedProvider([], respond=respond)
    roles = ("developer", "reviewer")
    async with delegating(tmp_path, provider, roles=roles) as (manager, subs):
        reviewer = await manager.create(NewSession(role="reviewer"))
        tool = task_of(subs, reviewer, tmp_path)
        ctx = ToolContext(cwd=Path(reviewer.cwd))
        with pytest.raises(Failed, match="role developer may do more than your role reviewer"):
            await tool.call({"prompt": "write it", "role": "developer"}, ctx)
        with pytest.raises(InvalidArgs, match="cannot start a conductor"):
            await tool.call({"prompt": "write it", "role": "conductor"}, ctx)
        result = await tool.call({"prompt": "write written.txt"}, ctx)
        (child,) = manager.children(reviewer.id)
        assert child.role == "reviewer"
        assert manager.get(child.id).sandbox == "read-only"
        assert "Permission denied for write_file: The reviewer role makes no" in result.content
        assert not target_file.exists()
    # off for reviewer by default
    default = SubagentTools()
    sandbox_role = session_roles.sandbox_role("reviewer", user_dir=tmp_path / "none")
    setup = ToolSetup(tmp_path, "reviewer", ReadOnly(), sandbox_role, session_id="x")
    assert default.tools(setup) == []
    ceiling = session_roles.ceiling
    assert within(ceiling("reviewer"), ceiling("tester"))
    assert not within(ceiling("developer"), ceiling("tester"))
    assert within(ceiling("tester"), ceiling("developer"))


async def test_agent_definitions_add_instructions_and_only_narrow(tmp_path: Path) -> None:
    work = workspace(tmp_path)
    agents = work / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "checker.md").write_text(
        "---\nname: checker\ndescription: Checks things\nrole: reviewer\nmodel: inherit\n"
        "tools: Read, Grep\n---\nYou are a careful checker.\n"
    )
    (agents / "broken.md").write_text("no frontmatter here\n")
    user_agents = tmp_path / "config" / "agents"
    user_agents.mkdir(parents=True)
    (user_agents / "checker.md").write_text("---\nname: checker\ndescription: shadowed\n---\n")
    found = discover(work, tmp_path / "config")
    assert found.by_name["checker"].path == agents / "checker.md"  # the project's wins
    assert found.by_name["checker"].tools == ("read_file", "grep")
    assert any("broken.md: no frontmatter" in p for p in found.problems)
    assert parse_definition(agents / "checker.md").model is None  # inherit: the parent's

    def respond(request: ChatRequest) -> Script:
        text = last_text(request)
        if text.startswith("You are a careful checker"):
            return script.tool_call("w1", "write_file", {"file_path": "x.txt", "content": "x"})
        return script.text(f"child saw: {text[:200]}")

    provider = ScriptedProvider([], respond=respond)
    async with delegating(tmp_path, provider) as (manager, subs):
        parent = await manager.create(NewSession(role="developer"))
        tool = task_of(subs, parent, tmp_path)
        assert "- checker [reviewer]: Checks things" in tool.description
        ctx = ToolContext(cwd=work)
        with pytest.raises(InvalidArgs, match="agent 'nobody' is not defined"):
            await tool.call({"prompt": "p", "agent": "nobody"}, ctx)
        result = await tool.call({"prompt": "check it", "agent": "checker"}, ctx)
        (child,) = manager.children(parent.id)
        assert child.role == "reviewer"
        assert "may use only these tools: grep, read_file" in result.content
        assert not (work / "x.txt").exists()


async def test_the_family_survives_a_restart(tmp_path: Path) -> None:
    def respond(request: ChatRequest) -> Script:
        text = last_text(request)
        if text.startswith("alpha"):
            return script.text("alpha answer", usage=USAGE)
        if "alpha answer" in text:
            return script.text("done", usage=USAGE)
        return script.tool_call("t1", "task", {"prompt": "alpha: go"}, usage=USAGE)

    provider = ScriptedProvider([], respond=respond)
    async with delegating(tmp_path, provider) as (manager, _):
        parent = await manager.create(NewSession(role="developer"))
        await parent.wait_handled(parent.submit("delegate"))
        (child,) = manager.children(parent.id)
        before = parent.cost_text()
    async with delegating(tmp_path, provider) as (manager, _):
        restored = manager.get(parent.id)
        assert manager.parent_of(child.id) == parent.id
        (again,) = manager.children(parent.id)
        assert (again.id, again.role, again.outcome) == (child.id, "developer", "done")
        assert restored.cost_text() == before
        assert "children 1\n" in before


async def test_a_restart_ends_every_live_child_and_keeps_a_plain_ephemeral_session(
    tmp_path: Path,
) -> None:
    """A child live at a restart ends with the reason, whatever it was doing: one whose prompt
    was queued and not taken (it never runs), one whose turn the stop cut. An ephemeral session
    of the user's (no parent) that has not run its prompt is restored: it may still get it."""

    def respond(request: ChatRequest) -> Script:
        if last_text(request).startswith("slow"):
            return [Pause(1000), *script.text("never")]
        return script.text("unused")

    provider = Recording(respond, lambda text: text.split(" ")[0])
    async with delegating(tmp_path, provider) as (manager, _):
        parent = await manager.create(NewSession(role="developer"))
        idle = await manager.create(NewSession(role="developer", ephemeral=True, parent=parent.id))
        cut = await manager.create(NewSession(role="developer", ephemeral=True, parent=parent.id))
        plain = await manager.create(NewSession(ephemeral=True))
        cut.submit("slow job")
        with trio.fail_after(10):
            await provider.until(lambda: "open slow" in provider.log)
        assert cut.status is SessionStatus.RUNNING
    store = SessionStore(tmp_path / "data" / "sessions")
    journal, _ = store.load(idle.id)  # as a crash just after the task call queued its prompt
    with journal:
        journal.append(PromptQueued("p9", "queued job"), sync=True)
    async with delegating(tmp_path, provider) as (manager, _):
        assert manager.ids() == [parent.id, plain.id]
        assert manager.get(plain.id).status is SessionStatus.IDLE
        children = {c.id: (c.state, c.outcome) for c in manager.children(parent.id)}
        # the stop cancelled the cut turn and recorded so: that outcome stays
        assert children == {idle.id: ("exited", "-"), cut.id: ("exited", "cancelled")}
        for child in (idle, cut):
            assert store.read(child.id).state.ended == CHILD_ORPHANED
        await trio.sleep(0.1)
        assert provider.log == ["open slow", "close slow"]  # nothing ran after the restart


def test_the_subagents_config_table(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"

    def limits(text: str) -> SubagentLimits:
        user.write_text(text)
        return load(tmp_path, user_file=user, data_dir=tmp_path / "data", project=False).subagents

    assert limits("") == SubagentLimits(2, 8, ("developer", "planner", "tester", "conductor"))
    read = limits('[subagents]\nmax_depth = 1\nmax_per_turn = 3\nroles = ["reviewer"]\n')
    assert read == SubagentLimits(1, 3, ("reviewer",))
    with pytest.raises(ConfigFileError, match=r"subagents\.max_depth: expected a whole number"):
        limits("[subagents]\nmax_depth = 0\n")
    with pytest.raises(ConfigFileError, match=r"subagents\.roles: expected one of"):
        limits('[subagents]\nroles = ["boss"]\n')
    assert authority_of(("subagents", "max_depth")) == "budget"
