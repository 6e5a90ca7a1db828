"""`anvilctl -p PROMPT`: one prompt, one turn, nobody at the keyboard (headless).

    git diff | anvilctl -p "review this"              stdin (not a TTY) is appended to the prompt
    anvilctl -p "fix the test" --output-format json   one JSON object when the turn has ended
    anvilctl -p --continue "and the other test?"      the latest conversation of this directory

Creates an ephemeral, headless session (a call needing approval is refused at once, naming what
would allow it); `--continue`/`--resume` reuse a live session or start a new one `from=` the old
conversation (a live session is never killed). The `events` file is opened (and its backlog
flushed) before the prompt is written, and reading stops at `turn_finished`, which the stream
never drops. Without a daemon on the namespace socket the turn runs in this process (anvild's
modules imported only then). Output `text`, `json` or `stream-json`: a program reading stdout
always gets one `result`; `text` strips control characters. Ctrl-C cancels the turn (exit 130);
before the prompt is sent it kills the new session. Exit: `EXIT_CODES` (0 done, 1 error, 2
max_steps, 3 max_tokens, 4 refused, 5 budget_exceeded, 6 protocol_stopped, 130 cancelled).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import queue
import re
import select
import signal
import stat
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, Final, NamedTuple, NoReturn

from anvilctl import ninep_cli, wire
from anvilctl.ninep_client import (
    CFid,
    Client,
    ClientError,
    ConnectError,
    ServerError,
    agent_address,
    dial,
    mount_agent,
)
from anvilctl.signals import BackgroundThread, drain_wakeup, signal_wakeup
from anvilctl.wire import ORDWR, OREAD, OTRUNC, OWRITE

__all__ = [
    "EXIT_CODES",
    "MODES",
    "Renderer",
    "SessionRow",
    "add_options",
    "build_parser",
    "live_session",
    "main",
    "usd_of",
]

MODES: Final = ("plan", "default", "accept-edits", "bypass")
FORMATS: Final = ("text", "json", "stream-json")
EXIT_CODES: Final = {
    "done": 0,
    "error": 1,
    "max_steps": 2,
    "max_tokens": 3,
    "refused": 4,
    "budget_exceeded": 5,
    "protocol_stopped": 6,
    "cancelled": 130,
}
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130
_CHUNK: Final = 8192
_PREFIX: Final = "anvilctl -p"
LATEST: Final = "latest"  # `new from=latest` (anvild.session.manager.LATEST)
_ESCAPES: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI (colours, cursor movement)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC (titles, hyperlinks)
    r"|\x1b[@-_]?"  # other escapes, or a lone ESC
    r"|[\x00-\x08\x0b-\x1f\x7f\x9b]"  # other control characters (tab and newline stay)
)


def plain(text: str) -> str:
    """`text` without terminal escape sequences or control characters (tab, newline kept)."""
    return _ESCAPES.sub("", text)


class HeadlessError(Exception):
    """The turn could not be run; the message says why (exit 1)."""


def _positive(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's parser that remembers its error message (`failure`), so `main` can also give
    it as JSON in the JSON formats; it still prints the usage and exits 2."""

    failure: str | None = None

    def error(self, message: str) -> NoReturn:
        self.failure = message
        super().error(message)


def add_options(parser: argparse.ArgumentParser) -> None:
    """`-p` and its options (not the global -a/-A/-n): for `build_parser`, and for the shell
    completion, which offers them at the top level of `anvilctl` (`anvilctl.completion`)."""
    parser.add_argument(
        "-p",
        "--print",
        dest="prompt",
        nargs="?",
        const="",
        metavar="PROMPT",
        help="run PROMPT headless and print the result (the prompt may also follow the "
        "options, or come on stdin)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "-c",
        "--continue",
        dest="continue_session",
        action="store_true",
        help="go on with this directory's (-C: DIR's) latest conversation: its live session, "
        "else a new session from the latest exited one's conversation",
    )
    which.add_argument(
        "-r",
        "--resume",
        metavar="ID",
        help="go on with the session with this id or alias: itself when live, else a new "
        "session from its conversation",
    )
    parser.add_argument(
        "-m", "--model", help="model alias or provider:model (default: the daemon's default model)"
    )
    parser.add_argument(
        "-C", "--cwd", help="the session's working directory (default: the current directory)"
    )
    parser.add_argument(
        "--max-steps",
        type=_positive,
        metavar="N",
        help="stop after N model requests (default: the daemon's setting)",
    )
    parser.add_argument(
        "--max-budget-tokens",
        type=_positive,
        metavar="N",
        help="stop the turn once it has used N tokens (input, output and cache)",
    )
    parser.add_argument(
        "--permission-mode",
        choices=MODES,
        metavar="MODE",
        help=f"one of {', '.join(MODES)} (default: the daemon's; never wider "
        "than permissions.max_mode in the user config)",
    )
    parser.add_argument(
        "--output-format",
        choices=FORMATS,
        default="text",
        metavar="FORMAT",
        help=f"one of {', '.join(FORMATS)} (default: text); json and stream-json print "
        "errors as a JSON result too",
    )


def build_parser() -> _Parser:
    parser = _Parser(
        prog="anvilctl -p",
        description="Run one prompt headless in a new session (or, with --continue or "
        "--resume, going on with an earlier conversation) and print the result. Stdin, when it "
        "is not a terminal, is appended to the prompt, or is the prompt when none is given.",
        epilog="Exit status: 0 done, 1 error, 2 max_steps (or a usage error), 3 max_tokens, "
        "4 refused, 5 budget_exceeded, 6 protocol_stopped, 130 cancelled.",
    )
    ninep_cli.add_global_options(parser)
    add_options(parser)
    parser.add_argument(
        "words",
        nargs="*",
        metavar="PROMPT",
        help="the prompt, when -p is given without one (words are joined with spaces)",
    )
    return parser


def resuming(args: argparse.Namespace) -> bool:
    """Whether the prompt goes to an existing session (--continue or --resume)."""
    return bool(args.continue_session) or args.resume is not None


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What argparse cannot check: a continued session keeps what `new` set (usage errors)."""
    if not resuming(args):
        return
    given = [
        flag
        for flag, value in (
            ("-m/--model", args.model),
            ("--max-steps", args.max_steps),
            ("--max-budget-tokens", args.max_budget_tokens),
            ("--permission-mode", args.permission_mode),
        )
        if value is not None
    ]
    if given:
        parser.error(
            f"{', '.join(given)}: set when a session is created; with --continue or --resume "
            "the session keeps its own (switch its model with `model NAME` on its ctl)"
        )
    if args.resume is not None and args.cwd is not None:
        parser.error(
            "-C: a resumed session keeps its own cwd (--continue -C DIR continues the latest "
            "session of DIR)"
        )


def format_in(argv: Sequence[str]) -> str:
    """The `--output-format` an argument list asks for (for a usage error, before it parses)."""
    fmt = "text"
    for i, arg in enumerate(argv):
        if arg == "--output-format" and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif arg.startswith("--output-format="):
            fmt = arg.partition("=")[2]
    return fmt if fmt in FORMATS else "text"


def _quote(value: str) -> str:
    """A ctl word as Plan 9's tokenize(2) reads it."""
    if value and not any(c in value for c in " \t\r\n'"):
        return value
    return "'" + value.replace("'", "''") + "'"


def new_words(args: argparse.Namespace, cwd: str) -> list[str]:
    """The words of `new` for this command's session. With --continue or --resume (no live
    session to take the prompt): `from=latest` in `cwd`, or `from=ID` (the old session's cwd)."""
    source = None if not resuming(args) else args.resume or LATEST
    words = [] if source not in (None, LATEST) else [f"cwd={_quote(cwd)}"]
    words += ["ephemeral", "headless"]
    if args.model:
        words.append(f"model={_quote(args.model)}")
    if args.max_steps is not None:
        words.append(f"max_steps={args.max_steps}")
    if args.permission_mode:
        words.append(f"permission={args.permission_mode}")
    if args.max_budget_tokens is not None:
        words.append(f"budget={args.max_budget_tokens}")
    if source is not None:
        words.append(f"from={_quote(source)}")
    return words


# -- rendering the events --------------------------------------------------------------------


class StdoutClosed(Exception):
    """The reader of stdout went away."""


class Renderer:
    """Turns a turn's event lines into the chosen output; `feed` returns True at the end.

    `start` writes stream-json's `init` line once the session is known; `finish` writes what
    the format writes at the turn's end (for json and stream-json the `result` object);
    `fail` reports an error instead (on stderr, and as a `result` in the JSON formats).
    `started` is when the command started (`duration_ms`); `cost_before` and `cost_after`
    are the session's cost in USD before and after the turn (`total_cost_usd`)."""

    def __init__(
        self, fmt: str, out: BinaryIO, err: BinaryIO, *, started: float | None = None
    ) -> None:
        self.fmt = fmt
        self._out = out
        self._err = err
        self.closed = False  # stdout's reader went away: nothing more is written to it
        self._pending = b""  # the start of a line whose end has not come yet
        self.finished: dict[str, Any] | None = None
        self.session_id = ""
        self.model = ""
        self.cwd = ""
        self.resumed = False
        self.forked = False  # resumed in a new session (from=): the command created it
        self.started = time.monotonic() if started is None else started
        self.cost_before: float | None = 0.0  # a new session has cost nothing yet
        self.cost_after: float | None = None
        self._step_text: list[str] = []
        self.lagged = False
        self._init_written = False
        self._result_written = False

    @property
    def answer(self) -> str:
        return "".join(self._step_text)

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self._out.write(data)
            self._out.flush()
        except (BrokenPipeError, ValueError) as exc:  # ValueError: a closed file object
            self.closed = True
            raise StdoutClosed from exc

    def start(self) -> None:
        """stream-json: the first line, naming the session (Claude Code's `system`/`init`)."""
        if self.fmt != "stream-json" or self._init_written:
            return
        self._init_written = True
        init = {
            "type": "system",
            "subtype": "init",
            "session_id": self.session_id,
            "model": self.model,
            "cwd": self.cwd,
            "resumed": self.resumed,
        }
        self.write(json.dumps(init, ensure_ascii=False).encode() + b"\n")

    def feed(self, line: bytes) -> bool:
        """One event line (with or without its newline). True once it was `turn_finished`."""
        line = line.rstrip(b"\n")
        if not line:
            return False
        try:
            event = json.loads(line)
        except ValueError:
            event = {}
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "step_started":
            self._step_text = []
        elif kind == "text_delta":
            self._step_text.append(str(event.get("text", "")))
        elif kind == "lagged":
            self.lagged = True
        if kind == "turn_finished":
            self.finished = event
        if self.fmt == "stream-json":
            self.write(line + b"\n")
        return kind == "turn_finished"

    def feed_lines(self, data: bytes) -> tuple[bool, bool]:
        """The complete lines of the stream so far (`data` after the unfinished rest of the
        last chunk), fed in order: (a line ended the turn, stdout's reader was found gone).
        A closed stdout does not stop the feeding: the turn's end is still to be read."""
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        closed = False
        for line in lines:
            try:
                if self.feed(line):
                    return True, closed
            except StdoutClosed:
                closed = True
        return False, closed

    @property
    def outcome(self) -> str:
        return str(self.finished.get("outcome", "error")) if self.finished else "error"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.outcome, EXIT_ERROR)

    @property
    def total_cost_usd(self) -> float | None:
        """This turn's cost: the session's after the turn less before it (None: unknown)."""
        if self.cost_before is None or self.cost_after is None:
            return None
        return round(max(0.0, self.cost_after - self.cost_before), 6)

    def result(self, text: str, detail: str, exit_code: int) -> dict[str, Any]:
        """The `result` object of the JSON formats (Claude Code's, where it fits)."""
        finished = self.finished or {}
        return {
            "type": "result",
            "session_id": self.session_id or None,
            "outcome": self.outcome,
            "detail": detail,
            "is_error": self.outcome != "done",
            "exit_code": exit_code,
            "result": text,
            "steps": finished.get("steps"),
            "duration_ms": int((time.monotonic() - self.started) * 1000),
            "total_cost_usd": self.total_cost_usd,
            "usage": finished.get("usage"),
            "model": self.model,
            "cwd": self.cwd,
        }

    def _write_result(self, result: dict[str, Any]) -> None:
        self._result_written = True
        self.write(json.dumps(result, ensure_ascii=False).encode() + b"\n")

    def finish(self, answer: str | None = None) -> None:
        """Write what the format writes at the end (`answer`: the session's `out`, when the
        event stream lost some text)."""
        text = self.answer if answer is None else answer
        finished = self.finished or {}
        detail = str(finished.get("detail", ""))
        if self.fmt == "text":
            text = plain(text)
            if text:
                self.write(text.encode() + (b"" if text.endswith("\n") else b"\n"))
            if self.outcome != "done":
                why = f": {plain(detail)}" if detail else ""
                self._say(f"turn ended: {self.outcome}{why}")
        else:
            self._write_result(self.result(text, detail, self.exit_code))

    def fail(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        """Report an error that ended the command: `anvilctl -p: MESSAGE` on stderr, and in
        the JSON formats a `result` with `is_error` (unless the turn's result was written)."""
        self._say(message)
        if self.fmt == "text" or self._result_written:
            return
        result = self.result(self.answer, message, exit_code)
        result.update(outcome="error", is_error=True)
        with contextlib.suppress(StdoutClosed):
            self._write_result(result)

    def _say(self, message: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._err.write(f"{_PREFIX}: {message}\n".encode())
            self._err.flush()


def synthetic_end(outcome: str, detail: str) -> bytes:
    """A `turn_finished` line for a turn that never started (its session ended first)."""
    event = {"type": "turn_finished", "outcome": outcome, "steps": 0, "usage": None}
    event["detail"] = detail
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


# -- which session: --continue and --resume ---------------------------------------------------


class SessionRow(NamedTuple):
    """A session as `agent/list` shows it; `created` (RFC 3339) is "" when not read."""

    id: str
    alias: str
    state: str
    cwd: str
    created: str = ""


def list_rows(text: str) -> list[SessionRow]:
    """`agent/list`: id, alias, state, role, model, cwd, tab-separated ("-": none)."""
    rows = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) >= 6 and fields[0]:
            alias = "" if fields[1] == "-" else fields[1]
            rows.append(SessionRow(fields[0], alias, fields[2], fields[5]))
    return rows


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def in_dir(rows: Sequence[SessionRow], cwd: str) -> list[SessionRow]:
    """The sessions of `cwd` that can still take a prompt (not exited)."""
    return [row for row in rows if row.state != "exited" and _same_dir(row.cwd, cwd)]


def live_session(rows: Sequence[SessionRow], *, cwd: str, key: str | None) -> SessionRow | None:
    """The live session that takes the prompt: `--resume KEY`, the one with that id or alias
    that has not exited; `--continue` (key None), the latest created of `cwd`'s sessions that
    have not exited (list order breaks a tie: the manager lists in creation order). None: there
    is none, and the prompt goes to a new session started from the old conversation (`new
    from=KEY` or `from=latest`: the daemon finds exited sessions too, and says when there is
    none)."""
    if key is not None:
        return next(
            (row for row in rows if key in (row.id, row.alias) and row.state != "exited"), None
        )
    here = in_dir(rows, cwd)
    if not here:
        return None
    order = {row.id: i for i, row in enumerate(rows)}
    return max(here, key=lambda row: (row.created, order[row.id]))


def usd_of(cost: str | None) -> float | None:
    """The `usd` line of a session's `cost` file (None: "n/a", or no such line)."""
    for line in (cost or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "usd":
            try:
                return float(value)
            except ValueError:
                return None
    return None


# -- the daemon path ---------------------------------------------------------------------------


class _Interrupted(Exception):
    pass


def _connect(args: argparse.Namespace) -> Client | None:
    """A connection to the daemon, or None when none answers on the namespace socket (with
    `-a`, a failure to connect is an error: the user named that server)."""
    try:
        return Client(dial(agent_address(args.address)))
    except ConnectError:
        if args.address:
            raise
        return None


def _mounted(args: argparse.Namespace) -> tuple[Client, CFid]:
    return mount_agent(args.address, aname=args.aname, auth=not args.noauth)


class _EventPump(BackgroundThread):
    """Reads the session's `events` file on its own connection and hands each chunk to the
    main thread (a queue, and a byte on a pipe so the main thread can poll it with stdout)."""

    def __init__(self, fid: CFid) -> None:
        super().__init__("anvilctl-events")
        self.fid = fid
        self.items: queue.SimpleQueue[bytes | BaseException | None] = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()

    def work(self) -> None:
        try:
            while data := self.fid.read(_CHUNK):
                self._put(data)
            self._put(None)
        except BaseException as exc:
            self._put(exc)

    def _put(self, item: bytes | BaseException | None) -> None:
        self.items.put(item)
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b".")

    def close(self) -> None:
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _watchable(fd: int) -> bool:
    """Whether a closed reader shows on `fd` as POLLERR (pipes and sockets)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _detach_stdout(out: BinaryIO) -> None:
    """After EPIPE: point fd 1 at /dev/null so the interpreter's final flush stays quiet."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)


class _DeferredInterrupt:
    """While `new` is written and its answer (the id) read: a Ctrl-C is noted (`pending`)
    instead of raised, so the id of a session that was created is always known (and it can be
    killed); a second Ctrl-C raises `_Interrupted` at once. Only in the main thread (where
    Python runs signal handlers); elsewhere this does nothing."""

    def __init__(self) -> None:
        self.pending = False
        self._previous: Any = None
        self._installed = False

    def _handler(self, signum: int, frame: object) -> None:
        if self.pending:
            raise _Interrupted
        self.pending = True

    def __enter__(self) -> _DeferredInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            # (None: the handler before was not set from Python; Python's own is the default)
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)


def _stdout_closed(out: BinaryIO) -> bool:
    """Whether the reader of stdout (a pipe or socket) has already gone away."""
    try:
        fd = out.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    if not _watchable(fd):
        return False
    poller = select.poll()
    poller.register(fd, 0)
    return any(flags & (select.POLLERR | select.POLLHUP) for _, flags in poller.poll(0))


def _read_text(client: Client, root: CFid, path: str) -> str | None:
    """A small file read to its end, or None when it cannot be read."""
    try:
        fid = client.open(root, path, OREAD)
        try:
            parts = []
            while data := fid.read(_CHUNK):
                parts.append(data)
        finally:
            fid.clunk()
    except ClientError:
        return None
    return b"".join(parts).decode(errors="replace")


def _existing_session(
    client: Client, root: CFid, args: argparse.Namespace, cwd: str
) -> SessionRow | None:
    """The live session `--continue` or `--resume` names, once it can take the prompt: a turn
    it is running is waited for (its `wait` file); an approval it waits for is an error. None:
    no live one (`live_session`)."""
    listing = _read_text(client, root, "list")
    if listing is None:
        raise HeadlessError("cannot read agent/list (the daemon's sessions)")
    rows = list_rows(listing)
    if args.resume is None:  # the candidates' creation times, to find the latest
        here = {row.id for row in in_dir(rows, cwd)}
        rows = [
            row._replace(created=(_read_text(client, root, f"{row.id}/created") or "").strip())
            if row.id in here
            else row
            for row in rows
        ]
    row = live_session(rows, cwd=cwd, key=args.resume)
    if row is None:
        return None
    if row.state == "await_approval":
        raise HeadlessError(
            f"session {row.id} waits for an approval: answer it first (`anvilctl attach "
            f"{row.id}`, or write approve or reject to agent/{row.id}/approval)"
        )
    if row.state in ("starting", "running"):
        _read_text(client, root, f"{row.id}/wait")  # returns when its turn has ended
        # An ephemeral session (an earlier -p's, listed just before it exited) ends with its
        # turn: then the prompt goes to a new session from its conversation.
        state = (_read_text(client, root, f"{row.id}/state") or "exited").split()
        if not state or state[0] == "exited":
            return None
    return row


_RFLUSH: Final = 109
_RREAD: Final = 117
_BACKLOG_QUIET: Final = 0.2  # seconds a read must stay pending before it is flushed
_BACKLOG_TIMEOUT: Final = 15.0


def _next_frame(client: Client, timeout: float | None) -> bytes | None:
    """The next reply on `client`'s connection, or None when none comes within `timeout`.
    (The client's own buffer first: a whole frame may already be there.)"""
    buf = client._buf
    whole = len(buf) >= 4 and len(buf) >= int.from_bytes(buf[:4], "little")
    if timeout is not None and not whole:
        ready, _, _ = select.select([client.sock], [], [], timeout)
        if not ready:
            return None
    return client._frame()


def skip_backlog(client: Client, fid: CFid) -> None:
    """Read and drop what an `events` file holds for a new reader (earlier turns), until a
    read stays pending: then flush it. flush(5): a read that had data is answered before the
    Rflush; an Rflush alone means every line published so far has been read. Only this
    connection's requests are in flight, on tags of their own."""
    count = client.msize - wire.IOHDRSZ
    read = wire.tread(1, fid.fid, 0, count)
    flush = struct.pack("<IBHH", 9, 108, 2, 1)  # Tflush tag 2, oldtag 1 (intro(5), flush(5))
    deadline = time.monotonic() + _BACKLOG_TIMEOUT
    client.sock.sendall(read)
    flushing = got_data = False
    while True:
        if time.monotonic() > deadline:
            raise HeadlessError("the session's events did not settle; is the daemon busy?")
        frame = _next_frame(client, None if flushing else _BACKLOG_QUIET)
        if frame is None:  # the read is pending: flush it to learn that we caught up
            client.sock.sendall(flush)
            flushing, got_data = True, False
            continue
        kind = frame[4]
        if kind == _RREAD:
            if not wire.rread(frame):
                raise HeadlessError("the session's events ended before its prompt was sent")
            got_data = True
            if not flushing:
                client.sock.sendall(read)
        elif kind == _RFLUSH:
            if not got_data:
                return
            flushing = False
            client.sock.sendall(read)
        elif kind == wire.RERROR:
            raise ServerError(wire.rerror(frame))
        else:
            raise ClientError(f"unexpected reply type {kind} on the events file")


def _run_daemon(
    client: Client,
    args: argparse.Namespace,
    prompt: str,
    cwd: str,
    renderer: Renderer,
    out: BinaryIO,
) -> int:
    root = client.mount(aname=args.aname, auth=not args.noauth)
    row = _existing_session(client, root, args, cwd) if resuming(args) else None
    if row is not None:
        renderer.session_id, renderer.cwd, renderer.resumed = row.id, row.cwd, True
        renderer.cost_before = usd_of(_read_text(client, root, f"{row.id}/cost"))
        return _run_session(client, root, row.id, args, prompt, False, renderer, out)
    with _DeferredInterrupt() as interrupt:
        ctl = client.open(root, "ctl", ORDWR)
        try:
            ctl.write(" ".join(["new", *new_words(args, cwd)]).encode())
        except ServerError as exc:
            raise HeadlessError(str(exc)) from exc
        session_id = ctl.pread(_CHUNK, 0).decode().strip()
        ctl.clunk()
    if not session_id:
        raise HeadlessError("the daemon answered no session id")
    renderer.session_id, renderer.cwd = session_id, cwd
    if resuming(args):  # a new session from an old conversation: this command owns it
        renderer.resumed = renderer.forked = True
        renderer.cwd = (_read_text(client, root, f"{session_id}/cwd") or cwd).strip()
    return _run_session(client, root, session_id, args, prompt, interrupt.pending, renderer, out)


def _run_session(
    client: Client,
    root: CFid,
    session_id: str,
    args: argparse.Namespace,
    prompt: str,
    interrupted: bool,
    renderer: Renderer,
    out: BinaryIO,
) -> int:
    """From a created (or continued) session to its turn's end: the events reader, the
    prompt, the stream. Until the prompt is taken, a Ctrl-C (`interrupted`: one came during
    `new`; or a KeyboardInterrupt now) or a closed stdout kills the session it created
    instead (a continued one is left as it was): no prompt is sent (exit 130)."""
    owned = renderer.forked or not renderer.resumed
    events_client: Client | None = None
    pump: _EventPump | None = None
    try:
        try:
            with contextlib.suppress(ClientError):
                model = client.open(root, f"{session_id}/model", OREAD)
                renderer.model = model.read(_CHUNK).decode().strip()
                model.clunk()
            events_client, events_root = _mounted(args)
            events = events_client.open(events_root, f"{session_id}/events", OREAD)
            if not owned:
                skip_backlog(events_client, events)  # earlier turns: not this one's
            pump = _EventPump(events)
            pump.start()
            if interrupted or _stdout_closed(out):
                if not interrupted:
                    renderer.closed = True
                    _detach_stdout(out)
                if owned:
                    _kill(args, session_id)
                return EXIT_INTERRUPTED
            renderer.start()
            fid = client.open(root, f"{session_id}/in", OWRITE | OTRUNC)
            try:
                fid.write(prompt.encode())
            finally:
                fid.clunk()  # the daemon takes the prompt here; a refusal fails the clunk
        except BaseException:
            # Whatever stopped the command before its prompt was taken (Ctrl-C, a broken
            # connection, a refused prompt): the session it created is not left idle.
            if owned:
                _kill(args, session_id)
            raise
        with signal_wakeup() as wakeup:
            return _pump_loop(client, root, session_id, pump, renderer, out, wakeup)
    finally:
        if events_client is not None:
            with contextlib.suppress(OSError):
                events_client.sock.shutdown(2)
            events_client.close()
        if pump is not None:
            pump.close()


def _pump_loop(
    client: Client,
    root: CFid,
    session_id: str,
    pump: _EventPump,
    renderer: Renderer,
    out: BinaryIO,
    wakeup: int,
) -> int:
    stdout_fd = out.fileno() if hasattr(out, "fileno") else -1
    poller = select.poll()
    poller.register(pump.wake_r, select.POLLIN)
    poller.register(wakeup, select.POLLIN)  # a Ctrl-C just before poll() still wakes it
    watching = stdout_fd >= 0 and _watchable(stdout_fd)
    if watching:
        poller.register(stdout_fd, 0)  # POLLERR/POLLHUP are always reported
    interrupted = False
    cancelled = False

    def cancel(why: str) -> None:
        nonlocal cancelled
        if cancelled:
            return
        cancelled = True
        _cancel(client, root, session_id, why, kill=renderer.forked or not renderer.resumed)

    while True:
        try:
            item = pump.items.get_nowait() if not pump.items.empty() else b""
            if isinstance(item, BaseException):
                raise HeadlessError(f"the events of session {session_id} broke off: {item}")
            if item is None:  # end of stream: the session ended without (or after) its turn
                if renderer.finished is None:
                    renderer.feed(synthetic_end("cancelled", "the session ended before its turn"))
                break
            if item:
                done, closed = renderer.feed_lines(item)
                if closed:
                    _detach_stdout(out)
                    cancel("stdout was closed")
                if done:
                    break
                continue
            for fd, flags in poller.poll():
                if fd == pump.wake_r:
                    os.read(pump.wake_r, 4096)
                elif fd == wakeup:
                    drain_wakeup(wakeup)  # KeyboardInterrupt comes from the handler itself
                elif flags & (select.POLLERR | select.POLLHUP):
                    poller.unregister(stdout_fd)
                    renderer.closed = True
                    _detach_stdout(out)
                    cancel("stdout was closed")
        except KeyboardInterrupt:
            if interrupted:
                raise _Interrupted from None
            interrupted = True
            cancel("interrupted (Ctrl-C)")
    renderer.cost_after = usd_of(_read_text(client, root, f"{session_id}/cost"))
    try:
        renderer.finish(_out_text(client, root, session_id) if renderer.lagged else None)
    except StdoutClosed:
        _detach_stdout(out)
    if interrupted:
        return EXIT_INTERRUPTED
    return renderer.exit_code


def _cancel(client: Client, root: CFid, session_id: str, why: str, *, kill: bool) -> None:
    """`cancel` on the session's ctl (it returns when the turn has ended); if no turn runs yet
    (the prompt is still queued), `kill` ends the session instead (`kill`: a session this
    command created; a continued one is only ever cancelled)."""
    for verb in ("cancel", "kill") if kill else ("cancel",):
        try:
            fid = client.open(root, f"{session_id}/ctl", OWRITE)
            try:
                fid.write(verb.encode())
                return
            finally:
                fid.clunk()
        except ServerError:
            continue
        except ClientError:
            return


def _kill(args: argparse.Namespace, session_id: str) -> None:
    """`kill` on the session's ctl, on a connection of its own (the command's may be what
    failed, or be in the middle of a request a second Ctrl-C broke off). Best effort."""
    with contextlib.suppress(ClientError, OSError):
        client, root = _mounted(args)
        with client:
            fid = client.open(root, f"{session_id}/ctl", OWRITE)
            try:
                fid.write(b"kill")
            finally:
                fid.clunk()


def _out_text(client: Client, root: CFid, session_id: str) -> str | None:
    """The session's `out` (the answer, complete even when the event stream lagged)."""
    try:
        fid = client.open(root, f"{session_id}/out", OREAD)
        parts = []
        while data := fid.read(_CHUNK):
            parts.append(data)
        fid.clunk()
    except ClientError:
        return None
    text = b"".join(parts).decode(errors="replace")
    return text.split("\n\n[turn ended: ")[0] if "[turn ended: " in text else text


# -- the in-process path -----------------------------------------------------------------------


def _run_in_process(
    args: argparse.Namespace, prompt: str, cwd: str, renderer: Renderer, out: BinaryIO
) -> int:
    """Run the turn with the session layer in this process (no daemon answers). See the module
    docstring for the data dir rules. Imports the daemon's modules: only this path pays."""
    import shutil
    import tempfile
    from pathlib import Path

    from anvild.config import load, user_config_file, user_data_dir
    from anvild.daemon.datadir import DataDirError, DataDirLock, prepare_data_dir
    from anvild.daemon.logs import LOG_ENV, LogLevelError, configure_logging, parse_level
    from anvild.llm.errors import ConfigError

    env = os.environ
    try:
        level = parse_level(env.get(LOG_ENV))
        data_dir = prepare_data_dir(user_data_dir().absolute())
        config = load(user_file=user_config_file(), data_dir=data_dir, project=False)
    except (LogLevelError, DataDirError, ConfigError) as exc:
        raise HeadlessError(str(exc)) from exc
    lock = DataDirLock(data_dir)
    holder = Path(f"(anvilctl -p in process, pid {os.getpid()})")
    temporary: Path | None = None
    try:
        lock.acquire(holder)
    except DataDirError as exc:
        if config.budget.any:  # a fresh ledger would forget the day's spend: refuse instead
            raise HeadlessError(
                f"no daemon answers on {agent_address(None)} and "
                f"{exc.args[0].split(';')[0]}; a [budget] is configured and its ledger in "
                f"{data_dir / 'budget'} cannot be shared with whoever holds that lock, so the "
                "spend would not add up: start anvild (or wait for the other command to end) "
                "and run this again"
            ) from exc
        temporary = Path(tempfile.mkdtemp(prefix="anvilctl-p-"))
        renderer._say(
            f"no daemon answers on {agent_address(None)} and {exc.args[0].split(';')[0]}; "
            f"running in process on the temporary data dir {temporary} (removed afterwards: "
            "this session's records are not kept)"
        )
        data_dir = temporary
        lock = DataDirLock(data_dir)
        lock.acquire(holder)
    try:
        redactor = config.redactor(env)
        try:
            configure_logging(data_dir, level=level, redactor=redactor)
        except OSError as exc:
            raise HeadlessError(f"cannot open the log file in {data_dir / 'logs'}: {exc}") from exc
        return _in_process_turn(args, prompt, cwd, renderer, out, config, data_dir, redactor)
    finally:
        lock.release()
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def _in_process_turn(
    args: argparse.Namespace,
    prompt: str,
    cwd: str,
    renderer: Renderer,
    out: BinaryIO,
    config: Any,
    data_dir: Any,
    redactor: Any,
) -> int:
    import trio

    from anvild import __version__
    from anvild.daemon.llama import LlamaNotBuilt, LlamaPaths, LlamaServer, embedded_default_wanted
    from anvild.daemon.wiring import Sessions
    from anvild.session import NewSession, Session, SessionError, SessionRefused
    from anvild.tree.root import RootTree

    env = os.environ
    local_model: LlamaServer | None = None
    if embedded_default_wanted(config, env):
        try:
            paths = LlamaPaths.find(env)
        except LlamaNotBuilt as exc:
            raise HeadlessError(str(exc)) from exc
        local_model = LlamaServer(paths, log_file=data_dir / "logs" / "llama-server.log", env=env)
    sessions = Sessions.build(
        config,
        RootTree(version=__version__),
        env=env,
        data_dir=data_dir,
        redactor=redactor,
        local_model=local_model,
    )
    interrupted = False

    async def cancel(session: Session) -> None:
        try:
            await session.cancel()
        except SessionRefused:  # no turn runs yet (or any more): end the session
            if renderer.forked or not renderer.resumed:  # only one this command created
                with contextlib.suppress(SessionError):
                    await session.kill()

    async def watch_signals(
        session: Session,
        scope: trio.CancelScope,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        nonlocal interrupted
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                if interrupted:
                    raise _Interrupted
                interrupted = True
                scope.cancel()  # stop watching stdout; the turn is being cancelled
                await cancel(session)

    async def watch_stdout(session: Session) -> None:
        fd = out.fileno()
        if not _watchable(fd):
            return
        await trio.to_thread.run_sync(_wait_stdout_closed, fd, abandon_on_cancel=True)
        renderer.closed = True
        _detach_stdout(out)
        await cancel(session)

    async def turn() -> int:
        async with trio.open_nursery() as nursery:
            if local_model is not None:
                await nursery.start(local_model.run)
            await nursery.start(sessions.run)
            rows = [
                SessionRow(s.id, s.alias or "", s.status.value, s.cwd, s.created)
                for s in sessions.manager.sessions()
            ]
            row = live_session(rows, cwd=cwd, key=args.resume) if resuming(args) else None
            if row is not None:
                session = sessions.manager.get(row.id)
                renderer.resumed = True
                renderer.cost_before = usd_of(session.cost_text())
                reader = session.events.open_reader(backlog=False)  # not the earlier turns
            else:
                source = None if not resuming(args) else args.resume or LATEST
                renderer.resumed = renderer.forked = source is not None
                request = NewSession(
                    model=args.model,
                    cwd=None if source not in (None, LATEST) else cwd,
                    ephemeral=True,
                    headless=True,
                    max_steps=args.max_steps,
                    permission=args.permission_mode,
                    budget=args.max_budget_tokens,
                    source=source,
                )
                try:
                    session = await sessions.manager.create(request)
                except SessionError as exc:
                    raise HeadlessError(in_process_message(exc)) from exc
                reader = session.events.open_reader()
            renderer.session_id, renderer.model = session.id, session.model
            renderer.cwd = session.cwd
            async with trio.open_nursery() as watchers:
                stdout_scope = trio.CancelScope()
                # Ctrl-C is watched before anything is shown: a read that finds lines waiting
                # does not yield, so a watcher only scheduled could start after `step_started`
                # was printed, leaving a Ctrl-C to trio's KeyboardInterrupt.
                await watchers.start(watch_signals, session, stdout_scope)
                renderer.start()
                try:
                    session.submit(prompt)
                except SessionError as exc:
                    reader.close()
                    raise HeadlessError(str(exc)) from exc

                async def stdout_task() -> None:
                    with stdout_scope:
                        await watch_stdout(session)

                watchers.start_soon(stdout_task)
                while True:
                    data = await reader.read(65536)
                    if not data:
                        if renderer.finished is None:
                            end = synthetic_end("cancelled", "the session ended before its turn")
                            with contextlib.suppress(StdoutClosed):
                                renderer.feed(end)
                        break
                    done, closed = renderer.feed_lines(data)
                    if closed:
                        _detach_stdout(out)
                        await cancel(session)
                    if done:
                        break
                watchers.cancel_scope.cancel()
            reader.close()  # `turn_finished` comes once the turn is handled: stopping is safe
            renderer.cost_after = usd_of(session.cost_text())
            try:
                renderer.finish(
                    session.out.split("\n\n[turn ended: ")[0] if renderer.lagged else None
                )
            except StdoutClosed:
                _detach_stdout(out)
            await sessions.stop()
            nursery.cancel_scope.cancel()
        return EXIT_INTERRUPTED if interrupted else renderer.exit_code

    try:
        return trio.run(turn)
    except BaseExceptionGroup as group:  # a nursery wraps what its body raised (trio)
        raise _reason(group) from None


def _reason(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception that ended an in-process turn, out of the nurseries' groups: a second
    Ctrl-C, a `HeadlessError` or a Ctrl-C before the turn's signal watcher (what `main`
    reports), else the group itself."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    for kind in (_Interrupted, HeadlessError, KeyboardInterrupt):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return group


def in_process_message(exc: BaseException) -> str:
    """A session the in-process path could not create: the message, except for a provider key
    that is not set, which this process's environment lacks (the registry's message is the
    daemon's, which reads its own)."""
    from anvild.llm.registry import MissingKey

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, MissingKey):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return str(exc)
    return (
        f"{cause.variable} is not set (needed by provider {cause.provider!r}): no daemon "
        "answered, so this turn runs inside anvilctl, which reads keys from its own "
        f"environment: export {cause.variable}=... (or start anvild with it: "
        f"`{cause.variable}=... anvild`)"
    )


def _wait_stdout_closed(fd: int) -> None:
    """Block until the reader of `fd` (a pipe or socket) has gone away."""
    poller = select.poll()
    poller.register(fd, 0)
    while not any(flags & (select.POLLERR | select.POLLHUP) for _, flags in poller.poll()):
        pass


# -- the command -------------------------------------------------------------------------------


def _prompt(args: argparse.Namespace, stdin: BinaryIO) -> str:
    """`-p`'s value and the words after the options, joined; stdin (not a terminal) is
    appended, or is the prompt when neither gives one."""
    prompt = " ".join(part for part in (args.prompt or "", *args.words) if part)
    if not stdin.isatty():
        piped = stdin.read().decode(errors="replace")
        if piped.strip():
            prompt = f"{prompt.rstrip()}\n\n{piped}" if prompt.strip() else piped
    if not prompt.strip():
        raise HeadlessError(
            "the prompt is empty: give -p TEXT (or the text after the options), or pipe it on stdin"
        )
    return prompt


def main(
    argv: Sequence[str],
    *,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
    in_process: Callable[..., int] | None = None,
) -> int:
    """Run `anvilctl -p ...`; return the exit status. A usage error exits 2 through argparse
    (SystemExit), after a JSON `result` in the JSON formats."""
    started = time.monotonic()
    stdin, stdout, stderr = ninep_cli.std_streams(stdin, stdout, stderr)
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
        check_args(parser, args)
    except SystemExit:
        fmt = format_in(argv)
        if parser.failure is not None and fmt != "text":
            failed = Renderer(fmt, stdout, io.BytesIO(), started=started)  # argparse said it
            failed.fail(f"{parser.failure} (see anvilctl -p --help)", EXIT_USAGE)
        raise
    renderer = Renderer(args.output_format, stdout, stderr, started=started)
    try:
        cwd = os.path.abspath(args.cwd or os.getcwd())
        if not os.path.isdir(cwd):
            raise HeadlessError(f"-C {args.cwd}: not a directory")
        prompt = _prompt(args, stdin)
        client = _connect(args)
        if client is None:
            run = in_process or _run_in_process
            return run(args, prompt, cwd, renderer, stdout)
        with client:
            return _run_daemon(client, args, prompt, cwd, renderer, stdout)
    except (HeadlessError, ClientError) as exc:
        renderer.fail(str(exc))
        return EXIT_ERROR
    except _Interrupted:
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        return EXIT_INTERRUPTED
