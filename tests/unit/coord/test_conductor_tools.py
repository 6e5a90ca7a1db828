"""The conductor's tools over a real `SessionManager` with scripted providers: what a conductor
may start (never full-access, never a wider sandbox than the role's, never another conductor,
only inside its workspace, at most N), that it drives only its own sessions, and the
start -> send -> wait -> read round trip, directly and through the agent loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from anvild.agent.tools.base import Failed, InvalidArgs, Tool, ToolContext, ToolOutput
from anvild.beads import BeadStatus, BeadStore, ConvoyStatus
from anvild.coord.approvers import SessionApprovals
from anvild.coord.conductor_tools import BEAD_TOOL_NAMES, CONDUCTOR_TOOL_NAMES, ConductorTools
from anvild.llm import stream
from anvild.llm.testing import Pause, Script, ScriptedProvider, script
from anvild.mail.tools import AnswerApproval
from anvild.sandbox import ReadOnly
from anvild.session import NewSession, Session, SessionManager, SessionStatus, ToolSetup
from anvild.session import roles as session_roles
from anvild.session.manager import chain_tools
from anvild.store import SessionStore
from tests.unit.session.support import (
    Models,
    file_tools,
    loads_on_loop,
    settings,
    target,
    unloaded,
    workspace,
)


@asynccontextmanager
async def conducting(
    tmp_path: Path,
    scripts: Sequence[Script],
    *,
    max_sessions: int = 16,
    beads: BeadStore | None = None,
) -> AsyncIterator[tuple[SessionManager, ScriptedProvider, ConductorTools]]:
    provider = ScriptedProvider(scripts)
    conductor = ConductorTools(max_sessions=max_sessions, beads=beads)
    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        Models({"fake": target(provider)}),
        settings=settings(tmp_path),
        tools=chain_tools(file_tools(), conductor.tools),
        default_cwd=workspace(tmp_path),
    )
    conductor.bind(manager)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager, provider, conductor
        nursery.cancel_scope.cancel()


def setup_of(session: Session, tmp_path: Path) -> ToolSetup:
    sandbox_role = session_roles.sandbox_role(session.role, user_dir=tmp_path / "none")
    return ToolSetup(
        Path(session.cwd), session.role, ReadOnly(), sandbox_role, session_id=session.id
    )


class Tools:
    """The conductor tools of one conductor session, called directly."""

    def __init__(self, tools: list[Tool], cwd: Path) -> None:
        self.by_name = {tool.name: tool for tool in tools}
        self.ctx = ToolContext(cwd=cwd)

    async def __call__(self, tool: str, **args: Any) -> str:
        output: ToolOutput = await self.by_name[tool].call(args, self.ctx)
        return output.content


async def conductor_session(
    manager: SessionManager, conductor: ConductorTools, tmp_path: Path
) -> tuple[Session, Tools]:
    session = await manager.create(NewSession(role="conductor"))
    tools = conductor.tools(setup_of(session, tmp_path))
    return session, Tools(tools, Path(session.cwd))


async def test_only_conductor_sessions_get_the_tools(tmp_path: Path) -> None:
    async with conducting(tmp_path, []) as (manager, _, conductor):
        developer = await manager.create(NewSession(role="developer"))
        assert conductor.tools(setup_of(developer, tmp_path)) == []
        boss, tools = await conductor_session(manager, conductor, tmp_path)
        assert tuple(tools.by_name) == CONDUCTOR_TOOL_NAMES
        # a session's own tool list, as its agent sees it
        assert "start_session" in boss.agent.tools.names()
        assert "start_session" not in developer.agent.tools.names()


async def test_full_access_is_refused_with_a_precise_message(tmp_path: Path) -> None:
    async with conducting(tmp_path, []) as (manager, _, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        with pytest.raises(Failed, match="sandbox=full-access is refused") as refused:
            await tools("start_session", role="developer", sandbox="full-access")
        assert "Only the user grants full access" in str(refused.value)
        assert len(manager.sessions()) == 1  # nothing started


@pytest.mark.parametrize("role", ["reviewer", "planner", "tester"])
async def test_a_role_is_never_given_a_wider_sandbox(tmp_path: Path, role: str) -> None:
    async with conducting(tmp_path, []) as (manager, _, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        default = session_roles.sandbox_role(role, user_dir=tmp_path / "none").default_policy()
        if isinstance(default, ReadOnly):
            with pytest.raises(Failed, match=f"the {role} role runs read-only"):
                await tools("start_session", role=role, sandbox="workspace-write")
            assert len(manager.sessions()) == 1
        # read-only is never wider than the role's default
        started = await tools("start_session", role=role, sandbox="read-only", name="r")
        assert "sandbox read-only" in started


async def test_a_conductor_starts_no_conductor_and_stays_in_its_workspace(
    tmp_path: Path,
) -> None:
    async with conducting(tmp_path, []) as (manager, _, conductor):
        boss, tools = await conductor_session(manager, conductor, tmp_path)
        with pytest.raises(InvalidArgs, match="'conductor' cannot be started by a conductor"):
            await tools("start_session", role="conductor")
        with pytest.raises(Failed, match="outside your workspace"):
            await tools("start_session", role="developer", cwd=str(tmp_path))
        (Path(boss.cwd) / "sub").mkdir()
        escape = Path(boss.cwd) / "escape"
        escape.symlink_to(tmp_path)
        with pytest.raises(Failed, match="outside your workspace"):
            await tools("start_session", role="developer", cwd="escape")
        with pytest.raises(Failed, match="outside your workspace"):
            await tools("start_session", role="developer", cwd="../")
        started = await tools("start_session", role="developer", cwd="sub", name="dev")
        assert f"alias dev.{boss.id}" in started
        assert manager.get(f"dev.{boss.id}").cwd == str(Path(boss.cwd) / "sub")
        with pytest.raises(Failed, match=r"not started: .*taken"):
            await tools("start_session", role="developer", name="dev")


async def test_the_session_limit(tmp_path: Path) -> None:
    async with conducting(tmp_path, [], max_sessions=2) as (manager, _, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        await tools("start_session", role="developer")
        await tools("start_session", role="developer")
        with pytest.raises(Failed, match=r"already run 2 sessions, the most a conductor may run"):
            await tools("start_session", role="developer")
        listed = (await tools("my_sessions")).splitlines()
        assert [line.split("\t")[1] for line in listed] == [
            f"alias=developer1.{manager.sessions()[0].id}",
            f"alias=developer2.{manager.sessions()[0].id}",
        ]
        await tools("kill_session", session="developer1")
        await tools("start_session", role="developer")  # room again


async def test_a_conductor_drives_only_its_own_sessions(tmp_path: Path) -> None:
    async with conducting(tmp_path, []) as (manager, _, conductor):
        boss, tools = await conductor_session(manager, conductor, tmp_path)
        users = await manager.create(NewSession(role="developer", alias="mine"))
        other, other_tools = await conductor_session(manager, conductor, tmp_path)
        await other_tools("start_session", role="developer", name="dev")
        for key in (users.id, "mine", f"dev.{other.id}", other.id):
            for name in ("send_prompt", "read_out", "kill_session"):
                args: dict[str, Any] = {"session": key}
                if name == "send_prompt":
                    args["prompt"] = "do it"
                with pytest.raises(Failed, match="not started by you"):
                    await tools(name, **args)
            with pytest.raises(Failed, match="not started by you"):
                await tools("wait_sessions", sessions=[key])
        with pytest.raises(Failed, match="That is you"):
            await tools("read_out", session=boss.id)
        with pytest.raises(Failed, match="You have no session 'dev'"):
            await tools("read_out", session="dev")
        assert users.status is not SessionStatus.EXITED


async def test_start_send_wait_read_a_fan_out(tmp_path: Path) -> None:
    scripts = [script.text("answer one"), script.text("answer two")]
    async with conducting(tmp_path, scripts) as (manager, provider, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        await tools("start_session", role="reviewer", name="r1")
        await tools("start_session", role="reviewer", name="r2")
        assert "accepted" in await tools("send_prompt", session="r1", prompt="review A")
        assert "accepted" in await tools("send_prompt", session="r2", prompt="review B")
        waited = await tools("wait_sessions", sessions=["r1", "r2"])
        assert [line.rsplit(": ", 1)[1] for line in waited.splitlines()] == ["await", "await"]
        outs = {await tools("read_out", session="r1"), await tools("read_out", session="r2")}
        assert outs == {"answer one\n", "answer two\n"}
        assert manager.get("r1." + manager.sessions()[0].id).status is SessionStatus.IDLE
        assert len(provider.requests) == 2


async def test_wait_gives_up_after_its_timeout(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = [stream.TextDelta(0, "slow"), Pause(1000), *script.text("never")]
    async with conducting(tmp_path, [slow]) as (manager, _, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        await tools("start_session", role="developer", name="d")
        await tools("send_prompt", session="d", prompt="work")
        waited = await tools("wait_sessions", sessions=["d"], timeout_seconds=5)
        assert "still running after 5 s" in waited
        assert "no answer yet (state running)" in await tools("read_out", session="d")


async def test_through_the_agent_loop_the_refusal_reaches_the_model(tmp_path: Path) -> None:
    scripts = [
        script.tool_call("c1", "start_session", {"role": "developer", "sandbox": "full-access"}),
        script.text("I may not start that."),
    ]
    async with conducting(tmp_path, scripts) as (manager, provider, _):
        boss = await manager.create(NewSession(role="conductor"))
        seq = boss.submit("Start a developer without a sandbox.")
        await boss.wait_handled(seq)
        assert boss.out.strip() == "I may not start that."
        result = provider.requests[1].messages[-1].tool_results()[0]
        assert result.is_error
        assert "sandbox=full-access is refused" in result.content
        assert [s.id for s in manager.sessions()] == [boss.id]


async def test_sessions_at_rest_are_listed_and_checked_unbuilt_and_driven_built_off_the_loop(
    tmp_path: Path,
) -> None:
    store = await bead_store(tmp_path)
    async with conducting(tmp_path, [script.text("done")], beads=store) as (manager, _, conductor):
        boss, tools = await conductor_session(manager, conductor, tmp_path)
        await tools("start_session", role="developer", name="d1")
        await tools("start_session", role="reviewer", name="r1")
        await manager.create(NewSession(alias="mine"))
        bead = (await tools("create_bead", title="Do it", role="developer")).split()[2]
        loads = loads_on_loop(manager)
        await unloaded(manager, *(s for s in manager.built_sessions() if s is not boss))

        listed = (await tools("my_sessions")).splitlines()
        assert [line.split("\t")[1:] for line in listed] == [
            [f"alias=d1.{boss.id}", "role=developer", "state=idle", "model=fake"],
            [f"alias=r1.{boss.id}", "role=reviewer", "state=idle", "model=fake"],
        ]
        assert f"alias developer1.{boss.id}" in await tools("start_session", role="developer")
        await tools("assign_bead", bead=bead, session="d1")
        assert "completed" in await tools("complete_bead", bead=bead, result="done")
        with pytest.raises(Failed, match="not started by you"):
            await tools("send_prompt", session="mine", prompt="work")
        assert [s.alias for s in manager.built_sessions()] == [None, f"developer1.{boss.id}"]
        assert loads == []

        assert "accepted" in await tools("send_prompt", session="d1", prompt="work")
        assert loads == [False]


# -- beads and convoys ---------------------------------------------------------------------------


async def bead_store(tmp_path: Path) -> BeadStore:
    store = BeadStore(tmp_path / "beads")
    await store.open()
    return store


async def test_bead_tools_exist_only_with_a_bead_store(tmp_path: Path) -> None:
    async with conducting(tmp_path, []) as (manager, _, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        assert not set(BEAD_TOOL_NAMES) & set(tools.by_name)
    store = await bead_store(tmp_path)
    async with conducting(tmp_path, [], beads=store) as (manager, _, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        assert tuple(tools.by_name) == (*CONDUCTOR_TOOL_NAMES, *BEAD_TOOL_NAMES)


async def test_a_conductor_plans_beads_in_a_convoy_and_its_sessions_do_them(
    tmp_path: Path,
) -> None:
    store = await bead_store(tmp_path)
    scripts = [script.text("researched"), script.text("implemented")]
    async with conducting(tmp_path, scripts, beads=store) as (manager, _, conductor):
        boss, tools = await conductor_session(manager, conductor, tmp_path)
        made = await tools("create_convoy", title="Auth system", goal="OAuth", context="Go.")
        convoy = made.split()[2]
        assert store.convoy(convoy).coordinator == boss.id
        first = await tools("create_bead", title="Research auth", role="planner", convoy=convoy)
        research = first.split()[2]
        second = await tools(
            "create_bead",
            title="Implement OAuth",
            role="developer",
            depends_on=[research],
            convoy=convoy,
        )
        implement = second.split()[2]
        with pytest.raises(Failed, match="not assigned"):
            await tools("assign_bead", bead=implement, session="me")  # research is open
        await tools("start_session", role="planner", name="p")
        await tools("assign_bead", bead=research, session="p")
        await tools("send_prompt", session="p", prompt="research")
        await tools("wait_sessions", sessions=["p"])
        out = await tools("read_out", session="p")
        assert "completed" in await tools("complete_bead", bead=research, result=out)
        await tools("start_session", role="developer", name="d")
        await tools("assign_bead", bead=implement, session="d")
        await tools("complete_bead", bead=implement, result="implemented")
        assert store.bead(research).result.strip() == "researched"
        assert store.bead(implement).status is BeadStatus.COMPLETED
        assert store.convoy(convoy).status is ConvoyStatus.COMPLETED
        listing = await tools("read_beads", convoy=convoy)
        assert "status=completed" in listing
        assert "researched" in listing
        done = await trio.run_process(
            ["git", "-C", str(tmp_path / "beads"), "log", "--format=%s"], capture_stdout=True
        )
        log = done.stdout.decode()
        assert f"(by session {boss.id})" in log


async def test_a_conductor_assigns_and_completes_only_for_its_own_sessions(
    tmp_path: Path,
) -> None:
    store = await bead_store(tmp_path)
    async with conducting(tmp_path, [], beads=store) as (manager, _, conductor):
        _, tools = await conductor_session(manager, conductor, tmp_path)
        users = await manager.create(NewSession(role="developer", alias="mine"))
        bead = (await tools("create_bead", title="Do it", role="developer")).split()[2]
        with pytest.raises(Failed, match="not started by you"):
            await tools("assign_bead", bead=bead, session="mine")
        await store.claim(bead, users.id, by="user")
        with pytest.raises(Failed, match=f"assigned to {users.id}, not to one of your"):
            await tools("complete_bead", bead=bead, result="stolen")
        assert store.bead(bead).status is BeadStatus.IN_PROGRESS
        await tools("start_session", role="developer", name="d")
        with pytest.raises(Failed, match="not assigned: .*" + users.id):
            await tools("assign_bead", bead=bead, session="d")  # compare-and-swap
        with pytest.raises(Failed, match=r"not created: .*nope-001"):
            await tools("create_bead", title="X", role="developer", depends_on=["nope-001"])
        with pytest.raises(Failed, match="nope-001"):
            await tools("read_beads", beads=["nope-001"])
        second = (await tools("create_bead", title="Again", role="developer")).split()[2]
        await tools("assign_bead", bead=second, session="me")
        assert "failed" in await tools("complete_bead", bead=second, failed="no way")
        assert store.bead(second).reason == "no way"


async def test_a_conductor_names_only_itself_or_user_as_approver(tmp_path: Path) -> None:
    store = await bead_store(tmp_path)
    async with conducting(tmp_path, [], beads=store) as (manager, _, conductor):
        boss, tools = await conductor_session(manager, conductor, tmp_path)
        other = await manager.create(NewSession(alias="other"))
        said = await tools("start_session", role="developer", name="d", approver="me")
        assert said.endswith("approver you).")
        assert manager.get(f"d.{boss.id}").approver == boss.id
        await tools("start_session", role="developer", name="e")
        assert manager.get(f"e.{boss.id}").approver == "user"
        for who in ("other", other.id, "d"):
            with pytest.raises(InvalidArgs, match='names only itself \\("me"\\) or a person'):
                await tools("start_session", role="developer", name="x", approver=who)
            with pytest.raises(InvalidArgs, match="names only itself"):
                await tools("create_bead", title="T", role="developer", approver=who)
        made = await tools(
            "create_bead", title="Fix it", role="developer", requires_approval=True, approver="me"
        )
        assert store.bead(made.split()[2]).approver == boss.id
        plain = await tools("create_bead", title="Fix that", role="developer")
        assert store.bead(plain.split()[2]).approver == "user"
        assert f"x.{boss.id}" not in {s.alias for s in manager.sessions()}
        # the schema the model sees offers only the two
        schema = tools.by_name["start_session"].input_schema["properties"]["approver"]
        assert schema["enum"] == ["me", "user"]


async def test_a_conductor_approves_the_result_of_a_worker_it_started_as_approver(
    tmp_path: Path,
) -> None:
    async with conducting(tmp_path, []) as (manager, _, conductor):
        boss, tools = await conductor_session(manager, conductor, tmp_path)
        await tools("start_session", role="developer", name="d", approver="me")
        await tools("start_session", role="developer", name="e")
        mine, theirs = manager.get(f"d.{boss.id}"), manager.get(f"e.{boss.id}")
        for worker in (mine, theirs):
            worker.request_result_approval("Parser fixed.", "ctl")
        waited = await tools("wait_sessions", sessions=["d", "e"])
        assert waited.splitlines() == [
            f"{mine.id} ({mine.alias}): await_approval, its result (ctl) waits for approval by "
            "you (answer_approval)",
            f"{theirs.id} ({theirs.alias}): await_approval, its result (ctl) waits for approval "
            "by a person",
        ]
        answers = SessionApprovals()
        answers.bind(manager)
        answer = AnswerApproval(answers, boss.id)
        with pytest.raises(Failed, match="result can be approved only by user; ask a human"):
            await answer.call({"session": "e." + boss.id, "verdict": "approve"}, tools.ctx)
        said = await answer.call({"session": "d", "verdict": "approve"}, tools.ctx)  # short name
        assert (
            said.content == f"You approved the result of session {mine.id} for ctl; it is now idle."
        )
        assert (mine.status, theirs.status) == (SessionStatus.IDLE, SessionStatus.AWAIT_APPROVAL)
