"""A session that lives through a full window: the issue's scripted check and the verb.

The provider has a 6,000-token window (it refuses larger requests with `ContextOverflow`, as
`context_length_exceeded`) and reports usage from the request's size. Thirty turns of
1,000-token prompts, each reading a file, must all end done: old results are cleared first,
then the history is compacted, and each summary request carries every file path and open todo
of what it drops.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anvild.agent.context.clearing import STUB_PREFIX
from anvild.agent.context.compaction import SUMMARY_MARK, prompt_text
from anvild.llm.testing import Script, ScriptedProvider, script
from anvild.llm.types import ChatRequest, Text, ToolCall, ToolResult
from anvild.session.errors import SessionRefused
from anvild.store import TurnEnded
from tests.unit.session.support import Models, ask, new, running, target, workspace

WINDOW = 6000
PROMPT_BYTES = 4000  # about 1,000 tokens


def prompt(turn: int) -> str:
    head = f"Turn {turn}: read src/file{turn}.py and tell me what it holds. "
    return head + "Context for this turn. " * ((PROMPT_BYTES - len(head)) // 23)


def summary_of(request: ChatRequest) -> str:
    return request.messages[0].text()


def respond(request: ChatRequest) -> Script:
    """The model: summaries for summary requests; otherwise a read of the turn's file, a todo
    list every fifth turn, then an answer."""
    if request.system == prompt_text():
        return script.text("## Goals and constraints\nRead the files the user names.")
    last = request.messages[-1]
    texts = [b.text for b in last.content if isinstance(b, Text) and b.text.startswith("Turn ")]
    if texts:
        turn = int(texts[-1].split()[1].rstrip(":"))
        return script.tool_call(f"r{turn}", "read_file", {"file_path": f"src/file{turn}.py"})
    result = next(b for b in last.content if isinstance(b, ToolResult))
    turn = int(result.call_id.lstrip("rt"))
    if result.call_id.startswith("r") and turn % 5 == 0:
        todos = [{"content": f"check file{turn}", "status": "pending"}]
        return script.tool_call(f"t{turn}", "todo_write", {"todos": todos})
    return script.text(f"file{turn} holds its module.")


async def test_thirty_turns_in_a_6000_token_window_all_end_done(tmp_path: Path) -> None:
    src = workspace(tmp_path) / "src"
    src.mkdir()
    for turn in range(30):
        (src / f"file{turn}.py").write_text(f"# file{turn}\n" + "x = 1\n" * 400)
    provider = ScriptedProvider([], window=WINDOW, respond=respond)
    models = Models({"fake": target(provider, window=WINDOW)})
    async with running(tmp_path, models) as manager:
        session = await new(manager)
        for turn in range(30):
            out = await ask(session, prompt(turn))
            ended = session.record.last_turn
            assert ended == TurnEnded("done"), (turn, out)
        requests = provider.requests
        cleared = [i for i, r in enumerate(requests) if STUB_PREFIX in json.dumps(str(r))]
        summaries = [i for i, r in enumerate(requests) if r.system == prompt_text()]
        assert cleared, "old tool results should have been cleared from some request"
        assert summaries, "the history should have been compacted"
        assert cleared[0] < summaries[0]  # clearing is the first defence
        compactions = session.record.compactions
        assert len(compactions) == len(summaries)
        assert {c.trigger for c in compactions} <= {"auto", "overflow"}
        # Each summary request names every file read before it, but the one of the step it
        # keeps verbatim (the current turn's read, when it compacts mid-turn).
        for index in summaries:
            text = summary_of(requests[index])
            read = [
                block.arguments["file_path"]
                for request in requests[:index]
                for message in request.messages
                for block in message.content
                if isinstance(block, ToolCall) and block.name == "read_file"
            ]
            missing = {path for path in read if path not in text}
            assert missing <= {read[-1]}, (index, missing)
        open_todo = next(i for i in summaries if "check file5" in summary_of(requests[i]))
        assert "pending: check file5" in summary_of(requests[open_todo])
        assert session.compaction.text().count("\n") == len(compactions)
        assert session.usage_line().endswith(" compact at 85%")
        assert session.agent.messages[0].text().startswith(SUMMARY_MARK)


async def test_compact_focus_on_the_parser_sends_the_focus(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [script.text("one"), script.text("two"), script.text("S")], window=WINDOW
    )
    async with running(tmp_path, Models({"fake": target(provider, window=WINDOW)})) as manager:
        session = await new(manager)
        await ask(session, "first")
        await ask(session, "second")
        assert await session.compaction.compact("focus on the parser") == "compacted"
        [summary] = [r for r in provider.requests if r.system == prompt_text()]
        assert "Focus the summary on: focus on the parser" in summary_of(summary)
        line = session.compaction.text().split("\t")
        assert line[1] == "manual"
        assert line[5] == "fake-model\n"
        assert session.agent.messages[0].text().startswith(SUMMARY_MARK)
        # nothing more to compact: the writer is told why
        with pytest.raises(SessionRefused, match="already one summary"):
            await session.compaction.compact()
