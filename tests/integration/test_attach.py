"""End to end: `anvilctl sessions` and `anvilctl attach` through the real daemon.

The daemon runs as a subprocess against the fake provider server (helpers from
test_sessions_e2e.py). `attach` runs on a real pseudo-terminal: the test holds the master side,
types on it (Ctrl-C is the byte 0x03, which the terminal turns into SIGINT) and reads what the
command prints, with a deadline on every read so nothing hangs.
"""

from __future__ import annotations

import codecs
import datetime as dt
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from anvilctl.ninep_client import Client, dial
from anvilctl.sessions import parse_created, read_small_files
from anvild.ninep.constants import OREAD
from tests.integration.test_daemon_cli import STARTUP_TIMEOUT, Anvild
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)


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

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\r")


class Terminal:
    """`anvilctl attach` on a real pseudo-terminal that is its controlling terminal.

    `setsid -c` makes the pty the child's controlling terminal, so a 0x03 typed on the master
    side is SIGINT for it, as in a shell. Every read has a deadline."""

    def __init__(self, namespace: Path, tmp_path: Path, *args: str) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {
            **os.environ,
            "NAMESPACE": str(namespace),
            "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
            "TERM": "xterm",
        }
        for name in ("NO_COLOR", "COLUMNS", "LINES"):  # pytest-xdist workers set the size
            env.pop(name, None)  # the pty's size (above) is the terminal's
        self.proc = subprocess.Popen(
            ["setsid", "-c", sys.executable, "-m", "anvilctl", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=tmp_path,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.raw = b""
        self.text = ""  # what was printed, without escape codes and carriage returns
        self.seen = 0  # how much of `text` `expect` has consumed
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""

    def _feed(self, chunk: bytes) -> None:
        """Append to `text` only what is final: a split UTF-8 character or escape sequence at
        the end waits for its rest, so positions in `text` never move."""
        self.raw += chunk
        data = self._held + self._decoder.decode(chunk)
        cut = data.rfind("\x1b")
        if cut != -1 and len(data) - cut < 16 and not ANSI.match(data, cut):
            data, self._held = data[:cut], data[cut:]
        else:
            self._held = ""
        self.text += ANSI.sub("", data)

    def _read(self, until: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            chunk = b""
        if not chunk:
            return False
        self._feed(chunk)
        return True

    def expect(self, pattern: str, timeout: float = TURN_TIMEOUT) -> re.Match[str]:
        """Wait for `pattern` (a regex) after what earlier calls consumed; consume through it."""
        until = time.monotonic() + timeout
        regex = re.compile(pattern, re.MULTILINE)
        while True:
            found = regex.search(self.text, self.seen)
            if found:
                self.seen = found.end()
                return found
            if not self._read(until) and (
                time.monotonic() >= until or self.proc.poll() is not None
            ):
                if (found := regex.search(self.text, self.seen)) is not None:
                    self.seen = found.end()
                    return found
                seen, rest = self.text[: self.seen], self.text[self.seen :]
                raise AssertionError(f"no {pattern!r} in the terminal after {seen!r}: {rest!r}")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_exit(self, timeout: float = STARTUP_TIMEOUT) -> int:
        until = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < until:
            self._read(min(until, time.monotonic() + 0.2))
        return self.proc.wait(timeout=1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


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
def terminal_factory(namespace: Path, tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    terminals: list[Terminal] = []

    def make(*args: str) -> Terminal:
        terminals.append(Terminal(namespace, tmp_path, *args))
        return terminals[-1]

    yield make
    for t in terminals:
        t.close()


def only_the_main_thread_takes_sigint(pid: int) -> bool:
    """Whether process `pid` has more than one thread and all but its main one block SIGINT."""
    sigint = 1 << (signal.SIGINT - 1)
    blocked = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        mask = next(line for line in status.splitlines() if line.startswith("SigBlk:"))
        blocked[int(task.name)] = bool(int(mask.split()[1], 16) & sigint)
    others = [tid for tid in blocked if tid != pid]
    return bool(others) and not blocked[pid] and all(blocked[tid] for tid in others)


def wait_state(namespace: Path, session: str, state: str) -> None:
    deadline = time.monotonic() + TURN_TIMEOUT
    while (now := read(namespace, f"agent/{session}/state").strip()) != state:
        assert time.monotonic() < deadline, f"the session stayed {now}, never {state}"
        time.sleep(0.05)


def test_attach_streams_turns_tools_approvals_cancel_and_commands(
    attach_daemon: Anvild,
    namespace: Path,
    workdir: Path,
    tmp_path: Path,
    attach_fake: FakeServer,
    terminal_factory: Callable[..., Terminal],
) -> None:
    (workdir / "notes.txt").write_text("alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\n")
    sid = ok(anvilctl(namespace, "new", "alias=dev", cwd=workdir)).strip()
    term = terminal_factory("attach", "dev")
    term.expect(r"attached to \w+ \(dev\): developer, model fake, idle")
    assert "\x1b[2mattached to" in term.raw.decode()  # dim: a terminal gets escape codes
    term.expect(r"> ")

    # A prompt streams its answer, then the usage line.
    term.type("ping\r")
    term.expect(r"pong\n\[done · 1 step · tokens \d+ in, \d+ out\]")
    term.expect(r"> ")
    assert read(namespace, f"agent/{sid}/state") == "idle\n"  # attach read `out`

    # A tool call: its dim line, then an indented preview of its result (the daemon's preview
    # is the result's first lines).
    term.type("read the notes\r")
    term.expect(r"● read_file notes\.txt\n  ⎿ +1\s+alpha\n +2\s+beta\n +3\s+gamma…\n")
    term.expect(r"^The notes say alpha\.\n\[done · 2 steps · tokens \d+ in, \d+ out\]\n")
    term.expect(r"> ")

    # An approval answered y: the file is written.
    term.type("write the file\r")
    term.expect(r"approval needed: write_file out\.txt")
    term.expect(r"y: approve once   a: always.*n: reject with feedback\napprove\? \[y/a/n\] ")
    term.type("y\r")
    term.expect(r"pong\n\[done · 2 steps")
    assert (workdir / "out.txt").read_text() == "hi"

    # An approval answered n: the feedback reaches the model as the call's result.
    term.expect(r"> ")
    term.type("make a mess\r")
    term.expect(r"approve\? \[y/a/n\] ")
    term.type("n\r")
    term.expect(r"feedback for the model: ")
    term.type("not in my repository\r")
    term.expect(r"  ⎿  error: .*not in my repository")
    term.expect(r"pong\n\[done · 2 steps")
    assert not (workdir / "mess.txt").exists()
    last = attach_fake.requests()[-1]
    assert "the user rejected this call and said: not in my repository" in last["last_user_text"]

    # Ctrl-C cancels a slow turn; the next prompt works. Its first piece of text on the
    # terminal says attach follows the turn (a Ctrl-C before that would hit the prompt).
    term.expect(r"> ")
    term.type("stuck here\r")
    term.expect(r"never fi")
    term.type("\x03")
    term.expect(r"\^C: cancelling the turn\n(.*\n)?\[cancelled")
    term.expect(r"> ")
    term.type("ping again\r")
    term.expect(r"pong\n\[done")

    # Ctrl-C at the prompt drops the line. The kernel hands a Ctrl-C to any thread that does
    # not block SIGINT, and readline's wait notices only its own thread's signals: every thread
    # but the main one blocks it (a Ctrl-C taken by the events reader did nothing until the
    # next key).
    term.expect(r"> ")
    assert only_the_main_thread_takes_sigint(term.proc.pid)
    term.type("half a thought\x03")
    term.expect(r"> ")
    term.type("/model nope\r")
    term.expect(r"error: .*unknown model 'nope' \(known aliases: fake")
    term.type("/help\r")
    term.expect(r"/model NAME +switch the session's model")
    term.type("/exit\r")
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
    terminal_factory: Callable[..., Terminal],
    attach_fake: FakeServer,
) -> None:
    sid = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
    turn(namespace, sid, "ping")  # a finished turn: in the events backlog, never shown
    ok(anvilctl(namespace, "send", sid, "tell a story"))
    wait_state(namespace, sid, "running")
    term = terminal_factory("attach", sid)
    term.expect(rf"attached to {sid}: developer, model fake, running; /help for help\n")
    attach_fake.release()  # the rest of the story, after attach has shown its start
    term.expect(r"^Once upon a time, far away\.\n\[done · 1 step")
    term.expect(r"> ")
    assert "pong" not in term.text
    term.type("/exit\r")
    assert term.wait_exit() == 0
    assert read(namespace, f"agent/{sid}/state") == "idle\n"

    again = terminal_factory("attach", sid)
    again.expect(rf"attached to {sid}: developer, model fake, idle; /help for help\n> ")
    again.type("/help\r")
    again.expect(r"/exit +leave")
    # Ctrl-D only at the prompt: typed ahead while the help prints, the terminal is still in
    # its cooked mode and keeps the end-of-file as a NUL byte for the next reader.
    again.expect(r"> ")
    assert "pong" not in again.text
    assert "Once upon" not in again.text
    again.type("\x04")  # Ctrl-D leaves too
    assert again.wait_exit() == 0


def test_attach_to_a_session_waiting_for_approval_asks_at_once_and_always_works(
    attach_daemon: Anvild,
    namespace: Path,
    workdir: Path,
    terminal_factory: Callable[..., Terminal],
) -> None:
    sid = ok(anvilctl(namespace, "new", "alias=scribe", cwd=workdir)).strip()
    ok(anvilctl(namespace, "send", sid, "keep a diary"))
    wait_state(namespace, sid, "await_approval")
    term = terminal_factory("attach", "scribe")
    term.expect(r"attached to \w+ \(scribe\): developer, model fake, await_approval;")
    term.expect(r"● write_file diary\.txt\n")  # the running turn, from its start
    term.expect(r"approval needed: write_file diary\.txt\n(.*\n)*.*a: always \(adds allow ")
    term.expect(r"approve\? \[y/a/n\] ")
    term.type("maybe\r")  # not an answer: asked again
    term.expect(r"approve\? \[y/a/n\] ")
    term.type("a\r")
    term.expect(r"  ⎿  Created diary\.txt.*\npong\n\[done · 2 steps")
    assert (workdir / "diary.txt").read_text() == "d"
    term.expect(r"> ")
    term.type("\x04")
    assert term.wait_exit() == 0
