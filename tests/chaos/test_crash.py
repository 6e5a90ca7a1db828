"""Short mode of part b (tests/chaos/crash.py): kill -9 at random points of a workload with
tools, restart, and nothing acknowledged is lost, nothing runs twice, `out` matches the records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import crash
from tests.chaos.__main__ import missed

pytestmark = pytest.mark.slow


def test_kill_9_at_random_points_loses_and_repeats_nothing(tmp_path: Path) -> None:
    r = crash.run(tmp_path, kills=1, per_series=1)
    assert missed(r) == [], (r.counts, r.notes)
    assert r["kill -9"] == r["restarts"] == 1
    assert r["acknowledged prompts checked"] > 0
    for name in (
        "files left behind",
        "out inconsistent with the records",
        "transcripts that do not validate",
        "sessions not back idle after restart",
        "follow-up prompts not answered",
    ):
        assert r[name] == 0, (name, r.notes)
