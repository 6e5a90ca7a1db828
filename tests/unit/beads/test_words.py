"""Splitting bead and convoy ctl lines (`anvild.beads.words`): both quote styles round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anvild.beads import InvalidBeadRequest
from anvild.beads.words import Word, split_words

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00"))


def double(word: str) -> str:
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def single(word: str) -> str:
    return "'" + word.replace("'", "''") + "'"


@given(st.lists(TEXT, max_size=6))
def test_double_quoted_words_round_trip(words: list[str]) -> None:
    assert split_words(" ".join(map(double, words))) == [Word(w, quoted=True) for w in words]


@given(st.lists(TEXT, max_size=6))
def test_single_quoted_words_round_trip(words: list[str]) -> None:
    assert split_words("\t".join(map(single, words))) == [Word(w, quoted=True) for w in words]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('new "Research auth" researcher', [("new", False), ("Research auth", True),
                                            ("researcher", False)]),
        ("a\\b c", [("a\\b", False), ("c", False)]),  # no escapes outside quotes
        ('"a\\nb"', [("a\\nb", True)]),  # only \" and \\ are escapes
        ('x"y z"w', [("xy zw", True)]),
        ("convoy=auth-001 'k=v'", [("convoy=auth-001", False), ("k=v", True)]),
        ("  ", []),
    ],
)  # fmt: skip
def test_examples(line: str, words: list[tuple[str, bool]]) -> None:
    assert split_words(line) == [Word(t, q) for t, q in words]


@pytest.mark.parametrize("line", ['new "open', "new 'open", 'x "a\\"'])
def test_an_unbalanced_quote_is_refused(line: str) -> None:
    with pytest.raises(InvalidBeadRequest, match="unbalanced"):
        split_words(line)
