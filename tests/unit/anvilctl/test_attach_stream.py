"""attach's answer text as it streams (finished blocks vs the pending one), the footer's cost
and context, the earlier exchanges from a `log` backlog, and the retry line."""

from __future__ import annotations

import re

from anvilctl.attach_render import (
    LineStream,
    MarkdownStream,
    Renderer,
    Style,
    context_text,
    cost_text,
    exchanges,
    format_exchange,
    parse_cost,
)

SGR = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    return SGR.sub("", text)


def feed(stream: MarkdownStream | LineStream, text: str, piece: int = 3) -> list[str]:
    """Feed `text` a few characters at a time; what each piece finished."""
    return [stream.feed(text[i : i + piece]) for i in range(0, len(text), piece)]


def test_markdown_blocks_are_rendered_when_they_end_and_the_rest_is_pending() -> None:
    stream = MarkdownStream(60)
    done = "".join(feed(stream, "Some **bold** text.\n\nA second para"))
    assert plain(done) == "Some bold text.\n"
    assert "\x1b[1mbold\x1b[0m" in done  # rendered, not the source
    assert plain(stream.pending()) == "A second para\n"
    assert plain(stream.feed("graph.\n\n")) == "\nA second paragraph.\n"  # one blank line between
    assert stream.pending() == ""
    assert stream.flush() == ""


def test_a_code_block_ends_at_its_closing_fence_even_with_blank_lines_inside() -> None:
    stream = MarkdownStream(60)
    done = "".join(feed(stream, "```python\ndef f():\n\n    return 1\n"))
    assert done == ""  # the blank line is inside the fence
    pending = stream.pending()  # shown as an open code block, highlighted
    assert "def" in plain(pending)
    assert "```" not in plain(pending)
    assert "38;5;" in pending
    done = stream.feed("```\nafter")
    assert re.search(r"def f\(\):\s*\n\s*\n\s+return 1", plain(done))
    assert plain(stream.flush()) == "\nafter\n"


def test_without_colour_whole_lines_are_finished_and_nothing_is_rendered() -> None:
    stream = LineStream()
    assert feed(stream, "# Title\n**bo", piece=100) == ["# Title\n"]
    assert stream.pending() == "**bo"
    assert stream.feed("ld**") == ""
    assert stream.flush() == "**bold**\n"


def test_a_tool_line_first_finishes_the_pending_text() -> None:
    renderer = Renderer(Style(False), stream=LineStream())
    assert renderer.event({"type": "text_delta", "step": 1, "text": "Let me look"}) == ""
    assert renderer.pending() == "Let me look"
    started = {"type": "tool_call_started", "step": 1, "id": "c", "name": "bash",
               "arguments": {"command": "ls"}}  # fmt: skip
    assert renderer.event(started) == "Let me look\n● bash ls\n"
    assert renderer.pending() == ""


def test_the_footer_says_cost_and_context_and_unknown_when_unknown() -> None:
    assert parse_cost("input 10\nusd 0.012500\n") == 0.0125
    assert parse_cost("input 10\nusd n/a\n") is None
    assert cost_text(0.01, 0.0125) == "cost $0.0025"  # the turn's
    assert cost_text(None, 0.0125) == "session cost $0.0125"  # joined mid-way: the session's
    assert cost_text(0.01, None) == "cost unknown"
    assert context_text("5274/6000 (87.9%) compact at 85%\n") == (
        "context 5274/6000 (87.9%), compacts at 85%"
    )
    assert context_text("-\n") == "context unknown"
    renderer = Renderer(Style(False))
    finished = {"type": "turn_finished", "outcome": "done", "steps": 1,
                "usage": {"input": 5, "output": 2}}  # fmt: skip
    assert renderer.footer(finished, ["cost unknown", "context unknown"]) == (
        "[done · 1 step · tokens 5 in, 2 out · cost unknown · context unknown]\n"
    )


def test_a_retry_says_when_which_attempt_and_why() -> None:
    renderer = Renderer(Style(False), width=60)
    retry = {"type": "retrying", "step": 1, "attempt": 2, "max_attempts": 5, "delay": 1.5,
             "reason": "HTTP 529: Overloaded " + "x" * 80}  # fmt: skip
    line = renderer.event(retry)
    assert line.startswith("retrying in 1.5 s (attempt 2 of 5): HTTP 529: Overloaded x")
    assert len(line) == 61  # cut to the width, and its newline


LOG = [
    "USER: first question",
    "ASSISTANT: first answer",
    "TURN: done",
    "USER: read it",
    "  please",
    'TOOL: read_file {"file_path": "a"}',
    "RESULT: 1 a",
    "  2 b",
    "STATE: running",
    "ASSISTANT: it says a",
    "TURN: done",
    "USER: the running one",
]


def test_the_last_exchanges_of_the_log_skip_the_running_turn() -> None:
    assert exchanges(LOG, 1) == [["USER: the running one"]]
    found = exchanges(LOG, 2, busy=True)
    assert [lines[0] for lines in found] == ["USER: first question", "USER: read it"]
    assert "STATE: running" not in found[1]
    assert exchanges(LOG, 0) == []
    assert format_exchange(found[1], Style(False), 80) == (
        "you: read it\n  please\n"
        '● read_file {"file_path": "a"}\n'
        "  ⎿  1 a\n  2 b\n"
        "it says a\n[done]\n"
    )
