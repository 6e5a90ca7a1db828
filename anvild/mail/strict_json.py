"""Reading JSON a client sent (an `outbox` body): strict, bounded, refused by name.

`loads(data)` returns the value or raises `JsonRefused`, whose message names what is wrong, the
limit and the fix: invalid UTF-8 (with its offset), malformed JSON (line and column), nesting
deeper than `MAX_DEPTH` (checked by a flat scan before parsing, so no input can exhaust Python's
recursion), NaN/Infinity/-Infinity and numbers outside what every parser reads alike (integers
beyond +-(2**53 - 1) and floats that overflow, RFC 7493 section 2.2), lone surrogates (they
cannot be written back as UTF-8), control characters in object keys, and duplicate keys in one
object. Duplicates are refused everywhere rather than "last wins": parsers disagree on which one
counts (RFC 8259 section 4), so a checker and a later reader could see different values.

`dumps` is the matching writer for what the daemon stores (`allow_nan=False`). Pure, no I/O.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, Final

__all__ = [
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "JsonRefused",
    "check_value",
    "dumps",
    "has_control",
    "loads",
]

MAX_DEPTH: Final = 64
"""The deepest nesting of arrays and objects accepted."""
MAX_SAFE_INTEGER: Final = 2**53 - 1
"""The largest integer magnitude every JSON parser reads exactly (an IEEE double)."""

_STRING: Final = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_TOKENS: Final = re.compile(_STRING + r'|[\[{]|[\]}]|"', re.DOTALL)
_STRING_RE: Final = re.compile(_STRING, re.DOTALL)
_NOT_BRACKET: Final = re.compile(r"[^\[\]{}]+")
_DELTA: Final = {"[": 1, "{": 1, "]": -1, "}": -1}
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
_MAX_INT_CHARS: Final = len(str(MAX_SAFE_INTEGER)) + 1  # a sign


class JsonRefused(ValueError):
    """JSON that is refused; the message says what, where, the limit and the fix."""


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (C0, DEL or C1)."""
    return _CONTROL.search(text) is not None


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {column}"


def _check_depth(text: str) -> None:
    # Fast path, all in C: drop the strings, keep the brackets, take the deepest running sum.
    brackets = _NOT_BRACKET.sub("", _STRING_RE.sub("", text))
    if not brackets or max(accumulate(map(_DELTA.__getitem__, brackets))) <= MAX_DEPTH:
        return
    # Deeper (or an unterminated string's brackets counted): find where, token by token.
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token[0] == '"':
            if len(token) == 1:
                return  # an unterminated string: the parser reports it with its position
            continue
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise JsonRefused(
                    f"JSON nested deeper than {MAX_DEPTH} levels (at {_where(text, match.start())})"
                    f"; the limit is {MAX_DEPTH} nested arrays or objects: flatten the value"
                )
        else:
            depth -= 1


def _refuse_constant(name: str) -> Any:
    raise JsonRefused(
        f"{name} is not a JSON number (RFC 8259 allows only finite numbers); write a finite "
        'number, or a string such as "NaN"'
    )


def _too_large(shown: str) -> JsonRefused:
    return JsonRefused(
        f"the number {shown} is too large: integers are limited to +-{MAX_SAFE_INTEGER} "
        "(2**53 - 1, what every JSON parser reads exactly); send it as a string"
    )


def _parse_int(text: str) -> int:
    if len(text) > _MAX_INT_CHARS or abs(value := int(text)) > MAX_SAFE_INTEGER:
        raise _too_large(text if len(text) <= 24 else text[:20] + "...")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 24 else text[:20] + "..."
        raise JsonRefused(
            f"the number {shown} is too large: it does not fit a 64-bit float (about 1.8e308); "
            "send it as a string"
        )
    return value


def _check_key(key: str) -> None:
    if has_control(key):
        raise JsonRefused(
            f"the key {json.dumps(key)} holds a control character; names may not contain "
            "control characters (U+0000-U+001F, U+007F-U+009F): rename the key"
        )


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        _check_key(key)
        if key in obj:
            raise JsonRefused(
                f"the key {json.dumps(key)} appears twice in one object; give each key once "
                "(parsers disagree on which value wins)"
            )
        obj[key] = value
    return obj


def check_value(value: Any, depth: int = 0) -> None:
    """Refuse in an already decoded value (a tool's arguments) what `loads` refuses: nesting,
    numbers, lone surrogates (`"\\ud800"`, which cannot be encoded as UTF-8), keys."""
    if isinstance(value, str):
        if not value.isascii() and _SURROGATE.search(value):
            raise JsonRefused(
                "a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its "
                "pair); escape a character outside the BMP as a surrogate pair, or write it as "
                "UTF-8"
            )
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            bits = value.bit_length()
            raise _too_large(str(value) if bits <= 80 else f"of {bits} bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            _refuse_constant(repr(value).replace("inf", "Infinity").replace("nan", "NaN"))
    elif isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise JsonRefused(
                f"JSON nested deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH} nested "
                "arrays or objects: flatten the value"
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise JsonRefused(f"the key {key!r} is not a string")
                _check_key(key)
                check_value(key, depth + 1)
                check_value(item, depth + 1)
        else:
            for item in value:
                check_value(item, depth + 1)
    else:
        raise JsonRefused(f"a {type(value).__name__} is not a JSON value")


def loads(data: bytes | str) -> Any:
    """The JSON value `data` holds, checked as the module docstring says; `JsonRefused`."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRefused(
                f"not valid UTF-8 (bad byte at offset {exc.start}); write UTF-8 JSON"
            ) from exc
    else:
        text = data
    _check_depth(text)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_refuse_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
        )
    except json.JSONDecodeError as exc:
        raise JsonRefused(
            f"malformed JSON at line {exc.lineno} column {exc.colno} (character {exc.pos}): "
            f"{exc.msg}"
        ) from exc
    except RecursionError as exc:  # unreachable after _check_depth; never a bare error
        raise JsonRefused(f"JSON nested too deeply; the limit is {MAX_DEPTH} levels") from exc
    if _SURROGATE_ESCAPE.search(text):  # only a \uD800-\uDFFF escape makes one
        check_value(value)
    return value


def dumps(value: Any, **options: Any) -> str:
    """JSON text of `value` that strict parsers accept (`ValueError` for NaN or Infinity)."""
    return json.dumps(value, allow_nan=False, ensure_ascii=False, **options)
