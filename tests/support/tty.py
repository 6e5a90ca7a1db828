"""`anvilctl attach` (or any command) on a real pseudo-terminal, read back as a screen.

pexpect runs the command on a pty of `rows` x `cols` (its controlling terminal, so it behaves as
in a shell); everything it writes goes through `tests.support.screen.Screen`, so a test asserts
on what a person would see (the scrollback and the screen), not on the redraws that produced it.

    term = Tty(["anvilctl", "attach", sid], env=...)
    term.expect(r"attached to \\w+")       # the next occurrence in the scrollback and screen
    term.type("ping\\r")
    term.expect(r"^pong$")
    term.wait_screen(r"^> $")              # the screen as it is now (the input line)

`expect` counts: each call with the same pattern waits for one more match than the last, so a
line printed again later is told from the first. Every wait has a deadline and fails with the
screen in its message.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pexpect

from tests.support.screen import Screen

ROWS = 40
COLS = 120


class Tty:
    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        rows: int = ROWS,
        cols: int = COLS,
    ) -> None:
        self.child = pexpect.spawn(
            sys.executable, ["-m", *args], env=dict(env), cwd=str(cwd), dimensions=(rows, cols)
        )
        self.screen = Screen(rows, cols)
        self.raw = b""
        self._counts: dict[str, int] = {}

    def pump(self, seconds: float = 0.05) -> bool:
        """Read what came within `seconds`; False once the program has ended."""
        try:
            data = self.child.read_nonblocking(1 << 16, timeout=seconds)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self.raw += data
        self.screen.feed(data)
        return True

    def _fail(self, what: str) -> AssertionError:
        return AssertionError(f"{what}; the terminal shows:\n{self.screen.text()}")

    def expect(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """The next match of `pattern` (a multi-line regex) in the scrollback and screen."""
        regex = re.compile(pattern, re.MULTILINE)
        wanted = self._counts.get(pattern, 0) + 1
        until = time.monotonic() + timeout
        while True:
            found = list(regex.finditer(self.screen.text()))
            if len(found) >= wanted:
                self._counts[pattern] = wanted
                return found[wanted - 1]
            alive = self.pump()
            if time.monotonic() > until or not alive:
                found = list(regex.finditer(self.screen.text()))
                if len(found) >= wanted:
                    self._counts[pattern] = wanted
                    return found[wanted - 1]
                raise self._fail(f"no {pattern!r} (occurrence {wanted})")

    def on_screen(self, pattern: str) -> bool:
        """Whether the screen (not the scrollback) shows `pattern` now."""
        return re.search(pattern, "\n".join(self.screen.display()), re.MULTILINE) is not None

    def wait_screen(self, pattern: str, timeout: float = 30.0, *, gone: bool = False) -> None:
        """Until the screen shows `pattern` (or, with `gone`, no longer shows it)."""
        until = time.monotonic() + timeout
        while self.on_screen(pattern) == gone:
            if not self.pump() or time.monotonic() > until:
                if self.on_screen(pattern) != gone:
                    return
                raise self._fail(f"{pattern!r} {'still' if gone else 'never'} on the screen")

    def settle(self, seconds: float = 0.3) -> None:
        """Read for `seconds` (what a program redraws after an event)."""
        until = time.monotonic() + seconds
        while time.monotonic() < until and self.pump():
            pass

    def type(self, text: str) -> None:
        self.child.send(text.encode())

    def wait_exit(self, timeout: float = 30.0) -> int:
        until = time.monotonic() + timeout
        while self.pump(0.1):
            if time.monotonic() > until:
                raise self._fail("the program did not exit")
        self.child.close()
        status = self.child.exitstatus
        return status if status is not None else -(self.child.signalstatus or 0)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.close()


def colors(sgr: Sequence[str]) -> list[str]:
    """The SGR parameter strings that set a colour (foreground or background)."""
    palette = {f"{ten}{unit}" for ten in "349" for unit in "01234567"}  # 30-37, 40-47, 90-97
    return [
        params
        for params in sgr
        if any(code in palette or code in ("38", "48") for code in re.split("[;:]", params))
    ]
