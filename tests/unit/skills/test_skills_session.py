"""Skills in scripted sessions: the prompt's list, the `skill` tool, the skill folders readable by
read_file and never writable, a project skill's `allowed-tools` granting nothing, the skipped
ones reported, and the session's `skills` file over 9P."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import structlog
import trio

from anvild.agent.permissions.policy import Grants, Mode
from anvild.agent.tools.skill import SkillTool
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ToolResult
from anvild.ninep import messages as m
from anvild.session.events import ConfigInvalid, SessionEvent
from anvild.session.manager import SessionManager
from anvild.skills import SkillCatalog
from anvild.store import SessionStatus, SessionStore
from anvild.tree.skills import skills_file
from tests.unit.session.support import (
    Models,
    ask,
    file_tools,
    new,
    running,
    settings,
    target,
)
from tests.unit.session.test_approvals_records import wait_for
from tests.unit.skills.support import add_skill, layout
from tests.unit.tree.test_sessions_tree import new_session, read_some, served

TIMEOUT = 20  # a call that waited for an approval would hang the turn: fail instead


def results(provider: ScriptedProvider) -> dict[str, ToolResult]:
    """Every tool result the model was sent, by call id."""
    found: dict[str, ToolResult] = {}
    for request in provider.requests:
        for message in request.messages:
            for block in message.content:
                if isinstance(block, ToolResult):
                    found[block.call_id] = block
    return found


def models(*steps: Any) -> tuple[ScriptedProvider, Models]:
    provider = ScriptedProvider(list(steps))
    return provider, Models({"fake": target(provider)})


async def test_the_prompt_lists_them_and_skill_loads_a_body_and_read_file_its_files(
    tmp_path: Path,
) -> None:
    config, repo = layout(tmp_path)
    reference = config / "skills" / "pdf-forms" / "reference.md"
    provider, scripted = models(
        script.tool_call("c1", "skill", {"name": "pdf-forms"}),
        script.tool_call("c2", "read_file", {"file_path": str(reference)}),
        script.tool_call("c3", "skill", {"name": "no-such-skill"}),
        script.text("done"),
    )
    catalog = SkillCatalog(config)
    async with running(tmp_path, scripted, mode=Mode.DEFAULT, skills=catalog) as manager:
        session = await new(manager, cwd=str(repo))
        with trio.fail_after(TIMEOUT):
            assert await ask(session, "fill the form") == "done\n"
    system = provider.requests[0].system
    assert "\n# Skills\n\nSkills are folders of instructions" in system
    assert "- pdf-forms: Fill in PDF forms and check the result." in system
    assert "- lint-fix: Fix lint errors in this project." in system
    assert "Filling PDF forms" not in system  # a body enters only through the tool
    assert "skill" in [tool.name for tool in provider.requests[0].tools]
    found = results(provider)
    loaded = found["c1"].content
    assert not found["c1"].is_error
    assert loaded.startswith(
        f'<skill name="pdf-forms" source="user" directory="{reference.parent}">'
    )
    assert "# Filling PDF forms\n\n1. List the form's fields" in loaded
    assert f"\n{reference}\n" in loaded
    assert f"\n{reference.parent / 'scripts' / 'fill_form.py'}" in loaded
    # read_file reaches a skill's file outside the workspace, with no approval asked.
    assert not found["c2"].is_error, found["c2"].content
    assert "Checkboxes take the export value" in found["c2"].content
    assert found["c3"].is_error
    assert "There is no skill named 'no-such-skill'. The skills are: pdf-forms, " in (
        found["c3"].content
    )


async def test_a_skill_folder_outside_the_workspace_is_never_writable(tmp_path: Path) -> None:
    config, repo = layout(tmp_path)
    cwd = repo / "src"
    cwd.mkdir()
    skill_file = repo / ".claude" / "skills" / "lint-fix" / "SKILL.md"
    before = skill_file.read_text()
    provider, scripted = models(
        script.tool_call("c1", "read_file", {"file_path": str(skill_file)}),
        script.tool_call("c2", "write_file", {"file_path": str(skill_file), "content": "x\n"}),
        script.tool_call(
            "c3", "write_file", {"file_path": str(repo / "notes.txt"), "content": "y"}
        ),
        script.text("done"),
    )
    # The user granted writes to the whole repository: the skill folder in it stays read-only.
    granted = Grants(write_roots=(PurePosixPath(repo.resolve()),))
    async with running(tmp_path, scripted, skills=SkillCatalog(config), grants=granted) as manager:
        session = await new(manager, cwd=str(cwd))
        with trio.fail_after(TIMEOUT):
            assert await ask(session, "fix the lint") == "done\n"
    found = results(provider)
    assert not found["c1"].is_error
    assert "Run the linter" in found["c1"].content
    assert found["c2"].is_error
    skills_dir = (repo / ".claude" / "skills").resolve()
    assert found["c2"].content == (
        f"{skill_file.resolve()} is in the skill folder {skills_dir}, which is read-only for you."
    )
    assert skill_file.read_text() == before
    assert not found["c3"].is_error, found["c3"].content  # the grant itself works
    assert (repo / "notes.txt").read_text() == "y"


async def test_a_project_skills_allowed_tools_widen_nothing(tmp_path: Path) -> None:
    """lint-fix says `allowed-tools: Write, Edit, Bash`; a reviewer still writes nothing, and a
    developer in default mode is still asked before a write."""
    config, repo = layout(tmp_path)
    write = {"file_path": "fixed.py", "content": "x = 1\n"}
    provider, scripted = models(
        script.tool_call("c1", "skill", {"name": "lint-fix"}),
        script.tool_call("c2", "write_file", write),
        script.text("reviewed"),
        script.tool_call("c3", "skill", {"name": "lint-fix"}),
        script.tool_call("c4", "write_file", write),
        script.text("never reached"),
    )
    async with running(
        tmp_path, scripted, mode=Mode.DEFAULT, skills=SkillCatalog(config), ids=["r", "d"]
    ) as manager:
        reviewer = await new(manager, cwd=str(repo), role="reviewer")
        with trio.fail_after(TIMEOUT):
            assert await ask(reviewer, "review the lint") == "reviewed\n"
        found = results(provider)
        assert "Its allowed-tools (Write Edit Bash) are recorded, not granted" in (
            found["c1"].content
        )
        assert found["c2"].is_error
        assert found["c2"].content.startswith(
            "Permission denied for write_file: The reviewer role makes no changes"
        )
        assert not (repo / "fixed.py").exists()
        developer = await new(manager, cwd=str(repo))
        developer.submit("fix the lint")
        with trio.fail_after(TIMEOUT):
            await wait_for(developer, SessionStatus.AWAIT_APPROVAL)
        assert "tool write_file\n" in developer.approval_text()
        assert not (repo / "fixed.py").exists()


async def test_skipped_skills_are_reported_and_the_skills_file_lists_what_it_sees(
    tmp_path: Path,
) -> None:
    config, repo = layout(tmp_path)
    catalog = SkillCatalog(config)
    with structlog.testing.capture_logs() as logs:
        async with served(
            tmp_path, [script.text("hi")], [skills_file(catalog)], skills=catalog
        ) as (_, con, _root):
            c = await con()
            sid = await new_session(c, b"alias=s cwd=" + str(repo).encode())
            text = await c.get(f"{sid}/skills")
            assert text == catalog.for_session(repo, "developer").text()
            lines = text.splitlines()
            assert [line.split("\t")[:2] for line in lines] == [
                ["pdf-forms", "user"],
                ["release-notes", "user"],
                ["lint-fix", "project"],
                ["-", "project"],
                ["-", "project"],
                ["-", "project"],
            ]
            log = await read_some(c, "s/log")
            bad = repo / ".anvil" / "skills" / "no-description" / "SKILL.md"
            assert f"NOTE: skill skipped: {bad}: the frontmatter has no `description`" in log
            assert await c.put(f"{sid}/in", b"hi") == m.Rclunk(0)
            assert await c.get(f"{sid}/wait") == "await\n"
    warned = [e for e in logs if e["event"] == "session.skill_skipped"]
    assert len(warned) == 3
    assert {e["session"] for e in warned} == {sid}
    assert any(str(bad) in e["reason"] for e in warned)


async def test_without_skills_there_is_no_tool_and_no_list(tmp_path: Path) -> None:
    provider, scripted = models(script.text("hi"))
    async with running(tmp_path, scripted, skills=SkillCatalog(tmp_path / "empty")) as manager:
        session = await new(manager)
        assert await ask(session, "hi") == "hi\n"
    assert "# Skills" not in provider.requests[0].system
    assert SkillTool.name not in [tool.name for tool in provider.requests[0].tools]


async def test_a_skill_added_during_the_session_is_loaded_and_readable(tmp_path: Path) -> None:
    """The prompt lists the skills found at session start; the tool and the file tools see the
    skill folders as they are now."""
    config, repo = layout(tmp_path)
    late = config / "skills" / "late"
    provider, scripted = models(
        script.tool_call("c1", "skill", {"name": "late"}),
        script.tool_call("c2", "read_file", {"file_path": str(late / "notes.md")}),
        script.text("done"),
    )
    async with running(tmp_path, scripted, mode=Mode.DEFAULT, skills=SkillCatalog(config)) as (
        manager
    ):
        session = await new(manager, cwd=str(repo))
        add_skill(config / "skills", "late", "Added after the session started.", body="LATE")
        (late / "notes.md").write_text("late notes\n")
        with trio.fail_after(TIMEOUT):
            assert await ask(session, "use the late skill") == "done\n"
    assert "- late:" not in provider.requests[0].system
    found = results(provider)
    assert "\nLATE\n</skill>" in found["c1"].content
    assert f"\n{late / 'notes.md'}" in found["c1"].content
    assert "late notes" in found["c2"].content
    assert not found["c2"].is_error


async def test_a_skipped_skill_is_a_config_invalid_event(tmp_path: Path) -> None:
    config, repo = layout(tmp_path)
    events: list[SessionEvent] = []
    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        Models({"fake": target(ScriptedProvider([]))}),
        settings=settings(tmp_path, skills=SkillCatalog(config)),
        tools=file_tools(),
        default_cwd=repo,
        on_event=events.append,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        session = await new(manager)
        nursery.cancel_scope.cancel()
    invalid = [e for e in events if isinstance(e, ConfigInvalid)]
    bad = repo / ".anvil" / "skills" / "broken-yaml" / "SKILL.md"
    assert len(invalid) == 3
    assert {e.id for e in invalid} == {session.id}
    assert any(
        e.error.startswith(f"skill skipped: {bad}: the frontmatter is not valid") for e in invalid
    )
    assert {e.using for e in invalid} == {"the session's other skills (its skills file lists them)"}
