"""Where one JSON value ends in text that arrives in pieces: a resumable scanner (RFC 8259).

`JsonScanner.feed(text)` takes the text received so far (always the whole of it, growing) and
answers `None` while it is a valid beginning of one JSON value, or the index just past the value
once it is complete; it raises `JsonMalformed` (line, column and what was expected) as soon as
no continuation could make the text valid, and when nesting passes `max_depth`. It only finds
the end: the value is decoded and checked by whoever receives it (`anvild.mail.strict_json` for
an outbox). A top-level number is complete only when something follows it (`12` may become
`123`). Scanning resumes where the last complete token ended, so each piece costs its own length
(a token cut by a piece boundary is scanned again). Pure, no I/O.
"""

from __future__ import annotations

import enum
import re
from typing import Final

__all__ = ["JsonMalformed", "JsonScanner"]


class JsonMalformed(ValueError):
    """Text that cannot be the beginning of a JSON value; the message says where and why."""


class _Want(enum.Enum):
    VALUE = "a value"
    VALUE_OR_END = "a value or ]"
    KEY = "a string key in double quotes"
    KEY_OR_END = "a string key in double quotes or }"
    COLON = "':'"
    COMMA_OR_END = "',' or the end of the array or object"
    NOTHING = "nothing"


_WS: Final = re.compile(r"[ \t\n\r]*")
_STRING_BODY: Final = re.compile(r'(?:[^"\\\x00-\x1f]+|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_PARTIAL_ESCAPE: Final = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?\Z")
_NUMBERISH: Final = re.compile(r"[-+0-9.eE]+")
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORD: Final = re.compile(r"[a-zA-Z]+")
_LITERALS: Final = ("true", "false", "null")


class JsonScanner:
    """One JSON value's end, found incrementally (see the module docstring)."""

    __slots__ = ("_depth_limit", "_pos", "_resume", "_stack", "_want")

    def __init__(self, *, max_depth: int | None = None) -> None:
        self._depth_limit = max_depth
        self._pos = 0  # where the next token starts
        self._resume = 0  # inside a string that starts at _pos: how far it is valid
        self._stack: list[str] = []  # "{" or "[" per open container
        self._want = _Want.VALUE

    def feed(self, text: str) -> int | None:
        """`None` while `text` is a valid beginning; the end of the value once it is complete."""
        pos, n = self._pos, len(text)
        while True:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]  # `*` always matches
            if self._want is _Want.NOTHING:
                return self._pos
            if pos >= n:
                self._pos = pos
                return None
            c = text[pos]
            want = self._want
            if c == '"':
                # A long string cut by pieces resumes where its valid part ended.
                start = self._resume if pos == self._pos and self._resume else pos + 1
                end = _STRING_BODY.match(text, start).end()  # type: ignore[union-attr]
                if end >= n or _PARTIAL_ESCAPE.match(text, end):
                    self._pos, self._resume = pos, end
                    return None  # a string still being written
                self._resume = 0
                if text[end] != '"':
                    raise self._error(text, end, "a string has a control character or bad escape")
                if want in (_Want.KEY, _Want.KEY_OR_END):
                    self._want = _Want.COLON
                elif want in (_Want.VALUE, _Want.VALUE_OR_END):
                    self._value_done()
                else:
                    raise self._error(text, pos, f"expected {want.value}")
                pos = end + 1
            elif c in "{[":
                if want not in (_Want.VALUE, _Want.VALUE_OR_END):
                    raise self._error(text, pos, f"expected {want.value}")
                self._stack.append(c)
                if self._depth_limit is not None and len(self._stack) > self._depth_limit:
                    limit = self._depth_limit
                    raise JsonMalformed(
                        f"JSON nested deeper than {limit} levels (at {_where(text, pos)}); the "
                        f"limit is {limit} nested arrays or objects: flatten the value"
                    )
                self._want = _Want.KEY_OR_END if c == "{" else _Want.VALUE_OR_END
                pos += 1
            elif c in "}]":
                opener = "{" if c == "}" else "["
                ok = want is _Want.COMMA_OR_END or (
                    want is (_Want.KEY_OR_END if c == "}" else _Want.VALUE_OR_END)
                )
                if not ok or not self._stack or self._stack[-1] != opener:
                    raise self._error(text, pos, f"expected {want.value}")
                self._stack.pop()
                pos += 1
                self._value_done()
            elif c == ":":
                if want is not _Want.COLON:
                    raise self._error(text, pos, f"expected {want.value}")
                self._want = _Want.VALUE
                pos += 1
            elif c == ",":
                if want is not _Want.COMMA_OR_END:
                    raise self._error(text, pos, f"expected {want.value}")
                self._want = _Want.KEY if self._stack[-1] == "{" else _Want.VALUE
                pos += 1
            elif c in "-0123456789" or c in "tfn":
                if want not in (_Want.VALUE, _Want.VALUE_OR_END):
                    raise self._error(text, pos, f"expected {want.value}")
                if text.startswith("-I", pos):
                    raise _not_a_number("-Infinity")
                run = (_WORD if c in "tfn" else _NUMBERISH).match(text, pos)
                assert run is not None  # c itself matches
                if run.end() == n:  # it may go on in the next piece
                    word = run.group()
                    if c in "tfn" and not any(lit.startswith(word) for lit in _LITERALS):
                        raise self._error(text, pos, "expected a value (true, false or null?)")
                    self._pos = pos
                    return None
                if c in "tfn":
                    if run.group() not in _LITERALS:
                        raise self._error(text, pos, "expected a value (true, false or null?)")
                elif _NUMBER.fullmatch(run.group()) is None:
                    raise self._error(text, pos, "a malformed number")
                pos = run.end()
                self._value_done()
            elif c in "NI" and want in (_Want.VALUE, _Want.VALUE_OR_END):
                raise _not_a_number("NaN" if c == "N" else "Infinity")
            else:
                raise self._error(text, pos, f"expected {want.value}")
            self._pos = pos

    def _value_done(self) -> None:
        self._want = _Want.COMMA_OR_END if self._stack else _Want.NOTHING

    def _error(self, text: str, pos: int, why: str) -> JsonMalformed:
        found = repr(text[pos]) if pos < len(text) else "the end"
        return JsonMalformed(
            f"malformed JSON at {_where(text, pos)} (character {pos}): {why}, found {found}"
        )


def _not_a_number(name: str) -> JsonMalformed:
    # Python's own json module writes these; say so rather than "malformed" (RFC 8259 section 6).
    return JsonMalformed(
        f"{name} is not a JSON number (RFC 8259 allows only finite numbers); write a finite "
        'number, or a string such as "NaN"'
    )


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {column}"
