"""The pure parts of `anvilctl attach`: event rendering, argument summaries, approvals.

The terminal, the connections and the daemon are tested in tests/integration/test_attach.py."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from anvilctl.attach import Renderer, Style, format_approval, parse_approval, summarize_arguments

PLAIN = Style(color=False)


def render(*events: dict[str, Any], color: bool = False, width: int = 100) -> str:
    renderer = Renderer(Style(color), width=width)
    return "".join(renderer.event(e) for e in events)


def test_text_streams_as_it_comes_and_the_usage_line_starts_a_line() -> None:
    out = render(
        {"type": "step_started", "step": 1},
        {"type": "text_delta", "step": 1, "text": "Hel"},
        {"type": "text_delta", "step": 1, "text": "lo"},
        {"type": "usage", "step": 1, "usage": {}, "turn": {}},
        {
            "type": "turn_finished",
            "outcome": "done",
            "steps": 1,
            "usage": {"input": 12, "output": 3, "cache_read": None, "cache_write": None},
            "detail": "",
        },
    )
    assert out == "Hello\n[done · 1 step · tokens 12 in, 3 out]\n"


def test_a_tool_call_is_one_dim_line_and_its_result_an_indented_preview() -> None:
    started = {"type": "tool_call_started", "step": 1, "id": "c1", "name": "bash"}
    finished = {"type": "tool_call_finished", "step": 1, "id": "c1", "name": "bash"}
    out = render(
        {"type": "text_delta", "step": 1, "text": "Let me look."},
        {**started, "arguments": {"command": "ls -la\necho more", "timeout": 5}},
        {**finished, "is_error": False, "preview": "a\nb\tc\nd\ne\nf\ng\n"},
        color=True,
    )
    dim = "\x1b[2m{}\x1b[0m".format
    assert out == (
        "Let me look.\n"
        + dim("● bash ls -la …")
        + "\n"
        + dim("  ⎿  ")
        + "a\n"
        + dim("     ")
        + "b   c\n"
        + dim("     ")
        + "d\n"
        + dim("     ")
        + "e\n"
        + dim("     … 2 more lines")
        + "\n"
        + dim("     (/last shows the whole result, /verbose every result)")
        + "\n"
    )


def test_an_error_result_and_a_failed_step_say_error() -> None:
    out = render(
        {"type": "tool_call_finished", "step": 1, "id": "c", "name": "x", "is_error": True,
         "preview": "Permission denied"},
        {"type": "step_failed", "step": 2, "error_type": "ProviderError", "message": "503",
         "retryable": True},
        {"type": "turn_finished", "outcome": "cancelled", "steps": 2,
         "usage": {"input": None, "output": 4}, "detail": "the turn was cancelled"},
    )  # fmt: skip
    assert out == (
        "  ⎿  error: Permission denied\n"
        "error: ProviderError: 503 (retrying)\n"
        "[cancelled · 2 steps · tokens ? in, 4 out: the turn was cancelled]\n"
    )


def test_long_preview_lines_are_cut_to_the_width() -> None:
    out = render(
        {"type": "tool_call_finished", "step": 1, "id": "c", "name": "x", "is_error": False,
         "preview": "x" * 200},
        width=50,
    )  # fmt: skip
    assert out == "  ⎿  " + "x" * 44 + "…\n"


def test_todos_lagged_and_unknown_events() -> None:
    out = render(
        {"type": "todos_updated", "todos": [
            {"content": "write tests", "status": "completed"},
            {"content": "fix bug", "status": "in_progress"},
            {"content": "docs", "status": "pending"},
        ]},
        {"type": "lagged", "dropped": 7},
        {"type": "something_new", "x": 1},
        {"type": "reasoning_delta", "step": 1, "text": "hmm"},
    )  # fmt: skip
    assert out == (
        "todos:\n  [x] write tests\n  [~] fix bug\n  [ ] docs\n"
        "[7 events were dropped: this terminal fell behind]\n"
    )


@pytest.mark.parametrize(
    ("arguments", "summary"),
    [
        ({"file_path": "src/a.py", "content": "x" * 500}, "src/a.py"),
        ({"pattern": "TODO", "path": "src"}, "src"),
        ({"command": "  pytest -q  "}, "pytest -q"),
        ({}, ""),
        ({"city": "Oslo"}, '{"city":"Oslo"}'),
        (
            {"items": list(range(100))},
            '{"items":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19…',
        ),
        ("not an object", '"not an object"'),
    ],
)
def test_summarize_arguments(arguments: Any, summary: str) -> None:
    assert summarize_arguments(arguments, width=60) == summary


APPROVAL = (
    "call_id c1\n"
    "tool write_file\n"
    'arguments {"file_path": "out.txt", "content": "hi"}\n'
    "reason in default mode edits need approval\n"
    "always_adds allow write_file(out.txt)\n"
    "answer approve | always | reject REASON\n"
)


def test_parse_approval_reads_the_key_value_lines() -> None:
    fields = parse_approval(APPROVAL)
    assert fields["call_id"] == "c1"
    assert json.loads(fields["arguments"]) == {"file_path": "out.txt", "content": "hi"}
    assert parse_approval("") == {}


def test_format_approval_shows_the_call_the_reason_and_the_choices() -> None:
    assert format_approval(parse_approval(APPROVAL), PLAIN) == (
        "approval needed: write_file out.txt\n"
        "  why: in default mode edits need approval\n"
        '  arguments: {"file_path": "out.txt", "content": "hi"}\n'
        "  y: approve once   a: always (adds allow write_file(out.txt))   n: reject with feedback\n"
    )
    bare = format_approval({"call_id": "c", "tool": "bash", "arguments": "{}"}, PLAIN)
    assert (
        bare == "approval needed: bash\n  y: approve once   a: always   n: reject with feedback\n"
    )


def test_no_escape_codes_without_color() -> None:
    style = Style(color=False)
    assert style.dim("a") + style.red("b") + style.bold("c") + style.yellow("d") == "abcd"
    assert Style(color=True).red("b") == "\x1b[31mb\x1b[0m"


def test_attach_is_not_imported_by_the_other_session_commands() -> None:
    """Nor its terminal libraries (prompt_toolkit, rich): the 9P and session commands start
    without them."""
    code = (
        "import sys\n"
        "from anvilctl.__main__ import main\n"
        "assert main(['-n', 'out', 'r1']) == 1\n"
        "assert main(['-n', 'read', 'agent/x']) == 1\n"
        "names = ('anvilctl.attach', 'readline', 'platformdirs')\n"
        "heavy = ('anvilctl.attach_', 'prompt_toolkit', 'rich', 'pygments')\n"
        "print(sorted(n for n in sys.modules if n in names or n.startswith(heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        env={"NAMESPACE": "/nonexistent", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.stdout == "[]\n"


def test_a_result_approval_is_a_line_saying_where_to_answer_and_its_answer_a_line() -> None:
    out = render(
        {"type": "approval_requested", "kind": "result", "asked_by": "bead b1", "summary": "x"},
        {
            "type": "approval_answered",
            "kind": "result",
            "verdict": "reject",
            "reason": "no",
            "by": "user",
        },
    )
    assert out == (
        "approval of the result requested by bead b1: write approve or reject REASON to the "
        "session's approval file\nresult reject (by user): no\n"
    )
    # A tool approval is asked (y/a/n) by the command, not rendered.
    assert render({"type": "approval_requested", "kind": "tool", "call_id": "c1"}) == ""
