"""`new` with max_steps, permission, budget and headless: parsing, the mode ceiling, what the
session runs with, records that survive a restart, and a headless session's approval refusal.
Also: the events stream never drops a turn's `turn_finished` for a reader that fell behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anvild.agent.permissions.policy import Mode
from anvild.agent.tools.bash import BashTool
from anvild.llm import stream
from anvild.llm.testing import ScriptedProvider, script
from anvild.session.errors import InvalidSessionRequest
from anvild.session.manager import NewSession
from anvild.session.stream import BroadcastLimits, LineBroadcast, is_turn_finished, lag_marker
from anvild.store import ApprovalAnswered, SessionStatus, Verdict, read_journal
from tests.unit.session.support import Models, ask, new, running, target

WRITE = {"file_path": "a.txt", "content": "written\n"}


# -- parsing -------------------------------------------------------------------------------------


def test_new_parses_the_limits_and_flags() -> None:
    parsed = NewSession.parse(
        ["max_steps=3", "permission=plan", "budget=5000", "headless", "ephemeral=true"]
    )
    assert parsed == NewSession(
        max_steps=3, permission="plan", budget=5000, headless=True, ephemeral=True
    )
    assert NewSession.parse([]) == NewSession()


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("max_steps=0", "max_steps=0: give a whole number from 1 to 1000"),
        ("max_steps=1001", "max_steps=1001: give a whole number from 1 to 1000"),
        ("max_steps=+3", "max_steps=+3: give a whole number from 1 to 1000"),
        ("max_steps=three", "max_steps=three: give a whole number from 1 to 1000"),
        ("budget=-1", "budget=-1: give a whole number from 1 to 1000000000"),
        (
            "permission=yolo",
            "permission=yolo is not a permission mode: use one of plan, default, accept-edits, "
            "bypass",
        ),
        ("headless=maybe", "headless=maybe: use headless or headless=true"),
        ("steps=3", "new: cannot use 'steps=3'; the arguments are model=M"),
    ],
)
def test_new_refuses_bad_limits_precisely(word: str, message: str) -> None:
    with pytest.raises(InvalidSessionRequest) as info:
        NewSession.parse([word])
    assert str(info.value).startswith(message)


# -- the session -------------------------------------------------------------------------------


async def test_a_mode_above_the_ceiling_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, [], mode=Mode.DEFAULT, max_mode=Mode.ACCEPT_EDITS) as manager:
        with pytest.raises(InvalidSessionRequest) as info:
            await new(manager, permission="bypass")
        assert str(info.value).startswith(
            "permission=bypass is wider than this daemon allows: its ceiling is accept-edits "
            "(permissions.max_mode in the user config); use one of plan, default, accept-edits"
        )
        assert manager.sessions() == ()
        assert manager.store.ids() == []
        session = await new(manager, permission="plan")
        assert session.mode is Mode.PLAN


async def test_limits_apply_and_survive_a_restart(tmp_path: Path) -> None:
    usage = stream.Usage(10, 2, 0, 0)
    calls = [
        script.tool_call(f"c{i}", "read_file", {"file_path": "x"}, usage=usage) for i in range(3)
    ]
    provider = ScriptedProvider(calls)
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.DEFAULT, ids=["s1"]) as manager:
        session = await new(manager, max_steps=2, permission="accept-edits", budget=99_999)
        assert (session.max_steps, session.mode, session.token_budget) == (
            2,
            Mode.ACCEPT_EDITS,
            99_999,
        )
        out = await ask(session, "look")
        assert out.endswith("[turn ended: max_steps: stopped after 2 steps]\n")
        assert len(provider.requests) == 2
    async with running(tmp_path, models, mode=Mode.DEFAULT) as manager:
        restored = manager.get("s1")
        assert (restored.max_steps, restored.mode, restored.token_budget) == (
            2,
            Mode.ACCEPT_EDITS,
            99_999,
        )
        assert restored.agent.config.max_steps == 2
        assert restored.agent.config.token_budget == 99_999
    # A ceiling lowered since: the recorded mode is held to it.
    async with running(tmp_path, models, mode=Mode.DEFAULT, max_mode=Mode.DEFAULT) as manager:
        assert manager.get("s1").mode is Mode.DEFAULT


async def test_a_headless_session_refuses_a_call_needing_approval_at_once(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.DEFAULT) as manager:
        session = await new(manager, headless=True)
        assert await ask(session, "write a.txt") == "ok\n"
        result = provider.requests[-1].messages[-1].tool_results()[0].content
        assert result.startswith("Permission denied for write_file: This call needs approval (")
        assert "nobody can approve it in a headless session" in result
        assert "It would be allowed by --permission-mode accept-edits" in result
        assert not (tmp_path / "work" / "a.txt").exists()
        assert session.status is SessionStatus.AWAIT  # never await_approval
        records = read_journal(session.journal.path).records
        answered = [r for r in records if isinstance(r, ApprovalAnswered)]
        assert [(a.call_id, a.verdict) for a in answered] == [("c1", Verdict.CANCELLED)]
        assert read_journal(session.journal.path).state == session.record


async def test_the_refusal_names_the_ceiling_when_only_a_wider_mode_allows_it(
    tmp_path: Path,
) -> None:
    call = script.tool_call("c1", "bash", {"command": "make"})
    provider = ScriptedProvider([call, script.text("ok")])
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.DEFAULT, tools=[BashTool()]) as manager:
        session = await new(manager, headless=True)
        await ask(session, "build")
        result = provider.requests[-1].messages[-1].tool_results()[0].content
        assert (
            '--permission-mode bypass (after setting permissions.max_mode = "bypass" in the '
            "user config)"
        ) in result
        assert "an allow rule in the user config's [permissions] allow: " in result


# -- the events stream keeps turn_finished -----------------------------------------------------


def _finished(n: int) -> str:
    return json.dumps({"type": "turn_finished", "outcome": "done", "steps": n}).replace(" ", "")


def test_a_slow_reader_always_gets_the_turn_finished_line() -> None:
    events = LineBroadcast(BroadcastLimits(reader_lines=4), terminal=is_turn_finished)
    reader = events.open_reader()
    for index in range(10):
        events.publish(f'{{"type":"usage","n":{index}}}')
    events.publish(_finished(1))
    data = reader.read_nowait(1 << 16)
    assert data is not None
    lines = data.decode().splitlines()
    assert lines[-1] == _finished(1)
    # The oldest lines made room; the markers count every line lost, none silently.
    lost = sum(json.loads(line)["dropped"] for line in lines if '"lagged"' in line)
    kept = [line for line in lines if '"usage"' in line]
    assert lost + len(kept) == 10
    assert len(lines) <= 4


def test_turn_finished_survives_a_full_byte_budget_and_keeps_its_order() -> None:
    limits = BroadcastLimits(reader_lines=100, reader_bytes=64)
    events = LineBroadcast(limits, terminal=is_turn_finished)
    reader = events.open_reader()
    events.publish('{"type":"text_delta","step":1,"text":"' + "x" * 40 + '"}')
    events.publish('{"type":"usage","step":1}')  # does not fit: dropped, counted
    events.publish(_finished(1))
    assert reader.read_nowait(1 << 16) == lag_marker(2) + _finished(1).encode() + b"\n"


async def test_a_session_reader_that_never_read_still_ends_with_turn_finished(
    tmp_path: Path,
) -> None:
    usage = stream.Usage(10, 2, 0, 0)
    calls = [
        script.tool_call(f"c{i}", "read_file", {"file_path": "x"}, usage=usage) for i in range(6)
    ]
    models = Models({"fake": target(ScriptedProvider(calls))})
    limits = BroadcastLimits(reader_lines=5)
    async with running(tmp_path, models, stream_limits=limits) as manager:
        session = await new(manager, max_steps=6)
        reader = session.events.open_reader()  # opened before the prompt, then not read
        await ask(session, "look")
        data = reader.read_nowait(1 << 20)
    assert data is not None
    lines = [json.loads(line) for line in data.splitlines()]
    assert len(lines) <= 5
    assert lines[-1]["type"] == "turn_finished"
    assert lines[-1]["outcome"] == "max_steps"
    assert any(line["type"] == "lagged" for line in lines)


def test_without_terminal_lines_a_full_reader_still_drops_the_newest() -> None:
    events = LineBroadcast(BroadcastLimits(reader_lines=1))
    reader = events.open_reader()
    events.publish("a")
    events.publish(_finished(1))
    assert reader.read_nowait(100) == b"a\n"
    assert reader.read_nowait(100) == lag_marker(1)
