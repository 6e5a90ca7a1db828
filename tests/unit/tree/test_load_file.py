"""`agent/load` (`anvild.tree.load`): what a conductor reads to place a session."""

from __future__ import annotations

from pathlib import Path

from anvild.store.records import SessionStatus as S
from anvild.tree.load import load_text


def fields(text: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in text.splitlines())


def test_turns_under_way_are_running_and_each_state_is_counted(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000 kB\nMemFree: 1 kB\nMemAvailable:    8000 kB\n")
    states = [S.RUNNING, S.AWAIT_APPROVAL, S.STARTING, S.IDLE, S.IDLE, S.AWAIT]
    text = load_text(states, meminfo=meminfo)
    got = fields(text)
    assert text.splitlines()[:6] == [
        "running 3",
        "sessions 6",
        "state.await 1",
        "state.await_approval 1",
        "state.idle 2",
        "state.running 1",
    ]
    assert (got["mem_available"], got["mem_total"]) == ("8192000", "16384000")
    assert int(got["cores"]) >= 1
    assert len(got["loadavg"].split()) == 3


def test_no_sessions_and_no_meminfo(tmp_path: Path) -> None:
    got = fields(load_text([], meminfo=tmp_path / "absent"))
    assert (got["running"], got["sessions"]) == ("0", "0")
    assert (got["mem_available"], got["mem_total"]) == ("-", "-")
    assert not any(key.startswith("state.") for key in got)
