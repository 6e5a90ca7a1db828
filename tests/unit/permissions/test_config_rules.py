"""Invalid rule syntax fails config loading with the rule, the position and what was expected."""

from __future__ import annotations

import pytest

from anvild.config.schema import ConfigFileError, check_document


def test_valid_rules_load() -> None:
    layer = check_document(
        {"permissions": {"allow": ["bash(cargo test:*)", "read_file"], "deny": ["mcp__x__*"]}},
        "config.toml",
    )
    assert layer[("permissions", "allow")] == ["bash(cargo test:*)", "read_file"]


def test_an_invalid_rule_fails_loading_with_position_and_expectation() -> None:
    with pytest.raises(ConfigFileError) as info:
        check_document({"permissions": {"ask": ["read_file", "bash(git push"]}}, "config.toml")
    message = str(info.value)
    assert message.startswith("config.toml: permissions.ask: rule 2: ")
    assert "invalid permission rule 'bash(git push' at column 14" in message
    assert "expected ')' to close the pattern opened at column 5" in message
