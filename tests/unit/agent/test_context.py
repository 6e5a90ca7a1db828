"""The pure parts of context management: clearing, the compaction plan, facts, rebuild, chunks."""

from __future__ import annotations

import math

from anvild.agent.context.clearing import STUB_PREFIX, clear_tool_results, is_stub
from anvild.agent.context.compaction import (
    KEPT_MARK,
    SUMMARY_MARK,
    chunks,
    facts,
    is_compacted,
    parse_facts,
    plan,
    prompt_text,
    rebuild,
    render_history,
    summary_block,
    summary_request,
)
from anvild.agent.context.tokens import TokenMeter, request_bytes
from anvild.agent.context.window import ContextSettings, ContextWindow
from anvild.agent.tools.base import Effects
from anvild.llm.integrity import validate_transcript
from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult


def call(cid: str, name: str, **args: object) -> Message:
    return Message(Role.ASSISTANT, (ToolCall(cid, name, dict(args)),))


def result(cid: str, content: str, *, error: bool = False) -> Message:
    return Message(Role.USER, (ToolResult(cid, content, error),))


def effects(c: ToolCall) -> Effects:
    match c.name:
        case "read_file":
            return Effects.read(str(c.arguments["file_path"]))
        case "write_file":
            return Effects.write(str(c.arguments["file_path"]))
    return Effects(subprocess=True)


def history() -> list[Message]:
    """Two turns of work: reads, a write, a failing then passing command, answers."""
    return [
        Message.user_text("fix the parser; never touch vendor/"),
        call("c1", "read_file", file_path="src/parser.py"),
        result("c1", "x" * 5000),
        call("c2", "write_file", file_path="src/parser.py", content="..."),
        result("c2", "wrote src/parser.py"),
        call("c3", "bash", command="pytest tests/test_parser.py"),
        result("c3", "1 failed: test_empty", error=True),
        call("c4", "bash", command="pytest tests/test_parser.py"),
        result("c4", "3 passed"),
        Message.assistant_text("Fixed."),
        Message.user_text("now the lexer"),
        call("c5", "read_file", file_path="src/lexer.py"),
        result("c5", "y" * 5000),
        call("c6", "bash", command="make lint"),
        result("c6", "E501 line too long", error=True),
    ]


def test_clearing_stubs_the_oldest_results_and_keeps_the_recent_and_the_current_step() -> None:
    messages = history()
    cleared = clear_tool_results(messages, save=4000, keep_recent=1)
    assert cleared.count == 1  # the 5000-byte read of c1 was enough
    first = cleared.messages[2].content[0]
    assert isinstance(first, ToolResult)
    assert is_stub(first)
    assert 'read_file {"file_path": "src/parser.py"}' in first.content
    assert "5000 bytes" in first.content
    assert "Run the tool again" in first.content
    assert cleared.saved >= 4000
    assert cleared.messages[12] == messages[12]  # c5 is protected as recent
    assert list(messages) == history()  # the input is untouched
    everything = clear_tool_results(messages, save=10**9, keep_recent=0)
    assert everything.count == 2  # both big reads; small results and the last step stay
    assert everything.messages[-1] == messages[-1]


def test_plan_keeps_the_current_prompt_the_unfinished_step_and_recent_users() -> None:
    messages = history()
    chosen = plan(messages, turn_start=10, keep_user_bytes=10_000)
    assert chosen.prompt == (Text("now the lexer"),)
    assert chosen.step == (messages[13], messages[14])
    assert chosen.kept_users == ("fix the parser; never touch vendor/",)
    assert chosen.dropped == (*messages[:10], messages[11], messages[12])
    new = rebuild(summary_block("S", facts(chosen.dropped, (), effects), model="m"), chosen)
    validate_transcript(new)
    assert is_compacted(new)
    head = new[0].content
    assert isinstance(head[1], Text)
    assert head[1].text.startswith(KEPT_MARK)
    assert head[-1] == Text("now the lexer")
    assert new[1:] == (messages[13], messages[14])
    # a second compaction in the same turn summarises the first summary again
    again = plan(new, turn_start=0, keep_user_bytes=10_000)
    assert again.prompt == (Text("now the lexer"),)
    assert again.kept_users == ("fix the parser; never touch vendor/",)
    assert any(
        isinstance(b, Text) and b.text.startswith(SUMMARY_MARK)
        for m in again.dropped
        for b in m.content
    )


def test_plan_keeps_only_what_fits_the_user_budget() -> None:
    chosen = plan(history(), turn_start=None, keep_user_bytes=15)
    assert chosen.kept_users == ("now the lexer",)
    assert plan(history(), turn_start=None, keep_user_bytes=0).kept_users == ()


def test_facts_name_every_file_the_successful_commands_the_open_errors_and_todos() -> None:
    found = facts(history(), [("write tests", "pending"), ("fix", "completed")], effects)
    assert found.files_read == ("src/lexer.py",)  # parser.py was changed, listed there
    assert found.files_changed == ("src/parser.py",)
    assert found.commands == ("pytest tests/test_parser.py",)
    assert found.errors == ('bash {"command": "make lint"}: E501 line too long',)
    assert found.todos == ("pending: write tests",)


def test_the_summary_request_carries_the_prompt_facts_and_focus() -> None:
    dropped = history()
    found = facts(dropped, [("write tests", "pending")], effects)
    request = summary_request(
        "m", render_history(dropped), found, focus="the parser", max_tokens=300
    )
    text = request.messages[0].text()
    assert request.system == prompt_text()
    assert "## Files" in request.system
    for needle in ("src/parser.py", "src/lexer.py", "pending: write tests", "the parser"):
        assert needle in text
    # the request ends with the instruction, after the history's last question
    assert text.rstrip().endswith("starting with ## Goals and constraints.")
    assert request.max_tokens == 300
    assert request.tools == ()


def test_chunks_cut_at_line_ends_and_within_the_limit() -> None:
    text = "".join(f"line {i} " + "z" * 50 + "\n" for i in range(100))
    pieces = chunks(text, 500)
    assert "".join(pieces) == text
    assert all(len(p.encode()) <= 500 for p in pieces)
    assert all(p.endswith("\n") for p in pieces)
    long = chunks("é" * 1000, 301)
    assert "".join(long) == "é" * 1000
    assert all(len(p.encode()) <= 301 for p in long)


def test_the_meter_learns_the_ratio_a_provider_reports() -> None:
    meter = TokenMeter()
    assert meter.tokens(400) == 100
    meter.measured(400, Usage(150, 10, 40, 0))
    assert meter.tokens(400) == 190
    meter.measured(400, Usage(None, 10, None, None))  # unknown input: kept
    assert meter.tokens(400) == 190


def test_the_window_clears_only_past_its_share() -> None:
    window = ContextWindow(ContextSettings(window=3000, clear_at=0.5, keep_tool_results=1))
    messages = history()
    assert window.size("", (), messages) == math.ceil(request_bytes("", (), messages) / 4)
    cleared = window.for_request("", (), messages)
    assert cleared.count == 1  # c1's read was enough; c5's is the one protected result
    assert cleared.messages[12] == messages[12]
    assert window.size("", (), cleared.messages) <= 1500
    roomy = ContextWindow(ContextSettings(window=100_000))
    assert roomy.for_request("", (), messages).count == 0
    assert roomy.wants_compaction(85_000)
    assert not roomy.wants_compaction(84_999)
    assert not ContextWindow(ContextSettings(window=10, auto_compact=0)).wants_compaction(10**6)
    assert STUB_PREFIX in str(cleared.messages)


def test_the_protected_span_is_bounded_by_size_too() -> None:
    messages = history()
    # c5's 5000-byte read would be protected as recent, but not within 1000 bytes
    cleared = clear_tool_results(messages, save=10**9, keep_recent=3, keep_bytes=1000)
    stubbed = [
        b.call_id
        for m in cleared.messages
        for b in m.content
        if isinstance(b, ToolResult) and is_stub(b)
    ]
    assert stubbed == ["c1", "c5"]
    roomy = clear_tool_results(messages, save=10**9, keep_recent=3, keep_bytes=10**6)
    assert roomy.count == 1  # c1 only: c2..c5 are the three recent ones


def test_facts_of_an_earlier_summary_are_carried_into_the_next() -> None:
    first = facts(history(), [("write tests", "pending")], effects)
    block = summary_block("the model's words", first, model="m")
    assert parse_facts(block) == first
    later = [
        Message.user_text(block),
        call("c7", "bash", command="make lint"),  # the error of c6 is fixed now
        result("c7", "ok"),
        call("c8", "read_file", file_path="docs/x.md"),
        result("c8", "z"),
    ]
    carried = facts(later, [("write tests", "completed")], effects)
    assert carried.files_read == ("src/lexer.py", "docs/x.md")
    assert carried.files_changed == ("src/parser.py",)
    assert carried.commands == ("pytest tests/test_parser.py", "make lint")
    assert carried.errors == ()
    assert carried.todos == ()  # the agent's list now replaces the summary's
