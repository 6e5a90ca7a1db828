"""`anvilctl new|send|wait|out|models` without a daemon: argument checks, errors, light imports.

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
        "approver=ID|ALIAS|user ephemeral headless\n"
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
        "heavy = sorted(n for n in sys.modules if n.startswith(('anvild.llm', 'anvild.sandbox',"
        " 'anvild.config', 'anvild.session', 'trio', 'httpx')))\n"
        "print(heavy)\n"
    )
    env = {**os.environ, "NAMESPACE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True)
    assert out.stdout == b"[]\n"
