"""`anvild.fs.ctl`: splitting, tokenizing and validating ctl command lines (no trio needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anvild.fs.ctl import (
    Command,
    CommandError,
    CommandSpec,
    CommandTable,
    _tokenize_quoted,
    split_lines,
    tokenize,
)


async def _answer(command: Command) -> str:
    return ""


TABLE = CommandTable(
    [
        CommandSpec("ping", _answer),
        CommandSpec("kill", _answer, usage="kill ID", min_args=1, max_args=1),
        CommandSpec(
            "new",
            _answer,
            usage="new [model=M] [cwd=D] [ephemeral]",
            options=frozenset({"model", "cwd"}),
            flags=frozenset({"ephemeral"}),
        ),
    ]
)


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b"", []),
        (b"\n", []),
        (b"ping", ["ping"]),  # `9p rdwr` strips the final newline
        (b"ping\n", ["ping"]),
        (b"ping\r\n", ["ping"]),
        (b"a 1\nb 2\n", ["a 1", "b 2"]),
        (b"a\n\n  \nb", ["a", "b"]),
    ],
)
def test_split_lines(data: bytes, lines: list[str]) -> None:
    assert split_lines(data) == lines


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xffping", r"not valid UTF-8 \(bad byte at offset 0\)"),
        (b"pi\x00ng", "NUL byte"),
    ],
)
def test_split_lines_refuses_non_text(data: bytes, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        split_lines(data)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("", []),
        ("ping", ["ping"]),
        ("  new   model=x\tcwd=/a  ", ["new", "model=x", "cwd=/a"]),
        ("new cwd='/src/my app'", ["new", "cwd=/src/my app"]),
        ("say 'it''s'", ["say", "it's"]),
        ("say ''", ["say", ""]),
        ("a'b c'd e", ["ab cd", "e"]),
    ],
)
def test_tokenize_follows_plan9_quoting(line: str, words: list[str]) -> None:
    assert tokenize(line) == words


@given(st.text(alphabet=st.sampled_from(" \t\u00a0\u2003\x0bab=/é"), max_size=30))
def test_a_line_without_quotes_splits_as_the_quoting_tokenizer_splits_it(line: str) -> None:
    """The quote-free fast path: words between runs of spaces and tabs, nothing else a
    separator (no-break and em spaces, vertical tabs stay in words)."""
    assert tokenize(line) == _tokenize_quoted(line)


def test_tokenize_refuses_an_open_quote() -> None:
    with pytest.raises(CommandError, match="unbalanced quote"):
        tokenize("new cwd='/src")


@given(st.lists(st.text(alphabet=st.characters(exclude_characters="\n\r\x00"), max_size=8)))
def test_tokenize_round_trips_quoted_words(words: list[str]) -> None:
    line = " ".join("'" + w.replace("'", "''") + "'" for w in words)
    assert tokenize(line) == words


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"ping", [Command("ping", line="ping")]),
        (b"kill r1\n", [Command("kill", ("r1",), line="kill r1")]),
        (
            b"new model=sonnet ephemeral cwd='/a b'",
            [
                Command(
                    "new",
                    options={"model": "sonnet", "cwd": "/a b"},
                    flags=frozenset({"ephemeral"}),
                    line="new model=sonnet ephemeral cwd='/a b'",
                )
            ],
        ),
        (b"ping\nkill x\n", [Command("ping", line="ping"), Command("kill", ("x",), line="kill x")]),
        (b"", []),
    ],
)
def test_parse_valid(data: bytes, expected: list[Command]) -> None:
    got = TABLE.parse(data)
    assert got == expected
    assert [dict(c.options) for c in got] == [dict(c.options) for c in expected]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"frob", "unknown command 'frob'; known commands: kill, new, ping"),
        (b"ping now", "ping: takes no arguments, got 'now'; usage: ping"),
        (b"kill", r"kill: wrong number of arguments \(0\); usage: kill ID"),
        (b"kill a b", r"kill: wrong number of arguments \(2\); usage: kill ID"),
        (b"new colour=red", "new: unknown option colour=; known options: cwd, model; usage: new"),
        (b"new model=a model=b", "new: option model= given twice"),
        (b"ping\nfrob\n", "line 2: unknown command 'frob'"),
    ],
)
def test_parse_refuses_with_a_precise_message(data: bytes, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        TABLE.parse(data)


def test_a_bad_line_means_no_line_is_returned() -> None:
    with pytest.raises(CommandError):
        TABLE.parse(b"ping\nping\nbogus")


def test_duplicate_and_invalid_verbs_are_bugs() -> None:
    with pytest.raises(ValueError, match="already defined"):
        CommandTable([CommandSpec("ping", _answer), CommandSpec("ping", _answer)])
    with pytest.raises(ValueError, match="invalid command verb"):
        CommandSpec("a b", _answer)


def test_empty_table_says_so() -> None:
    with pytest.raises(CommandError, match="known commands: none"):
        CommandTable().parse(b"x")
