"""Short mode of part e (tests/chaos/connections.py): 1,000 held connections under a soft
descriptor limit of 1024 while another client is served, then the cap reached and refused
beyond it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import connections
from tests.chaos.__main__ import missed

pytestmark = pytest.mark.slow


def test_a_thousand_held_connections_then_the_cap_under_a_soft_limit_of_1024(
    tmp_path: Path,
) -> None:
    r = connections.run(tmp_path, 1000, soft_nofile=1024, beyond=30)
    assert missed(r) == [], (r.counts, r.notes)
    assert r["connections held open (attached)"] == 1000, r.notes
    assert r["held connections still answering"] == 1000
    assert r["daemon fds with them open"] >= 1000
    assert r["other client served (ms, a prompt answered)"] > 0
    # Without the raised descriptor limit (anvild.daemon.fdlimit), accept() failed with EMFILE
    # from about 1,008 connections on and the rest waited unanswered.
    assert r["of 30 more connections: held"] == 24, (r.counts, r.notes)
    assert r["connections refused at the cap, naming max_connections"] == 6
    assert r["connections that failed otherwise (closed, unanswered)"] == 0
