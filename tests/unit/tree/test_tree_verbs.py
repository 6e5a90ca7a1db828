"""Session verbs and files through the tree (DESIGN section 4), in-process over real 9P.

The supervisor's own tests (tests/unit/session) call `Session` methods; these write the files a
user or a script writes (`ctl`, `in`, `queue`, `approval`, ...) through `anvild.ninep.Server`
over memory streams, and check what the files, the records and the scripted provider's recorded
requests show. Helpers come from test_sessions_tree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from anvild.agent.permissions.policy import Mode
from anvild.llm import stream
from anvild.llm.testing import ScriptedProvider, Step, script
from anvild.llm.types import ProviderMeta
from anvild.ninep import messages as m
from anvild.session import SessionStatus
from anvild.store import (
    ApprovalAnswered,
    ContextReplaced,
    ModelChanged,
    ReplaceReason,
    ToolStarted,
    Verdict,
    read_journal,
)
from tests.unit.session.support import Models, target
from tests.unit.tree.test_sessions_tree import (
    SLOW,
    Client,
    dir_names,
    error_text,
    new_session,
    read_some,
    served,
    wait_state,
)

S = SessionStatus


async def ctl(c: Client, sid: str, line: bytes) -> m.Message:
    """Write one ctl line the way `9p write` does; the error reply or Rclunk."""
    return await c.put(f"{sid}/ctl", line)


async def turn(c: Client, sid: str, prompt: bytes) -> str:
    """Write a prompt, wait for it, read `out` (await -> idle)."""
    assert await c.put(f"{sid}/in", prompt) == m.Rclunk(0)
    assert await c.get(f"{sid}/wait") == "await\n"
    return await c.get(f"{sid}/out")


async def test_stop_refuses_prompts_until_start(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    provider = ScriptedProvider([SLOW, script.text("after start")])
    async with served(tmp_path, Models({"fake": target(provider)})) as (manager, con, _):
        c = await con()
        sid = await new_session(c, b"alias=s1")
        await c.put(f"{sid}/in", b"p1")
        await wait_state(manager, sid, S.RUNNING)
        assert await ctl(c, sid, b"stop\n") == m.Rclunk(0)
        assert await c.get(f"{sid}/state") == "stopped\n"
        assert "[turn ended: cancelled" in await c.get(f"{sid}/out")
        assert await c.get(f"{sid}/wait") == "stopped\n"  # returns at once
        reply = await c.put(f"{sid}/in", b"p2")
        assert error_text(reply) == (
            f"in: session {sid} is stopped: write `start` to its ctl to resume it"
        )
        assert "already stopped" in error_text(await ctl(c, sid, b"stop"))
        assert await c.get(f"{sid}/queue") == ""  # the refused prompt was not queued
        assert await ctl(c, sid, b"start") == m.Rclunk(0)
        assert await c.get(f"{sid}/state") == "idle\n"
        assert "start resumes a stopped session" in error_text(await ctl(c, sid, b"start"))
        assert await turn(c, sid, b"p3") == "after start\n"
        prompts = [r.messages[-1].text() for r in provider.requests]
        assert prompts[0] == "p1"
        assert prompts[1].startswith("p1[The previous turn was cancelled")
        assert prompts[1].endswith("p3")


async def test_restart_keeps_id_alias_and_role_and_records_a_fresh_context(
    tmp_path: Path,
) -> None:
    usage = stream.Usage(100, 20, 0, 0)
    provider = ScriptedProvider([script.text("a", usage=usage), script.text("b")])
    async with served(tmp_path, Models({"fake": target(provider)})) as (manager, con, _):
        c = await con()
        sid = await new_session(c, b"alias=r1 role=tester")
        assert await turn(c, sid, b"first") == "a\n"
        assert await c.get(f"{sid}/usage") != "-\n"
        assert await ctl(c, "r1", b"restart") == m.Rclunk(0)
        assert await c.get("list") == (f"{sid}\tr1\tidle\ttester\tfake\t{tmp_path / 'work'}\n")
        assert await c.get("r1/role") == "tester\n"
        assert await c.get(f"{sid}/usage") == "-\n"  # the baseline reset
        records = read_journal(manager.get(sid).journal.path).records
        assert ContextReplaced((), ReplaceReason.RESTART) in records
        assert "CONTEXT: restart" in await read_some(c, f"{sid}/log")
        assert await turn(c, sid, b"second") == "b\n"
        assert [msg.text() for msg in provider.requests[1].messages] == ["second"]


async def test_cancel_ends_only_the_running_turn_and_the_queue_goes_on(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    provider = ScriptedProvider([SLOW, script.text("next one")])
    async with served(tmp_path, Models({"fake": target(provider)})) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        reply = await ctl(c, sid, b"cancel")
        assert error_text(reply) == (
            f"ctl: no turn is running (session {sid} is idle): nothing to cancel"
        )
        await c.put(f"{sid}/in", b"p1")
        await wait_state(manager, sid, S.RUNNING)
        await c.put(f"{sid}/in", b"p2")
        assert await ctl(c, sid, b"cancel") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert await c.get(f"{sid}/out") == "next one\n"
        prompts = [r.messages[-1].text() for r in provider.requests]
        assert prompts[0] == "p1"
        assert prompts[1].startswith("p1[The previous turn was cancelled")
        assert prompts[1].endswith("p2")
        assert "TURN: cancelled" in await read_some(c, f"{sid}/log")


async def test_clear_empties_the_context_and_refuses_while_a_turn_runs(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    provider = ScriptedProvider([script.text("a"), SLOW, script.text("c")])
    async with served(tmp_path, Models({"fake": target(provider)})) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        await turn(c, sid, b"one")
        await c.put(f"{sid}/in", b"two")
        await wait_state(manager, sid, S.RUNNING)
        reply = await ctl(c, sid, b"clear")
        assert error_text(reply) == (
            f"ctl: clear: a turn is running in session {sid}; write cancel (or wait) first"
        )
        await ctl(c, sid, b"cancel")
        assert await ctl(c, sid, b"clear") == m.Rclunk(0)
        assert await c.get(f"{sid}/usage") == "-\n"
        assert await turn(c, sid, b"three") == "c\n"
        assert [msg.text() for msg in provider.requests[-1].messages] == ["three"]
        records = read_journal(manager.get(sid).journal.path).records
        assert ContextReplaced((), ReplaceReason.CLEAR) in records


async def test_model_replays_the_history_or_records_a_handoff(tmp_path: Path) -> None:
    signed = ProviderMeta("anthropic", {"signature": "sig"})
    thinking: list[Step] = [  # nothing but signed reasoning: it cannot go elsewhere
        stream.ReasoningDelta(0, "private thoughts"),
        stream.BlockMeta(0, signed),
        stream.Finish(stream.FinishReason.END_TURN),
    ]
    first = ScriptedProvider([script.text("from fake"), thinking])
    second = ScriptedProvider([script.text("from other"), script.text("handed")], name="other")
    third = ScriptedProvider([], name="third")
    models = Models(
        {
            "fake": target(first),
            "other": target(second, name="other", kind="openai-chat"),
            "third": target(third, name="third"),
        }
    )
    async with served(tmp_path, models) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        reply = await ctl(c, sid, b"model nope")
        assert error_text(reply) == "ctl: unknown model 'nope' (known aliases: fake, other, third)"
        assert error_text(await ctl(c, sid, b"model")) == (
            "ctl: model: wrong number of arguments (0); usage: model NAME"
        )
        # A plain history replays to another provider as it is.
        await turn(c, sid, b"hi")
        assert await ctl(c, sid, b"model other") == m.Rclunk(0)
        assert await c.get(f"{sid}/model") == "other\n"
        assert await turn(c, sid, b"again") == "from other\n"
        assert [msg.text() for msg in second.requests[0].messages] == ["hi", "from fake", "again"]
        assert "MODEL: other (replayed)" in await read_some(c, f"{sid}/log")
        # Signed reasoning cannot go to another provider: a text handoff is recorded.
        assert await ctl(c, sid, b"model fake") == m.Rclunk(0)
        await turn(c, sid, b"think")
        assert await ctl(c, sid, b"model other") == m.Rclunk(0)
        assert await c.get(f"{sid}/usage") == "-\n"
        assert await turn(c, sid, b"go on") == "handed\n"
        handed = second.requests[1].messages
        assert len(handed) == 1
        assert handed[0].text().startswith("[Handoff: this session moved from model fake")
        assert "private thoughts" not in handed[0].text()
        records = read_journal(manager.get(sid).journal.path).records
        assert [r.model for r in records if isinstance(r, ModelChanged)] == [
            "other",
            "fake",
            "other",
        ]
        assert any(
            isinstance(r, ContextReplaced) and r.reason is ReplaceReason.HANDOFF for r in records
        )


async def test_an_ephemeral_session_exits_keeps_out_and_leaves_list_after_the_delay(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with served(tmp_path, [script.text("done")], reap_delay=30.0) as (_, con, _root):
        c = await con()
        sid = await new_session(c, b"ephemeral")
        await c.put(f"{sid}/in", b"once")
        assert await c.get(f"{sid}/wait") == "exited\n"
        assert await c.get(f"{sid}/state") == "exited\n"
        assert await c.get(f"{sid}/out") == "done\n"
        assert await c.get(f"{sid}/out") == "done\n"  # reading it is harmless
        assert (await c.get("list")).split("\t")[:3] == [sid, "-", "exited"]
        reply = await c.put(f"{sid}/in", b"twice")
        assert error_text(reply) == (
            f"in: session {sid} is exited: it has ended; create a new session"
        )
        out_fid = await c.open(f"{sid}/out", 0)  # held open across the reap
        await trio.sleep(29)
        assert sid in await c.get("list")
        await trio.sleep(2)
        assert await c.get("list") == ""
        assert sid not in await dir_names(c, "")
        gone = await c.raw.rpc(m.Twalk(0, 0, 99, (sid,)))
        assert isinstance(gone, m.Rerror), gone
        assert await c.read_all(out_fid) == b"done\n"  # an open fid keeps working
        await c.clunk(out_fid)


async def test_todos_after_a_todo_write_call(tmp_path: Path) -> None:
    todos = {
        "todos": [
            {"content": "write the test", "status": "completed"},
            {"content": "fix the bug", "status": "in_progress"},
            {"content": "land it", "status": "pending"},
        ]
    }
    provider = ScriptedProvider([script.tool_call("t1", "todo_write", todos), script.text("ok")])
    async with served(tmp_path, Models({"fake": target(provider)})) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        assert await c.get(f"{sid}/todos") == ""
        assert await turn(c, sid, b"plan it") == "ok\n"
        assert await c.get(f"{sid}/todos") == (
            "completed\twrite the test\nin_progress\tfix the bug\npending\tland it\n"
        )
        assert read_journal(manager.get(sid).journal.path).state.todos == (
            manager.get(sid).record.todos
        )
        assert await ctl(c, sid, b"clear") == m.Rclunk(0)
        assert await c.get(f"{sid}/todos") == ""


async def test_per_session_events_lines_for_a_turn(tmp_path: Path) -> None:
    usage = stream.Usage(100, 20, 0, 0)
    provider = ScriptedProvider(
        [
            script.tool_call("r1", "read_file", {"file_path": "a.txt"}),
            script.text("seen", usage=usage),
        ]
    )
    async with served(tmp_path, Models({"fake": target(provider)})) as (_, con, _root):
        (tmp_path / "work" / "a.txt").write_text("content\n")
        c = await con()
        sid = await new_session(c)
        fid = await c.open(f"{sid}/events", 0)
        assert await turn(c, sid, b"read a.txt") == "seen\n"
        data = b""
        while b'"turn_finished"' not in data:
            reply = await c.raw.rpc(m.Tread(0, fid, len(data), 1 << 16))
            assert isinstance(reply, m.Rread), reply
            data += reply.data
        await c.clunk(fid)
        events = [json.loads(line) for line in data.decode().splitlines()]
        kinds = [e["type"] for e in events]
        assert kinds[0] == "step_started"
        assert kinds[-1] == "turn_finished"
        started = [e for e in events if e["type"] == "tool_call_started"]
        assert [(e["name"], e["arguments"]) for e in started] == [
            ("read_file", {"file_path": "a.txt"})
        ]
        finished = [e for e in events if e["type"] == "tool_call_finished"]
        assert [e["is_error"] for e in finished] == [False]
        assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "seen"
        assert events[-1]["outcome"] == "done"
        assert kinds.count("step_started") == 2
        assert any(e["type"] == "usage" for e in events)


@pytest.mark.parametrize("verb", [b"restart", b"kill"])
async def test_verbs_never_approve_a_pending_call(tmp_path: Path, verb: bytes) -> None:
    write = {"file_path": "a.txt", "content": "x\n"}
    provider = ScriptedProvider([script.tool_call("w1", "write_file", write)])
    models = Models({"fake": target(provider)})
    async with served(tmp_path, models, mode=Mode.DEFAULT) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        await c.put(f"{sid}/in", b"write it")
        await wait_state(manager, sid, S.AWAIT_APPROVAL)
        assert "tool write_file\n" in await c.get(f"{sid}/approval")
        target_ = "ctl" if verb == b"kill" else f"{sid}/ctl"
        line = b"kill " + sid.encode() if verb == b"kill" else verb
        assert await c.put(target_, line) == m.Rclunk(0)
        assert not (tmp_path / "work" / "a.txt").exists()
        records = read_journal(tmp_path / "data" / "sessions" / f"{sid}.jsonl").records
        answers = [r for r in records if isinstance(r, ApprovalAnswered)]
        assert [a.verdict for a in answers] == [Verdict.CANCELLED]
        assert "w1" not in {r.call_id for r in records if isinstance(r, ToolStarted)}
