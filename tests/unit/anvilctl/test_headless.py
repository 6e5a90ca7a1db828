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
import time

import pytest

from anvilctl.__main__ import headless_requested
from anvilctl.headless import (
    EXIT_CODES,
    HeadlessError,
    Renderer,
    SessionRow,
    StdoutClosed,
    build_parser,
    in_process_message,
    live_session,
    main,
    new_words,
    synthetic_end,
    usd_of,
)
from anvilctl.headless import _reason as ended_by
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


def test_new_words_continue_from_the_latest_or_the_named_session() -> None:
    """No live session takes the prompt: a new one from the old conversation (from=)."""
    assert new_words(_args("-c"), "/src") == ["cwd=/src", "ephemeral", "headless", "from=latest"]
    assert new_words(_args("-r", "ab12"), "/src") == ["ephemeral", "headless", "from=ab12"]


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
    renderer.start()
    done = [renderer.feed(line) for line in lines]
    assert done == [False] * (len(lines) - 1) + [True]
    renderer.cost_after = 0.0015
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


def test_json_is_one_result_object_with_cost_duration_and_session() -> None:
    _, out, _ = _render("json", EVENTS)
    result = json.loads(out)
    duration = result.pop("duration_ms")
    assert isinstance(duration, int)
    assert 0 <= duration < 60_000
    assert result == {
        "type": "result",
        "session_id": "s1",
        "outcome": "done",
        "detail": "",
        "is_error": False,
        "exit_code": 0,
        "result": "Found a.py",
        "steps": 2,
        "total_cost_usd": 0.0015,  # the session's cost after the turn less before it
        "usage": {"input": 10, "output": 3, "cache_read": 0, "cache_write": 0},
        "model": "fake",
        "cwd": "/src",
    }
    assert out.count("\n") == 1


def test_the_cost_is_null_when_unknown_and_the_turns_own_for_a_continued_session() -> None:
    renderer = Renderer("json", io.BytesIO(), io.BytesIO())
    assert renderer.total_cost_usd is None  # not read yet
    renderer.cost_after = 0.25
    assert renderer.total_cost_usd == 0.25  # a new session: all of it is this turn's
    renderer.cost_before = 0.2  # a continued one had cost this much before
    assert renderer.total_cost_usd == pytest.approx(0.05)
    renderer.cost_before = None  # n/a before: this turn's share is unknown
    assert renderer.total_cost_usd is None


def test_duration_counts_from_the_commands_start() -> None:
    renderer = Renderer("json", io.BytesIO(), io.BytesIO(), started=time.monotonic() - 2.5)
    assert 2500 <= renderer.result("", "", 0)["duration_ms"] < 60_000


def test_stream_json_names_the_session_first_then_every_line_then_the_result() -> None:
    lagged = b'{"type":"lagged","dropped":3}'
    renderer, out, _ = _render("stream-json", [EVENTS[0], lagged, *EVENTS[1:]])
    lines = out.encode().splitlines()
    assert json.loads(lines[0]) == {
        "type": "system",
        "subtype": "init",
        "session_id": "s1",
        "model": "fake",
        "cwd": "/src",
        "resumed": False,
    }
    assert lines[1:-1] == [EVENTS[0], lagged, *EVENTS[1:]]
    result = json.loads(lines[-1])
    assert (result["type"], result["session_id"], result["result"]) == (
        "result",
        "s1",
        "Found a.py",
    )
    assert result["total_cost_usd"] == 0.0015
    assert renderer.lagged  # the text is then taken from the session's `out`


def test_usd_is_read_from_the_cost_file() -> None:
    cost = "input 10\noutput 3\ncache_read -\ncache_write -\ncache_hit_rate -\nusd 0.001500\n"
    assert usd_of(cost) == 0.0015
    assert usd_of(cost.replace("usd 0.001500", "usd n/a")) is None
    assert usd_of(None) is None
    assert usd_of("") is None


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
    init, end, result = (json.loads(line) for line in out.splitlines())
    assert init["subtype"] == "init"
    assert (end["type"], end["outcome"]) == ("turn_finished", "cancelled")
    assert (result["outcome"], result["exit_code"]) == ("cancelled", 130)
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
        "anvilctl -p: the prompt is empty: give -p TEXT (or the text after the options), or "
        "pipe it on stdin\n",
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


# -- the prompt, usage errors and errors as JSON ------------------------------------------------


def _prompt_seen(argv: list[str], stdin: bytes = b"") -> str:
    seen: list[str] = []

    def fake(args: argparse.Namespace, prompt: str, *rest: object) -> int:
        seen.append(prompt)
        return 0

    code = main(
        argv, stdin=io.BytesIO(stdin), stdout=io.BytesIO(), stderr=io.BytesIO(), in_process=fake
    )
    assert code == 0
    return seen[0]


def test_the_prompt_is_p_the_words_after_the_options_or_stdin(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAMESPACE", str(tmp_path))  # no daemon: the (fake) in-process path
    assert _prompt_seen(["-p", "fix it"]) == "fix it"
    assert _prompt_seen(["-p", "--max-steps", "3", "fix", "it"]) == "fix it"  # Claude's way
    assert _prompt_seen(["-p"], stdin=b"explain main.py\n") == "explain main.py\n"  # echo x | -p
    assert _prompt_seen(["-p", "review:"], stdin=b"+x\n") == "review:\n\n+x\n"


def test_p_help_works(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["-p", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: anvilctl -p")
    assert "--continue" in out
    assert "--resume ID" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c", "-m", "x"], "-m/--model: set when a session is created"),
        (["--resume", "r1", "--max-steps", "2"], "--max-steps: set when a session is created"),
        (["-c", "--permission-mode", "plan"], "--permission-mode: set when a session is created"),
        (["--resume", "r1", "-C", "/tmp"], "-C: a resumed session keeps its own cwd"),
        (["-c", "-r", "r1"], "not allowed with argument"),
    ],
)
def test_a_continued_session_keeps_what_new_set(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["-p", "x", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["json", "stream-json"])
def test_errors_in_the_json_formats_are_a_json_result(tmp_path: pathlib.Path, fmt: str) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    code = main(
        ["-a", f"unix!{tmp_path}/agent", "-p", "x", "--output-format", fmt],
        stdin=io.BytesIO(b""),
        stdout=out,
        stderr=err,
    )
    assert code == 1
    message = (
        f"anvild is not running (no socket at {tmp_path}/agent): start it with "
        f"`anvild --namespace {tmp_path}`"
    )
    assert err.getvalue().decode() == f"anvilctl -p: {message}\n"  # for the person
    (line,) = out.getvalue().decode().splitlines()  # one result, for the program
    result = json.loads(line)
    assert result["type"] == "result"
    assert (result["is_error"], result["outcome"], result["exit_code"]) == (True, "error", 1)
    assert result["detail"] == message
    assert (result["session_id"], result["total_cost_usd"]) == (None, None)
    assert isinstance(result["duration_ms"], int)


def test_a_usage_error_in_a_json_format_is_a_json_result_too(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    out = io.BytesIO()
    with pytest.raises(SystemExit) as info:
        main(["-p", "x", "--max-steps", "0", "--output-format", "json"], stdout=out)
    assert info.value.code == 2
    result = json.loads(out.getvalue())
    assert (result["is_error"], result["exit_code"]) == (True, 2)
    assert "--max-steps: expected a whole number of at least 1" in result["detail"]
    assert b"--max-steps" in capsysbinary.readouterr().err  # argparse's usage error as ever


def test_text_errors_stay_on_stderr_only(tmp_path: pathlib.Path) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    code = main(
        ["-a", f"unix!{tmp_path}/agent", "-p", "x"], stdin=io.BytesIO(), stdout=out, stderr=err
    )
    assert (code, out.getvalue()) == (1, b"")
    assert err.getvalue().startswith(b"anvilctl -p: anvild is not running")


@pytest.mark.parametrize(
    "argv",
    [["-c", "-p", "x"], ["--resume", "r1", "-p", "x"], ["-r", "dev", "-p"], ["-m", "m", "-p"]],
)
def test_p_after_its_own_options_is_still_headless(argv: list[str]) -> None:
    assert headless_requested(argv)


# -- which session --continue and --resume pick ----------------------------------------------

ROWS = [
    SessionRow("a1", "", "idle", "/src", "2026-01-01T10:00:00Z"),
    SessionRow("b2", "dev", "await", "/src", "2026-01-01T11:00:00Z"),
    SessionRow("c3", "", "exited", "/src", "2026-01-01T12:00:00Z"),  # a -p session, done
    SessionRow("d4", "", "idle", "/elsewhere", "2026-01-01T13:00:00Z"),
]


def test_continue_picks_the_latest_live_session_of_the_directory() -> None:
    assert live_session(ROWS, cwd="/src", key=None) == ROWS[1]
    assert live_session(ROWS, cwd="/elsewhere", key=None) == ROWS[3]
    same_second = [r._replace(created="2026-01-01T10:00:00Z") for r in ROWS[:2]]
    assert live_session(same_second, cwd="/src", key=None) == same_second[1]  # the later listed


def test_without_a_live_session_the_prompt_goes_to_a_new_one() -> None:
    """None: `new from=latest` (or from=KEY), which the daemon resolves among exited ones too."""
    assert live_session(ROWS, cwd="/nowhere", key=None) is None
    assert live_session([SessionRow("c3", "", "exited", "/x")], cwd="/x", key=None) is None
    assert live_session(ROWS, cwd="/src", key="c3") is None  # exited
    assert live_session(ROWS, cwd="/src", key="deb") is None  # unknown: the daemon says so


def test_resume_takes_a_live_sessions_id_or_alias() -> None:
    assert live_session(ROWS, cwd="/ignored", key="a1") == ROWS[0]
    assert live_session(ROWS, cwd="/ignored", key="dev") == ROWS[1]


def test_in_process_a_missing_key_is_this_processs_environment() -> None:
    """The registry's message says anvild's environment; in process it is anvilctl's own."""
    from anvild.llm.registry import MissingKey
    from anvild.session import InvalidSessionRequest

    try:
        try:
            raise MissingKey("ANTHROPIC_API_KEY", "anthropic")
        except MissingKey as exc:
            raise InvalidSessionRequest(str(exc)) from exc
    except InvalidSessionRequest as exc:
        message = in_process_message(exc)
    assert message.startswith(
        "ANTHROPIC_API_KEY is not set (needed by provider 'anthropic'): no daemon answered, so "
        "this turn runs inside anvilctl, which reads keys from its own environment"
    )
    assert "anvild's environment" not in message
    assert in_process_message(InvalidSessionRequest("cwd=x is not absolute")) == (
        "cwd=x is not absolute"
    )


def test_in_process_the_turns_end_is_found_inside_the_nurseries_groups() -> None:
    """A Ctrl-C that reached trio's KeyboardInterrupt (no signal watcher was open) is reported
    as an interrupt (exit 130), not as a traceback; a `HeadlessError` as its message."""
    interrupt = KeyboardInterrupt()
    nested = BaseExceptionGroup("x", [interrupt])
    assert ended_by(BaseExceptionGroup("turn", [ExceptionGroup("y", [ValueError()]), nested])) is (
        interrupt
    )
    failed = HeadlessError("no model")
    assert ended_by(BaseExceptionGroup("turn", [interrupt, failed])) is failed
    other = ExceptionGroup("turn", [ValueError("bug")])
    assert ended_by(other) is other
