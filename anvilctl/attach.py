"""`anvilctl attach ID`: talk to a session from a terminal.

Prompts go to `in`; turns are shown from `events` as they stream (answer, tool calls, results,
retries, a footer per turn). A call waiting on `approval` is answered y/a/n. Commands: /help,
/exit, /clear, /compact [FOCUS], /model [NAME], /last, /verbose, /attach ID. On a terminal the
input is a prompt_toolkit application (`anvilctl.attach_tty`); otherwise lines are read one at a
time and plain text is written (no escape codes for NO_COLOR or a pipe).
One asyncio loop: the controller (`Attach`) takes one item at a time from its inbox (event lines
from `attach_remote.EventReader`, which blocks while the inbox is full so the daemon's `lagged`
bound applies; prompts; keys). 9P commands run on one worker thread. The `approval` file, not the
event, is what is shown (empty if someone answered first). When the daemon goes away attach
redials with back-off and keeps what was typed; a session that is gone ends it with status 1.
Details: docs/decisions.md, "Module notes" (anvilctl.attach).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, TextIO, TypeVar

from anvilctl.attach_remote import (
    SYNCED,
    EventReader,
    Item,
    RecordsFile,
    Remote,
    read_backlog,
)
from anvilctl.attach_remote import Ended as _Ended
from anvilctl.attach_render import (
    LineStream,
    MarkdownStream,
    Renderer,
    Style,
    TextStream,
    context_text,
    cost_text,
    exchanges,
    format_approval,
    format_exchange,
    parse_approval,
    parse_cost,
    summarize_arguments,
)
from anvilctl.ninep_client import ClientError, ConnectError, ServerError
from anvilctl.signals import BackgroundThread

__all__ = [
    "Attach",
    "Renderer",
    "Style",
    "format_approval",
    "parse_approval",
    "run",
    "summarize_arguments",
]

T = TypeVar("T")

HISTORY_FILE: Final = "attach_history"
EXCHANGES: Final = 3  # earlier exchanges shown on attaching
SYNC_TIMEOUT: Final = 15.0
INBOX: Final = 4096
BACKOFF: Final = (0.25, 5.0)  # the first wait before redialling the daemon, and the longest
BUSY: Final = frozenset({"starting", "running", "await_approval"})
COMMANDS: Final = (
    "/help",
    "/exit",
    "/quit",
    "/clear",
    "/compact",
    "/model",
    "/last",
    "/verbose",
    "/attach",
    "/undo",
    "/rewind",
)

HELP: Final = """\
Type a prompt and press Enter; the answer streams above the input line.
  /help             this text
  /exit             leave (also Ctrl-D); the session keeps running in the daemon
  /clear            empty the session's context (ctl clear)
  /compact [FOCUS]  summarise the history to free the window (ctl compact)
  /model [NAME]     show or switch the session's model (ctl model NAME)
  /last             the last tool results in full (from the session's records)
  /verbose          show every tool result in full (again: previews)
  /attach ID        leave this session for another
  /undo [force]     take back the files' changes of the last turn (ctl undo)
  /rewind N [conversation]  files (and the conversation) as before turn N (ctl rewind)
Keys: Enter sends; Alt-Enter, Ctrl-J or a \\ at the end of a line adds a line (a paste stays one
prompt); Tab completes /commands, models, session ids and paths; Up/Down walk the history.
Ctrl-C cancels a running turn (ctl cancel); at the prompt it clears the line.
Approvals: y approves the call once, a always (for this session), n rejects it with feedback.
"""


def history_path() -> Path:
    import platformdirs  # only here: the other commands start without it

    return platformdirs.user_data_path("anvil") / HISTORY_FILE


def records_path(session: str) -> Path:
    import platformdirs

    return platformdirs.user_data_path("anvil") / "sessions" / f"{session}.jsonl"


class SessionGone(Exception):
    """The session's event stream ended for good: it exited, or it is no longer listed."""


class Leave(Exception):
    """Leave attach (EOF on an answer, /exit)."""


# --- inbox items ------------------------------------------------------------------------------


class Submit:
    def __init__(self, text: str) -> None:
        self.text = text


class Interrupt:
    def __init__(self, typed: bool = False) -> None:
        self.typed = typed  # the input line holds text


class Quit:
    """The user leaves (Ctrl-D at an empty prompt, EOF on stdin)."""


class Reconnected:
    def __init__(self, reader: EventReader, row: list[str]) -> None:
        self.reader = reader
        self.row = row


Inbound = Item | Submit | Interrupt | Quit | Reconnected


class Ui(Protocol):
    color: bool

    @property
    def width(self) -> int: ...

    def write(self, text: str) -> None: ...

    def live(self, text: str) -> None: ...

    def changed(self) -> None: ...

    def ready(self, idle: bool) -> None: ...

    def restore(self, text: str) -> None: ...

    def clear(self) -> None: ...

    async def ask(self, question: str) -> str | None: ...


# --- the plain UI: pipes and dumb terminals ---------------------------------------------------


class PlainUi:
    """Lines from stdin, one at a time and only when attach is idle; text to stdout."""

    def __init__(self, out: TextIO, post: Callable[[Inbound], None], *, color: bool) -> None:
        self.out = out
        self.color = color
        self._post = post
        self._prompt = "> " if sys.stdin.isatty() else ""  # no prompts in a script's output
        self._wanted = threading.Event()
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._claimed = 0  # lines `ask` is waiting for
        self._loop = asyncio.get_running_loop()
        self._reading = False
        threading.Thread(target=self._read, name="anvilctl-attach-stdin", daemon=True).start()

    @property
    def width(self) -> int:
        return 100

    def _read(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            line = sys.stdin.readline()
            self._loop.call_soon_threadsafe(self._got, line if line else None)
            if not line:
                return

    def _got(self, line: str | None) -> None:
        self._reading = False
        if self._claimed:
            self._lines.put_nowait(line)
        elif line is None:
            self._post(Quit())
        else:
            self._post(Submit(line.rstrip("\n")))

    def _want(self, prompt: str) -> None:
        if not self._reading:
            self._reading = True
            self.write(prompt)
            self._wanted.set()

    def write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()

    def live(self, text: str) -> None:
        pass

    def changed(self) -> None:
        pass

    def ready(self, idle: bool) -> None:
        if idle:
            self._want(self._prompt)

    def restore(self, text: str) -> None:
        pass

    def clear(self) -> None:
        pass

    async def ask(self, question: str) -> str | None:
        self._claimed += 1
        try:
            if self._reading:
                self.write(question)
            self._want(question)
            line = await self._lines.get()
        finally:
            self._claimed -= 1
        if line is None:
            raise EOFError
        return line.rstrip("\n")


# --- the worker thread for 9P commands --------------------------------------------------------


class Worker(BackgroundThread):
    """Runs the blocking 9P commands one at a time, off the event loop."""

    def __init__(self) -> None:
        super().__init__("anvilctl-attach-commands")
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None
        ] = queue.SimpleQueue()

    def work(self) -> None:
        while (job := self._jobs.get()) is not None:
            action, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(action())
            except BaseException as exc:
                future.set_exception(exc)

    def submit(self, action: Callable[[], T]) -> asyncio.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((action, future))
        return asyncio.wrap_future(future)

    def stop(self) -> None:
        self._jobs.put(None)


# --- the controller -------------------------------------------------------------------------


class Attach:
    """One session attached: its stream, its turns, the prompts and commands sent to it."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.name: str = args.id
        self.sid = args.id
        self.alias = "-"
        self.cwd = ""
        self.out = out
        self.err = err
        self.tty = _interactive(out)
        self.human = self.tty or sys.stdin.isatty()  # someone types (not a script's pipe)
        color = out.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self.style = Style(color)
        self.remote = Remote(args)
        self.worker = Worker()
        self.inbox: asyncio.Queue[Inbound] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ui: Ui | None = None
        self.renderer = Renderer(self.style, width=100)
        self.reader: EventReader | None = None
        self.row: list[str] = []
        self.switch_to: str | None = None
        # The stream.
        self.syncing = False
        self.past: list[str] = []
        self.deferred: list[Submit] = []
        self.attached_once = False
        self.connected = False
        self.reconnect_task: asyncio.Task[None] | None = None
        self.reconnect_note = ""
        # The turn.
        self.busy = False
        self.started_at = 0.0
        self.phase = ""
        self.retry_until = 0.0
        self.cost_before: float | None = None
        self.calls: dict[str, tuple[str, Any]] = {}  # the last step's calls: id -> name, args
        self.previews: dict[str, tuple[str, bool]] = {}
        self.verbose = bool(getattr(args, "verbose", False))
        self._models: list[str] = []
        self._sessions: list[str] = []

    # --- output

    def write(self, text: str) -> None:
        if self.ui is not None:
            self.ui.write(text)
        elif text:
            self.out.write(text)
            self.out.flush()

    def show(self, text: str) -> None:  # the name the tests and older callers use
        self.write(text)

    def note(self, text: str) -> None:
        self.write(self.renderer.line(self.style.dim(text)))

    def warn(self, text: str) -> None:
        self.write(self.renderer.line(self.style.yellow(text)))

    def error(self, text: str) -> None:
        self.write(self.renderer.line(self.style.red(f"error: {text}")))

    def _live(self) -> None:
        if self.ui is not None:
            self.ui.live(self.renderer.pending())

    # --- the inbox, the worker

    def post(self, item: Inbound) -> None:
        assert self.inbox is not None
        self.inbox.put_nowait(item)

    def _put_from_thread(self, item: Item) -> None:
        """The reader thread's `put`: waits while the inbox is full."""
        loop, inbox = self.loop, self.inbox
        assert loop is not None
        assert inbox is not None
        with contextlib.suppress(RuntimeError, concurrent.futures.CancelledError):
            asyncio.run_coroutine_threadsafe(inbox.put(item), loop).result()

    async def io(self, action: Callable[[], T]) -> T:
        return await self.worker.submit(action)

    # --- the status line

    def status(self) -> str | None:
        now = time.monotonic()
        if not self.connected and self.attached_once:
            return f"the daemon is away: {self.reconnect_note or 'reconnecting'}"
        if not self.busy:
            return None
        phase = self.phase or "waiting for the model"
        if self.retry_until:
            left = self.retry_until - now
            if left > 0:
                phase = f"{phase} in {left:.0f}s" if left >= 1 else f"{phase} now"
        return f"{phase} · {_elapsed(now - self.started_at)} · Ctrl-C cancels"

    def _set_phase(self, phase: str, *, retry_until: float = 0.0) -> None:
        if not self.busy:
            self.busy = True
            self.started_at = time.monotonic()
        self.phase = phase
        self.retry_until = retry_until
        if self.ui is not None:
            self.ui.changed()

    # --- attaching

    def _row(self) -> list[str]:
        for line in self.remote.read("list").splitlines():
            fields = line.split("\t")
            if len(fields) >= 6 and self.sid in (fields[0], fields[1]):
                return fields
        raise SessionGone(f"no session {self.sid}; `anvilctl sessions --all` lists them")

    def _open_events(self) -> tuple[EventReader, list[str]]:
        """(on the worker) Find the session, open its events and start reading them."""
        row = self._row()
        self.sid = row[0]  # the alias could be given to another session meanwhile
        client, fid = self.remote.open_stream(f"{self.sid}/events")
        reader = EventReader(client, fid, self._put_from_thread)
        reader.start()
        return reader, row

    async def start(self) -> None:
        try:
            reader, row = await self.io(self._open_events)
        except SessionGone as exc:
            raise ClientError(str(exc)) from None
        self._adopt(reader, row)

    def _adopt(self, reader: EventReader, row: list[str]) -> None:
        self.reader = reader
        self.row = row
        self.alias = row[1]
        self.syncing, self.past = True, []

    async def _synced(self) -> None:
        """The reader caught up: show where the session is, then follow it."""
        self.syncing = False
        past, self.past = self.past, []
        sid, alias, _state, role, model = self.row[:5]
        state = (await self.io(lambda: self.remote.read(f"{sid}/state"))).strip()
        name = sid if alias == "-" else f"{sid} ({alias})"
        busy = state in BUSY
        if not self.attached_once:
            with contextlib.suppress(ClientError, OSError):
                self.cwd = (await self.io(lambda: self.remote.read(f"{sid}/cwd"))).strip()
            await self._earlier(busy)
            self.note(f"attached to {name}: {role}, model {model}, {state}; /help for help")
        else:
            self.note(f"reconnected to {name}: {state}")
        self.attached_once = True
        self.connected = True
        self.busy = False
        if busy:
            self._set_phase("working")
            ends = [i for i, line in enumerate(past) if '"type":"turn_finished"' in line]
            for line in past[ends[-1] + 1 if ends else 0 :]:
                await self._event(line, live=False)
            if state == "await_approval":
                await self._check_approval()  # a gate opened before we came: its event is past
        if self.ui is not None:
            self.ui.changed()

    async def _earlier(self, busy: bool) -> None:
        """The last exchanges, from the session's log backlog."""
        if not self.human:
            return  # a script's output starts with what it asked for
        try:
            log = await self.io(lambda: read_backlog(self.remote, f"{self.sid}/log"))
        except (ClientError, OSError):
            return
        found = exchanges(log, EXCHANGES, busy=busy)
        if not found:
            return
        width = self.ui.width if self.ui is not None else 100
        self.write(self.style.dim("─── earlier in this session ───") + "\n")
        for lines in found:
            self.write(format_exchange(lines, self.style, width))
        self.write(self.style.dim("───") + "\n")

    # --- events

    async def _event(self, line: str, *, live: bool = True) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if self.ui is not None:
            self.renderer.width = max(40, self.ui.width)
        kind = event.get("type")
        self._track(kind, event)
        if kind == "turn_finished":
            await self._finished(event)
            return
        if kind == "tool_call_finished" and self.verbose:
            self.write(self.renderer.flush_text())
            await self._full_results([str(event.get("id", ""))], headers=False)
        else:
            self.write(self.renderer.event(event))
        self._live()
        if kind == "approval_requested" and event.get("kind") == "tool" and live:
            await self._check_approval()

    def _track(self, kind: Any, event: Mapping[str, Any]) -> None:
        match kind:
            case "step_started":
                self._set_phase("waiting for the model")
            case "text_delta":
                self._set_phase("answering")
            case "reasoning_delta":
                self._set_phase("thinking")
            case "tool_call_started":
                if any(True for _ in self.previews):
                    self.calls.clear()
                    self.previews.clear()
                self.calls[str(event.get("id", ""))] = (
                    str(event.get("name", "?")),
                    event.get("arguments"),
                )
                self._set_phase(f"running {event.get('name', 'a tool')}")
            case "tool_call_finished":
                call = str(event.get("id", ""))
                self.previews[call] = (str(event.get("preview", "")), bool(event.get("is_error")))
                self._set_phase("working")
            case "retrying":
                delay = event.get("delay")
                wait = float(delay) if isinstance(delay, int | float) else 0.0
                attempt = f"attempt {event.get('attempt', '?')} of {event.get('max_attempts', '?')}"
                self._set_phase(f"retrying ({attempt})", retry_until=time.monotonic() + wait)
            case "approval_requested" if event.get("kind") == "tool":
                self._set_phase("waiting for your approval")
            case "approval_answered":
                self._set_phase("working")
            case "compaction_started":
                self._set_phase("compacting the history")

    async def _finished(self, event: Mapping[str, Any]) -> None:
        extra: list[str] = []
        try:
            cost = await self.io(lambda: self.remote.read(f"{self.sid}/cost"))
            usage = await self.io(lambda: self.remote.read(f"{self.sid}/usage"))
        except ServerError:
            pass
        else:
            extra = [cost_text(self.cost_before, parse_cost(cost)), context_text(usage)]
        self.write(self.renderer.footer(event, extra))
        self.busy = False
        self.phase = ""
        self.retry_until = 0.0
        self.cost_before = None
        self._live()
        if self.ui is not None:
            self.ui.changed()
        with contextlib.suppress(ServerError):
            # shown already: reading it moves await to idle
            await self.io(lambda: self.remote.read(f"{self.sid}/out"))

    # --- approvals

    async def _check_approval(self) -> None:
        text = await self.io(lambda: self.remote.read(f"{self.sid}/approval"))
        fields = parse_approval(text)
        if "call_id" not in fields:
            return
        request = format_approval(fields, self.style, self.renderer.width).rstrip("\n")
        self.write(self.renderer.line(request))
        answer = ""
        while answer not in ("y", "a", "n"):
            reply = await self._ask("approve? [y/a/n] ")
            if reply is None:
                await self._cancel()
                return
            answer = reply.strip().lower()[:1]
        if answer == "n":
            reply = await self._ask("feedback for the model: ")
            if reply is None:
                await self._cancel()
                return
            feedback = reply.strip()
            line = f"reject {feedback}" if feedback else "reject"
        else:
            line = "approve" if answer == "y" else "always"
        try:
            await self.io(lambda: self.remote.write(f"{self.sid}/approval", f"{line}\n".encode()))
        except ServerError as exc:
            self.error(str(exc))

    async def _ask(self, question: str) -> str | None:
        """A question inside a turn: None for Ctrl-C (cancel the turn), Leave for Ctrl-D."""
        assert self.ui is not None
        try:
            answer = await self.ui.ask(question)
        except EOFError:
            self.note(f"left with the request pending: answer it on agent/{self.sid}/approval")
            raise Leave from None
        if answer is not None and self.tty:
            self.write(f"{question}{answer}\n")
        return answer

    async def _cancel(self) -> None:
        self.note("^C: cancelling the turn")
        try:
            await self.io(lambda: self.remote.write(f"{self.sid}/ctl", b"cancel\n"))
        except ServerError as exc:
            if "nothing to cancel" not in str(exc):
                self.error(str(exc))

    # --- prompts and commands

    async def _submit(self, text: str) -> None:
        stripped = text.strip()
        if not stripped:
            return
        if stripped.startswith("/"):
            await self.command(stripped)
            return
        assert self.ui is not None
        if self.tty:
            lines = text.rstrip("\n").split("\n")
            shown = [self.style.bold("> ") + lines[0], *("  " + line for line in lines[1:])]
            self.write(self.renderer.line("\n".join(shown)))
        if not self.connected:
            self.ui.restore(text)
            self.warn("not sent: the daemon is away; the prompt is back in the input line")
            return
        was_busy = self.busy
        try:
            if not was_busy:
                with contextlib.suppress(ServerError):
                    cost = await self.io(lambda: self.remote.read(f"{self.sid}/cost"))
                    self.cost_before = parse_cost(cost)
            await self.io(lambda: self.remote.write(f"{self.sid}/in", text.encode()))
        except ServerError as exc:
            self.error(str(exc))
            self.ui.restore(text)
            return
        except (ConnectError, OSError):
            self.ui.restore(text)
            raise
        if was_busy:
            self.note("queued: it runs when the current turn ends")
        else:
            self._set_phase("waiting for the model")
            self.started_at = time.monotonic()

    async def command(self, line: str) -> None:
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        match word:
            case "/exit" | "/quit":
                raise Leave
            case "/help":
                self.write(self.renderer.line(HELP.rstrip("\n")))
            case "/clear":
                await self._ctl("clear", "context cleared")
            case "/compact":
                await self._ctl(
                    f"compact {rest}".strip(), f"compacted: agent/{self.sid}/compactions"
                )
            case "/model" if rest:
                await self._ctl(f"model {rest}", f"model: {rest}")
            case "/model":
                model = (await self.io(lambda: self.remote.read(f"{self.sid}/model"))).strip()
                self.note(f"model: {model} (/model NAME switches; `anvilctl models` lists them)")
            case "/last":
                await self._full_results(list(self.calls), headers=True)
            case "/verbose":
                self.verbose = not self.verbose
                self.note("tool results: " + ("in full" if self.verbose else "previews"))
            case "/attach" if rest:
                self.switch_to = rest
                raise Leave
            case "/undo":
                await self._ctl(f"undo {rest}".strip(), f"undone: agent/{self.sid}/turns/")
            case "/rewind" if rest:
                await self._ctl(f"rewind {rest}", f"rewound: agent/{self.sid}/turns/")
            case _:
                self.error(f"unknown command {word}; /help lists the commands")

    async def _ctl(self, line: str, done: str) -> None:
        if line.startswith("compact"):
            self._set_phase("compacting the history")
        try:
            await self.io(lambda: self.remote.write(f"{self.sid}/ctl", f"{line}\n".encode()))
        except ServerError as exc:
            self.error(str(exc))
        else:
            self.note(done)
        finally:
            if line.startswith("compact"):
                self.busy = False
                if self.ui is not None:
                    self.ui.changed()

    async def _full_results(self, ids: list[str], *, headers: bool) -> None:
        """The whole results of `ids` (none: the last step's) from the session's records, each
        after its call's line with `headers`."""
        records = RecordsFile(records_path(self.sid))
        try:
            found = await self.io(lambda: records.results(ids))
        except OSError:
            found = {}
            if headers:
                self.note(
                    f"the full results are in the session's records, {records.path}, which "
                    "are not on this machine (a daemon with another --data-dir): previews only"
                )
        if not found and not ids:
            self.note("no tool results yet")
            return
        for call in ids or list(found):
            name, arguments = self.calls.get(call, ("?", None))
            if headers:
                summary = summarize_arguments(arguments, self.renderer.width - len(name) - 4)
                self.write(self.renderer.line(self.style.dim(f"● {name} {summary}".rstrip())))
            content, is_error = found.get(call) or self.previews.get(call, ("", False))
            self.write(self.renderer.preview(content, is_error, limit=0))

    # --- keys from the UI

    async def _interrupt(self, item: Interrupt) -> None:
        if self.busy:
            await self._cancel()
        elif item.typed and self.ui is not None:
            self.ui.clear()
        else:
            self.note("Ctrl-D or /exit leaves (the session keeps running)")

    # --- the daemon going away

    async def _ended(self, item: _Ended) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        try:
            row: list[str] | None = await self.io(self._row)
        except (ConnectError, OSError, ServerError):
            row = None
        except SessionGone:
            raise SessionGone(item.error or "the session is gone") from None
        if row is not None and row[2] == "exited":
            raise SessionGone(item.error or "the session exited")
        if not self.attached_once:
            raise SessionGone(item.error or "the session's event stream ended")
        self.connected = False
        self.busy = False
        self.renderer.flush_text()
        self._live()
        why = item.error or "its stream ended"
        self.warn(f"the daemon went away ({why}); reconnecting. What you type is kept.")
        self.reconnect_task = asyncio.ensure_future(self._reconnect())

    async def _reconnect(self) -> None:
        delay, longest = BACKOFF
        attempt = 0
        while True:
            attempt += 1
            self.reconnect_note = f"attempt {attempt} in {delay:g}s"
            if self.ui is not None:
                self.ui.changed()
            await asyncio.sleep(delay)
            self.reconnect_note = f"attempt {attempt}"
            try:
                reader, row = await self.io(self._open_events)
            except SessionGone as exc:
                self.post(_Ended(str(exc)))  # listed no more: _ended decides
                return
            except (ClientError, OSError):
                delay = min(longest, delay * 2)
                continue
            self.post(Reconnected(reader, row))
            return

    # --- the loop

    async def main(self, ui: Ui) -> None:
        self.ui = ui
        self.renderer = Renderer(self.style, width=ui.width, stream=_text_stream(ui, self.style))
        await self.start()
        assert self.inbox is not None
        deadline = time.monotonic() + SYNC_TIMEOUT
        while True:
            ui.ready(self.connected and not self.busy and not self.syncing)
            try:
                if self.syncing and not self.attached_once:
                    left = max(0.0, deadline - time.monotonic())
                    item = await asyncio.wait_for(self.inbox.get(), left)
                else:
                    item = await self.inbox.get()
            except TimeoutError:
                raise ClientError(
                    "the session's events did not arrive; is the daemon busy?"
                ) from None
            try:
                await self._handle(item)
            except ServerError as exc:
                self.error(str(exc))
            except (ConnectError, OSError) as exc:
                self.warn(f"the daemon did not answer ({exc})")

    async def _handle(self, item: Inbound) -> None:
        match item:
            case str() if self.syncing:
                self.past.append(item)
            case str():
                await self._event(item)
            case Submit() if self.syncing:
                self.deferred.append(item)  # typed before attach caught up: sent once it has
            case _ if item is SYNCED:
                await self._synced()
                deferred, self.deferred = self.deferred, []
                for submit in deferred:
                    await self._submit(submit.text)
            case _Ended():
                await self._ended(item)
            case Submit(text=text):
                await self._submit(text)
            case Interrupt():
                await self._interrupt(item)
            case Quit():
                raise Leave
            case Reconnected(reader=reader, row=row):
                self._adopt(reader, row)
                self.reconnect_task = None

    def close(self) -> None:
        if self.reconnect_task is not None:
            self.reconnect_task.cancel()
        if self.reader is not None:
            self.reader.close()
        self.worker.stop()
        self.remote.close()

    def goodbye(self) -> str:
        name = self.sid if self.alias in ("-", "") else self.alias
        return self.style.dim(
            f"left {self.sid}; it keeps running in the daemon. Come back with "
            f"`anvilctl attach {name}`."
        )


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m {rest:02d}s"


def _interactive(out: TextIO) -> bool:
    """Whether attach runs its terminal application (a tty both ways, a capable terminal)."""
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stdin.isatty() and out.isatty() and out.fileno() == 1
    except (OSError, ValueError):
        return False


def _text_stream(ui: Ui, style: Style) -> TextStream | None:
    """How answer text is cut: not at all on a pipe; in lines, or markdown blocks with colour,
    where an input line sits below it."""
    if isinstance(ui, PlainUi):
        return None
    if style.color:
        return MarkdownStream(ui.width, truecolor=os.environ.get("COLORTERM") == "truecolor")
    return LineStream()


async def _run(session: Attach) -> None:
    session.loop = asyncio.get_running_loop()
    session.inbox = asyncio.Queue(maxsize=INBOX)
    session.worker.start()
    if session.tty:
        from anvilctl.attach_tty import AttachCompleter, TtyUi

        def models() -> list[str]:
            if not session._models:
                text = session.remote.read("models")
                session._models = [line.split()[0] for line in text.splitlines() if line.split()]
            return session._models

        def sessions() -> list[str]:
            text = session.remote.read("list")
            names = []
            for line in text.splitlines():
                fields = line.split("\t")
                names += [f for f in fields[:2] if f and f != "-"]
            return names

        def quietly(get: Callable[[], list[str]]) -> Callable[[], list[str]]:
            def safe() -> list[str]:
                try:
                    return get()
                except (ClientError, OSError):
                    return []

            return safe

        inbox = session.inbox
        completer = AttachCompleter(
            COMMANDS,
            models=quietly(models),
            sessions=quietly(sessions),
            cwd=lambda: session.cwd or os.getcwd(),
        )
        ui = TtyUi(
            color=session.style.color,
            history=history_path(),
            completer=completer,
            status=session.status,
            on_submit=lambda text: inbox.put_nowait(Submit(text)),
            on_interrupt=lambda typed: inbox.put_nowait(Interrupt(typed)),
            on_leave=lambda: inbox.put_nowait(Quit()),
        )
        await ui.run(lambda: _main(session, ui))
    else:
        plain = PlainUi(session.out, session.post, color=session.style.color)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, lambda: session.post(Interrupt()))
        try:
            await _main(session, plain)
        finally:
            loop.remove_signal_handler(signal.SIGINT)


async def _main(session: Attach, ui: Ui) -> None:
    try:
        await session.main(ui)
    except Leave:
        session.write(session.renderer.flush_text())
        if session.ui is not None:
            session.ui.live("")


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`anvilctl attach ID`; the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    while True:
        session = Attach(args, out, err)
        try:
            asyncio.run(_run(session))
        except SessionGone as exc:
            out.write(session.renderer.line(""))
            out.flush()
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
        if session.switch_to is None:
            if session.attached_once and session.human:
                out.write(session.goodbye() + "\n")
                out.flush()
            return 0
        args = argparse.Namespace(**{**vars(args), "id": session.switch_to})
