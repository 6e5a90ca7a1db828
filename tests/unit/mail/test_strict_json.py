"""The strict JSON reader: every refusal by name, and nothing else ever escapes it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anvild.mail.strict_json import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    JsonRefused,
    check_value,
    dumps,
    loads,
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"[" * 3000 + b"]" * 3000, f"nested deeper than {MAX_DEPTH} levels"),
        (b'{"a":' * 65 + b"1" + b"}" * 65, "at line 1 column 321"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b"[Infinity]", "Infinity is not a JSON number"),
        (b"[-Infinity]", "-Infinity is not a JSON number"),
        (b"1" * 5000, f"integers are limited to +-{MAX_SAFE_INTEGER}"),
        (str(MAX_SAFE_INTEGER + 1).encode(), "send it as a string"),
        (b"1e999", "does not fit a 64-bit float"),
        (b'{"to": "a", "to": "b"}', 'the key "to" appears twice in one object'),
        (b'{"a\\u0007": 1}', "holds a control character"),
        (b'{"a\\u0085": 1}', "holds a control character"),
        (b'{"ok": 1, "x": {"a\\u001b": 1}}', "holds a control character"),
        (b'{"a": "\xff"}', "not valid UTF-8 (bad byte at offset 7)"),
        (b'"\\ud800"', "lone UTF-16 surrogate"),
        (b'{"a": 1', "malformed JSON at line 1 column 8"),
        (b'"abc', "malformed JSON at line 1 column 1"),
        (b"", "malformed JSON"),
    ],
)
def test_hostile_json_is_refused_by_name(data: bytes, expected: str) -> None:
    with pytest.raises(JsonRefused) as caught:
        loads(data)
    assert expected in str(caught.value)


def test_the_limits_themselves_are_accepted() -> None:
    deepest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(deepest) is not None
    assert loads(str(MAX_SAFE_INTEGER)) == MAX_SAFE_INTEGER
    assert loads(str(-MAX_SAFE_INTEGER)) == -MAX_SAFE_INTEGER
    assert loads("1.7976931348623157e308") == 1.7976931348623157e308
    # Brackets inside strings are text, not nesting; escaped quotes do not end a string.
    assert loads(json.dumps(["[" * 500, '\\"{' * 100])) == ["[" * 500, '\\"{' * 100]
    assert loads('"\\ud83d\\ude00"') == "\U0001f600"  # a surrogate pair is one character


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": math.nan}, "NaN is not a JSON number"),
        ([math.inf], "Infinity is not a JSON number"),
        ({"a": 2**60}, "too large"),
        ({"a": 10**5000}, "of 16610 bits"),
        ({"k\x00": 1}, "control character"),
        (["\udc80"], "lone UTF-16 surrogate"),
        ([[]], None),
    ],
)
def test_check_value_refuses_what_loads_refuses(value: Any, expected: str | None) -> None:
    if expected is None:
        check_value(value)
        return
    with pytest.raises(JsonRefused) as caught:
        check_value(value)
    assert expected in str(caught.value)


def test_check_value_bounds_depth_without_recursing_further() -> None:
    value: Any = []
    for _ in range(5000):
        value = [value]
    with pytest.raises(JsonRefused, match="nested deeper than 64"):
        check_value(value)


def test_dumps_never_writes_nan() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps({"a": math.nan})
    assert dumps({"a": "é"}) == '{"a": "é"}'


KEYS = st.text(st.characters(codec="utf-8", exclude_categories=["Cc"]))
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8")),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_every_strict_value_round_trips(value: Any) -> None:
    assert loads(json.dumps(value).encode()) == value
    assert loads(dumps(value)) == value


def _value_or_refusal(read: Callable[[], object]) -> None:
    """`read()` returns, or raises `JsonRefused` with a message; any other exception fails."""
    refusal = ""
    try:
        read()
    except JsonRefused as exc:
        refusal = str(exc) or "(empty)"
    assert refusal != "(empty)"


@given(st.binary(max_size=200))
def test_any_bytes_give_a_value_or_a_refusal(data: bytes) -> None:
    _value_or_refusal(lambda: loads(data))


@given(st.text(alphabet='[]{}",:0123456789.eE-+ \\naNIfinty', max_size=300))
def test_any_json_like_text_gives_a_value_or_a_refusal(text: str) -> None:
    _value_or_refusal(lambda: check_value(loads(text)))


@given(st.integers(1, 4000))
def test_any_nesting_is_refused_or_read(depth: int) -> None:
    text = "[" * depth + "]" * depth
    if depth <= MAX_DEPTH:
        assert loads(text) is not None
    else:
        with pytest.raises(JsonRefused, match="nested deeper"):
            loads(text)


@given(st.integers(1, 100), st.text(alphabet='[]{}"\\ab', max_size=20))
def test_brackets_and_escapes_in_strings_never_count_as_nesting(depth: int, text: str) -> None:
    value: Any = text
    for _ in range(depth):
        value = [value, {text: text}]
    data = json.dumps(value)
    if depth + 1 <= MAX_DEPTH:  # the innermost {text: text} is one level more
        assert loads(data) == value
    else:
        with pytest.raises(JsonRefused, match="nested deeper"):
            loads(data)
