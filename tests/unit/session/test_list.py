"""`agent/list` over many sessions: every line follows its session (the lines are cached until
the recorded state, the status or the model changes)."""

from __future__ import annotations

from pathlib import Path

from anvild.llm.testing import ScriptedProvider, script
from anvild.session import Session, SessionManager
from tests.unit.session.support import Models, ask, new, running, target


def fresh_line(session: Session) -> str:
    fields = (session.id, session.alias, session.status.value, session.role, session.model)
    return "\t".join(f or "-" for f in (*fields, session.cwd))


def check(manager: SessionManager) -> list[str]:
    lines = manager.list_text().splitlines()
    assert lines == [fresh_line(s) for s in manager.sessions()]
    return lines


async def test_many_sessions_are_listed_in_creation_order(tmp_path: Path) -> None:
    async with running(tmp_path, []) as manager:
        made = [await new(manager, alias=f"s{i}") for i in range(40)]
        lines = check(manager)
        assert [line.split("\t")[0] for line in lines] == [s.id for s in made]
        assert {line.split("\t")[2] for line in lines} == {"idle"}
        assert check(manager) == lines  # read again: the same text
        await manager.kill("s7")
        assert made[7].id not in manager.list_text()
        assert len(check(manager)) == 39


async def test_a_line_follows_state_role_and_model(tmp_path: Path) -> None:
    first = ScriptedProvider([script.text("one"), script.text("two")])
    other = ScriptedProvider([], name="other")
    models = Models({"fake": target(first), "other": target(other, name="other")})
    async with running(tmp_path, models) as manager:
        session = await new(manager, alias="r1")
        quiet = await new(manager)
        check(manager)
        session.set_role("reviewer")
        assert "\treviewer\t" in check(manager)[0]
        await ask(session, "hi")
        assert "\tawait\t" in check(manager)[0]
        session.mark_out_read()
        assert "\tidle\t" in check(manager)[0]
        await session.switch_model("other")
        assert check(manager)[0].split("\t")[4] == "other"
        await session.control("stop")
        assert "\tstopped\t" in check(manager)[0]
        assert check(manager)[1] == fresh_line(quiet)
