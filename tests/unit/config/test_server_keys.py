"""`[server]`: the 9P server's limits. Defaults, values read from the user config, and
validation errors that name the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.config import ConfigFileError, ServerLimits, load


def _load(tmp_path: Path, text: str) -> ServerLimits:
    user = tmp_path / "user.toml"
    user.write_text(text)
    return load(tmp_path, user_file=user, data_dir=tmp_path / "data", project=False).server


def test_defaults(tmp_path: Path) -> None:
    assert _load(tmp_path, "") == ServerLimits(10.0, 1024, 4096, 256)


def test_the_keys_are_read(tmp_path: Path) -> None:
    text = (
        "[server]\nhandshake_timeout = 2\nmax_connections = 8\nmax_fids = 64\n"
        "max_outstanding = 65535\n"
    )
    limits = _load(tmp_path, text)
    assert limits == ServerLimits(2.0, 8, 64, 65535)
    assert isinstance(limits.handshake_timeout, float)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "handshake_timeout = 0",
            "expected a number of seconds above 0, at most 3600, got integer 0",
        ),
        ("handshake_timeout = -1.5", "a number of seconds above 0, at most 3600, got float -1.5"),
        ("handshake_timeout = inf", "a number of seconds above 0, at most 3600, got float inf"),
        ("handshake_timeout = nan", "a number of seconds above 0, at most 3600, got float nan"),
        ('handshake_timeout = "10s"', "a number of seconds above 0, at most 3600, got string"),
        ("handshake_timeout = true", "a number of seconds above 0, at most 3600, got boolean"),
        ("max_connections = 0", "expected a whole number from 1 to 100000, got integer 0"),
        ("max_fids = 2.5", "expected a whole number from 1 to 1000000, got float 2.5"),
        ("max_outstanding = 65536", "expected a whole number from 1 to 65535, got integer 65536"),
        ("max_tags = 5", "unknown key; expected one of handshake_timeout, max_connections"),
    ],
)
def test_bad_values_name_the_key_and_the_rule(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigFileError) as info:
        _load(tmp_path, f"[server]\n{text}\n")
    key = text.split(" =")[0]
    assert f"user.toml: server.{key}: " in str(info.value)
    assert message in str(info.value)
