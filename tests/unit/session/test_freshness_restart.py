"""Freshness of the file tools across a daemon restart: what the agent read is in its records
(`FileSeen`), so after a restart it edits the file without reading it again, while a file that
changed on disk while the daemon was down is still refused as stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import ScriptedProvider, script
from anvild.store import FileSeen, SessionStatus, ToolFinished, read_journal
from tests.unit.session.support import Models, ask, new, running, target
from tests.unit.session.test_approvals_records import FailingAppends


def edit(call_id: str, name: str) -> script.Script:
    args = {"file_path": name, "old_string": "old", "new_string": "new"}
    return script.tool_call(call_id, "edit_file", args)


def last_result(provider: ScriptedProvider) -> str:
    results = provider.requests[-1].messages[-1].tool_results()
    assert results
    return results[0].content


async def test_an_edit_after_a_restart_needs_no_new_read_but_a_changed_file_is_stale(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "kept.txt").write_text("old text\n")
    (work / "changed.txt").write_text("old text\n")
    (work / "unread.txt").write_text("old text\n")
    first = ScriptedProvider(
        [
            script.tool_call("r1", "read_file", {"file_path": "kept.txt"}),
            script.tool_call("r2", "read_file", {"file_path": "changed.txt"}),
            script.text("read both"),
        ]
    )
    async with running(tmp_path, Models({"fake": target(first)}), mode=Mode.ACCEPT_EDITS) as m:
        session = await new(m, alias="f")
        assert await ask(session, "read them") == "read both\n"
        path = session.journal.path
    records = read_journal(path).records
    seen = [r for r in records if isinstance(r, FileSeen)]
    assert [Path(r.path).name for r in seen] == ["kept.txt", "changed.txt"]
    finished = [i for i, r in enumerate(records) if isinstance(r, ToolFinished)]
    assert records.index(seen[0]) > finished[0]  # after its call's result was recorded

    (work / "changed.txt").write_text("old text, edited while the daemon was down\n")
    second = ScriptedProvider(
        [
            edit("e1", "kept.txt"),
            script.text("edited"),
            edit("e2", "changed.txt"),
            script.text("tried"),
            edit("e3", "unread.txt"),
            script.text("tried again"),
        ]
    )
    async with running(tmp_path, Models({"fake": target(second)}), mode=Mode.ACCEPT_EDITS) as m:
        session = m.get("f")
        assert await ask(session, "edit kept") == "edited\n"
        assert (work / "kept.txt").read_text() == "new text\n"
        assert await ask(session, "edit changed") == "tried\n"
        assert "File changed on disk since you last read it" in last_result(second)
        assert (work / "changed.txt").read_text().endswith("edited while the daemon was down\n")
        assert await ask(session, "edit unread") == "tried again\n"
        assert "You must read_file before editing it" in last_result(second)
        assert (work / "unread.txt").read_text() == "old text\n"
        # The agent's own edit is seen too: a later restart keeps the new digest.
        kept = [r for r in session.journal.state.files_seen if r[0].endswith("kept.txt")]
        assert len(kept) == 1


async def test_a_read_whose_result_was_not_recorded_leaves_no_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("old text\n")
    provider = ScriptedProvider(
        [script.tool_call("r1", "read_file", {"file_path": "a.txt"}), script.text("read")]
    )
    async with running(tmp_path, Models({"fake": target(provider)})) as manager:
        session = await new(manager)
        monkeypatch.setattr(session.journal, "append", FailingAppends(session, (ToolFinished,)))
        seq = session.submit("read it")
        assert await session.wait_handled(seq) is SessionStatus.ERROR
        path = session.journal.path
    assert not [r for r in read_journal(path).records if isinstance(r, FileSeen)]
