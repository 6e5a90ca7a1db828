"""Rule parsing and matching (course 11.1, 11.B): table-driven, synchronous."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from anvild.agent.permissions.rules import (
    AnySubject,
    CommandSubject,
    Exact,
    Glob,
    PathSubject,
    Prefix,
    Rule,
    RuleKind,
    RuleSet,
    RuleSyntaxError,
    TextSubject,
    parse_rule,
)

WS = PurePosixPath("/work/repo")
HOME = PurePosixPath("/home/dev")


def path(p: str) -> PathSubject:
    return PathSubject.of(PurePosixPath(p), WS, HOME)


@pytest.mark.parametrize(
    ("text", "selector", "pattern"),
    [
        ("read_file", "read_file", None),
        ("  read_file  ", "read_file", None),
        ("bash(cargo test:*)", "bash", Prefix("cargo test", ("cargo", "test"))),
        ("bash(git status)", "bash", Exact("git status", ("git", "status"))),
        ("bash( git  'status' )", "bash", Exact("git  'status'", ("git", "status"))),
        ("bash(git log *)", "bash", Glob("git log *")),
        ("bash(*)", "bash", AnySubject()),
        ("bash(echo (x))", "bash", Exact("echo (x)", ("echo", "(x)"))),
        ("edit_file(src/**)", "edit_file", Glob("src/**")),
        ("read_file(README.md)", "read_file", Exact("README.md")),
        ("mcp__github__*", "mcp__github__*", None),
        ("mcp__github__get_issue(42)", "mcp__github__get_issue", Exact("42")),
        ("Bash(npm run test:*)", "Bash", Prefix("npm run test", ("npm", "run", "test"))),
    ],
)
def test_parse(text: str, selector: str, pattern: object) -> None:
    rule = parse_rule(text, RuleKind.DENY)
    assert (rule.kind, rule.selector, rule.pattern) == (RuleKind.DENY, selector, pattern)


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("", 0, "a tool name"),
        ("bash(cargo test", 15, "')' to close the pattern opened at column 5"),
        ("bash()", 5, "a pattern inside '()'"),
        ("bash(  )", 7, "a pattern inside '()'"),
        ("bash(ls) x", 8, "the end of the rule after ')'"),
        ("ba sh", 2, "a tool name character"),
        ("read.file", 4, "a tool name character"),
        ("(ls)", 0, "a tool name before '('"),
        ("*", 0, "a wildcard completes a name"),
        ("bash(:*)", 5, "a prefix before ':*'"),
        ("bash(git * x:*)", 9, "a literal prefix before ':*'"),
        ("bash(echo 'unclosed)", 5, "a command with balanced quotes"),
        ("edit_file(!src/**)", 10, "'!' negation has no meaning"),
        ("edit_file(src:*)", 13, "':*' prefixes are for commands"),
        ("  bash(", 7, "')' to close the pattern opened at column 7"),
    ],
)
def test_invalid_rules_say_where_and_what_was_expected(
    text: str, position: int, expected: str
) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_rule(text)
    error = info.value
    assert (error.rule, error.position) == (text, position)
    assert expected in error.expected
    assert f"at column {position + 1}: expected" in str(error)
    assert repr(text) in str(error)


@pytest.mark.parametrize(
    ("rule", "words", "matches"),
    [
        ("bash(cargo test:*)", ["cargo", "test", "--lib"], True),
        ("bash(cargo test:*)", ["cargo", "test"], True),
        ("bash(cargo test:*)", ["cargo", "testx"], False),
        ("bash(cargo test:*)", ["cargo", "build"], False),
        ("bash(cargo test:*)", ["FOO=1", "cargo", "test"], False),
        ("bash(git status)", ["git", "status"], True),
        ("bash(git status)", ["git", "status", "-s"], False),
        ("bash(git commit -m 'a b')", ["git", "commit", "-m", "a b"], True),
        ("bash(git commit -m 'a b')", ["git", "commit", "-m", "a", "b"], False),
        ("bash(git log *)", ["git", "log", "--oneline"], True),
        ("bash(git log *)", ["git", "log"], False),
        ("bash(*)", ["anything"], True),
        ("bash", ["anything"], True),
        ("Bash(ls:*)", ["ls", "-la"], True),
    ],
)
def test_command_matching(rule: str, words: list[str], matches: bool) -> None:
    assert parse_rule(rule).matches("bash", CommandSubject(words)) is matches


@pytest.mark.parametrize(
    ("rule", "subject", "matches"),
    [
        ("edit_file(src/**)", "/work/repo/src/a/b.rs", True),
        ("edit_file(src/**)", "/work/repo/src", False),
        ("edit_file(src/**)", "/work/repo/lib/src.rs", False),
        ("edit_file(src)", "/work/repo/src/main.rs", True),
        ("edit_file(*.md)", "/work/repo/docs/x.md", True),
        ("edit_file(/docs/**)", "/work/repo/docs/x.md", True),
        ("edit_file(./docs/**)", "/work/repo/docs/x.md", True),
        ("edit_file(/docs/**)", "/work/repo/a/docs/x.md", False),
        ("read_file(README.md)", "/work/repo/README.md", True),
        ("read_file(README.md)", "/other/README.md", False),
        ("read_file(~/notes/**)", "/home/dev/notes/a.txt", True),
        ("read_file(~)", "/home/dev/a.txt", True),
        ("read_file(//etc/hosts)", "/etc/hosts", True),
        ("read_file(//etc/**)", "/etc/ssh/sshd_config", True),
        ("read_file(//etc/**)", "/work/repo/etc/x", False),
        ("read_file(*)", "/anywhere/at/all", True),
        ("Read(src/**)", "/work/repo/src/x", True),
    ],
)
def test_path_matching(rule: str, subject: str, matches: bool) -> None:
    assert (
        parse_rule(rule).matches(
            "read_file" if "read" in rule.lower() else "edit_file", path(subject)
        )
        is matches
    )


def test_path_subject_relative_forms() -> None:
    assert path("/work/repo/src/a.rs") == PathSubject("/work/repo/src/a.rs", "src/a.rs", None)
    assert path("/home/dev/x") == PathSubject("/home/dev/x", None, "x")
    assert path("/work/repo") == PathSubject("/work/repo", ".", None)


@pytest.mark.parametrize(
    ("selector", "tool", "selects"),
    [
        ("mcp__github__*", "mcp__github__get_issue", True),
        ("mcp__github__*", "mcp__github__create_pr", True),
        ("mcp__github__*", "mcp__gitlab__get_issue", False),
        ("mcp__github__*", "mcp__githubx__get_issue", False),
        ("mcp__github", "mcp__github__get_issue", True),
        ("mcp__github", "mcp__githubber__x", False),
        ("mcp__github__get_issue", "mcp__github__get_issue", True),
        ("mcp__github__get_issue", "mcp__github__get_issues", False),
        ("mcp__*__search", "mcp__docs__search", True),
        ("read_file", "read_file", True),
        ("read_file", "write_file", False),
        ("Read", "grep", True),
        ("Edit", "write_file", True),
        ("Edit", "read_file", False),
    ],
)
def test_tool_selectors(selector: str, tool: str, selects: bool) -> None:
    assert parse_rule(selector).selects(tool) is selects


def test_selector_wildcards_never_reach_into_the_subject() -> None:
    rule = parse_rule("mcp__github__*")
    assert rule.matches("mcp__github__get_issue", TextSubject("anything"))
    # A pattern's '*' is about subjects only: it does not widen the tool selector.
    assert not parse_rule("mcp__github__get_issue(*)").selects("mcp__github__other")


def test_text_subjects() -> None:
    rule = parse_rule("mcp__db__query(SELECT:*)")
    assert rule.matches("mcp__db__query", TextSubject("SELECT 1"))
    assert not rule.matches("mcp__db__query", TextSubject("DELETE FROM t"))
    assert parse_rule("mcp__db__query(SELECT * FROM t)").matches(
        "mcp__db__query", TextSubject("SELECT a, b FROM t")
    )


def test_a_pattern_never_matches_a_call_without_subject() -> None:
    assert not parse_rule("todo_write(x)").matches("todo_write", None)
    assert parse_rule("todo_write").matches("todo_write", None)


def test_covers_needs_every_subject_and_hits_needs_one() -> None:
    rule = parse_rule("edit_file(src/**)")
    inside, outside = path("/work/repo/src/a"), path("/work/repo/b")
    assert rule.covers("edit_file", [inside])
    assert not rule.covers("edit_file", [inside, outside])
    assert rule.hits("edit_file", [outside, inside])
    assert not rule.covers("edit_file", [])  # an empty subject list satisfies nothing


@pytest.mark.parametrize(
    "text",
    ["read_file", "bash(cargo test:*)", "edit_file(src/**)", "bash(*)", "mcp__github__*"],
)
def test_str_round_trips(text: str) -> None:
    assert str(parse_rule(text)) == text
    assert parse_rule(str(parse_rule(text))) == parse_rule(text)


def test_ruleset_parse_and_kind_check() -> None:
    rules = RuleSet.parse(allow=["read_file"], ask=["bash(git push:*)"], deny=["bash(curl:*)"])
    assert [r.kind for r in (*rules.allow, *rules.ask, *rules.deny)] == [
        RuleKind.ALLOW,
        RuleKind.ASK,
        RuleKind.DENY,
    ]
    with pytest.raises(ValueError, match="is a deny rule, listed under allow"):
        RuleSet(allow=(Rule(RuleKind.DENY, "bash"),))
