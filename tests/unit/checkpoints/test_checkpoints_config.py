"""`[checkpoints]` is the daemon's own: a project file can neither switch it off nor widen it."""

from __future__ import annotations

from anvild.config.trust import authority_of
from anvild.session.project_config import DAEMON_WIDE


def test_a_project_cannot_switch_checkpoints_off_without_a_grant() -> None:
    assert authority_of(("checkpoints", "enabled")) == "budget"
    assert authority_of(("checkpoints", "max_file_bytes")) == "budget"


def test_the_config_file_shows_checkpoints_as_daemon_wide() -> None:
    assert "checkpoints" in DAEMON_WIDE
