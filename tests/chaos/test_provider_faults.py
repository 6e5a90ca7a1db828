"""Short mode of part d (tests/chaos/provider_faults.py): every provider fault ends the turn
with a clear outcome, the stalled one by `cancel`, and the daemon serves throughout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import provider_faults
from tests.chaos.__main__ import missed

pytestmark = pytest.mark.slow


def test_provider_faults_end_the_turn_clearly_and_the_daemon_serves_on(tmp_path: Path) -> None:
    r = provider_faults.run(tmp_path)
    assert missed(r) == [], (r.counts, r.notes)
    assert r["turns without a clear outcome"] == 0, r.notes
    assert r["turns ended with a clear outcome"] == r["cases"] == 6, r.notes
