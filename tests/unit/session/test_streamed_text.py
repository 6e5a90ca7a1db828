"""A streaming answer is recorded at a bounded cadence (`TextStreamed`, one record per second
at most, never a second behind), and a session restored from records cut mid-stream shows it in
`out` marked [interrupted], while the next request carries none of it, for every provider."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import trio
import trio.testing

from anvild.llm import capabilities as caps
from anvild.llm.integrity import validate_transcript
from anvild.llm.providers import anthropic, gemini, openai_chat, openai_responses
from anvild.llm.stream import Finish, FinishReason, TextDelta
from anvild.llm.testing import Pause, ScriptedProvider, script
from anvild.llm.types import ChatRequest, Role
from anvild.session.checkpoint import TextCheckpoint
from anvild.store import SessionStatus, TextStreamed, read_journal
from anvild.store.recovery import STREAMED_NOTE, TURN_DETAIL
from tests.unit.session.support import Models, ask, new, running, target


def streamed_records(path: Path) -> list[str]:
    return [r.text for r in read_journal(path).records if isinstance(r, TextStreamed)]


async def test_the_checkpoint_writes_once_per_interval_what_gathered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    written: list[tuple[float, str]] = []

    def write(text: str) -> bool:
        written.append((trio.current_time(), text))
        return True

    checkpoint = TextCheckpoint(write, interval=1.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(checkpoint.run)
        start = trio.current_time()
        for piece in ("He", "l", "lo"):  # many deltas within one interval: one record
            checkpoint.add(piece)
            await trio.sleep(0.2)
        await trio.sleep(3)  # nothing new: nothing written
        checkpoint.add(" world")
        checkpoint.flush()  # a turn that ends uncommitted writes at once
        checkpoint.add(" dropped")
        checkpoint.discard()  # the answer was committed whole
        await trio.sleep(3)
        nursery.cancel_scope.cancel()
    assert [(round(t - start, 1), text) for t, text in written] == [
        (1.0, "Hello"),
        (3.6, " world"),
    ]
    assert checkpoint.records == 2


async def test_a_streaming_answer_is_recorded_at_most_a_second_behind(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    steps = [
        TextDelta(0, "Hel"),
        TextDelta(0, "lo"),
        Pause(5),
        TextDelta(0, " world"),
        Pause(5),
        Finish(FinishReason.END_TURN),
    ]
    async with running(tmp_path, [steps]) as manager:
        session = await new(manager)
        path = session.journal.path
        seq = session.submit("hi")
        await trio.sleep(0.5)
        assert streamed_records(path) == []  # not one record per delta
        await trio.sleep(1)
        assert streamed_records(path) == ["Hello"]
        assert session.record.streamed == "Hello"
        await trio.sleep(5)
        assert streamed_records(path) == ["Hello", " world"]
        await session.wait_handled(seq)
        assert session.out == "Hello world\n"
        assert session.record.streamed == ""  # the committed answer supersedes the records
        assert streamed_records(path) == ["Hello", " world"]


async def test_a_cancelled_answer_is_recorded_whole_and_restored_in_out(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    steps = [TextDelta(0, "Half an"), Pause(0.3), TextDelta(0, " answer"), Pause(100)]
    async with running(tmp_path, [steps]) as manager:
        session = await new(manager, alias="c")
        session.submit("hi")
        await trio.sleep(0.5)  # both pieces arrived, neither is recorded yet
        await session.cancel()
        assert session.record.streamed == "Half an answer"
        out = session.out
    assert out.startswith("Half an answer\n\n[turn ended: cancelled")
    async with running(tmp_path, []) as manager:  # a clean restart shows the same
        assert manager.get("c").out == out


def crash_copy(tmp_path: Path, name: str) -> Path:
    """The data dir as a kill -9 would leave it now: a copy of its files. A file that goes
    while the copy runs (the index's temp file, renamed by the writer thread) is left out, as
    a crash after its rename would have it."""
    copy = tmp_path / name

    def copy_present(src: str, dst: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            shutil.copy2(src, dst)

    shutil.copytree(tmp_path / "data", copy / "data", copy_function=copy_present)
    return copy


async def test_a_session_cut_mid_stream_shows_the_text_interrupted_and_resumes_validly(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.txt").write_text("a\n")
    first = [
        script.tool_call("c1", "read_file", {"file_path": "a.txt"}, text="Let me look."),
        [TextDelta(0, "There is one "), TextDelta(0, "file, a.txt"), Pause(1000)],
    ]
    async with running(tmp_path, first) as manager:
        session = await new(manager, alias="s")
        reader = session.events.open_reader()
        session.submit("what is here?")
        seen = b""
        while b"file, a.txt" not in seen:  # the second step's text was shown
            seen += await reader.read(1 << 16)
        await trio.sleep(1.5)  # and recorded within a second
        assert session.record.streamed == "There is one file, a.txt"
        crashed = crash_copy(tmp_path, "crashed")
    provider = ScriptedProvider([script.text("One file: a.txt.")])
    models = Models({"fake": target(provider)})
    async with running(crashed, models) as manager:
        session = manager.get("s")
        assert session.status is SessionStatus.IDLE
        assert session.out == (
            f"There is one file, a.txt\n[interrupted]\n\n[turn ended: error: {TURN_DETAIL}]\n"
        )
        assert await ask(session, "go on") == "One file: a.txt.\n"
    request = provider.requests[0]
    validate_transcript(request.messages)
    assert [m.role for m in request.messages] == [Role.USER, Role.ASSISTANT, Role.USER]
    last = request.messages[-1]
    assert [b.text for b in last.content if hasattr(b, "text")] == [  # type: ignore[attr-defined]
        STREAMED_NOTE.format(chars=len("There is one file, a.txt")),
        "go on",
    ]
    for kind, body in wire_bodies(request).items():
        text = json.dumps(body)
        assert "There is one" not in text, kind  # the unfinished answer reaches no provider
        assert "were not kept in this conversation" in text, kind
        assert "go on" in text, kind
        assert "Let me look." in text, kind  # the finished step is intact


def wire_bodies(request: ChatRequest) -> dict[str, Any]:
    """The request as each provider kind's message builder puts it on the wire; each builder
    refuses (raises) a transcript it cannot represent."""
    bodies = {
        "anthropic": anthropic.to_wire(request, caps.for_target("anthropic")),
        "openai-chat": openai_chat.to_wire(request, caps.for_target("openai-chat")),
        "openai-responses": openai_responses.to_wire(request, caps.for_target("openai-responses")),
        "gemini": gemini.to_wire(request, caps.for_target("gemini")),
    }
    roles = [m["role"] for m in bodies["anthropic"]["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert [c["role"] for c in bodies["gemini"]["contents"]] == ["user", "model", "user"]
    chat = [m["role"] for m in bodies["openai-chat"]["messages"] if m["role"] != "system"]
    assert chat == ["user", "assistant", "tool", "user"]
    return bodies
