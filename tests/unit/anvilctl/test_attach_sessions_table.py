"""The pure parts of `anvilctl sessions`: ages, the `created` file, the table."""

from __future__ import annotations

import datetime as dt

import pytest

from anvilctl.sessions import SessionRow, age_text, format_sessions, parse_created, usage_text

NOW = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0s"),
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m"),
        (3 * 60 + 59, "3m"),
        (3599, "59m"),
        (2 * 3600, "2h"),
        (86399, "23h"),
        (5 * 86400 + 3600, "5d"),
        (400 * 86400, "400d"),
    ],
)
def test_age_text(seconds: float, text: str) -> None:
    assert age_text(seconds) == text


def test_parse_created_takes_rfc3339_utc_only() -> None:
    assert parse_created("2026-11-30T11:57:00Z\n") == dt.datetime(
        2026, 11, 30, 11, 57, tzinfo=dt.UTC
    )
    assert parse_created("2026-11-30T11:57:00") is None  # no zone: not a point in time
    assert parse_created("-\n") is None
    assert parse_created("") is None


def row(
    sid: str,
    alias: str,
    minutes: float | None,
    prompt: str,
    cwd: str = "/w",
    usage: str = "-",
    outcome: str = "-",
) -> SessionRow:
    created = None if minutes is None else NOW - dt.timedelta(minutes=minutes)
    return SessionRow(sid, alias, "idle", "developer", "fake", cwd, created, prompt, usage, outcome)


def test_the_table_aligns_columns_and_cuts_the_prompt_to_the_width() -> None:
    rows = [
        row("a1b2c3", "dev", 3, "fix the parser " * 10, usage="17.4k/200k 8.7%", outcome="error"),
        row("d4e5f6", "-", None, "-"),
    ]
    text = format_sessions(rows, NOW, width=100)
    lines = text.splitlines()
    assert lines[0].split() == [
        "ID", "ALIAS", "STATE", "OUTCOME", "ROLE", "MODEL", "USAGE", "AGE", "PROMPT"
    ]  # fmt: skip
    assert lines[1].startswith(
        "a1b2c3  dev    idle   error    developer  fake   17.4k/200k 8.7%  3m   fix the parser"
    )
    assert lines[1].endswith("…")
    assert len(lines[1]) == 100
    assert lines[2] == "d4e5f6  -      idle   -        developer  fake   -                -    -"
    assert lines[0].index("PROMPT") == lines[1].index("fix")


def test_the_prompt_column_keeps_twenty_characters_on_a_narrow_terminal() -> None:
    text = format_sessions([row("a1", "-", 0, "x" * 50)], NOW, width=10)
    assert text.splitlines()[1].endswith(" " + "x" * 19 + "…")


def test_all_adds_the_cwd_column() -> None:
    text = format_sessions(
        [row("a1", "-", 90 * 24 * 60, "hi", cwd="/src/app", outcome="done")], NOW, show_cwd=True
    )
    assert text.splitlines()[0].split() == [
        "ID", "ALIAS", "STATE", "OUTCOME", "ROLE", "MODEL", "USAGE", "AGE", "CWD", "PROMPT"
    ]  # fmt: skip
    assert text.splitlines()[1].split() == [
        "a1",
        "-",
        "idle",
        "done",
        "developer",
        "fake",
        "-",
        "90d",
        "/src/app",
        "hi",
    ]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("17426/200000 (8.7%)\n", "17.4k/200k 8.7%"),
        ("512/8192 (6.2%)\n", "512/8.2k 6.2%"),
        ("1000/1000000 (0.1%)", "1k/1M 0.1%"),
        ("5274/6000 (87.9%) compact at 85%\n", "5.3k/6k 87.9%"),
        ("1234567/2000000 (61.7%)", "1.2M/2M 61.7%"),
        ("-\n", "-"),
        ("N/A\n", "-"),  # what AnviLLM writes for a backend without a context query
        ("", "-"),
        (None, "-"),  # the file could not be read
    ],
)
def test_usage_text_shows_used_over_window_and_the_percentage(text: str | None, shown: str) -> None:
    assert usage_text(text) == shown
