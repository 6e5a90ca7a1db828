"""A context replacement (clear, restart, a model handoff) refused by a full disk leaves the
session as its records say, so `start` or `restart` brings it back once space returns. The
write fails inside the journal (OSError ENOSPC from write(2)), as on a full data directory."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from anvild.llm import stream
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ProviderMeta
from anvild.session.errors import RecordWriteFailed
from anvild.session.session import Session
from anvild.store import ContextReplaced, SessionStatus, journal, read_journal
from tests.unit.session.support import Models, ask, new, running, target

S = SessionStatus


class DiskFull:
    """While `full`, every write(2) of a journal fails with ENOSPC (the journal cuts it back)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        self._write = journal._write_all
        monkeypatch.setattr(journal, "_write_all", self)

    def __call__(self, fd: int, line: bytes) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._write(fd, line)


def assert_memory_is_the_record(session: Session) -> None:
    assert session.agent.messages == session.record.messages
    assert read_journal(session.journal.path).state.messages == session.record.messages


@pytest.mark.parametrize("verb", ["start", "restart"])
@pytest.mark.parametrize("refused", ["clear", "restart"])
async def test_a_replacement_refused_by_a_full_disk_leaves_the_session_recoverable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: str, verb: str
) -> None:
    disk = DiskFull(monkeypatch)
    provider = ScriptedProvider([script.text("pong"), script.text("back")])
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager)
        assert await ask(session, "ping") == "pong\n"
        before = session.record.messages
        assert before
        disk.full = True
        with pytest.raises(RecordWriteFailed, match="No space left on device"):
            await session.control(refused)
        assert session.status is S.ERROR
        assert session.agent.messages == before  # not replaced: the record was not written
        assert_memory_is_the_record(session)
        disk.full = False
        await session.control(verb)
        assert session.status is S.IDLE
        assert await ask(session, "again") == "back\n"
        assert_memory_is_the_record(session)


async def test_a_handoff_refused_by_a_full_disk_keeps_the_model_and_the_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskFull(monkeypatch)
    thinking_only = [
        stream.ReasoningDelta(0, "private thoughts"),
        stream.BlockMeta(0, ProviderMeta("anthropic", {"signature": "sig"})),
        stream.Finish(stream.FinishReason.END_TURN),
    ]
    first = ScriptedProvider([thinking_only, script.text("still fake")])
    second = ScriptedProvider([script.text("continuing")], name="other")
    models = Models(
        {"fake": target(first), "other": target(second, name="other", kind="openai-chat")}
    )
    async with running(tmp_path, models) as manager:
        session = await new(manager)
        await ask(session, "think about it")
        before = session.record.messages
        disk.full = True
        with pytest.raises(RecordWriteFailed, match="No space left on device"):
            await session.control("model other")
        assert session.model == "fake"
        assert session.agent.messages == before
        assert_memory_is_the_record(session)
        disk.full = False
        await session.control("start")
        assert await ask(session, "go on") == "still fake\n"
        assert_memory_is_the_record(session)
        await session.control("model other")
        records = read_journal(session.journal.path).records
        assert sum(isinstance(r, ContextReplaced) for r in records) == 1
        assert await ask(session, "and now") == "continuing\n"
