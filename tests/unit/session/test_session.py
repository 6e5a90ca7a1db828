"""The supervisor with scripted providers: turns, out, the queue, verbs, usage, ephemeral."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from anvild.agent.tools.base import COMPACT_TOOLS_WINDOW
from anvild.agent.tools.files import ReadFile
from anvild.llm import stream
from anvild.llm.errors import HttpError
from anvild.llm.registry import Pricing
from anvild.llm.testing import Pause, ScriptedProvider, script
from anvild.llm.types import ProviderMeta, Role, Text
from anvild.session.errors import InvalidSessionRequest, SessionRefused
from anvild.store import (
    ContextReplaced,
    ModelChanged,
    ReplaceReason,
    SessionStatus,
    read_journal,
)
from tests.unit.session.support import Models, ask, new, running, target

S = SessionStatus


async def test_a_prompt_runs_a_turn_and_out_holds_the_answer(tmp_path: Path) -> None:
    usage = stream.Usage(100, 20, 0, 0)
    async with running(tmp_path, [script.text("Hello there.", usage=usage)]) as manager:
        session = await new(manager, alias="r1")
        assert session.status is S.IDLE
        assert session.usage_line() == "-"
        assert await ask(session, "hi") == "Hello there.\n"
        assert session.status is S.AWAIT
        assert session.usage_line() == "120/32000 (0.4%) compact at 85%"
        assert "input 100\noutput 20\n" in session.cost_text()
        assert "usd n/a\n" in session.cost_text()
        session.mark_out_read()
        assert session.status is S.IDLE
        assert manager.get("r1") is session
        assert manager.list_text() == (
            f"{session.id}\tr1\tidle\tdeveloper\tfake\t{tmp_path / 'work'}\n"
        )
        log = session.log.backlog()
        assert "USER: hi" in log
        assert "ASSISTANT: Hello there." in log
        kinds = [json.loads(line)["type"] for line in session.events.backlog()]
        assert kinds[-1] == "turn_finished"


async def test_cost_uses_the_models_pricing(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("ok", usage=stream.Usage(1000, 100, 3000, 0))])
    pricing = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    models = Models({"fake": target(provider, pricing=pricing)})
    async with running(tmp_path, models) as manager:
        session = await new(manager)
        await ask(session, "hi")
        assert session.cost_text() == (
            "input 1000\noutput 100\ncache_read 3000\ncache_write 0\n"
            "cache_hit_rate 75.0%\nusd 0.005400\n"
            "turn 1 input 1000 cache_read 3000 cache_write 0 cache_hit_rate 75.0%\n"
        )


async def test_three_prompts_queued_during_a_turn_run_in_order_and_drop_discards(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = [stream.TextDelta(0, "one"), Pause(10), stream.Finish(stream.FinishReason.END_TURN)]
    provider = ScriptedProvider(
        [slow, script.text("two"), script.text("three"), script.text("four"), slow]
    )
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager)
        session.submit("p1")
        await trio.sleep(1)
        assert session.status is S.RUNNING
        last = 0
        for text in ("p2", "p3", "p4"):
            last = session.submit(text)
        assert [p.text for p in session.record.queue] == ["p2", "p3", "p4"]
        assert session.queue_text().splitlines()[0].endswith("\tp2")
        assert await session.wait_handled(last) is S.AWAIT
        asked = [request.messages[-1].text() for request in provider.requests]
        assert asked == ["p1", "p2", "p3", "p4"]
        assert session.out == "four\n"
        # two more behind a slow turn; drop discards them and wait returns
        seq = session.submit("p5")
        await trio.sleep(1)
        session.submit("p6")
        last = session.submit("p7")
        assert session.drop_queue() == 2
        assert session.queue_text() == ""
        assert await session.wait_handled(last) is S.AWAIT
        assert seq < last
        assert len(provider.requests) == 5
        assert provider.remaining == 0


async def test_an_ephemeral_session_exits_keeps_out_and_is_reaped(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(tmp_path, [script.text("done")], reap_delay=30.0) as manager:
        session = await new(manager, ephemeral=True)
        seq = session.submit("just once")
        assert await session.wait_handled(seq) is S.EXITED
        assert session.out == "done\n"
        assert manager.get(session.id) is session
        assert "\texited\t" in manager.list_text()
        await trio.sleep(29)
        assert session.id in manager.list_text()
        await trio.sleep(2)
        assert manager.list_text() == ""
        assert session.out == "done\n"
        assert read_journal(session.journal.path).state.ended == (
            "ephemeral: its prompt was handled"
        )
        ended = [json.loads(line) for line in manager.events.backlog()]
        assert ended[-1]["type"] == "session_ended"


async def test_role_is_writable_only_before_the_first_prompt(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("ok")]) as manager:
        session = await new(manager)
        session.set_role("reviewer")
        assert session.role == "reviewer"
        assert "# Your role: reviewer" in session.system_prompt
        with pytest.raises(InvalidSessionRequest, match="unknown role"):
            session.set_role("admin")
        await ask(session, "hi")
        with pytest.raises(SessionRefused, match="fixed once it has had a prompt"):
            session.set_role("developer")
        assert session.record.role == "reviewer"


async def test_context_applies_from_the_next_turn_and_is_recorded(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("a"), script.text("b"), script.text("c")])
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager)
        await ask(session, "one")
        await ask(session, "two")
        assert provider.requests[0].system == provider.requests[1].system  # byte-stable
        session.set_context("Answer in French.")
        await ask(session, "three")
        assert "Answer in French." not in provider.requests[1].system
        assert provider.requests[2].system.endswith("# Session context\n\nAnswer in French.\n")
        assert read_journal(session.journal.path).state.context == "Answer in French."


async def test_model_switch_replays_a_plain_history(tmp_path: Path) -> None:
    first = ScriptedProvider([script.text("from the first")])
    second = ScriptedProvider([script.text("from the second")], name="other")
    models = Models(
        {"fake": target(first), "other": target(second, name="other", kind="openai-chat")}
    )
    async with running(tmp_path, models) as manager:
        session = await new(manager)
        await ask(session, "hi")
        before = session.agent.messages
        await session.control("model other")
        assert session.model == "other"
        assert session.agent.messages == before
        assert await ask(session, "again") == "from the second\n"
        assert second.requests[0].messages[0].text() == "hi"
        records = read_journal(session.journal.path).records
        assert ModelChanged("other") in records
        assert not any(isinstance(r, ContextReplaced) for r in records)
        with pytest.raises(InvalidSessionRequest, match="known aliases: fake, other"):
            await session.switch_model("nope")


async def test_a_small_window_model_gets_compact_tool_definitions_and_a_switch_recomputes(
    tmp_path: Path,
) -> None:
    small = ScriptedProvider([script.text("small"), script.text("small again")])
    large = ScriptedProvider([script.text("large")], name="large")
    models = Models(
        {
            "fake": target(small, window=COMPACT_TOOLS_WINDOW),
            "large": target(large, name="large", window=COMPACT_TOOLS_WINDOW + 1),
        }
    )
    async with running(tmp_path, models) as manager:
        session = await new(manager)
        await ask(session, "hi")
        await session.control("model large")
        await ask(session, "again")
        await session.control("model fake")
        await ask(session, "and again")
    compact, full, back = small.requests[0].tools, large.requests[0].tools, small.requests[1].tools
    assert [t.name for t in compact] == [t.name for t in full] == [t.name for t in back]
    read_file = {t.name: t for t in full}["read_file"]
    assert {t.name: t for t in compact}["read_file"].description == ReadFile.summary
    assert read_file.description == ReadFile.description
    assert back == compact


async def test_model_switch_records_a_handoff_when_the_history_cannot_be_replayed(
    tmp_path: Path,
) -> None:
    signed = ProviderMeta("anthropic", {"signature": "sig"})
    thinking_only = [
        stream.ReasoningDelta(0, "private thoughts"),
        stream.BlockMeta(0, signed),
        stream.Finish(stream.FinishReason.END_TURN),
    ]
    first = ScriptedProvider([thinking_only])
    second = ScriptedProvider([script.text("continuing")], name="other")
    models = Models(
        {"fake": target(first), "other": target(second, name="other", kind="openai-chat")}
    )
    async with running(tmp_path, models) as manager:
        session = await new(manager)
        await ask(session, "think about it")
        await session.switch_model("other")
        handed = session.agent.messages
        assert len(handed) == 1
        assert handed[0].role is Role.USER
        assert handed[0].text().startswith("[Handoff: this session moved from model fake")
        assert "think about it" in handed[0].text()
        assert "private thoughts" not in handed[0].text()
        records = read_journal(session.journal.path).records
        assert ContextReplaced(handed, ReplaceReason.HANDOFF) in records
        assert session.usage_line() == "-"
        assert await ask(session, "go on") == "continuing\n"
        assert second.requests[0].messages[0].content[-1] == Text("go on")


async def test_usage_thresholds_emit_events(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [
            script.text("a", usage=stream.Usage(700, 10, 0, 0)),
            script.text("b", usage=stream.Usage(820, 10, 0, 0)),
            script.text("c", usage=stream.Usage(930, 10, 0, 0)),
        ]
    )
    async with running(tmp_path, Models({"fake": target(provider, window=1000)})) as manager:
        session = await new(manager)
        for prompt in ("one", "two", "three"):
            await ask(session, prompt)
        crossings = [
            (event["percent"], event["used"])
            for event in map(json.loads, manager.events.backlog())
            if event["type"] == "usage_threshold"
        ]
        assert crossings == [(80, 830), (90, 940)]
        assert session.usage_line() == "940/1000 (94.0%) compact at 85%"
        await session.clear()
        assert session.usage_line() == "-"


async def test_restart_keeps_id_alias_and_role_with_a_fresh_context(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("a"), script.text("b")]) as manager:
        session = await new(manager, alias="dev", role="tester")
        await ask(session, "hi")
        await session.control("restart")
        assert (session.id, session.alias, session.role) == (manager.get("dev").id, "dev", "tester")
        assert session.agent.messages == ()
        assert session.status is S.IDLE
        records = read_journal(session.journal.path).records
        assert ContextReplaced((), ReplaceReason.RESTART) in records
        assert await ask(session, "again") == "b\n"
        assert session.agent.messages[0].text() == "again"


async def test_stop_refuses_prompts_until_start_and_kill_removes_the_session(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = [stream.TextDelta(0, "partial answer"), Pause(100), *script.text("never")]
    async with running(tmp_path, [slow, script.text("after start")]) as manager:
        session = await new(manager)
        session.submit("long")
        await trio.sleep(1)
        await session.stop()
        assert session.status is S.STOPPED
        assert session.out == "partial answer\n\n[turn ended: cancelled: the turn was cancelled]\n"
        with pytest.raises(SessionRefused, match="write `start`"):
            session.submit("more")
        await session.start()
        assert await ask(session, "more") == "after start\n"
        await manager.kill(session.id)
        assert session.status is S.EXITED
        assert manager.list_text() == ""
        assert read_journal(session.journal.path).state.ended == "killed"
        with pytest.raises(SessionRefused, match="has exited"):
            await session.kill()


async def test_the_turn_deadline_ends_a_turn_with_the_reason(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    slow = [stream.TextDelta(0, "so far"), Pause(1000), *script.text("late")]
    async with running(tmp_path, [slow], turn_deadline=60.0) as manager:
        session = await new(manager)
        seq = session.submit("take your time")
        start = trio.current_time()
        assert await session.wait_handled(seq) is S.AWAIT
        assert trio.current_time() - start == pytest.approx(60.0)
        assert (
            session.out == "so far\n\n[turn ended: cancelled: the turn's deadline of 60 s passed]\n"
        )
        assert session.record.last_turn is not None
        assert "deadline" in session.record.last_turn.detail


async def test_new_validates_its_arguments(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("a")], ids=["s1", "s2"]) as manager:
        first = await new(manager, alias="a1")
        assert first.id == "s1"
        with pytest.raises(InvalidSessionRequest, match="known aliases: fake"):
            await new(manager, model="gpt-9")
        with pytest.raises(InvalidSessionRequest, match="does not exist"):
            await new(manager, cwd=str(tmp_path / "missing"))
        with pytest.raises(InvalidSessionRequest, match="is taken"):
            await new(manager, alias="a1")
        with pytest.raises(InvalidSessionRequest, match="the id of a session"):
            await new(manager, alias="s1")
        with pytest.raises(InvalidSessionRequest, match="reserved"):
            await new(manager, alias="list")
        with pytest.raises(InvalidSessionRequest, match="not granted"):
            await new(manager, sandbox="full-access")
        assert [s.id for s in manager.sessions()] == [first.id]


def test_new_parses_key_value_arguments() -> None:
    from anvild.session.manager import NewSession

    parsed = NewSession.parse(["model=fake", "cwd=/src", "role=reviewer", "alias=r1", "ephemeral"])
    assert parsed == NewSession("fake", "/src", "reviewer", "r1", None, ephemeral=True)
    assert NewSession.parse([]) == NewSession()
    with pytest.raises(InvalidSessionRequest, match="model=M cwd=DIR"):
        NewSession.parse(["colour=blue"])
    with pytest.raises(InvalidSessionRequest, match="given twice"):
        NewSession.parse(["alias=a", "alias=b"])


async def test_unknown_ctl_commands_list_the_verbs(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("a")]) as manager:
        session = await new(manager)
        with pytest.raises(InvalidSessionRequest, match="stop, start, restart, kill"):
            await session.control("explode")
        with pytest.raises(InvalidSessionRequest, match="model NAME"):
            await session.control("model")
        with pytest.raises(SessionRefused, match="nothing to cancel"):
            await session.control("cancel")
        with pytest.raises(SessionRefused, match="start resumes"):
            await session.control("start")


async def test_a_multi_line_provider_error_is_logged_and_the_session_lives_on(
    tmp_path: Path,
) -> None:
    body = '{\n  "error": {\n    "message": "Incorrect API key provided"\n  }\n}'
    scripts = [HttpError(401, body), script.text("fine now")]
    async with running(tmp_path, scripts) as manager:
        session = await new(manager)
        out = await ask(session, "hi")
        assert "[turn ended: error: HttpError: HTTP 401:" in out
        log = session.log.backlog()
        turn = next(i for i, line in enumerate(log) if line.startswith("TURN: error"))
        assert log[turn + 1 : turn + 3] == (
            '    "error": {',
            '      "message": "Incorrect API key provided"',
        )
        assert all("\n" not in line for line in log)
        assert await ask(session, "again") == "fine now\n"
