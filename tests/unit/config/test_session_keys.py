"""`[permissions] mode / max_mode / full_access` and `[sessions]`: defaults, validation naming the
key and the allowed values, the mode ceiling, full_access from the user config only, and the
daemon's `SessionSettings` built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.agent.permissions.policy import Mode
from anvild.config import Config, ConfigFileError, SessionLimits, load
from anvild.config.schema import MODES
from anvild.daemon.wiring import Sessions
from anvild.session.session import MODE_ORDER
from anvild.tree.root import RootTree


def _load(tmp_path: Path, text: str, project: str | None = None) -> Config:
    user = tmp_path / "user.toml"
    user.write_text(text)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True, exist_ok=True)
    if project is not None:
        (repo / ".anvil").mkdir(exist_ok=True)
        (repo / ".anvil" / "config.toml").write_text(project)
    return load(repo, user_file=user, data_dir=tmp_path / "data")


def test_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, user_file=tmp_path / "none.toml", data_dir=tmp_path / "data")
    perms = config.permissions
    assert (perms.mode, perms.max_mode, perms.full_access) == ("default", "accept-edits", False)
    assert config.sessions == SessionLimits(50, None, 3600.0, 60.0)
    assert config.sessions.max_prompt_bytes == 1 << 20


def test_the_keys_are_read(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        user_file=_write(
            tmp_path,
            '[permissions]\nmode = "plan"\nmax_mode = "bypass"\nfull_access = true\n'
            "[sessions]\nmax_steps = 7\ntoken_budget = 9000\nturn_deadline = 0\n"
            "reap_delay = 2.5\nmax_prompt_bytes = 4096\n",
        ),
        data_dir=tmp_path / "data",
    )
    perms = config.permissions
    assert (perms.mode, perms.max_mode, perms.full_access) == ("plan", "bypass", True)
    assert config.sessions == SessionLimits(7, 9000, None, 2.5, 4096)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "user.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[permissions]\nmode = "yolo"',
            "permissions.mode: expected one of 'plan', 'default', 'accept-edits', 'bypass', "
            "got string 'yolo'",
        ),
        (
            "[permissions]\nmax_mode = 3",
            "permissions.max_mode: expected one of 'plan', 'default', 'accept-edits', 'bypass', "
            "got integer 3",
        ),
        (
            '[permissions]\nfull_access = "yes"',
            "permissions.full_access: expected true or false",
        ),
        (
            "[sessions]\nmax_steps = 0",
            "sessions.max_steps: expected a whole number from 1 to 1000, got integer 0",
        ),
        (
            "[sessions]\ntoken_budget = -5",
            "sessions.token_budget: expected a positive integer, got integer -5",
        ),
        (
            '[sessions]\nturn_deadline = "1h"',
            "sessions.turn_deadline: expected a number of seconds (0 or more; 0 means no deadline)",
        ),
        (
            "[sessions]\nreap_delay = -1",
            "sessions.reap_delay: expected a number of seconds (0 or more; 0 means at once)",
        ),
        (
            "[sessions]\nmax_prompt_bytes = 0",
            "sessions.max_prompt_bytes: expected a whole number from 1 to 16777216, got integer 0",
        ),
        (
            "[sessions]\nmax_prompt_bytes = 16777217",
            "sessions.max_prompt_bytes: expected a whole number from 1 to 16777216",
        ),
        (
            '[sessions]\nmax_prompt_bytes = "1M"',
            "sessions.max_prompt_bytes: expected a whole number from 1 to 16777216, got "
            "string '1M'",
        ),
        (
            "[sessions]\nsteps = 3",
            "sessions.steps: unknown key; expected one of max_steps, token_budget, "
            "turn_deadline, reap_delay, max_prompt_bytes, idle_unload in [sessions]",
        ),
        (
            '[permissions]\nmode = "bypass"',
            "permissions.mode: permissions.mode = 'bypass' is wider than permissions.max_mode = "
            "'accept-edits'; the modes from narrowest to widest are",
        ),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigFileError) as info:
        _load(tmp_path, text + "\n")
    assert message in str(info.value)
    assert str(info.value).startswith(str(tmp_path / "user.toml"))


def test_the_modes_listed_narrowest_first(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError) as info:
        _load(tmp_path, '[permissions]\nmode = "bypass"\n')
    assert str(info.value).endswith("plan, default, accept-edits, bypass")
    narrow = _load(tmp_path, '[permissions]\nmode = "plan"\nmax_mode = "default"\n')
    assert narrow.permissions.mode == "plan"
    with pytest.raises(ConfigFileError, match=r"'default' is wider than permissions\.max_mode"):
        _load(tmp_path, '[permissions]\nmax_mode = "plan"\n')


def test_the_config_and_the_session_layer_order_the_modes_alike() -> None:
    assert tuple(m.value for m in MODE_ORDER) == MODES
    assert set(MODES) == {m.value for m in Mode}


def test_a_project_never_grants_full_access(tmp_path: Path) -> None:
    config = _load(tmp_path, "", project="[permissions]\nfull_access = true\n")
    assert config.permissions.full_access is False
    warnings = [str(w) for w in config.warnings]
    assert any("ignored permissions.full_access: only the user config" in w for w in warnings)


def test_the_daemon_settings_come_from_the_config(tmp_path: Path) -> None:
    user = _write(
        tmp_path,
        '[permissions]\nmode = "accept-edits"\nmax_mode = "bypass"\nfull_access = true\n'
        "[sessions]\nmax_steps = 7\ntoken_budget = 9000\nturn_deadline = 0\nreap_delay = 2\n",
    )
    config = load(tmp_path, user_file=user, data_dir=tmp_path / "data", project=False)
    sessions = Sessions.build(config, RootTree(version="t"), env={}, data_dir=tmp_path / "data")
    settings = sessions.manager.settings
    assert (settings.mode, settings.max_mode) == (Mode.ACCEPT_EDITS, Mode.BYPASS)
    assert settings.full_access_granted_by == f"permissions.full_access in {user}"
    assert (settings.max_steps, settings.token_budget) == (7, 9000)
    assert (settings.turn_deadline, settings.reap_delay) == (None, 2.0)
