"""Short mode of part a (tests/chaos/ninep_fuzz.py): hostile 9P frames against every file of a
real daemon's tree in the three dialects."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import ninep_fuzz
from tests.chaos.__main__ import missed

pytestmark = pytest.mark.slow


def test_hostile_frames_against_every_file_in_every_dialect(tmp_path: Path) -> None:
    r = ninep_fuzz.run(tmp_path, episodes=None, frames_per_episode=2)  # every file, each dialect
    assert missed(r) == [], (r.counts, r.notes)
    assert r["(dialect, file) pairs covered"] == 3 * r["files and directories in the tree"]
    assert r["frames generated"] > 50
    assert r["frames mutated from traces"] > 50
