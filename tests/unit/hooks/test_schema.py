"""`[hooks.NAME]` tables: checked with precise errors, read back as `HookSpec`s."""

from __future__ import annotations

import pytest

from anvild.config.schema import ConfigFileError, check_document
from anvild.hooks import Event, HookSet


def hooks(**tables: object) -> dict[str, object]:
    return check_document({"hooks": tables}, "config.toml")


def test_a_full_table_is_kept_whole_and_read_back() -> None:
    layer = hooks(
        guard={"event": "PreToolUse", "matcher": "Bash|Write", "command": "./guard.sh"},
        stop={"event": "Stop", "command": ["python3", "check.py"], "timeout": 5, "max_blocks": 1},
    )
    assert layer[("hooks", "guard")] == {
        "event": "PreToolUse",
        "command": "./guard.sh",
        "matcher": "Bash|Write",
    }
    tables = {key[1]: value for key, value in layer.items()}
    found = HookSet.of(tables)  # type: ignore[arg-type]
    (guard,) = found.matching(Event.PRE_TOOL_USE, "bash")
    assert guard.argv == ("sh", "-c", "./guard.sh")
    assert guard.timeout == 60.0
    assert not found.matching(Event.PRE_TOOL_USE, "bash_output")  # the whole name must match
    assert found.matching(Event.PRE_TOOL_USE, "write")
    (stop,) = found.matching(Event.STOP)
    assert (stop.argv, stop.timeout, stop.max_blocks) == (("python3", "check.py"), 5.0, 1)


def test_no_matcher_or_a_star_matches_every_tool() -> None:
    found = HookSet.of(
        {
            "a": {"event": "PostToolUse", "command": "a"},
            "b": {"event": "PostToolUse", "command": "b", "matcher": "*"},
            "c": {"event": "PostToolUse", "command": "c", "matcher": "mcp__.*"},
        }
    )
    assert [h.name for h in found.matching(Event.POST_TOOL_USE, "mcp__github__search")] == [
        "a",
        "b",
        "c",
    ]
    assert [h.name for h in found.matching(Event.POST_TOOL_USE, "bash")] == ["a", "b"]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"command": "x"}, "hooks.h.event: missing: a hook needs event (one of SessionStart"),
        ({"event": "PreToolUse"}, "hooks.h.command: missing"),
        ({"event": "BeforeTool", "command": "x"}, "hooks.h.event: expected one of 'SessionStart'"),
        ({"event": "Stop", "command": "  "}, "hooks.h.command: expected a non-empty string"),
        ({"event": "Stop", "command": []}, "hooks.h.command: expected a command string or a"),
        (
            {"event": "PreToolUse", "command": "x", "matcher": "("},
            "hooks.h.matcher: not a regular expression",
        ),
        (
            {"event": "Stop", "command": "x", "matcher": "bash"},
            "hooks.h.matcher: Stop hooks take no matcher; only PreToolUse, PostToolUse",
        ),
        (
            {"event": "Stop", "command": "x", "timeout": 0},
            "hooks.h.timeout: expected seconds above 0, at most 3600, got integer 0",
        ),
        (
            {"event": "PreToolUse", "command": "x", "max_blocks": 2},
            "hooks.h.max_blocks: only a Stop hook takes max_blocks",
        ),
        (
            {"event": "Stop", "command": "x", "max_blocks": 0},
            "hooks.h.max_blocks: expected a whole number from 1 to 100",
        ),
        (
            {"event": "Stop", "command": "x", "when": "always"},
            "hooks.h.when: unknown key; expected one of event, command, matcher, timeout",
        ),
    ],
)
def test_a_bad_table_names_the_key_and_what_to_write(table: object, message: str) -> None:
    with pytest.raises(ConfigFileError) as caught:
        hooks(h=table)
    assert str(caught.value).startswith(f"config.toml: {message}"), str(caught.value)


def test_a_hook_name_must_be_a_plain_name() -> None:
    with pytest.raises(ConfigFileError, match=r'hooks\."a b": expected a name'):
        hooks(**{"a b": {"event": "Stop", "command": "x"}})
