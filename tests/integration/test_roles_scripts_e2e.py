"""End to end through the real `anvild` process: the workflow scripts run from the tree
(`bash <(anvilctl read agent/scripts/fanout) ...`, no checkout needed), and role files written
through the tree with `anvilctl write` (refused on the write with the loader's error; a valid one
lands in the daemon's user config directory)."""

from __future__ import annotations

from typing import Any

from anvild import data
from tests.integration.test_workflows_e2e import (
    assert_ok,
    check_fanout_output,
    fanout_turns,
    rig_factory,
)

__all__ = ["rig_factory"]  # the fixture, used by name


def test_fanout_read_from_the_tree_runs_a_fan_out_without_a_checkout(rig_factory: Any) -> None:
    rig = rig_factory(fanout_turns())
    served = assert_ok(rig.run("anvilctl", "read", "agent/scripts/fanout"))
    assert served == (data.path(data.SCRIPTS) / "fanout").read_text()
    assert not (rig.work / "scripts").exists()  # the script comes from the tree, not a checkout
    command = "bash <(anvilctl read agent/scripts/fanout) -n 3 -m fake Say your answer."
    result = rig.run("bash", "-c", command)
    ids = check_fanout_output(assert_ok(result), 3)
    assert len(set(ids)) == 3
    assert rig.sessions() == []  # fanout killed them at the end


def test_a_broken_role_is_refused_on_the_write_and_a_valid_one_lands_in_the_config_dir(
    rig_factory: Any,
) -> None:
    rig = rig_factory([])
    path = "agent/sandbox-roles/developer.yaml"
    user_file = rig.tmp_path / "xdg-config" / "anvil" / "sandbox-roles" / "developer.yaml"
    shipped = assert_ok(rig.run("anvilctl", "read", path))
    refused = rig.run("anvilctl", "write", path, stdin="network: maybe\n")
    assert refused.returncode != 0, refused
    assert "network must be true or false, got 'maybe'" in refused.stderr, refused.stderr
    assert not user_file.exists()
    assert assert_ok(rig.run("anvilctl", "read", path)) == shipped
    role = "description: Reads only.\ngit: read-only\n"
    assert_ok(rig.run("anvilctl", "write", path, stdin=role))
    assert user_file.read_text() == role
    assert assert_ok(rig.run("anvilctl", "read", path)) == role
