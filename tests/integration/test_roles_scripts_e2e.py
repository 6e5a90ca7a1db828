"""End to end through the real `anvild` process: the workflow scripts run from the tree
(`bash <(anvilctl read agent/scripts/fanout) ...`, no checkout needed), and role files written
through the tree with `anvilctl write` (refused on the write with the loader's error; a valid one
lands in the daemon's user config directory), and created and removed with PyPI `python-9p`
(Tcreate, Twrite, Tremove in 9P2000, as `9p create`/`9p write`/`9p rm` and 9pfuse send them)."""

from __future__ import annotations

from typing import Any

import pytest
from py9p import client as p9client

from anvild import data
from anvild.ninep.constants import OWRITE
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


def test_a_sandbox_role_created_over_9p_is_checked_used_by_ls_and_removed(rig_factory: Any) -> None:
    rig = rig_factory([])
    user_dir = rig.tmp_path / "xdg-config" / "anvil" / "sandbox-roles"
    role = b"description: Audits.\nnetwork: false\ngit: read-only\n"
    with p9client.Client.connect_unix(str(rig.namespace / "agent")) as c:
        c.negotiate()
        c.attach(0, uname="tester")
        c.walk(0, 1, "sandbox-roles")
        c.create(1, "auditor.yaml", 0o644, OWRITE)
        c.write(1, role)
        c.clunk(1)
        assert (user_dir / "auditor.yaml").read_bytes() == role
        assert "auditor.yaml" in assert_ok(rig.run("anvilctl", "ls", "agent/sandbox-roles")).split()
        c.walk(0, 2, "sandbox-roles")
        c.create(2, "broken.yaml", 0o644, OWRITE)
        with pytest.raises(p9client.RemoteError, match="network must be true or false"):
            c.write(2, b"network: maybe\n")
        with pytest.raises(p9client.RemoteError, match="the role file is unchanged"):
            c.clunk(2)  # a refused open repeats its refusal at the clunk
        assert (user_dir / "broken.yaml").read_bytes() == b""  # created empty, the narrowest
        for name in ("auditor.yaml", "broken.yaml"):
            c.walk(0, 3, ("sandbox-roles", name))
            c.remove(3)
            assert not (user_dir / name).exists()
        c.walk(0, 4, ("sandbox-roles", "tester.yaml"))
        with pytest.raises(p9client.RemoteError, match="a shipped role cannot be removed"):
            c.remove(4)
        c.walk(0, 5, "roles")
        with pytest.raises(p9client.RemoteError, match="a new role cannot be made here"):
            c.create(5, "auditor", 0o644, OWRITE)
    listed = assert_ok(rig.run("anvilctl", "ls", "agent/sandbox-roles")).split()
    assert "auditor.yaml" not in listed
    assert "tester.yaml" in listed
