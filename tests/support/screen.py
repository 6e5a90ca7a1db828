"""A small VT100 screen for tests: what a terminal would show after the bytes a program wrote.

A program that redraws (prompt_toolkit's input line, a spinner) writes cursor movements and
erasures, so its raw output is not what a person sees. `Screen.feed` applies the bytes to a grid
of `rows` x `cols` cells: printable characters (one cell each), CR, LF, BS, TAB, the CSI cursor
moves (A B C D E F G H f d), erasures (J K X), insert/delete (@ P L M), scrolling at the bottom
into a scrollback (`history`); SGR and the mode switches are consumed and ignored (`sgr` keeps
every SGR parameter string seen, so a test can tell colours were written), OSC strings skipped.
It is enough for prompt_toolkit and rich, not a full terminal.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

_CSI: Final = re.compile(r"\x1b\[([?>=!]?)([0-9;:]*)([ -/]*)([@-~])")
_OSC: Final = re.compile(r"\x1b\].*?(?:\x07|\x1b\\)", re.DOTALL)
_ESC2: Final = re.compile(r"\x1b[()][0-9A-Za-z]|\x1b[=>78DEMc]")


class Screen:
    def __init__(self, rows: int = 40, cols: int = 120) -> None:
        self.rows = rows
        self.cols = cols
        self.grid = [[" "] * cols for _ in range(rows)]
        self.history: list[str] = []
        self.row = 0
        self.col = 0
        self.wrap_pending = False
        self.autowrap = True
        self.sgr: list[str] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""
        self._saved = (0, 0)

    # --- reading

    def display(self) -> list[str]:
        return ["".join(line).rstrip() for line in self.grid]

    def lines(self) -> list[str]:
        """The scrollback and the screen, trailing empty lines dropped."""
        out = self.history + self.display()
        while out and not out[-1]:
            out.pop()
        return out

    def text(self) -> str:
        return "\n".join(self.lines())

    # --- writing

    def feed(self, data: bytes) -> None:
        text = self._held + self._decoder.decode(data)
        self._held = ""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\x1b":
                match = _CSI.match(text, i) or _OSC.match(text, i) or _ESC2.match(text, i)
                if match is None:
                    if len(text) - i < 64:  # the rest of the sequence has not come yet
                        self._held = text[i:]
                        return
                    i += 1
                    continue
                if match.re is _CSI:
                    self._csi(match.group(1), match.group(2), match.group(4))
                elif match.group(0) == "\x1b7":
                    self._saved = (self.row, self.col)
                elif match.group(0) == "\x1b8":
                    self.row, self.col = self._saved
                elif match.group(0) in ("\x1bD", "\x1bE"):
                    self._linefeed()
                    if match.group(0) == "\x1bE":
                        self.col = 0
                elif match.group(0) == "\x1bM":
                    self.row = max(0, self.row - 1)
                i = match.end()
                continue
            self._char(ch)
            i += 1

    def _char(self, ch: str) -> None:
        if ch == "\r":
            self.col, self.wrap_pending = 0, False
        elif ch == "\n":
            self._linefeed()
        elif ch == "\b":
            self.col, self.wrap_pending = max(0, self.col - 1), False
        elif ch == "\t":
            self.col = min(self.cols - 1, (self.col // 8 + 1) * 8)
        elif ch == "\x07" or ord(ch) < 32:
            return
        else:
            if self.wrap_pending:
                if self.autowrap:
                    self.col = 0
                    self._linefeed()
                self.wrap_pending = False
            self.grid[self.row][self.col] = ch
            if self.col == self.cols - 1:
                self.wrap_pending = True
            else:
                self.col += 1

    def _linefeed(self) -> None:
        self.wrap_pending = False
        if self.row == self.rows - 1:
            self.history.append("".join(self.grid.pop(0)).rstrip())
            self.grid.append([" "] * self.cols)
        else:
            self.row += 1

    def _csi(self, private: str, params: str, final: str) -> None:
        numbers = [int(p) if p.isdigit() else 0 for p in params.replace(":", ";").split(";")]
        n = numbers[0] or 1
        self.wrap_pending = False
        if private == "?":
            if final in "hl" and 7 in numbers:
                self.autowrap = final == "h"
            return
        if private:
            return
        match final:
            case "m":
                self.sgr.append(params)
            case "A":
                self.row = max(0, self.row - n)
            case "B":
                self.row = min(self.rows - 1, self.row + n)
            case "C":
                self.col = min(self.cols - 1, self.col + n)
            case "D":
                self.col = max(0, self.col - n)
            case "E":
                self.row, self.col = min(self.rows - 1, self.row + n), 0
            case "F":
                self.row, self.col = max(0, self.row - n), 0
            case "G":
                self.col = min(self.cols - 1, n - 1)
            case "d":
                self.row = min(self.rows - 1, n - 1)
            case "H" | "f":
                column = numbers[1] if len(numbers) > 1 and numbers[1] else 1
                self.row = min(self.rows - 1, n - 1)
                self.col = min(self.cols - 1, column - 1)
            case "J":
                self._erase_display(numbers[0])
            case "K":
                self._erase_line(numbers[0])
            case "X":
                for c in range(self.col, min(self.cols, self.col + n)):
                    self.grid[self.row][c] = " "
            case "@":
                line = self.grid[self.row]
                line[self.col : self.col] = [" "] * n
                del line[self.cols :]
            case "P":
                line = self.grid[self.row]
                del line[self.col : self.col + n]
                line.extend([" "] * (self.cols - len(line)))
            case "L":
                for _ in range(n):
                    self.grid.insert(self.row, [" "] * self.cols)
                    self.grid.pop()
            case "M":
                for _ in range(n):
                    self.grid.pop(self.row)
                    self.grid.append([" "] * self.cols)

    def _erase_line(self, mode: int) -> None:
        line = self.grid[self.row]
        start, end = {0: (self.col, self.cols), 1: (0, self.col + 1)}.get(mode, (0, self.cols))
        for c in range(start, end):
            line[c] = " "

    def _erase_display(self, mode: int) -> None:
        if mode == 0:
            self._erase_line(0)
            for r in range(self.row + 1, self.rows):
                self.grid[r] = [" "] * self.cols
        elif mode == 1:
            self._erase_line(1)
            for r in range(self.row):
                self.grid[r] = [" "] * self.cols
        else:
            self.grid = [[" "] * self.cols for _ in range(self.rows)]
