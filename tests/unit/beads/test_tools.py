"""The bead tools (`anvild.beads.tools`): bound to their session, strict schemas."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.agent.tools.base import ArgsValidator, Failed, Tool, ToolContext
from anvild.beads import BeadStatus, BeadStore, NewBead, NewConvoy
from anvild.beads.tools import bead_tools
from anvild.sandbox import ReadOnly
from anvild.session import ToolSetup
from anvild.session.roles import sandbox_role


def tools_for(store: BeadStore, tmp_path: Path, session_id: str, role: str) -> dict[str, Tool]:
    setup = ToolSetup(tmp_path, role, ReadOnly(), sandbox_role(role), session_id=session_id)
    return {tool.name: tool for tool in bead_tools(store)(setup)}


async def call(tool: Tool, tmp_path: Path, **args: object) -> str:
    ArgsValidator(tool.input_schema).validate(args)
    return (await tool.call(args, ToolContext(cwd=tmp_path))).content


@pytest.fixture
async def store(tmp_path: Path) -> BeadStore:
    s = BeadStore(tmp_path / "beads")
    await s.open()
    return s


def test_schemas_are_strict(tmp_path: Path) -> None:
    tools = tools_for(BeadStore(tmp_path / "beads"), tmp_path, "s1", "developer")
    assert sorted(tools) == ["claim", "complete", "fail", "list_ready"]
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["additionalProperties"] is False
        assert sorted(schema["required"]) == sorted(schema["properties"])
        assert "session" not in str(sorted(schema["properties"]))  # no identity argument
        assert tool.effects({}).read_only


async def test_a_worker_claims_for_itself_and_gets_its_brief(
    store: BeadStore, tmp_path: Path
) -> None:
    research = await store.create(NewBead("Research auth", "researcher", "Read it"), by="user")
    await store.claim(research.id, "r1", by="user")
    await store.complete(research.id, "notes in /tmp/auth.md", by="user")
    convoy = await store.create_convoy(
        NewConvoy("Auth", "Add OAuth", context="OWASP top 10 applies."), by="user"
    )
    dev = await store.create(
        NewBead("Implement OAuth", "developer", "Add OAuth", (research.id,), convoy=convoy.id),
        by="user",
    )
    other = await store.create(NewBead("Write docs", "writer"), by="user")
    mine = tools_for(store, tmp_path, "d1", "developer")
    listed = await call(mine["list_ready"], tmp_path, scope="my_role")
    assert listed == f"{dev.id}\tdeveloper\tImplement OAuth\n  Add OAuth"
    everything = await call(mine["list_ready"], tmp_path, scope="all")
    assert other.id in everything
    brief = await call(mine["claim"], tmp_path, bead_id=dev.id)
    assert brief.startswith(f"You hold bead {dev.id}: Implement OAuth (role developer).")
    assert "Result of research-auth-001 (Research auth):\nnotes in /tmp/auth.md" in brief
    assert "Convoy context:\nOWASP top 10 applies." in brief
    assert store.bead(dev.id).assigned_to == "d1"
    assert "You hold: implement-oauth-002 (in_progress)" in await call(
        mine["list_ready"], tmp_path, scope="my_role"
    )
    done = await call(mine["complete"], tmp_path, bead_id=dev.id, result="merged as abc123")
    assert done == "Bead implement-oauth-002 is completed. Convoy auth-001: 1/1 beads completed."
    assert store.convoy(convoy.id).status.value == "completed"


async def test_a_session_cannot_touch_another_sessions_bead(
    store: BeadStore, tmp_path: Path
) -> None:
    bead = await store.create(NewBead("Fix bug", "developer"), by="user")
    first = tools_for(store, tmp_path, "s1", "developer")
    second = tools_for(store, tmp_path, "s2", "developer")
    await call(first["claim"], tmp_path, bead_id=bead.id)
    with pytest.raises(Failed, match="already claimed by s1"):
        await call(second["claim"], tmp_path, bead_id=bead.id)
    with pytest.raises(Failed, match="assigned to s1, not to you"):
        await call(second["complete"], tmp_path, bead_id=bead.id, result="x")
    with pytest.raises(Failed, match="assigned to s1, not to you"):
        await call(second["fail"], tmp_path, bead_id=bead.id, reason="x")
    with pytest.raises(Failed, match=r"no bead 'nope-001'.*Call list_ready"):
        await call(second["claim"], tmp_path, bead_id="nope-001")
    assert await call(first["fail"], tmp_path, bead_id=bead.id, reason="blocked on the API") == (
        "Bead fix-bug-001 is failed; the reason is recorded."
    )
    assert store.bead(bead.id).status is BeadStatus.FAILED


async def test_completion_of_a_gated_bead_waits_for_approval(
    store: BeadStore, tmp_path: Path
) -> None:
    bead = await store.create(NewBead("Ship it", "developer", requires_approval=True), by="user")
    tools = tools_for(store, tmp_path, "s1", "developer")
    assert "needs a person's approval" in await call(tools["claim"], tmp_path, bead_id=bead.id)
    answer = await call(tools["complete"], tmp_path, bead_id=bead.id, result="done")
    assert "waits for approval (pending_approval)" in answer
    assert store.bead(bead.id).status is BeadStatus.PENDING_APPROVAL
