"""`anvilctl -p` without a daemon: recognising `-p`, the `new` words, rendering each output
format from event lines, exit codes, errors, and light imports on the daemon path.

The runs through a real daemon (and in process) are in tests/integration/test_headless.py."""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import subprocess
import sys

import pytest

from anvilctl.__main__ import headless_requested
from anvilctl.headless import (
    EXIT_CODES,
    Renderer,
    StdoutClosed,
    build_parser,
    main,
    new_words,
    synthetic_end,
)
from anvild.agent.events import TurnOutcome

EVENTS = [
    b'{"type":"step_started","step":1}',
    b'{"type":"text_delta","step":1,"text":"I will look."}',
    b'{"type":"tool_call_started","step":1,"id":"c1","name":"glob","arguments":{"pattern":"*"}}',
    b'{"type":"tool_call_finished","step":1,"id":"c1","name":"glob","is_error":false,'
    b'"preview":"a.py"}',
    b'{"type":"step_started","step":2}',
    b'{"type":"text_delta","step":2,"text":"Found "}',
    b'{"type":"text_delta","step":2,"text":"a.py"}',
    b'{"type":"turn_finished","outcome":"done","steps":2,"usage":{"input":10,"output":3,'
    b'"cache_read":0,"cache_write":0},"detail":""}',
]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-p", "hi"], True),
        (["-phi"], True),
        (["--print", "hi"], True),
        (["--print=hi"], True),
        (["-a", "tcp!127.0.0.1!5640", "-A", "tok", "-p", "x"], True),
        (["-n", "-p", "x"], True),
        (["read", "agent/list"], False),
        (["-a", "-p", "read", "x"], False),  # -p is -a's value here
        (["send", "r1", "-p"], False),  # after the command word: the command's own argument
        ([], False),
    ],
)
def test_p_is_recognised_before_any_command_word(argv: list[str], expected: bool) -> None:
    assert headless_requested(argv) is expected


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["-p", "x", *argv])


def test_new_words_carry_every_option_and_quote_a_cwd_with_blanks() -> None:
    args = _args(
        "-m", "fake", "--max-steps", "3", "--permission-mode", "plan", "--max-budget-tokens", "9"
    )
    assert new_words(args, "/src/my app's") == [
        "cwd='/src/my app''s'",
        "ephemeral",
        "headless",
        "model=fake",
        "max_steps=3",
        "permission=plan",
        "budget=9",
    ]
    assert new_words(_args(), "/src") == ["cwd=/src", "ephemeral", "headless"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-steps", "0"],
        ["--max-budget-tokens", "x"],
        ["--permission-mode", "yolo"],
        ["--output-format", "xml"],
    ],
)
def test_bad_options_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _args(*argv)
    assert info.value.code == 2


def _render(fmt: str, lines: list[bytes]) -> tuple[Renderer, str, str]:
    out, err = io.BytesIO(), io.BytesIO()
    renderer = Renderer(fmt, out, err)
    renderer.session_id, renderer.model, renderer.cwd = "s1", "fake", "/src"
    done = [renderer.feed(line) for line in lines]
    assert done == [False] * (len(lines) - 1) + [True]
    renderer.finish()
    return renderer, out.getvalue().decode(), err.getvalue().decode()


def test_text_prints_the_last_step_answer() -> None:
    renderer, out, err = _render("text", EVENTS)
    assert (out, err, renderer.exit_code) == ("Found a.py\n", "", 0)


def test_text_after_an_abnormal_end_says_why_on_stderr() -> None:
    end = b'{"type":"turn_finished","outcome":"max_steps","steps":2,"usage":null,"detail":"stop"}'
    renderer, out, err = _render("text", [*EVENTS[:-1], end])
    assert (out, err, renderer.exit_code) == (
        "Found a.py\n",
        "anvilctl -p: turn ended: max_steps: stop\n",
        2,
    )


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[31mred\x1b[0m", "red"),
        ("a\x1b]0;title\x07b", "ab"),
        ("x\x1b]8;;http://e\x1b\\link\x1b]8;;\x1b\\y", "xlinky"),
        ("tab\there\r\nbell\x07", "tab\there\nbell"),
        ("lone\x1b", "lone"),
        ("é ünïcode", "é ünïcode"),
    ],
)
def test_text_never_carries_escape_codes(raw: str, shown: str) -> None:
    delta = json.dumps({"type": "text_delta", "step": 1, "text": raw}).encode()
    end = b'{"type":"turn_finished","outcome":"done","steps":1,"usage":null,"detail":""}'
    _, out, _ = _render("text", [EVENTS[0], delta, end])
    assert out == shown + "\n"


def test_json_is_one_result_object() -> None:
    _, out, _ = _render("json", EVENTS)
    assert json.loads(out) == {
        "type": "result",
        "session_id": "s1",
        "outcome": "done",
        "detail": "",
        "is_error": False,
        "exit_code": 0,
        "result": "Found a.py",
        "steps": 2,
        "usage": {"input": 10, "output": 3, "cache_read": 0, "cache_write": 0},
        "model": "fake",
        "cwd": "/src",
    }
    assert out.count("\n") == 1


def test_stream_json_passes_every_line_and_ends_with_turn_finished() -> None:
    lagged = b'{"type":"lagged","dropped":3}'
    renderer, out, _ = _render("stream-json", [EVENTS[0], lagged, *EVENTS[1:]])
    assert out.encode().splitlines() == [EVENTS[0], lagged, *EVENTS[1:]]
    assert renderer.lagged  # the text is then taken from the session's `out`


def test_every_outcome_has_its_exit_code() -> None:
    assert EXIT_CODES == {
        "done": 0,
        "error": 1,
        "max_steps": 2,
        "max_tokens": 3,
        "refused": 4,
        "budget_exceeded": 5,
        "protocol_stopped": 6,
        "cancelled": 130,
    }
    assert set(EXIT_CODES) == {o.value for o in TurnOutcome}


def test_a_synthetic_end_is_a_turn_finished_line() -> None:
    renderer, out, _ = _render("stream-json", [synthetic_end("cancelled", "gone")])
    assert json.loads(out)["outcome"] == "cancelled"
    assert renderer.exit_code == 130


class _Closed(io.BytesIO):
    def write(self, data: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_stdout_stops_writing() -> None:
    renderer = Renderer("stream-json", _Closed(), io.BytesIO())
    with pytest.raises(StdoutClosed):
        renderer.feed(EVENTS[0])
    assert renderer.closed
    assert renderer.feed(EVENTS[-1]) is True  # nothing more is written, the end is still seen


def _main(argv: list[str], stdin: bytes = b"") -> tuple[int, str]:
    err = io.BytesIO()
    code = main(argv, stdin=io.BytesIO(stdin), stdout=io.BytesIO(), stderr=err)
    return code, err.getvalue().decode()


def test_an_empty_prompt_and_a_missing_cwd_are_errors(tmp_path: pathlib.Path) -> None:
    assert _main(["-p", "  "]) == (
        1,
        "anvilctl -p: the prompt is empty: give -p TEXT, or pipe the text on stdin\n",
    )
    assert _main(["-p", "x", "-C", str(tmp_path / "gone")]) == (
        1,
        f"anvilctl -p: -C {tmp_path / 'gone'}: not a directory\n",
    )


def test_an_unreachable_a_address_is_an_error_not_a_fallback(tmp_path: pathlib.Path) -> None:
    def no(*args: object) -> int:
        raise AssertionError("no in-process fallback with -a")

    err = io.BytesIO()
    code = main(
        ["-a", f"unix!{tmp_path}/none", "-p", "x"],
        stdin=io.BytesIO(b""),
        stdout=io.BytesIO(),
        stderr=err,
        in_process=no,
    )
    assert code == 1
    assert err.getvalue().decode().startswith(f"anvilctl -p: dial unix!{tmp_path}/none: ")


def test_without_a_daemon_the_in_process_path_gets_the_prompt_with_stdin(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAMESPACE", str(tmp_path))
    seen: list[tuple[str, str]] = []

    def fake(
        args: argparse.Namespace, prompt: str, cwd: str, renderer: Renderer, out: object
    ) -> int:
        seen.append((prompt, cwd))
        return 0

    code = main(
        ["-p", "review this", "-C", str(tmp_path)],
        stdin=io.BytesIO(b"+diff\n"),
        stdout=io.BytesIO(),
        stderr=io.BytesIO(),
        in_process=fake,
    )
    assert code == 0
    assert seen == [("review this\n\n+diff\n", str(tmp_path))]


def test_p_against_a_daemon_imports_only_the_9p_client(tmp_path: pathlib.Path) -> None:
    code = (
        "import sys\n"
        "from anvilctl.__main__ import main\n"
        f"assert main(['-a', 'unix!{tmp_path}/none', '-p', 'x']) == 1\n"
        "heavy = sorted(n for n in sys.modules if n.startswith(('anvild.llm', 'anvild.sandbox',"
        " 'anvild.config', 'anvild.session', 'anvild.daemon', 'trio', 'httpx')))\n"
        "print(heavy)\n"
    )
    env = {**os.environ, "NAMESPACE": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        env=env,
        check=True,
        stdin=subprocess.DEVNULL,
    )
    assert out.stdout == b"[]\n"
