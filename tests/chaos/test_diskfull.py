"""Short mode of part c (tests/chaos/diskfull.py): the data directory on a full tmpfs. One run
(one daemon, one mount) serves both tests: 0 and 4096 bytes free, then 0 bytes free with a
`clear` written while full."""

from __future__ import annotations

import pytest

from tests.chaos import diskfull
from tests.chaos.__main__ import missed
from tests.chaos.common import Result

pytestmark = pytest.mark.slow

SHORT = (0, 4096)  # the full run adds 64 and 512


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Result:
    try:
        return diskfull.run(tmp_path_factory.mktemp("disk"), free_left=SHORT, then_clear=(0,))
    except diskfull.MountRefused as exc:
        pytest.skip(str(exc))


def test_a_full_disk_refuses_clearly_corrupts_nothing_and_recovers(disk: Result) -> None:
    r = disk
    assert missed(r) == [], (r.counts, r.notes)
    # The long prompt needs new pages: refused at every free size, naming the full disk.
    assert r["prompt of 20000 bytes: refused, naming the full disk"] == len(SHORT) + 1
    assert r["refusals that do not say the disk is full"] == 0, r.notes
    # `start` brings the session back (with the `clear` refused too); a prompt is answered
    # every time.
    assert r["sessions started again by `start`"] == len(SHORT) + 1, r.notes
    assert r["recoveries when space returned"] == len(SHORT) + 1, r.notes
    assert r["record lines checked"] > 0


def test_a_clear_refused_while_the_disk_is_full_leaves_the_session_startable(
    disk: Result,
) -> None:
    assert disk["session ctl (clear): refused, naming the full disk"] == 1
    assert disk["sessions that `start` cannot recover once space is back"] == 0, disk.notes
