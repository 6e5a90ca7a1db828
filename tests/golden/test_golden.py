"""Golden transcripts of whole sessions: a `SessionManager` with the daemon's native tools and
`task`, real files in a temp workspace, a scripted provider. What the model saw (every request)
is rendered with temp paths and session ids redacted and compared with
`tests/golden/transcripts/NAME.txt`. `ANVIL_UPDATE_GOLDEN=1` rewrites the files (then review
the diff and commit it)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from anvild.agent.permissions.policy import Mode
from anvild.agent.tools import files
from anvild.agent.tools.base import Failed
from anvild.coord.subagents import SubagentTools
from anvild.llm.testing import Script, ScriptedProvider, script
from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from anvild.session import NewSession, Session, SessionManager, SessionStatus
from anvild.session.manager import chain_tools, default_tools
from anvild.store import SessionStore
from tests.golden import transcript
from tests.unit.session.support import Models, settings, target

WORKSPACES: dict[Path, Path] = {}  # a test's tmp_path -> its workspace, to redact
SESSION_IDS = [f"5e55{n:04d}" for n in range(1, 10)]
WINDOW = 32000

CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('test_calc: ok')\n"


def make_workspace() -> Path:
    """As root the sandbox runs bash as uid 65534, which must reach and own the workspace
    (pytest's tmp dir is 0700 root): the same result then as for a user's own workspace."""
    work = Path(tempfile.mkdtemp(prefix="anvil-golden-", dir="/var/tmp"))
    work.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(work, DEFAULT_UID, DEFAULT_GID)
    return work


@asynccontextmanager
async def harness(
    tmp_path: Path, scripts: Sequence[Script], mode: Mode = Mode.BYPASS
) -> AsyncIterator[tuple[SessionManager, ScriptedProvider, Path]]:
    provider = ScriptedProvider(scripts, window=WINDOW)
    work = make_workspace()
    WORKSPACES[tmp_path] = work
    subagents = SubagentTools(user_config_dir=tmp_path / "config")
    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        Models({"fake": target(provider, window=WINDOW)}),
        settings=settings(tmp_path, mode=mode, reap_delay=300.0),
        tools=chain_tools(default_tools, subagents.tools),
        default_cwd=work,
        new_id=iter(SESSION_IDS).__next__,
    )
    subagents.bind(manager)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            yield manager, provider, work
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def redactions(tmp_path: Path) -> dict[str, str]:
    table = {str(tmp_path.resolve()): "<TMP>", str(tmp_path): "<TMP>"}
    table[str(WORKSPACES.pop(tmp_path))] = "<WORK>"
    table.update({sid: f"<SESSION-{n}>" for n, sid in enumerate(SESSION_IDS, start=1)})
    return table


def rendered(provider: ScriptedProvider, tmp_path: Path) -> str:
    text = transcript.render(provider.requests, redactions(tmp_path))
    # A bash call's timing and any stray temp name are not what the snapshot is about.
    return re.sub(r"\b\d+(\.\d+)?\s?(ms|s)\b", "<DURATION>", text)


async def ask(session: Session, text: str) -> None:
    seq = session.submit(text)
    await session.wait_handled(seq)


async def wait_for(session: Session, status: SessionStatus) -> None:
    while session.status is not status:
        await session.wait_changed(session.version)


EDIT_AND_TEST: list[Script] = [
    script.tool_call("c1", "read_file", {"file_path": "calc.py"}),
    script.tool_call(
        "c2", "edit_file", {"file_path": "calc.py", "old_string": "a-b", "new_string": "a + b"}
    ),
    script.tool_call(
        "c3", "edit_file", {"file_path": "calc.py", "old_string": "a - b", "new_string": "a + b"}
    ),
    script.tool_call("c4", "bash", {"command": "python3 test_calc.py"}),
    script.text("Fixed add: it subtracted. test_calc passes."),
]


async def run_edit_and_test(tmp_path: Path) -> str:
    async with harness(tmp_path, EDIT_AND_TEST) as (manager, provider, work):
        (work / "calc.py").write_text(CALC)
        (work / "test_calc.py").write_text(TEST_CALC)
        session = await manager.create(NewSession(role="developer"))
        await ask(session, "test_calc.py fails; fix calc.py and run the test.")
        assert (work / "calc.py").read_text() == CALC.replace("a - b", "a + b")
        return rendered(provider, tmp_path)


async def test_edit_and_test(tmp_path: Path) -> None:
    transcript.check("edit_and_test", await run_edit_and_test(tmp_path))


async def test_unknown_tool_recovery(tmp_path: Path) -> None:
    scripts: list[Script] = [
        script.tool_call("c1", "run_tests", {"path": "."}),
        script.tool_call("c2", "bash", {"command": "python3 test_calc.py"}),
        script.text("The test passes."),
    ]
    async with harness(tmp_path, scripts) as (manager, provider, work):
        (work / "calc.py").write_text(CALC.replace("a - b", "a + b"))
        (work / "test_calc.py").write_text(TEST_CALC)
        session = await manager.create(NewSession(role="developer"))
        await ask(session, "Run the tests.")
        transcript.check("unknown_tool_recovery", rendered(provider, tmp_path))


async def test_permission_denial_with_feedback(tmp_path: Path) -> None:
    write = {"file_path": "notes.txt", "content": "todo\n"}
    scripts: list[Script] = [
        script.tool_call("c1", "write_file", write),
        script.text("Understood: I will not create notes.txt; here are the notes instead: todo"),
    ]
    async with harness(tmp_path, scripts, mode=Mode.DEFAULT) as (manager, provider, work):
        session = await manager.create(NewSession(role="developer"))
        seq = session.submit("Write my notes to a file.")
        await wait_for(session, SessionStatus.AWAIT_APPROVAL)
        session.answer_approval("reject do not create files, just answer in text")
        await session.wait_handled(seq)
        assert not (work / "notes.txt").exists()
        transcript.check("permission_denial_with_feedback", rendered(provider, tmp_path))


async def test_compaction(tmp_path: Path) -> None:
    scripts: list[Script] = [
        script.tool_call("c1", "read_file", {"file_path": "parser.py"}),
        script.text("parser.py splits on commas."),
        script.text("Yes, quoted commas are not handled."),
        script.text("## Goals and constraints\nUnderstand parser.py; quoted commas break it."),
        script.text("Handle quotes with the csv module."),
    ]
    async with harness(tmp_path, scripts) as (manager, provider, work):
        (work / "parser.py").write_text("def parse(line):\n    return line.split(',')\n")
        session = await manager.create(NewSession(role="developer"))
        await ask(session, "What does parser.py do?")
        await ask(session, "Does it handle quoted commas?")
        assert await session.compaction.compact("focus on the parser") == "compacted"
        await ask(session, "How would you fix it?")
        transcript.check("compaction", rendered(provider, tmp_path))


async def test_subagent_call(tmp_path: Path) -> None:
    scripts: list[Script] = [
        script.tool_call("p1", "task", {"prompt": "Count the lines of data.csv and answer."}),
        script.tool_call("k1", "read_file", {"file_path": "data.csv"}),
        script.text("data.csv has 3 lines."),
        script.text("The subagent counted 3 lines in data.csv."),
    ]
    async with harness(tmp_path, scripts) as (manager, provider, work):
        (work / "data.csv").write_text("a,b\n1,2\n3,4\n")
        session = await manager.create(NewSession(role="developer"))
        await ask(session, "Delegate counting the lines of data.csv.")
        assert session.out == "The subagent counted 3 lines in data.csv.\n"
        transcript.check("subagent_call", rendered(provider, tmp_path))


class _Reworded(Failed):
    """`Failed` with one word of its message changed, as an edit of a tool's message would."""

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("Check whitespace", "Verify whitespace"))


async def test_one_changed_word_in_a_tool_error_shows_in_the_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(transcript.UPDATE_ENV, raising=False)
    monkeypatch.setattr(files, "Failed", _Reworded)
    actual = await run_edit_and_test(tmp_path)
    with pytest.raises(transcript.GoldenMismatch) as caught:
        transcript.check("edit_and_test", actual)
    changed = [
        line
        for line in str(caught.value).splitlines()
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]
    old = (
        "old_string was not found in calc.py. Check whitespace and indentation (tabs vs spaces, "
        "trailing spaces, line breaks) and read_file the file again to copy the exact current "
        "text."
    )
    # The failed edit is in requests 3, 4 and 5: the one word changes in each, nothing else.
    assert changed == [f"-{old}", "+" + old.replace("Check", "Verify")] * 3


def test_a_missing_golden_file_says_how_to_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(transcript.UPDATE_ENV, raising=False)
    with pytest.raises(transcript.GoldenMismatch, match="ANVIL_UPDATE_GOLDEN=1"):
        transcript.check("absent", "text\n", golden_dir=tmp_path)
    monkeypatch.setenv(transcript.UPDATE_ENV, "1")
    transcript.check("absent", "text\n", golden_dir=tmp_path)
    assert (tmp_path / "absent.txt").read_text() == "text\n"
