"""The daemon's log: level from ANVIL_LOG, JSON lines in a rotating file, secrets redacted."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from anvild.daemon.logs import LogLevelError, LogSetup, configure_logging, parse_level
from anvild.sandbox.secrets import Redactor

KEY = "sk-ant-api03-PLANTEDplantedPLANTED0123456789"


@pytest.mark.parametrize(
    ("value", "level"),
    [
        (None, logging.INFO),
        ("", logging.INFO),
        ("debug", logging.DEBUG),
        ("info", logging.INFO),
        ("WARNING", logging.WARNING),
        (" error ", logging.ERROR),
    ],
)
def test_anvil_log_levels(value: str | None, level: int) -> None:
    assert parse_level(value) == level


@pytest.mark.parametrize("value", ["verbose", "warn", "10", "critical"])
def test_an_unknown_level_is_refused_with_the_allowed_values(value: str) -> None:
    with pytest.raises(LogLevelError) as refused:
        parse_level(value)
    assert str(refused.value) == (
        f"ANVIL_LOG={value!r} is not a log level; set it to one of debug|info|warning|error "
        "(or unset it for info)"
    )


@pytest.fixture
def setups() -> Iterator[list[LogSetup]]:
    made: list[LogSetup] = []
    saved = logging.getLogger().handlers[:], logging.getLogger().level
    yield made
    for setup in made:
        setup.close()
    root = logging.getLogger()
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def configure(setups: list[LogSetup], data: Path, level: int = logging.INFO, **kw: Any) -> LogSetup:
    redactor = Redactor.from_environ({"ANTHROPIC_API_KEY": KEY})
    setup = configure_logging(data, level=level, redactor=redactor, **kw)
    setups.append(setup)
    return setup


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_structlog_and_stdlib_records_become_json_lines_in_the_file(
    tmp_path: Path, setups: list[LogSetup], capfd: pytest.CaptureFixture[str]
) -> None:
    setup = configure(setups, tmp_path)
    assert setup.path == tmp_path / "logs" / "anvild.log"
    structlog.get_logger("anvild.test").info("thing.happened", count=3)
    logging.getLogger("anvild.legacy").warning("old style %s", "message")
    structlog.get_logger("anvild.test").debug("too.detailed")  # below the level
    got = records(setup.path)
    assert [(r["logger"], r["level"], r["event"]) for r in got] == [
        ("anvild.test", "info", "thing.happened"),
        ("anvild.legacy", "warning", "old style message"),
    ]
    assert got[0]["count"] == 3
    assert got[0]["timestamp"].endswith("Z")
    assert capfd.readouterr() == ("", "")  # nothing on stdout or stderr
    assert (tmp_path / "logs").stat().st_mode & 0o777 == 0o700
    assert setup.path.stat().st_mode & 0o777 == 0o600


def test_debug_level_lets_debug_through_and_error_holds_back_warnings(
    tmp_path: Path, setups: list[LogSetup]
) -> None:
    (tmp_path / "a").mkdir()
    setup = configure(setups, tmp_path / "a", logging.DEBUG)
    structlog.get_logger("x").debug("seen")
    assert [r["event"] for r in records(setup.path)] == ["seen"]
    setup.close()
    setups.remove(setup)
    (tmp_path / "b").mkdir()
    setup = configure(setups, tmp_path / "b", logging.ERROR)
    structlog.get_logger("x").warning("hidden")
    logging.getLogger("y").info("hidden too")
    structlog.get_logger("x").error("shown")
    assert [r["event"] for r in records(setup.path)] == ["shown"]


def test_http_client_chatter_is_held_at_warning_unless_debug(
    tmp_path: Path, setups: list[LogSetup]
) -> None:
    setup = configure(setups, tmp_path)
    logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1/health")
    assert records(setup.path) == []


def test_a_planted_key_never_reaches_the_file(tmp_path: Path, setups: list[LogSetup]) -> None:
    setup = configure(setups, tmp_path)
    log = structlog.get_logger("anvild.test")
    log.info(f"event with {KEY}", header=f"Bearer {KEY}", nested={"k": [KEY]})
    logging.getLogger("anvild.legacy").info("stdlib arg %s", KEY)
    try:
        raise RuntimeError(f"request failed: key {KEY} rejected")
    except RuntimeError:
        log.exception("call.failed")
    log.info("a cut key", tail=KEY[-12:], weird=f'"{KEY}\\')
    text = setup.path.read_text()
    assert KEY not in text
    assert KEY[:12] not in text
    assert KEY[-12:] not in text
    got = records(setup.path)
    assert got[0]["event"] == "event with [redacted:ANTHROPIC_API_KEY]"
    assert got[0]["header"] == "Bearer [redacted:ANTHROPIC_API_KEY]"
    assert got[0]["nested"] == {"k": ["[redacted:ANTHROPIC_API_KEY]"]}
    assert got[1]["event"] == "stdlib arg [redacted:ANTHROPIC_API_KEY]"
    assert "RuntimeError: request failed: key [redacted:ANTHROPIC_API_KEY]" in got[2]["exception"]


def test_the_file_rotates_by_size_and_keeps_a_bounded_number(
    tmp_path: Path, setups: list[LogSetup]
) -> None:
    setup = configure(setups, tmp_path, max_bytes=2000, backups=2)
    log = structlog.get_logger("anvild.test")
    for i in range(200):
        log.info("filler", i=i, pad="x" * 50)
    names = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert names == ["anvild.log", "anvild.log.1", "anvild.log.2"]
    assert all(p.stat().st_size <= 2000 for p in (tmp_path / "logs").iterdir())
    assert records(setup.path)[-1]["i"] == 199
