"""End to end: `anvilctl sessions` and `anvilctl attach` through the real daemon.

The daemon runs as a subprocess against the fake provider server (helpers from
test_sessions_e2e.py). `attach` runs on a real pseudo-terminal: the test holds the master side,
types on it (Ctrl-C is the byte 0x03, which the terminal turns into SIGINT) and reads what the
command prints, with a deadline on every read so nothing hangs.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import (
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)


@pytest.fixture
def namespace(tmp_path: Path) -> Path:
    return tmp_path / "ns"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, [{"text": "pong", "repeat": True}])
    yield server
    server.stop()


@pytest.fixture
def config(tmp_path: Path, fake: FakeServer) -> Path:
    return user_config(tmp_path, fake.url)


@pytest.fixture
def daemon(namespace: Path, config: Path) -> Iterator[Anvild]:
    d = start_daemon(namespace, config)
    yield d
    code, log = d.stop()
    assert code == 0, log


def turn(namespace: Path, session: str, prompt: str) -> None:
    ok(anvilctl(namespace, "send", session, "-", stdin=prompt))
    assert ok(anvilctl(namespace, "wait", session)) == "await\n"


def table(text: str) -> list[list[str]]:
    """The `sessions` table as rows of cells (columns are two or more spaces apart)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


# --- anvilctl sessions ----------------------------------------------------------------------


def test_sessions_lists_this_directorys_sessions_with_first_prompt_and_age(
    daemon: Anvild, namespace: Path, workdir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    mine = ok(anvilctl(namespace, "new", "alias=dev", cwd=workdir)).strip()
    fresh = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
    theirs = ok(anvilctl(namespace, "new", cwd=other)).strip()
    turn(namespace, mine, "fix the parser\nthen the lexer\n")
    turn(namespace, theirs, "elsewhere")

    created = read(namespace, f"agent/{mine}/created").strip()
    stamp = dt.datetime.fromisoformat(created)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created), created
    assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 60
    assert read(namespace, f"agent/{mine}/first_prompt") == "fix the parser\n"
    assert read(namespace, f"agent/{fresh}/first_prompt") == "-\n"
    listing = read(namespace, "agent/list").splitlines()  # its format is unchanged
    assert [len(line.split("\t")) for line in listing] == [6, 6, 6]

    rows = table(ok(anvilctl(namespace, "sessions", cwd=workdir)))
    assert rows[0] == ["ID", "ALIAS", "STATE", "ROLE", "MODEL", "AGE", "PROMPT"]
    by_id = {row[0]: row for row in rows[1:]}
    assert set(by_id) == {mine, fresh}  # not the session of the other directory
    assert by_id[mine][1:5] == ["dev", "await", "developer", "fake"]
    assert re.fullmatch(r"\d+s|1m", by_id[mine][5]), by_id[mine]
    assert by_id[mine][6] == "fix the parser"
    assert by_id[fresh][1] == "-"
    assert by_id[fresh][6] == "-"

    everything = table(ok(anvilctl(namespace, "sessions", "--all", cwd=workdir)))
    assert everything[0] == ["ID", "ALIAS", "STATE", "ROLE", "MODEL", "AGE", "CWD", "PROMPT"]
    all_ids = {row[0]: row for row in everything[1:]}
    assert set(all_ids) == {mine, fresh, theirs}
    assert all_ids[theirs][6:] == [str(other), "elsewhere"]

    empty = tmp_path / "empty"
    empty.mkdir()
    none = anvilctl(namespace, "sessions", cwd=empty)
    assert (none.returncode, none.stdout) == (0, "")
    assert f"no sessions in {empty}; `anvilctl sessions --all` lists every one" in none.stderr


def test_sessions_keeps_first_prompt_and_creation_time_across_a_restart(
    namespace: Path, config: Path, workdir: Path
) -> None:
    first = start_daemon(namespace, config)
    try:
        session_id = ok(anvilctl(namespace, "new", cwd=workdir)).strip()
        turn(namespace, session_id, "remember me")
        turn(namespace, session_id, "a later prompt")
        created = read(namespace, f"agent/{session_id}/created")
        before = table(ok(anvilctl(namespace, "sessions", cwd=workdir)))
    finally:
        code, log = first.stop()
    assert code == 0, log
    second = start_daemon(namespace, config)
    try:
        assert read(namespace, f"agent/{session_id}/created") == created
        assert read(namespace, f"agent/{session_id}/first_prompt") == "remember me\n"
        after = table(ok(anvilctl(namespace, "sessions", cwd=workdir)))
    finally:
        code, log = second.stop()
    assert code == 0, log
    assert [row[0] for row in after] == [row[0] for row in before] == ["ID", session_id]
    assert after[1][-1] == "remember me"


def test_sessions_without_a_daemon_says_which_socket(namespace: Path, workdir: Path) -> None:
    result = anvilctl(namespace, "sessions", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.startswith(f"anvilctl sessions: dial unix!{namespace}/agent: ")
