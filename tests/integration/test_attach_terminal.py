"""`anvilctl attach` on a terminal, end to end: what its prompt_toolkit input and rich output
change for a person at the keyboard.

A real daemon serves the fake provider (tests/support/fake_provider.py, which can delay its
first byte, hold a stream until released, and fail requests); attach runs on a pseudo-terminal
read back as a screen (tests/support/tty.py). Each check is one turn or two, a few seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.test_attach import attach_env, wait_state
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import FakeServer, anvilctl, ok, user_config
from tests.support.tty import Tty, colors

SPINNER = "[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]"
MARKDOWN = (
    "# Release notes\n\nThe parser is **much** faster now; call `parse()` as before.\n\n"
    "```python\ndef parse(text):\n    return tokens(text)\n```\n"
)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(
        tmp_path,
        [
            {"contains": "slow", "text": "at last", "delay": 1.5},
            {"contains": "tell a story", "text": "Once upon a time, far away.", "hold": 2},
            {"contains": "flaky", "status": 529, "message": "Overloaded", "retry_after": 1},
            {"contains": "flaky", "text": "recovered", "hold": 1},
            {"contains": "notes", "text": MARKDOWN, "repeat": True},
            {"contains": "cat the log", "tool_calls": [
                {"name": "read_file", "arguments": {"file_path": "build.log"}}]},
            {"contains": "FAIL", "text": "The fix is on line 9."},
            {"text": "pong", "repeat": True},
        ],
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture
def config(tmp_path: Path, fake: FakeServer) -> Path:
    return user_config(tmp_path, fake.url)


@pytest.fixture
def daemon(namespace: Path, config: Path) -> Iterator[Anvild]:
    # The platform data dir (under the test's XDG_DATA_HOME), which attach knows: /last reads
    # the session's records there.
    d = serve(namespace, config)
    yield d
    if d.proc.returncode is None:  # not stopped by the test
        code, log = d.stop()
        assert code == 0, log


def serve(namespace: Path, config: Path) -> Anvild:
    d = Anvild(namespace, "--config", str(config), platform_data_dir=True)
    d.wait_serving()
    return d


@pytest.fixture
def attach(
    namespace: Path, tmp_path: Path, workdir: Path
) -> Iterator[Callable[..., tuple[str, Tty]]]:
    terminals: list[Tty] = []

    def make(**env: str) -> tuple[str, Tty]:
        sid = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        term = Tty(
            ["anvilctl", "attach", sid], env=attach_env(namespace, tmp_path, **env), cwd=workdir
        )
        terminals.append(term)
        term.expect(rf"attached to {sid}: ")
        term.wait_screen(r"^>$")
        return sid, term

    yield make
    for term in terminals:
        term.close()


def prompts(fake: FakeServer) -> list[str]:
    return [str(r["last_user_text"]) for r in fake.requests()]


def test_a_bracketed_paste_of_two_lines_is_one_prompt(
    daemon: Anvild, fake: FakeServer, attach: Callable[..., tuple[str, Tty]]
) -> None:
    _, term = attach()
    term.type("\x1b[200~first line\nsecond line\x1b[201~")
    term.wait_screen(r"^> first line\n  second line$")  # one input of two lines, not sent
    assert prompts(fake) == []
    term.type("\r")
    term.expect(r"^> first line\n  second line\npong\n\[done · 1 step")
    assert prompts(fake) == ["first line\nsecond line"]

    # Ctrl-J adds a line too, and so does a paste the terminal did not bracket (the Enter
    # comes with more keys behind it).
    term.wait_screen(r"^>$")
    term.type("one")
    term.wait_screen(r"^> one$")
    term.type("\ntwo\rthree")
    term.wait_screen(r"^> one\n  two\n  three$")
    term.type("\r")
    term.expect(r"^> one\n  two\n  three\npong\n")
    assert prompts(fake)[1:] == ["one\ntwo\nthree"]


def test_typing_while_an_answer_streams_leaves_the_answer_intact(
    daemon: Anvild, fake: FakeServer, attach: Callable[..., tuple[str, Tty]]
) -> None:
    _, term = attach()
    term.type("tell a story\r")
    term.wait_screen(r"^Once upo$")  # held after its first piece: the turn is streaming
    term.type("and then what")
    term.wait_screen(r"^> and then what$")
    fake.release()
    term.expect(r"^Once upon a time, far away\.\n\[done · 1 step")
    term.wait_screen(r"^> and then what$")  # still typed, not sent, not in the answer
    assert "and then what" not in term.screen.text().replace("> and then what", "")
    assert prompts(fake) == ["tell a story"]
    term.type("\r")
    term.expect(r"^> and then what\npong\n")


def test_a_spinner_runs_while_the_model_is_silent_and_is_gone_after(
    daemon: Anvild, attach: Callable[..., tuple[str, Tty]]
) -> None:
    _, term = attach()
    term.type("slow one\r")  # the provider sends its first byte after 1.5 s
    term.wait_screen(rf"^{SPINNER} waiting for the model · \d+\.\ds · Ctrl-C cancels$")
    assert "at last" not in term.screen.text()
    term.wait_screen(r"^[⠋-⣿] waiting for the model · (0\.[5-9]|1\.\d)s")  # the clock runs
    term.expect(r"^at last\n\[done · 1 step")
    term.wait_screen(r"^>$")
    term.settle()
    assert not re.search(SPINNER, "\n".join(term.screen.display())), term.screen.text()


def test_a_retry_is_shown_when_it_starts_before_the_retry_succeeds(
    daemon: Anvild, fake: FakeServer, attach: Callable[..., tuple[str, Tty]]
) -> None:
    _, term = attach()
    term.type("flaky provider\r")
    term.expect(r"^retrying in 1 s \(attempt 2 of 5\): HTTP 529: Overloaded$")
    term.wait_screen(rf"^{SPINNER} retrying \(attempt 2 of 5\)")
    fake_requests = len(fake.requests())
    assert "recovered" not in term.screen.text()  # the second attempt is held by the fake
    fake.release()
    term.expect(r"^recovered\n\[done · 1 step")
    assert fake_requests >= 1
    assert prompts(fake) == ["flaky provider", "flaky provider"]


def test_markdown_is_rendered_on_a_terminal_and_plain_under_no_color(
    daemon: Anvild, attach: Callable[..., tuple[str, Tty]]
) -> None:
    _, term = attach()
    term.type("release notes\r")
    term.expect(r"^ +Release notes$")  # a heading, centred, its # gone
    term.expect(r"^The parser is much faster now; call parse\(\) as before\.$")
    term.expect(r"^ +def parse\(text\):\n +return tokens\(text\)$")
    term.expect(r"^\[done · 1 step")
    assert "**" not in term.screen.text()
    assert [p for p in colors(term.screen.sgr) if "38;5;" in p]  # the code is highlighted

    _, plain = attach(NO_COLOR="1")
    plain.type("release notes\r")
    plain.expect(r"^# Release notes\n\nThe parser is \*\*much\*\* faster now; call `parse\(\)`")
    plain.expect(r"^```python\ndef parse\(text\):\n    return tokens\(text\)\n```\n\[done")
    assert colors(plain.screen.sgr) == []  # no colour at all


def test_a_dumb_terminal_gets_plain_lines_and_no_escape_codes(
    daemon: Anvild, namespace: Path, tmp_path: Path, workdir: Path
) -> None:
    sid = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
    env = attach_env(namespace, tmp_path, TERM="dumb")
    term = Tty(["anvilctl", "attach", sid], env=env, cwd=workdir)
    try:
        term.expect(rf"^attached to {sid}: developer, model fake, idle; /help for help\n>$")
        term.type("release notes\r")
        term.expect(r"^# Release notes\n\nThe parser is \*\*much\*\* faster")
        term.expect(r"^\[done · 1 step")
        term.type("/exit\r")
        assert term.wait_exit() == 0
    finally:
        term.close()
    assert b"\x1b" not in term.raw


def test_reattaching_shows_the_last_exchanges_and_leaving_says_how_to_come_back(
    daemon: Anvild, namespace: Path, tmp_path: Path, workdir: Path,
    attach: Callable[..., tuple[str, Tty]],
) -> None:  # fmt: skip
    sid, term = attach()
    term.type("ping\r")
    term.expect(r"^pong\n\[done")
    term.wait_screen(r"^>$")
    term.type("/exit\r")
    term.expect(rf"^left {sid}; it keeps running in the daemon\. Come back with `anvilctl attach")
    assert term.wait_exit() == 0

    again = Tty(["anvilctl", "attach", sid], env=attach_env(namespace, tmp_path), cwd=workdir)
    try:
        again.expect(r"─── earlier in this session ───\nyou: ping\npong\n\[done\]\n───\n")
        again.expect(rf"attached to {sid}: developer, model fake, idle")
    finally:
        again.close()


def test_last_shows_the_whole_tool_result(
    daemon: Anvild, workdir: Path, attach: Callable[..., tuple[str, Tty]]
) -> None:
    (workdir / "build.log").write_text("".join(f"step {n} ok\n" for n in range(1, 9)) + "FAIL\n")
    _, term = attach()
    term.type("cat the log\r")
    term.expect(r"● read_file build\.log\n  ⎿ +1\s+step 1 ok\n")
    term.expect(r"\(/last shows the whole result, /verbose every result\)")
    term.expect(r"^The fix is on line 9\.\n\[done · 2 steps")
    assert "FAIL" not in term.screen.text()  # the preview is three lines
    term.wait_screen(r"^>$")
    term.type("/last\r")
    term.expect(r"● read_file build\.log\n  ⎿ +1\s+step 1 ok\n(.*\n){7} +9\s+FAIL\n")


def test_the_daemon_going_away_is_shown_at_once_and_attach_comes_back_with_the_typed_prompt(
    daemon: Anvild, namespace: Path, config: Path, fake: FakeServer,
    attach: Callable[..., tuple[str, Tty]],
) -> None:  # fmt: skip
    sid, term = attach()
    code, log = daemon.stop()
    assert code == 0, log
    term.expect(r"^the daemon went away \(.*\); reconnecting\. What you type is kept\.$", 10)
    term.wait_screen(rf"^{SPINNER} the daemon is away: attempt \d+")
    term.type("are you back")
    term.wait_screen(r"^> are you back$")
    again = serve(namespace, config)
    try:
        term.expect(rf"^reconnected to {sid}: idle$", 15)
        term.wait_screen(r"^> are you back$")  # kept
        term.type("\r")
        term.expect(r"^> are you back\npong\n\[done")
        assert prompts(fake) == ["are you back"]
        wait_state(namespace, sid, "idle")
    finally:
        code, log = again.stop()
    assert code == 0, log
