"""`anvilctl replay`: a recorded ten-step session re-runs with every request byte for byte (its
recorded digest), with tools re-executed in a scratch copy or fed from the records; a tool whose
output format or definition changed, and a transcript that changed, are reported at the right
step with a diff; records without digests fall back to comparing messages and say so."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from anvilctl import rerun
from anvild.agent.tools.base import Cancellation, Effects, ToolContext, ToolOutput
from anvild.agent.tools.files import ReadFile
from anvild.llm.stream import Usage
from anvild.llm.testing import script
from tests.unit.session.support import ask, new, running

STEPS = 10
USAGE = Usage(input=50, output=5, cache_read=0, cache_write=0)


def ten_steps() -> list[Any]:
    calls = [
        script.tool_call(f"c{i}", "read_file", {"file_path": f"f{i % 3}.txt"}, usage=USAGE)
        for i in range(STEPS - 1)
    ]
    return [*calls, script.text("read them all", usage=USAGE)]


async def record(
    tmp_path: Path,
    script_: list[Any] | None = None,
    tools: Any = (),
    answer: str = "read them all\n",
) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for i in range(3):
        (work / f"f{i}.txt").write_text(f"line one of {i}\nline two\n")
    async with running(tmp_path, script_ or ten_steps(), tools=tools) as manager:
        session = await new(manager)
        assert await ask(session, "read the files") == answer
        assert await ask(session, "nothing else?") != ""
        return tmp_path / "data" / "sessions" / f"{session.id}.jsonl"


def replayed(path: Path, **kwargs: Any) -> tuple[int, str]:
    out = io.StringIO()
    status = rerun.replay(path, out=out, **kwargs)
    return status, out.getvalue()


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    return trio.run(record, tmp_path)


def test_the_recorded_turns_are_read_back(recorded: Path) -> None:
    from anvild.store import read_journal

    _, turns = rerun.recorded_turns(read_journal(recorded).records)
    assert [len(t.responses) for t in turns][:1] == [STEPS]
    assert len(turns[0].results) == STEPS - 1
    assert turns[0].outcome == "done"


BYTES = "(every request byte for byte)"


def usage_records(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line["type"] == "usage"]


def test_each_request_is_recorded_by_digest_with_its_head_once(recorded: Path) -> None:
    usages = usage_records(recorded)
    assert len(usages) == STEPS
    assert len({u["request"] for u in usages}) == STEPS  # every request differs from the last
    assert len({u["head"] for u in usages}) == 1
    bodies = [u["head_body"] for u in usages if "head_body" in u]
    assert len(bodies) == 1  # the system prompt and tools once, not per step
    assert [t["name"] for t in bodies[0]["tools"]][:2] == ["edit_file", "read_file"]
    assert "You are a coding agent" in bodies[0]["system"]


def test_every_request_is_reproduced_with_tools_re_executed(recorded: Path) -> None:
    status, out = replayed(recorded, turn=1)
    assert (status, out) == (0, f"turn 1: {STEPS} requests reproduced {BYTES}\n")


def test_every_turn_is_replayed_one_that_failed_up_to_its_failure(recorded: Path) -> None:
    # The second turn's only request failed (the script was exhausted): nothing to compare.
    status, out = replayed(recorded)
    assert (status, out) == (
        0,
        f"turn 1: {STEPS} requests reproduced {BYTES}\nturn 2: 0 requests reproduced\n",
    )


def test_recorded_results_can_be_fed_instead(recorded: Path) -> None:
    status, out = replayed(recorded, turn=1, feed=True)
    assert (status, out) == (0, f"turn 1: {STEPS} requests reproduced {BYTES}\n")


def test_a_changed_tool_output_format_is_a_divergence_at_its_call(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ReadFile.call

    async def shouting(self: ReadFile, args: Any, ctx: Any) -> ToolOutput:
        output = await original(self, args, ctx)
        if args["file_path"] != "f2.txt":  # only this file's reads change: first at step 3
            return output
        return ToolOutput(output.content.upper())

    monkeypatch.setattr(ReadFile, "call", shouting)
    status, out = replayed(recorded, turn=1)
    assert status == 1
    assert out.startswith("DIVERGED turn 1 step 3: the result of c2 (read_file) differs\n")
    assert "-     1\tline one of 2\n" in out
    assert "+     1\tLINE ONE OF 2\n" in out


def test_a_request_that_differs_is_reported_at_its_step(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fed results that differ from what the model saw make the next request differ.
    real = rerun.CheckedTools.dispatch

    async def altered(self: rerun.CheckedTools, call: Any, ctx: Any) -> Any:
        result = await real(self, call, ctx)
        if call.id == "c4":
            return type(result)(result.call_id, result.content + " (changed)", result.is_error)
        return result

    monkeypatch.setattr(rerun.CheckedTools, "dispatch", altered)
    status, out = replayed(recorded, turn=1, feed=True)
    assert status == 1
    assert out.startswith("DIVERGED turn 1 step 6: the request differs\n")
    assert "--- recorded messages\n+++ replayed messages\n" in out
    assert "(changed)" in out
    assert "recorded head" not in out  # only the part that differs


def test_a_changed_tool_definition_is_a_divergence_at_the_first_request(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    description = ReadFile().description
    monkeypatch.setattr(ReadFile, "description", description.replace("file", "document"))
    status, out = replayed(recorded, turn=1)
    assert status == 1
    assert out.startswith("DIVERGED turn 1 step 1: the request differs\n--- recorded head\n")
    lines = out.splitlines()
    removed = [line for line in lines if line.startswith("-") and not line.startswith("---")]
    added = [line for line in lines if line.startswith("+") and not line.startswith("+++")]
    assert len(removed) == len(added) == 1  # read_file's description line, nothing else
    assert "document" in added[0]
    assert "recorded messages" not in out


def test_records_without_digests_are_compared_by_their_messages(recorded: Path) -> None:
    lines = [json.loads(line) for line in recorded.read_text().splitlines()]
    for line in lines:
        for key in ("request", "head", "head_body"):
            line.pop(key, None)
    recorded.write_text("".join(json.dumps(line) + "\n" for line in lines))
    status, out = replayed(recorded, turn=1)
    assert (status, out) == (
        0,
        f"turn 1: {STEPS} requests reproduced (by their messages: the records hold no request "
        "hash)\n",
    )


def test_a_request_that_carried_cleared_results_is_compared_by_its_messages(
    recorded: Path,
) -> None:
    from anvild.llm.identity import digest_of, message_digest
    from anvild.llm.types import Message, ToolResult
    from anvild.store import read_journal

    _, turns = rerun.recorded_turns(read_journal(recorded).records)
    fifth = turns[0].responses[4]

    # What a context window that cleared the first result would have sent at step 5.
    def cleared(block: Any) -> Any:
        if isinstance(block, ToolResult) and block.call_id == "c0":
            return ToolResult(block.call_id, "[cleared]", block.is_error)
        return block

    sent = [Message(m.role, tuple(cleared(b) for b in m.content)) for m in fifth.request]
    assert sent != list(fifth.request)
    lines = [json.loads(line) for line in recorded.read_text().splitlines()]
    usage = [line for line in lines if line["type"] == "usage"][4]
    assert usage["request"] == fifth.digest
    usage["request"] = digest_of(fifth.head, [message_digest(m) for m in sent])
    recorded.write_text("".join(json.dumps(line) + "\n" for line in lines))
    status, out = replayed(recorded, turn=1)
    assert (status, out) == (
        0,
        f"turn 1: {STEPS} requests reproduced ({STEPS - 1} byte for byte, 1 by their messages: "
        "the session's context window had cleared old tool results from what was sent)\n",
    )


class Weather:
    """A tool the replay cannot build (not one of the session's native tools)."""

    name = "weather"
    description = "Today's weather."
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    cancellation = Cancellation.SAFE_TO_ABANDON

    def effects(self, args: Any) -> Effects:
        return Effects.none()

    async def call(self, args: Any, ctx: ToolContext) -> ToolOutput:
        return ToolOutput("sunny")


def test_a_tool_the_replay_cannot_build_keeps_its_recorded_definition_and_results(
    tmp_path: Path,
) -> None:
    steps = [
        script.tool_call("w1", "weather", {}, usage=USAGE),
        script.tool_call("r1", "read_file", {"file_path": "f0.txt"}, usage=USAGE),
        script.text("sunny, and f0 read", usage=USAGE),
    ]
    path = trio.run(record, tmp_path, steps, [Weather()], "sunny, and f0 read\n")
    status, out = replayed(path, turn=1)
    assert (status, out) == (
        0,
        "turn 1: 3 requests reproduced (every request byte for byte; recorded definitions and "
        "results: weather)\n",
    )


def test_an_unknown_turn_is_refused(recorded: Path) -> None:
    status, out = replayed(recorded, turn=9)
    assert status == 2
    assert "has no turn 9" in out
