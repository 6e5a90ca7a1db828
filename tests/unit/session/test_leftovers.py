"""Temporary files of writes a crash interrupted: their names are derived from the session and
call ids before the write starts, and a restart removes them and says so to the model and in
the log."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

import pytest

from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.files import WriteFile
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import Message, Role, ToolCall
from anvild.sandbox.files import temp_name
from anvild.session import leftovers
from anvild.store import (
    Journal,
    MessageAppended,
    PromptQueued,
    PromptTaken,
    SessionStarted,
    SessionStatus,
    StateChanged,
    ToolStarted,
)
from anvild.store.recovery import TEMP_REMOVED
from tests.unit.session.support import Models, ask, running, target


def write_call(path: str, call_id: str = "w1") -> ToolCall:
    return ToolCall(call_id, "write_file", {"file_path": path, "content": "new\n"})


def test_the_tag_is_derived_from_the_session_and_the_call() -> None:
    assert re.fullmatch(r"[0-9a-f]{12}", leftovers.tag("s1", "w1"))
    assert leftovers.tag("s1", "w1") == leftovers.tag("s1", "w1")
    assert (
        len({leftovers.tag("s1", "w1"), leftovers.tag("s2", "w1"), leftovers.tag("s1", "w2")}) == 3
    )


async def test_a_write_goes_through_the_temp_file_its_tag_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed: list[Any] = []
    real = os.rename

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        renamed.append(src)
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    ctx = ToolContext(cwd=tmp_path, temp_tag=leftovers.tag("s1", "w1"))
    await WriteFile().call({"file_path": "notes/x.txt", "content": "hi\n"}, ctx)
    assert renamed == [temp_name("x.txt", leftovers.tag("s1", "w1"))]
    assert (tmp_path / "notes" / "x.txt").read_text() == "hi\n"


def test_remove_deletes_only_the_named_regular_files(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    left = notes / temp_name("x.txt", leftovers.tag("s1", "w1"))
    left.write_text("half")
    other = notes / temp_name("x.txt", leftovers.tag("s1", "w9"))  # another call's
    other.write_text("keep")
    target = notes / "y.txt"
    target.write_text("keep")
    (notes / temp_name("y.txt", leftovers.tag("s1", "w2"))).symlink_to(target)
    calls = [
        write_call("notes/x.txt"),
        write_call("notes/y.txt", "w2"),  # a symlink there: never followed nor removed
        ToolCall("b1", "bash", {"command": "touch notes/x.txt"}),  # no temp file of its own
        write_call("notes/missing.txt", "w3"),  # nothing left
    ]
    assert leftovers.remove("s1", str(tmp_path), calls) == {"w1": (str(left),)}
    assert not left.exists()
    assert other.read_text() == "keep"
    assert target.read_text() == "keep"


async def test_a_restart_removes_the_temp_file_of_an_interrupted_write_and_says_so(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    (work / "notes").mkdir(parents=True)
    call = write_call("notes/x.txt")
    path = tmp_path / "data" / "sessions" / "s1.jsonl"
    path.parent.mkdir(parents=True)
    header = SessionStarted(
        id="s1",
        alias="w",
        role="developer",
        model="fake",
        cwd=str(work),
        sandbox="workspace-write",
        created_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
    )
    with Journal.create(path, header) as journal:
        for record in (
            StateChanged(SessionStatus.IDLE),
            PromptQueued("p1", "write the notes"),
            PromptTaken("p1"),
            StateChanged(SessionStatus.RUNNING),
            MessageAppended(Message.user_text("write the notes")),
            MessageAppended(Message(Role.ASSISTANT, (call,))),
            ToolStarted("w1", "write_file"),
        ):
            journal.append(record)
    left = work / "notes" / temp_name("x.txt", leftovers.tag("s1", "w1"))
    left.write_text("half writ")  # what kill -9 left in the middle of the write
    provider = ScriptedProvider([script.text("I will write it again.")])
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = manager.get("w")
        assert not left.exists()
        assert not (work / "notes" / "x.txt").exists()
        said = TEMP_REMOVED.format(paths=left)
        result = session.record.messages[-1].tool_results()[0]
        assert result.is_error
        assert result.content.startswith("Outcome unknown")
        assert result.content.endswith(said)
        assert any(str(left) in line for line in session.log.backlog() if "NOTE:" in line)
        assert await ask(session, "what happened?") == "I will write it again.\n"
    sent = provider.requests[0].messages[-1]
    assert sent.tool_results()[0].content.endswith(said)
