"""`anvilctl attach` on a terminal: a prompt_toolkit application below the conversation.

Not full screen (the conversation stays in the terminal's scrollback): at the bottom, the live
area (the unfinished markdown block, redrawn), a status line while busy, and a multi-line input.
Finished output (`write`) goes above through `run_in_terminal`, so typing and streaming never
mix. Enter sends; Alt-Enter, Ctrl-J or a trailing `\\` adds a line; a paste (bracketed or not:
an Enter with keys already waiting) is inserted whole. Tab completes /commands, models, session
ids and paths. Ctrl-C, Ctrl-D and Enter go to the controller (`on_interrupt`, `on_leave`,
`on_submit`); during `ask`, Enter answers, Ctrl-C returns None, Ctrl-D raises EOFError. Prompts
go to the history file, answers do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Final, TypeVar

from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import ANSI, StyleAndTextTuples
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent, merge_key_bindings
from prompt_toolkit.key_binding.bindings.completion import display_completions_like_readline
from prompt_toolkit.key_binding.defaults import load_key_bindings
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.styles import Style as PtStyle

T = TypeVar("T")

SPINNER: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
PROMPT: Final = "> "
REFRESH: Final = 0.1  # seconds between redraws (the spinner and the elapsed time)


class AttachCompleter(Completer):
    """/commands, then per command: model names, session ids; paths anywhere else."""

    def __init__(
        self,
        commands: Iterable[str],
        *,
        models: Callable[[], list[str]],
        sessions: Callable[[], list[str]],
        cwd: Callable[[], str],
    ) -> None:
        self.commands = sorted(commands)
        self.models = models
        self.sessions = sessions
        self.cwd = cwd
        self._paths = PathCompleter(expanduser=True, get_paths=lambda: [self.cwd()])

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        before = document.text_before_cursor
        if before.startswith("/") and " " not in before:
            for command in self.commands:
                if command.startswith(before):
                    yield Completion(command, -len(before))
            return
        word = document.get_word_before_cursor(WORD=True)
        head = before[: len(before) - len(word)]
        if head.strip() in ("/model", "/attach") and head.count(" ") == 1:
            names = self.models() if head.startswith("/model") else self.sessions()
            for name in names:
                if name.startswith(word):
                    yield Completion(name, -len(word))
            return
        path = word[1:] if word.startswith("@") else word
        if path and ("/" in path or path.startswith((".", "~"))):
            yield from self._paths.get_completions(Document(path, len(path)), complete_event)


class TtyUi:
    """The terminal's input line, live area and status line; output goes above them."""

    color: bool

    def __init__(
        self,
        *,
        color: bool,
        history: Path | None,
        completer: Completer | None,
        status: Callable[[], str | None],
        on_submit: Callable[[str], None],
        on_interrupt: Callable[[bool], None],
        on_leave: Callable[[], None],
    ) -> None:
        self.color = color
        self._status = status
        self._on_submit = on_submit
        self._on_interrupt = on_interrupt
        self._on_leave = on_leave
        self._live = ""
        self._question: str | None = None
        self._answer: asyncio.Future[str | None] | None = None
        self._out: list[str] = []
        self._flushing = False
        self._last_flush: asyncio.Future[None] | None = None
        self.buffer = Buffer(
            multiline=True,
            history=_history(history),
            completer=completer,
            complete_while_typing=False,
        )
        self.app: Application[None] = Application(
            layout=Layout(self._container(), focused_element=self.buffer),
            key_bindings=merge_key_bindings([load_key_bindings(), self._bindings()]),
            style=PtStyle.from_dict({"status": "fg:ansiyellow", "prompt": "bold"}),
            full_screen=False,
            mouse_support=False,
            erase_when_done=True,
            refresh_interval=REFRESH,
        )

    # the layout

    def _container(self) -> HSplit:
        live = Window(
            FormattedTextControl(lambda: ANSI(self._live_view())),
            dont_extend_height=True,
            wrap_lines=True,
        )
        status = Window(FormattedTextControl(self._status_view), height=1)
        line = Window(
            BufferControl(self.buffer),
            get_line_prefix=self._prefix,
            dont_extend_height=True,
            wrap_lines=True,
        )
        return HSplit(
            [
                ConditionalContainer(live, filter=Condition(lambda: bool(self._live))),
                ConditionalContainer(status, filter=Condition(lambda: self._status() is not None)),
                line,
            ]
        )

    def _live_view(self) -> str:
        rows = self.app.output.get_size().rows
        lines = self._live.rstrip("\n").split("\n")
        room = max(3, rows - 6)
        return "\n".join(lines[-room:])

    def _status_view(self) -> StyleAndTextTuples:
        text = self._status()
        if text is None:
            return []
        frame = SPINNER[int(time.monotonic() / REFRESH) % len(SPINNER)]
        return [("class:status", f"{frame} {text}")]

    def _prefix(self, line: int, wrap: int) -> StyleAndTextTuples:
        if line == 0 and wrap == 0:
            return [("class:prompt", self._question if self._question is not None else PROMPT)]
        return [("", "  ")]

    # keys

    def _bindings(self) -> KeyBindings:
        kb = KeyBindings()
        empty = Condition(lambda: not self.buffer.text)

        @kb.add("enter")
        def _enter(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            if self._answer is not None:
                answer, self._answer = self._answer, None
                text = buffer.text
                buffer.reset()
                if not answer.done():
                    answer.set_result(text)
                return
            if buffer.document.is_cursor_at_the_end and buffer.text.endswith("\\"):
                buffer.delete_before_cursor(1)
                buffer.insert_text("\n")
                return
            if event.app.key_processor.input_queue:
                buffer.insert_text("\n")  # more keys came with it: a paste, not a send
                return
            text = buffer.text
            if not text.strip():
                return
            buffer.append_to_history()
            buffer.reset()
            self._on_submit(text)

        @kb.add("escape", "enter")
        @kb.add("c-j")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @kb.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            if self._answer is not None:
                answer, self._answer = self._answer, None
                self.buffer.reset()
                if not answer.done():
                    answer.set_result(None)
                return
            self._on_interrupt(bool(self.buffer.text))

        @kb.add("c-d", filter=empty)
        def _leave(event: KeyPressEvent) -> None:
            if self._answer is not None:
                answer, self._answer = self._answer, None
                if not answer.done():
                    answer.set_exception(EOFError())
                return
            self._on_leave()

        @kb.add("tab")
        def _complete(event: KeyPressEvent) -> None:
            display_completions_like_readline(event)

        return kb

    # what the controller calls

    @property
    def width(self) -> int:
        return self.app.output.get_size().columns

    def write(self, text: str) -> None:
        """`text` (whole lines) above the application."""
        if not text:
            return
        if not self.app.is_running:
            os.write(1, text.encode())
            return
        self._out.append(text)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        def emit() -> None:
            self._flushing = False
            text, self._out[:] = "".join(self._out), []
            if text:
                self.app.output.write_raw(text)
                self.app.output.flush()

        self._last_flush = asyncio.ensure_future(run_in_terminal(emit))

    async def _drained(self) -> None:
        await asyncio.sleep(0)  # a flush scheduled with call_soon has started
        while (last := self._last_flush) is not None and not last.done():
            with contextlib.suppress(Exception):
                await last

    def live(self, text: str) -> None:
        if text != self._live:
            self._live = text
            self.app.invalidate()

    def changed(self) -> None:
        self.app.invalidate()

    def ready(self, idle: bool) -> None:
        """The controller can take a prompt (the input line is always there: nothing to do)."""

    def restore(self, text: str) -> None:
        """Put `text` back in the input line (a prompt that could not be sent)."""
        if not self.buffer.text:
            self.buffer.document = Document(text, len(text))

    def clear(self) -> None:
        self.buffer.reset()

    async def ask(self, question: str) -> str | None:
        """An answer typed on the input line (`question` is its prompt); None for Ctrl-C,
        EOFError for Ctrl-D. What was typed before is put back afterwards."""
        kept = self.buffer.document
        self.buffer.reset()
        self._question = question
        self._answer = asyncio.get_running_loop().create_future()
        self.app.invalidate()
        try:
            return await self._answer
        finally:
            self._question = self._answer = None
            self.buffer.document = kept
            self.app.invalidate()

    async def run(self, main: Callable[[], Awaitable[T]]) -> T:
        """Run `main` with the application on the terminal; the application ends with it."""
        started = asyncio.Event()
        app_task = asyncio.ensure_future(self.app.run_async(pre_run=started.set))
        waiting = asyncio.ensure_future(started.wait())
        await asyncio.wait([app_task, waiting], return_when=asyncio.FIRST_COMPLETED)
        if app_task.done():
            waiting.cancel()
            app_task.result()
            raise RuntimeError("the terminal application ended before it started")
        main_task = asyncio.ensure_future(main())
        try:
            await asyncio.wait([app_task, main_task], return_when=asyncio.FIRST_COMPLETED)
            if main_task.done():
                return main_task.result()
            app_task.result()  # the application failed: its error
            raise RuntimeError("the terminal application ended")
        finally:
            if not main_task.done():
                main_task.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await main_task
            if self.app.is_running:
                await self._drained()  # scheduled output reaches the terminal first
                self.app.exit()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await app_task


def _history(path: Path | None) -> History:
    """The prompts' history: a file in the data dir (0600 in a 0700 directory), or memory."""
    if path is None:
        return InMemoryHistory()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    except OSError:
        return InMemoryHistory()
    return FileHistory(str(path))
