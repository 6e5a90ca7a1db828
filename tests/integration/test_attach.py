"""End to end: `anvilctl sessions` and `anvilctl attach` through the real daemon.

The daemon runs as a subprocess against the fake provider server (helpers from
test_sessions_e2e.py). `attach` runs on a real pseudo-terminal (`tests.support.tty`): the test
types on it (Ctrl-C is the byte 0x03, which attach's terminal application reads as a key) and
reads what a person would see, the scrollback and the screen, with a deadline on every wait.
The newer parts of attach (paste, typing while a turn streams, the spinner, retries, markdown,
reconnecting) are in test_attach_terminal.py.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anvilctl.ninep_client import Client, dial
from anvilctl.sessions import parse_created, read_small_files
from anvild.ninep.constants import OREAD
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)
from tests.support.tty import Tty


def turn(namespace: Path, session: str, prompt: str) -> None:
    ok(anvilctl(namespace, "send", session, "-", stdin=prompt))
    assert ok(anvilctl(namespace, "wait", session)) == "await\n"


def table(text: str) -> list[list[str]]:
    """The `sessions` table as rows of cells (columns are two or more spaces apart)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


# --- anvilctl sessions ----------------------------------------------------------------------


def test_sessions_lists_this_directorys_sessions_with_first_prompt_and_age(
    daemon: Anvild, namespace: Path, workdir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    mine = ok(anvilctl(namespace, "new", "alias=dev", cwd=workdir)).strip()
    fresh = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
    theirs = ok(anvilctl(namespace, "new", cwd=other)).strip()
    turn(namespace, mine, "fix the parser\nthen the lexer\n")
    turn(namespace, theirs, "elsewhere")

    created = read(namespace, f"agent/{mine}/created").strip()
    stamp = dt.datetime.fromisoformat(created)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created), created
    assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 60
    assert read(namespace, f"agent/{mine}/first_prompt") == "fix the parser\n"
    assert read(namespace, f"agent/{fresh}/first_prompt") == "-\n"
    listing = read(namespace, "agent/list").splitlines()  # its format is unchanged
    assert [len(line.split("\t")) for line in listing] == [6, 6, 6]

    rows = table(ok(anvilctl(namespace, "sessions", cwd=workdir)))
    assert rows[0] == [
        *("ID", "ALIAS", "STATE", "OUTCOME", "ROLE", "MODEL", "USAGE", "AGE", "PROMPT")
    ]
    by_id = {row[0]: row for row in rows[1:]}
    assert set(by_id) == {mine, fresh}  # not the session of the other directory
    assert by_id[mine][1:6] == ["dev", "await", "done", "developer", "fake"]
    assert re.fullmatch(r"[0-9.]+k?/8\.2k [0-9.]+%", by_id[mine][6]), by_id[mine]
    assert re.fullmatch(r"\d+s|1m", by_id[mine][7]), by_id[mine]
    assert by_id[mine][8] == "fix the parser"
    fresh_row = by_id[fresh]
    assert (fresh_row[1], fresh_row[3], fresh_row[6], fresh_row[8]) == ("-", "-", "-", "-")

    everything = table(ok(anvilctl(namespace, "sessions", "--all", cwd=workdir)))
    assert everything[0] == [
        *("ID", "ALIAS", "STATE", "OUTCOME", "ROLE", "MODEL", "USAGE", "AGE", "CWD", "PROMPT")
    ]
    all_ids = {row[0]: row for row in everything[1:]}
    assert set(all_ids) == {mine, fresh, theirs}
    assert all_ids[theirs][8:] == [str(other), "elsewhere"]

    # Many sessions: the per-session files are read in pipelined batches of 32 files; a file
    # that cannot be read (no such session) is None and the rest still arrive, in order.
    crowd = tmp_path / "crowd"
    crowd.mkdir()
    ok(anvilctl(namespace, "write", "-l", "agent/ctl", stdin=f"new cwd={crowd}\n" * 40))
    crowd_rows = table(ok(anvilctl(namespace, "sessions", cwd=crowd)))[1:]
    assert len(crowd_rows) == 40
    assert all(row[6] == "-" and row[7].endswith("s") and row[8] == "-" for row in crowd_rows), (
        crowd_rows
    )
    with Client(dial(f"unix!{namespace}/agent")) as client:
        root = client.mount()
        paths = ["nosuch/created", *(f"{row[0]}/created" for row in crowd_rows), f"{mine}/x"]
        texts = read_small_files(client, root, [*paths, f"{mine}/first_prompt"])
        assert texts[0] is None
        assert all(t is not None and parse_created(t) for t in texts[1:41])
        assert texts[41:] == [None, "fix the parser\n"]
        assert client.open(root, "list", OREAD).read(100)  # the connection is still in step

    empty = tmp_path / "empty"
    empty.mkdir()
    none = anvilctl(namespace, "sessions", cwd=empty)
    assert (none.returncode, none.stdout) == (0, "")
    assert f"no sessions in {empty}; `anvilctl sessions --all` lists every one" in none.stderr


def test_sessions_keeps_first_prompt_and_creation_time_across_a_restart(
    namespace: Path, config: Path, workdir: Path
) -> None:
    first = start_daemon(namespace, config)
    try:
        session_id = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        turn(namespace, session_id, "remember me")
        turn(namespace, session_id, "a later prompt")
        created = read(namespace, f"agent/{session_id}/created")
        before = table(ok(anvilctl(namespace, "sessions", cwd=workdir)))
    finally:
        code, log = first.stop()
    assert code == 0, log
    second = start_daemon(namespace, config)
    try:
        assert read(namespace, f"agent/{session_id}/created") == created
        assert read(namespace, f"agent/{session_id}/first_prompt") == "remember me\n"
        after = table(ok(anvilctl(namespace, "sessions", cwd=workdir)))
    finally:
        code, log = second.stop()
    assert code == 0, log
    assert [row[0] for row in after] == [row[0] for row in before] == ["ID", session_id]
    assert after[1][-1] == "remember me"


def test_sessions_without_a_daemon_says_which_socket(namespace: Path, workdir: Path) -> None:
    result = anvilctl(namespace, "sessions", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"anvilctl sessions: anvild is not running (no socket at {namespace}/agent): "
    )


# --- anvilctl attach ------------------------------------------------------------------------


def attach_env(namespace: Path, tmp_path: Path, **more: str) -> dict[str, str]:
    """The environment of an attach on a terminal: its history in the test's data dir, an
    xterm; prompt_toolkit asks the terminal for the cursor position (a CPR) only where it can
    get an answer, and this test terminal answers none."""
    env = {
        **os.environ,
        "NAMESPACE": str(namespace),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "TERM": "xterm-256color",
        "PROMPT_TOOLKIT_NO_CPR": "1",
    }
    for name in ("NO_COLOR", "COLUMNS", "LINES", "COLORTERM"):  # xdist workers set the size
        env.pop(name, None)  # the pty's size is the terminal's
    env.update(more)
    return env


@pytest.fixture
def attach_fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(
        tmp_path,
        [
            {
                "contains": "read the notes",
                "tool_calls": [{"name": "read_file", "arguments": {"file_path": "notes.txt"}}],
            },
            {"contains": "alpha", "text": "The notes say alpha."},
            {
                "contains": "write the file",
                "tool_calls": [
                    {"name": "write_file", "arguments": {"file_path": "out.txt", "content": "hi"}}
                ],
            },
            {
                "contains": "make a mess",
                "tool_calls": [
                    {"name": "write_file", "arguments": {"file_path": "mess.txt", "content": "x"}}
                ],
            },
            # Not repeated: the next prompt's request still holds this one's text. Held after
            # its first piece of text, never released: the turn runs until it is cancelled.
            {"contains": "stuck", "text": "never finished", "hold": 2},
            {
                "contains": "keep a diary",
                "tool_calls": [
                    {"name": "write_file", "arguments": {"file_path": "diary.txt", "content": "d"}}
                ],
            },
            # Held after its first piece of text until the test releases it.
            {"contains": "tell a story", "text": "Once upon a time, far away.", "hold": 2},
            {"text": "pong", "repeat": True},
        ],
    )
    yield server
    server.stop()


@pytest.fixture
def attach_daemon(namespace: Path, tmp_path: Path, attach_fake: FakeServer) -> Iterator[Anvild]:
    d = start_daemon(namespace, user_config(tmp_path, attach_fake.url))
    yield d
    code, log = d.stop()
    assert code == 0, log


@pytest.fixture
def terminal_factory(
    namespace: Path, tmp_path: Path, workdir: Path
) -> Iterator[Callable[..., Tty]]:
    terminals: list[Tty] = []

    def make(*args: str, **env: str) -> Tty:
        terminals.append(
            Tty(["anvilctl", *args], env=attach_env(namespace, tmp_path, **env), cwd=workdir)
        )
        return terminals[-1]

    yield make
    for t in terminals:
        t.close()


def wait_state(namespace: Path, session: str, state: str) -> None:
    deadline = time.monotonic() + TURN_TIMEOUT
    while (now := read(namespace, f"agent/{session}/state").strip()) != state:
        assert time.monotonic() < deadline, f"the session stayed {now}, never {state}"
        time.sleep(0.05)


FOOTER = r"\[done · {steps} steps? · tokens \d+ in, \d+ out · cost unknown · context \d+/8192 "


def test_attach_streams_turns_tools_approvals_cancel_and_commands(
    attach_daemon: Anvild,
    namespace: Path,
    workdir: Path,
    tmp_path: Path,
    attach_fake: FakeServer,
    terminal_factory: Callable[..., Tty],
) -> None:
    (workdir / "notes.txt").write_text("alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\n")
    sid = ok(anvilctl(namespace, "new", "alias=dev", cwd=workdir)).strip()
    term = terminal_factory("attach", "dev")
    term.expect(r"attached to \w+ \(dev\): developer, model fake, idle")
    assert b"\x1b[2mattached to" in term.raw  # dim: a terminal gets escape codes
    term.wait_screen(r"^>$")

    # A prompt streams its answer, then the footer: tokens, cost (the fake model has no
    # price), the context's use and where it compacts.
    term.type("ping\r")
    term.expect(r"^> ping\npong\n" + FOOTER.format(steps=1) + r"\(\d+\.\d%\), compacts at 85%\]")
    term.wait_screen(r"^>$")
    assert read(namespace, f"agent/{sid}/state") == "idle\n"  # attach read `out`

    # A tool call: its dim line, then an indented preview of its result (the daemon's preview
    # is the result's first lines).
    term.type("read the notes\r")
    term.expect(r"● read_file notes\.txt\n  ⎿ +1\s+alpha\n +2\s+beta\n +3\s+gamma…\n")
    term.expect(r"^The notes say alpha\.\n" + FOOTER.format(steps=2))
    term.wait_screen(r"^>$")

    # An approval answered y: the file is written.
    term.type("write the file\r")
    term.expect(r"approval needed: write_file out\.txt")
    term.expect(r"y: approve once   a: always.*n: reject with feedback")
    term.wait_screen(r"^approve\? \[y/a/n\]$")
    term.type("y\r")
    term.expect(r"^pong\n" + FOOTER.format(steps=2))
    assert (workdir / "out.txt").read_text() == "hi"

    # An approval answered n: the feedback reaches the model as the call's result.
    term.wait_screen(r"^>$")
    term.type("make a mess\r")
    term.wait_screen(r"^approve\? \[y/a/n\]$")
    term.type("n\r")
    term.wait_screen(r"^feedback for the model:$")
    term.type("not in my repository\r")
    term.expect(r"  ⎿  error: .*not in my repository")
    term.expect(r"^pong\n" + FOOTER.format(steps=2))
    assert not (workdir / "mess.txt").exists()
    last = attach_fake.requests()[-1]
    assert "the user rejected this call and said: not in my repository" in last["last_user_text"]

    # Ctrl-C cancels a slow turn; the next prompt works.
    term.wait_screen(r"^>$")
    term.type("stuck here\r")
    term.wait_screen(r"never fi")
    term.type("\x03")
    term.expect(r"\^C: cancelling the turn\n(.*\n)*\[cancelled")
    term.wait_screen(r"^>$")
    term.type("ping again\r")
    term.expect(r"^pong\n\[done")

    # Ctrl-C at the prompt drops the line.
    term.wait_screen(r"^>$")
    term.type("half a thought")
    term.wait_screen(r"^> half a thought$")
    term.type("\x03")
    term.wait_screen(r"^>$")
    term.type("/model nope\r")
    term.expect(r"error: .*unknown model 'nope' \(known aliases: fake")
    term.type("/help\r")
    term.expect(r"/model \[NAME\] +show or switch the session's model")
    term.type("/exit\r")
    term.expect(
        rf"left {sid}; it keeps running in the daemon\. Come back with `anvilctl attach dev`"
    )
    assert term.wait_exit() == 0

    rows = table(ok(anvilctl(namespace, "sessions", cwd=workdir)))
    assert [row[:3] for row in rows[1:]] == [[sid, "dev", "idle"]]
    assert rows[1][-1] == "ping"
    history = (tmp_path / "xdg-data" / "anvil" / "attach_history").read_text()
    assert "ping again" in history
    assert "half a thought" not in history
    assert "not in my repository" not in history  # approval answers are not prompts
    prompts = [r["last_user_text"] for r in attach_fake.requests()]
    assert "half a thought" not in str(prompts)


def test_attach_without_a_terminal_prints_no_escape_codes(
    attach_daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    sid = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
    result = anvilctl(namespace, "attach", sid, stdin="ping\n/clear\n/model fake\n/model\n")
    out = ok(result)
    assert "\x1b" not in out + result.stderr
    assert f"attached to {sid}: developer, model fake, idle" in out
    assert "pong\n[done · 1 step · tokens " in out
    assert "context cleared\nmodel: fake\n" in out
    assert "model: fake (/model NAME switches" in out
    assert sid in read(namespace, "agent/list")  # leaving (EOF) leaves the session running


def test_attach_to_an_unknown_session_says_so(attach_daemon: Anvild, namespace: Path) -> None:
    result = anvilctl(namespace, "attach", "nosuch")
    assert result.returncode == 1
    assert result.stderr == (
        "anvilctl attach nosuch: no session nosuch; `anvilctl sessions --all` lists them\n"
    )


def test_attach_joins_a_running_turn_from_its_start_and_skips_finished_ones(
    attach_daemon: Anvild,
    namespace: Path,
    workdir: Path,
    terminal_factory: Callable[..., Tty],
    attach_fake: FakeServer,
) -> None:
    sid = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
    turn(namespace, sid, "ping")  # a finished turn: shown as an earlier exchange, not replayed
    ok(anvilctl(namespace, "send", sid, "tell a story"))
    wait_state(namespace, sid, "running")
    term = terminal_factory("attach", sid)
    term.expect(r"─── earlier in this session ───\nyou: ping\npong\n\[done\]\n───\n")
    term.expect(rf"attached to {sid}: developer, model fake, running; /help for help\n")
    term.wait_screen(r"Once upo")  # the running turn, from its start
    attach_fake.release()  # the rest of the story, after attach has shown its start
    term.expect(r"^Once upon a time, far away\.\n\[done · 1 step")
    term.wait_screen(r"^>$")
    assert term.screen.text().count("pong") == 1  # the earlier turn is not replayed
    term.type("/exit\r")
    assert term.wait_exit() == 0
    assert read(namespace, f"agent/{sid}/state") == "idle\n"

    again = terminal_factory("attach", sid)
    again.expect(rf"attached to {sid}: developer, model fake, idle; /help for help\n")
    again.expect(r"you: tell a story\nOnce upon a time, far away\.\n")  # now an earlier one
    again.wait_screen(r"^>$")
    again.type("\x04")  # Ctrl-D leaves too
    again.expect(r"Come back with `anvilctl attach \w+`")
    assert again.wait_exit() == 0


def test_attach_to_a_session_waiting_for_approval_asks_at_once_and_always_works(
    attach_daemon: Anvild,
    namespace: Path,
    workdir: Path,
    terminal_factory: Callable[..., Tty],
) -> None:
    sid = ok(anvilctl(namespace, "new", "alias=scribe", cwd=workdir)).strip()
    ok(anvilctl(namespace, "send", sid, "keep a diary"))
    wait_state(namespace, sid, "await_approval")
    term = terminal_factory("attach", "scribe")
    term.expect(r"attached to \w+ \(scribe\): developer, model fake, await_approval;")
    term.expect(r"● write_file diary\.txt\n")  # the running turn, from its start
    term.expect(r"approval needed: write_file diary\.txt\n(.*\n)*.*a: always \(adds allow ")
    term.wait_screen(r"^approve\? \[y/a/n\]$")
    term.type("maybe\r")  # not an answer: asked again
    term.expect(r"^approve\? \[y/a/n\] maybe$")
    term.wait_screen(r"^approve\? \[y/a/n\]$")
    term.type("a\r")
    term.expect(r"  ⎿  Created diary\.txt.*\npong\n\[done · 2 steps")
    assert (workdir / "diary.txt").read_text() == "d"
    term.wait_screen(r"^>$")
    term.type("\x04")
    assert term.wait_exit() == 0
