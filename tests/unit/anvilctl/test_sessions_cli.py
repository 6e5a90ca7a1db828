"""`anvilctl new|send|wait|out|kill|models` without a daemon: arguments, errors, light imports.

The commands against a real daemon are in tests/integration/test_sessions_e2e.py."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys

import pytest

from anvilctl import sessions
from anvilctl.__main__ import build_parser
from anvilctl.sessions import run
from anvild.session.manager import NEW_FLAGS, NEW_KEYS


def _run(argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    parser, _ = build_parser(only_9p=True)
    out, err = io.BytesIO(), io.BytesIO()
    code = run(parser.parse_args(argv), stdin=io.BytesIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue().decode(), err.getvalue().decode()


@pytest.fixture(autouse=True)
def empty_namespace(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESPACE", str(tmp_path))


def test_new_refuses_a_word_that_is_not_key_value() -> None:
    code, out, err = _run(["new", "fast"])
    assert (code, out) == (1, "")
    assert err == (
        "anvilctl new: 'fast' is not key=value, ephemeral or headless; use model=M cwd=DIR "
        "role=R alias=A sandbox=S max_steps=N permission=MODE budget=TOKENS "
        "approver=ID|ALIAS|user from=ID|ALIAS|latest ephemeral headless\n"
    )


def test_new_names_every_key_and_flag_the_daemon_takes() -> None:
    """anvilctl keeps its own copy (it must not import the daemon's layers): keep it in step."""
    usage = sessions.NEW_USAGE.split()
    assert [word.split("=")[0] for word in usage if "=" in word] == list(NEW_KEYS)
    assert tuple(word for word in usage if "=" not in word) == sessions.NEW_FLAGS == NEW_FLAGS


def test_send_refuses_an_empty_prompt_before_dialling() -> None:
    code, _, err = _run(["send", "r1", "-"], stdin=b"  \n")
    assert code == 1
    assert err == "anvilctl send r1: the prompt is empty; give TEXT or pipe it with `-`\n"


def test_no_daemon_is_an_error_naming_the_socket(tmp_path: pathlib.Path) -> None:
    code, _, err = _run(["wait", "r1", "--timeout", "1"])
    assert code == 1
    assert err == (
        f"anvilctl wait r1: anvild is not running (no socket at {tmp_path}/agent): "
        "start it with `anvild`\n"
    )


def test_session_commands_start_without_the_heavy_layers(tmp_path: pathlib.Path) -> None:
    code = (
        "import sys\n"
        "from anvilctl.__main__ import main\n"
        "assert main(['-n', 'new']) == 1\n"
        "assert main(['out', 'r1']) == 1\n"
        "assert main(['wait', 'r1']) == 1\n"
        "assert main(['kill', 'r1']) == 1\n"
        "assert main(['models']) == 1\n"
        "heavy = sorted(n for n in sys.modules if n.startswith(('anvild.llm', 'anvild.sandbox',"
        " 'anvild.config', 'anvild.session', 'trio', 'httpx')))\n"
        "print(heavy)\n"
    )
    env = {**os.environ, "NAMESPACE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True)
    assert out.stdout == b"[]\n"


def test_kill_refuses_a_name_with_blanks_before_dialling() -> None:
    code, out, err = _run(["kill", "a b"])
    assert (code, out) == (1, "")
    assert err == "anvilctl kill a b: 'a b' is not a session id or alias (one word, no blanks)\n"


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("done\n", 0),
        ('error HttpError: HTTP 401: {"error": "bad key"}\n', 1),
        ("max_steps stopped after 3 steps\n", 2),
        ("max_tokens\n", 3),
        ("refused the provider refused to answer\n", 4),
        ("budget_exceeded 12000 tokens over a budget of 10000\n", 5),
        ("protocol_stopped\n", 6),
        ("cancelled the turn was cancelled\n", 130),
        ("something_new\n", 1),  # an outcome this anvilctl does not know: a failure
        ("-\n", 0),  # no turn has ended
        ("", 0),
        (None, 0),  # a daemon without the outcome file
    ],
)
def test_a_waits_exit_status_is_the_headless_status_of_the_outcome(
    line: str | None, status: int
) -> None:
    assert sessions.outcome_status(line) == status


@pytest.mark.parametrize(
    ("text", "word"),
    [("done\n", "done"), ("error HttpError: HTTP 401: x\n", "error"), ("-\n", "-"), (None, "-")],
)
def test_the_sessions_table_shows_the_outcomes_first_word(text: str | None, word: str) -> None:
    assert sessions.outcome_word(text) == word


def test_models_gets_a_header_row_and_aligned_columns() -> None:
    text = "fake\tfake\tfake-model\t8192\tyes\nsonnet\tanthropic\tclaude-sonnet-4\t200000\tno\n"
    assert sessions.format_models(text).splitlines() == [
        "ALIAS   PROVIDER   MODEL            WINDOW  KEY",
        "fake    fake       fake-model       8192    yes",
        "sonnet  anthropic  claude-sonnet-4  200000  no",
    ]
    assert sessions.format_models("") == "ALIAS  PROVIDER  MODEL  WINDOW  KEY\n"


def test_the_new_options_parse() -> None:
    parser, _ = build_parser(only_9p=True)
    send = parser.parse_args(["send", "--wait", "r1", "fix", "it"])
    assert (send.wait, send.id, send.text) == (True, "r1", ["fix", "it"])
    assert parser.parse_args(["send", "r1", "hi"]).wait is False
    assert parser.parse_args(["models", "--no-header"]).no_header is True
    assert parser.parse_args(["models"]).no_header is False
    assert parser.parse_args(["kill", "dev"]).id == "dev"
    assert parser.parse_args(["attach", "dev", "-v"]).verbose is True
    assert parser.parse_args(["attach", "dev"]).verbose is False
