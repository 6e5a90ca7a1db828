"""A session's `outcome` file (`anvild.tree.outcome`) over a real 9P connection: the
last turn's outcome as one line, from the records (so a restored session shows it too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvilctl.headless import EXIT_CODES
from anvild.agent.events import TurnOutcome
from anvild.llm.errors import HttpError
from anvild.llm.testing import script
from anvild.ninep import messages as m
from anvild.store import TurnEnded
from anvild.tree.outcome import outcome_file, outcome_line
from tests.unit.tree.test_sessions_tree import new_session, served

BODY = '{"error": {"message": "invalid x-api-key", "type": "authentication_error"}}'


@pytest.mark.parametrize(
    ("turn", "line"),
    [
        (None, "-\n"),
        (TurnEnded("done"), "done\n"),
        (TurnEnded("cancelled", "the turn was cancelled"), "cancelled the turn was cancelled\n"),
        (
            TurnEnded("error", 'HttpError: HTTP 401: {\n  "error": 1\n}'),
            'error HttpError: HTTP 401: { "error": 1 }\n',
        ),
        (TurnEnded("max_steps", "stopped after 3 steps\n"), "max_steps stopped after 3 steps\n"),
    ],
)
def test_the_line_is_the_outcome_then_the_detail_on_one_line(
    turn: TurnEnded | None, line: str
) -> None:
    assert outcome_line(turn) == line


def test_every_outcome_a_turn_can_have_has_an_exit_status() -> None:
    """The file's first word is one of the words `anvilctl wait` maps with headless's table."""
    assert {outcome.value for outcome in TurnOutcome} == set(EXIT_CODES)


async def test_outcome_follows_each_turn_and_survives_a_restart(tmp_path: Path) -> None:
    scripts = [script.text("fine"), HttpError(401, BODY)]
    async with served(tmp_path, scripts, [outcome_file()]) as (_, con, _root):
        c = await con()
        sid = await new_session(c, b"alias=r1")
        assert await c.get(f"{sid}/outcome") == "-\n"
        assert await c.put(f"{sid}/in", b"hi") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert await c.get("r1/outcome") == "done\n"
        assert await c.put(f"{sid}/in", b"again") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        failed = (
            'error HttpError: HTTP 401: {"error": {"message": "invalid x-api-key", '
            '"type": "authentication_error"}}\n'
        )
        assert await c.get(f"{sid}/outcome") == failed
    async with served(tmp_path, [], [outcome_file()]) as (manager, con, _root):
        c = await con()
        assert [s.id for s in manager.sessions()] == [sid]
        assert await c.get("r1/outcome") == failed
