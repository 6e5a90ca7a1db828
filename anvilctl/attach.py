"""`anvilctl attach ID`: talk to a session from a terminal.

    anvilctl [-a ADDRESS] [-A ANAME] [-n] attach ID|ALIAS

A prompt line is written to the session's `in`; the turn it starts is shown from the session's
`events` file as it streams: answer text as it comes, one dim line per tool call (its name and
a short summary of its arguments), a few indented lines of each tool result, and a last dim
line with the outcome, the steps and the tokens. When a call waits on `approval`, its request
is shown and answered with y (approve), a (always) or n (reject, with feedback that goes back
to the model as the call's result). Ctrl-C during a turn writes `cancel` to the session's
`ctl` and the next prompt works; Ctrl-C at the prompt clears the line; Ctrl-D or /exit leaves,
and the session keeps running in the daemon. Commands: /help, /exit, /clear (ctl `clear`),
/model NAME (ctl `model NAME`). Prompt history is kept with readline in
`<data dir>/attach_history` (platformdirs' data dir of "anvil", as the daemon's). No escape
codes are written when stdout is not a terminal (or NO_COLOR is set).

Theory of operation
-------------------
Two 9P connections. The *event connection* belongs to a reader thread: it opens `ID/events`
and puts every line it reads on a bounded queue (when the queue is full the thread stops
reading, so the daemon's per-reader bound applies and a `lagged` marker says what was lost).
The *command connection* belongs to the main thread: `in`, `ctl`, `approval`, `out`, `list`.
An RPC that a Ctrl-C interrupts leaves its connection with an unread reply, so that connection
is dropped and the next command dials a fresh one.

A new open of `events` starts with the stream's backlog (the last lines, earlier turns
included). To tell that backlog from what comes next, the reader *synchronises* once: when its
read has been pending for a moment it sends Tflush for it. flush(5) answers a read that already
had data before the Rflush; an Rflush alone means the read was still blocked, so every line
published until then has been delivered. Lines before that point are the past: shown only when
the session is in the middle of a turn (the part after the last `turn_finished`), so an
attacher sees the turn it joins. After the synchronisation every `turn_finished` ends a turn.

Approvals. The session announces on `events` when it starts waiting on `approval`
(`approval_requested`) and when the wait ends (`approval_answered`). On an
`approval_requested` of kind tool the main thread reads `approval` once and asks y/a/n (the
file, not the event, is shown: if another client answered first, it is empty and nothing is
asked). A gate already open before this client attached has its event in the past, so `start`
reads `approval` once when the session is in await_approval. A result approval (kind result)
is shown as a line saying where to answer it.

The pure parts (`Style`, `Renderer`, `summarize_arguments`, `parse_approval`,
`format_approval`) have unit tests; the terminal parts are tested through a real pty.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import select
import shutil
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TextIO

from anvilctl.ninep_client import (
    CFid,
    Client,
    ClientError,
    ConnectError,
    ServerError,
    dial,
    service_address,
)
from anvilctl.signals import BackgroundThread, readline_ticks
from anvild.ninep import messages as m
from anvild.ninep.constants import IOHDRSZ, OREAD, OTRUNC, OWRITE
from anvild.ninep.errors import ProtocolError
from anvild.ninep.framing import FrameReader

__all__ = [
    "Renderer",
    "Style",
    "format_approval",
    "parse_approval",
    "run",
    "summarize_arguments",
]

SERVICE: Final = "agent"
HISTORY_FILE: Final = "attach_history"
HISTORY_LENGTH: Final = 1000
PREVIEW_LINES: Final = 4
SYNC_QUIET: Final = 0.2  # seconds a read must stay pending before the reader flushes it
WAKE: Final = 1.0  # seconds between wake-ups of a blocked wait for events (nothing is polled)
SYNC_TIMEOUT: Final = 15.0
BUSY: Final = frozenset({"starting", "running", "await_approval"})
ARGUMENT_KEYS: Final = ("command", "file_path", "path", "pattern", "url", "query", "description")

HELP: Final = """\
Type a prompt and press Enter; the answer streams below it.
  /help          this text
  /exit          leave (also Ctrl-D); the session keeps running in the daemon
  /clear         empty the session's context (ctl clear)
  /compact [FOCUS]  summarise the history to free the window (ctl compact)
  /model NAME    switch the session's model (ctl model NAME)
Ctrl-C cancels a running turn (ctl cancel); at the prompt it clears the line.
Approvals: y approves the call once, a always (for this session), n rejects it with feedback.
"""


# --- the pure parts -------------------------------------------------------------------------


class Style:
    """Escape codes for a terminal, or none at all."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def summarize_arguments(arguments: Any, width: int = 80) -> str:
    """A tool call's arguments in one short line: the value of its most telling argument
    (command, file_path, path, pattern, ...), else the arguments as compact JSON."""
    if isinstance(arguments, Mapping):
        for key in ARGUMENT_KEYS:
            value = arguments.get(key)
            if isinstance(value, str) and value.strip():
                lines = value.strip().splitlines()
                more = " …" if len(lines) > 1 else ""
                return _cut(lines[0] + more, width)
        if not arguments:
            return ""
    text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    return _cut(text, width)


def _tokens(usage: Any) -> str:
    if not isinstance(usage, Mapping):
        return ""

    def count(key: str) -> str:
        value = usage.get(key)
        return "?" if value is None else f"{value}"

    parts = [f"{count('input')} in", f"{count('output')} out"]
    cached = usage.get("cache_read")
    if cached:
        parts.append(f"{cached} cached")
    return "tokens " + ", ".join(parts)


class Renderer:
    """Turns a session's `events` lines (one parsed JSON object each) into terminal text.

    It remembers whether the text so far ends a line, so tool lines and the final usage line
    always start on a line of their own. Unknown event types are ignored."""

    def __init__(self, style: Style, *, width: int = 100, preview_lines: int = PREVIEW_LINES):
        self.style = style
        self.width = max(40, width)
        self.preview_lines = preview_lines
        self.at_line_start = True

    def line(self, text: str) -> str:
        """`text` as a line of its own (after a newline if the output is mid-line)."""
        prefix = "" if self.at_line_start else "\n"
        self.at_line_start = True
        return f"{prefix}{text}\n"

    def event(self, event: Mapping[str, Any]) -> str:
        s = self.style
        match event.get("type"):
            case "text_delta":
                text = str(event.get("text", ""))
                if text:
                    self.at_line_start = text.endswith("\n")
                return text
            case "tool_call_started":
                name = str(event.get("name", "?"))
                summary = summarize_arguments(event.get("arguments"), self.width - len(name) - 4)
                return self.line(s.dim(f"● {name} {summary}".rstrip()))
            case "tool_call_finished":
                return self._preview(str(event.get("preview", "")), bool(event.get("is_error")))
            case "step_failed":
                kind, message = event.get("error_type", "error"), event.get("message", "")
                retry = " (retrying)" if event.get("retryable") else ""
                return self.line(s.red(f"error: {kind}: {message}{retry}"))
            case "todos_updated":
                marks = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}
                todos = event.get("todos") or []
                lines = [
                    f"  {marks.get(str(t.get('status')), '[ ]')} {t.get('content', '')}"
                    for t in todos
                    if isinstance(t, Mapping)
                ]
                return self.line(s.dim("\n".join(["todos:", *lines]) if lines else "todos: none"))
            case "lagged":
                dropped = event.get("dropped", "?")
                return self.line(
                    s.yellow(f"[{dropped} events were dropped: this terminal fell behind]")
                )
            case "turn_finished":
                return self._finished(event)
            case "approval_requested" if event.get("kind") == "result":
                asked_by = str(event.get("asked_by") or "-")
                return self.line(
                    s.yellow(
                        f"approval of the result requested by {asked_by}: write approve or "
                        "reject REASON to the session's approval file"
                    )
                )
            case "approval_answered" if event.get("kind") == "result":
                verdict, reason = str(event.get("verdict", "?")), str(event.get("reason") or "")
                by = f" (by {event['by']})" if event.get("by") else ""
                return self.line(s.dim(f"result {verdict}{by}" + (f": {reason}" if reason else "")))
        return ""

    def _preview(self, preview: str, is_error: bool) -> str:
        s = self.style
        lines = preview.rstrip("\n").splitlines() or [""]
        shown = lines[: self.preview_lines]
        room = self.width - 5
        out = []
        for index, line in enumerate(shown):
            lead = "  ⎿  " if index == 0 else "     "
            text = _cut(line.expandtabs(4), room)
            if index == 0 and is_error:
                text = s.red(f"error: {text}")
            out.append(s.dim(lead) + text)
        if len(lines) > len(shown):
            out.append(s.dim(f"     … {len(lines) - len(shown)} more lines"))
        return self.line("\n".join(out))

    def _finished(self, event: Mapping[str, Any]) -> str:
        s = self.style
        outcome = str(event.get("outcome", "?"))
        steps = event.get("steps")
        parts = [outcome]
        if isinstance(steps, int):
            parts.append(f"{steps} step" + ("" if steps == 1 else "s"))
        tokens = _tokens(event.get("usage"))
        if tokens:
            parts.append(tokens)
        detail = str(event.get("detail") or "")
        text = "[" + " · ".join(parts) + (f": {detail}" if detail else "") + "]"
        return self.line(s.dim(text) if outcome == "done" else s.yellow(text))


def parse_approval(text: str) -> dict[str, str]:
    """The `approval` file's `key value` lines as a dict (empty when nothing is pending)."""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key:
            fields[key] = value
    return fields


def format_approval(fields: Mapping[str, str], style: Style, width: int = 100) -> str:
    """The approval request as shown before the y/a/n question."""
    tool = fields.get("tool", "?")
    try:
        arguments = json.loads(fields.get("arguments", "{}"))
    except ValueError:
        arguments = fields.get("arguments", "")
    summary = summarize_arguments(arguments, width - len(tool) - 20)
    lines = [style.bold(f"approval needed: {tool} {summary}".rstrip())]
    if fields.get("reason"):
        lines.append(f"  why: {fields['reason']}")
    full = json.dumps(arguments, ensure_ascii=False)
    if full != json.dumps(summary, ensure_ascii=False) and len(full) > len(summary) + 2:
        lines.append(style.dim(f"  arguments: {_cut(full, width * 3)}"))
    always = fields.get("always_adds")
    lines.append(
        "  y: approve once   a: always"
        + (f" (adds {always})" if always else "")
        + "   n: reject with feedback"
    )
    return "\n".join(lines) + "\n"


# --- the connections --------------------------------------------------------------------------


class _Synced:
    """Queue item: the reader caught up with the stream (see the module docstring)."""


class _Ended:
    """Queue item: the stream ended (EOF: the session exited) or failed (`error`)."""

    def __init__(self, error: str = "") -> None:
        self.error = error


SYNCED: Final = _Synced()
Item = str | _Synced | _Ended

_READ_TAG: Final = 1
_FLUSH_TAG: Final = 2


class EventReader(BackgroundThread):
    """Reads one session's `events` on its own connection and queues every line."""

    def __init__(self, client: Client, fid: CFid, out: queue.Queue[Item]) -> None:
        super().__init__("anvilctl-attach-events")
        self._sock = client.sock
        self._dialect = client.dialect
        self._count = client.msize - IOHDRSZ
        self._fid = fid.fid
        self._out = out
        self._frames = FrameReader(1 << 24)
        self._partial = b""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv
        self._sock.close()

    def work(self) -> None:
        try:
            self._loop()
        except (OSError, ClientError, ProtocolError) as exc:
            self._out.put(_Ended(str(exc) or type(exc).__name__))

    def _send(self, msg: m.Message) -> None:
        self._sock.sendall(m.encode(msg, self._dialect))

    def _next(self, timeout: float | None) -> m.Message | None:
        """The next reply, or None when `timeout` passes without one."""
        while True:
            frame = self._frames.next_frame()
            if frame is not None:
                return m.decode(frame, self._dialect)
            if timeout is not None:
                ready, _, _ = select.select([self._sock], [], [], timeout)
                if not ready:
                    return None
            data = self._sock.recv(65536)
            if not data:
                raise ConnectError("the daemon closed the connection")
            self._frames.feed(data)

    def _lines(self, data: bytes) -> None:
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            if line.strip():
                self._out.put(line.decode("utf-8", "replace"))

    def _loop(self) -> None:
        read = m.Tread(_READ_TAG, self._fid, 0, self._count)
        self._send(read)
        synced = flushing = got_data = False
        while True:
            reply = self._next(None if synced or flushing else SYNC_QUIET)
            if reply is None:  # the read is pending: flush it to learn that we caught up
                self._send(m.Tflush(_FLUSH_TAG, _READ_TAG))
                flushing, got_data = True, False
                continue
            match reply:
                case m.Rread(data=b""):
                    self._lines(b"\n")
                    self._out.put(_Ended())
                    return
                case m.Rread(data=data):
                    self._lines(data)
                    got_data = True
                    if not flushing:
                        self._send(read)
                case m.Rflush():
                    flushing = False
                    if not got_data:
                        synced = True
                        self._out.put(SYNCED)
                    self._send(read)
                case m.Rerror(ename=message):
                    raise ServerError(message)
                case m.Rlerror(ecode=code):
                    raise ServerError(os.strerror(code), code)
                case _:
                    raise ClientError(f"unexpected {type(reply).__name__} on the events file")


class Remote:
    """The command connection: small reads and writes, redialled after an interrupted RPC."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._address = args.address or service_address(SERVICE)
        self._aname = args.aname
        self._auth = not args.noauth
        self._client: Client | None = None
        self._root: CFid | None = None

    def connect(self) -> tuple[Client, CFid]:
        client = Client(dial(self._address))
        try:
            root = client.mount(aname=self._aname, auth=self._auth)
        except BaseException:
            client.close()
            raise
        return client, root

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._root = None

    def _call(self, action: Callable[[Client, CFid], bytes]) -> bytes:
        if self._client is None or self._root is None:
            self._client, self._root = self.connect()
        try:
            return action(self._client, self._root)
        except ServerError:
            raise  # answered: the connection is in step
        except BaseException:
            self.close()  # a reply may be unread: never reuse this connection
            raise

    def read(self, path: str) -> str:
        def action(client: Client, root: CFid) -> bytes:
            fid = client.open(root, path, OREAD)
            try:
                parts = []
                while data := fid.read(8192):
                    parts.append(data)
            finally:
                fid.clunk()
            return b"".join(parts)

        return self._call(action).decode("utf-8", "replace")

    def write(self, path: str, data: bytes) -> None:
        """One open, one write, clunk (where a body file like `in` takes or refuses it)."""

        def action(client: Client, root: CFid) -> bytes:
            fid = client.open(root, path, OWRITE | OTRUNC)
            try:
                fid.write(data)
            finally:
                fid.clunk()
            return b""

        self._call(action)


# --- the terminal ---------------------------------------------------------------------------


def history_path() -> Path:
    import platformdirs  # only here: the other commands start without it

    return platformdirs.user_data_path("anvil") / HISTORY_FILE


class _History:
    """readline with a history file; nothing when readline is missing or stdin is no tty."""

    def __init__(self, path: Path, err: TextIO) -> None:
        self.path = path
        self._err = err
        self._readline: Any = None
        if not sys.stdin.isatty():
            return
        try:
            import readline
        except ImportError:
            return
        self._readline = readline
        readline.set_history_length(HISTORY_LENGTH)
        try:
            readline.read_history_file(str(path))
        except FileNotFoundError:
            pass
        except OSError as exc:
            err.write(f"anvilctl attach: history not loaded from {path}: {exc}\n")

    def forget_last(self) -> None:
        """Drop the last line from the history (an approval answer is not a prompt)."""
        rl = self._readline
        if rl is not None and rl.get_current_history_length() > 0:
            rl.remove_history_item(rl.get_current_history_length() - 1)

    def save(self) -> None:
        if self._readline is None:
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._readline.write_history_file(str(self.path))
            os.chmod(self.path, 0o600)
        except OSError as exc:
            self._err.write(f"anvilctl attach: history not saved to {self.path}: {exc}\n")


class SessionGone(Exception):
    """The session's event stream ended: it exited, or the daemon went away."""


class Attach:
    """One `anvilctl attach` run: the prompt loop and the turns it follows."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.name: str = args.id
        self.out = out
        self.err = err
        color = out.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self.style = Style(color)
        width = shutil.get_terminal_size().columns if out.isatty() else 100
        self.renderer = Renderer(self.style, width=width)
        self.remote = Remote(args)
        self.queue: queue.Queue[Item] = queue.Queue(maxsize=4096)
        self.reader: EventReader | None = None
        self.history = _History(history_path(), err)
        self.prompt = "> " if sys.stdin.isatty() else ""  # no prompts in a script's output

    # output

    def show(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()

    def note(self, text: str) -> None:
        self.show(self.renderer.line(self.style.dim(text)))

    def error(self, text: str) -> None:
        self.show(self.renderer.line(self.style.red(f"error: {text}")))

    # start and stop

    def _row(self) -> list[str]:
        for line in self.remote.read("list").splitlines():
            fields = line.split("\t")
            if len(fields) >= 6 and self.name in (fields[0], fields[1]):
                return fields
        raise ClientError(f"no session {self.name}; `anvilctl sessions --all` lists them")

    def start(self) -> None:
        fields = self._row()
        sid, alias, state, role, model = fields[:5]
        self.name = sid  # the alias could be given to another session meanwhile
        client, root = self.remote.connect()
        try:
            fid = client.open(root, f"{sid}/events", OREAD)
        except BaseException:
            client.close()
            raise
        self.reader = EventReader(client, fid, self.queue)
        self.reader.start()
        past = self._until_synced()
        state = self.remote.read(f"{sid}/state").strip()
        name = sid if alias == "-" else f"{sid} ({alias})"
        self.note(f"attached to {name}: {role}, model {model}, {state}; /help for help")
        if state in BUSY:
            ends = [i for i, line in enumerate(past) if '"type":"turn_finished"' in line]
            for line in past[ends[-1] + 1 if ends else 0 :]:
                self._render(line)
            if state == "await_approval":
                self._check_approval()  # a gate opened before we came: its event is past
            self.follow()

    def _until_synced(self) -> list[str]:
        past: list[str] = []
        deadline = time.monotonic() + SYNC_TIMEOUT
        while True:
            try:
                item = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise ClientError(
                    "the session's events did not arrive; is the daemon busy?"
                ) from None
            if item is SYNCED:
                return past
            if isinstance(item, _Ended):
                raise SessionGone(item.error or "the session's event stream ended")
            if isinstance(item, str):
                past.append(item)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.remote.close()
        self.history.save()

    # turns

    def _render(self, line: str) -> str | None:
        """Show one event line; returns its type."""
        try:
            event = json.loads(line)
        except ValueError:
            return None
        if not isinstance(event, dict):
            return None
        self.show(self.renderer.event(event))
        kind = event.get("type")
        return kind if isinstance(kind, str) else None

    def _drain(self) -> None:
        """Show what arrived while the prompt waited (another client's turn, say)."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Ended):
                raise SessionGone(item.error or "the session ended")
            if isinstance(item, str):
                self._render(item)

    def follow(self) -> None:
        """Show the running turn until its `turn_finished`; Ctrl-C cancels it."""
        while True:
            try:
                try:
                    item = self.queue.get(timeout=WAKE)
                except queue.Empty:
                    continue
                if isinstance(item, _Ended):
                    raise SessionGone(item.error or "the session ended")
                if not isinstance(item, str):
                    continue
                kind = self._render(item)
                if kind == "turn_finished":
                    break
                if kind == "approval_requested":
                    self._check_approval()
            except KeyboardInterrupt:
                self._cancel()
        with contextlib.suppress(ClientError, KeyboardInterrupt):
            self.remote.read(f"{self.name}/out")  # shown already: reading it moves await to idle

    def _cancel(self) -> None:
        self.note("^C: cancelling the turn")
        try:
            self.remote.write(f"{self.name}/ctl", b"cancel\n")
        except ServerError as exc:
            if "nothing to cancel" not in str(exc):
                self.error(str(exc))
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: the cancel is on its way; keep following the turn

    def _check_approval(self) -> None:
        text = self.remote.read(f"{self.name}/approval")
        fields = parse_approval(text)
        if "call_id" not in fields:
            return
        self.show(
            self.renderer.line(
                format_approval(fields, self.style, self.renderer.width).rstrip("\n")
            )
        )
        answer = ""
        while answer not in ("y", "a", "n"):
            answer = self._ask("approve? [y/a/n] ").strip().lower()[:1]
        if answer == "n":
            feedback = self._ask("feedback for the model: ").strip()
            line = f"reject {feedback}" if feedback else "reject"
        else:
            line = "approve" if answer == "y" else "always"
        try:
            self.remote.write(f"{self.name}/approval", f"{line}\n".encode())
        except ServerError as exc:
            self.error(str(exc))

    def _ask(self, question: str) -> str:
        """A question inside a turn: Ctrl-C cancels the turn, Ctrl-D leaves attach."""
        try:
            with readline_ticks():
                answer = input(question)
        except EOFError:
            self.note(f"left with the request pending: answer it on agent/{self.name}/approval")
            raise
        if answer:  # readline keeps only non-empty lines
            self.history.forget_last()
        return answer

    # the prompt loop

    def command(self, line: str) -> bool:
        """A /command; False to leave."""
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        match word:
            case "/exit" | "/quit":
                return False
            case "/help":
                self.show(HELP)
            case "/clear":
                self._ctl("clear", "context cleared")
            case "/compact":
                self._ctl(f"compact {rest}".strip(), f"compacted: agent/{self.name}/compactions")
            case "/model" if rest:
                self._ctl(f"model {rest}", f"model: {rest}")
            case "/model":
                model = self.remote.read(f"{self.name}/model").strip()
                self.note(f"model: {model} (/model NAME switches; `anvilctl models` lists them)")
            case _:
                self.error(f"unknown command {word}; /help lists the commands")
        return True

    def _ctl(self, line: str, done: str) -> None:
        try:
            self.remote.write(f"{self.name}/ctl", f"{line}\n".encode())
        except ServerError as exc:
            self.error(str(exc))
        else:
            self.note(done)

    def submit(self, text: str) -> None:
        self._drain()
        try:
            self.remote.write(f"{self.name}/in", text.encode())
        except ServerError as exc:
            self.error(str(exc))
            return
        self.follow()

    def loop(self) -> None:
        while True:
            try:
                with readline_ticks():
                    line = input(self.prompt)
            except KeyboardInterrupt:
                self.show("\n")  # the line is dropped; a fresh prompt follows
                continue
            except EOFError:
                self.show("\n")
                return
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/"):
                    if not self.command(text):
                        return
                else:
                    self.submit(line)
            except ServerError as exc:
                self.error(str(exc))
            except KeyboardInterrupt:
                self.show("\n")  # during a /command's write: back to the prompt


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`anvilctl attach ID`; the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    session = Attach(args, out, err)
    try:
        session.start()
        session.loop()
    except EOFError:
        session.show("\n")
    except SessionGone as exc:
        session.show(session.renderer.line(""))
        err.write(f"anvilctl attach {args.id}: the session's events ended ({exc})\n")
        return 1
    except ClientError as exc:
        out.flush()
        err.write(f"anvilctl attach {args.id}: {exc}\n")
        return 1
    except KeyboardInterrupt:
        out.write("\n")
        return 130
    finally:
        session.close()
    return 0
