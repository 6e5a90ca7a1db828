"""The subset is not so small that allow rules become useless: measured on agent commands.

`ANVIL_CORPUS_REPORT=1 pytest tests/unit/permissions/test_corpus.py -s` prints the figures that
docs/sandbox-escapes.md quotes ("Permission layer").
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from anvild.agent.permissions.policy import Allow, Mode, Policy, resolve_request
from anvild.agent.permissions.rules import CommandSubject, RuleSet
from anvild.agent.tools.base import Effects
from anvild.sandbox import WorkspaceWrite
from tests.unit.permissions.agent_commands import COMMANDS

TYPICAL_ALLOW = tuple(
    f"bash({rule})"
    for rule in (
        "ls:*", "pwd", "cat:*", "head:*", "tail:*", "wc:*", "grep:*", "rg:*", "find:*",
        "sed:*", "awk:*", "sort:*", "uniq:*", "cut:*", "tr:*", "diff:*", "file:*", "stat:*",
        "du:*", "df:*", "tree:*", "which:*", "echo:*", "jq:*", "date", "whoami", "uname:*",
        "git status:*", "git diff:*", "git log:*", "git show:*", "git branch:*",
        "git remote:*", "git blame:*", "git grep:*", "git ls-files:*", "git rev-parse:*",
        "git stash list", "python3 --version", "python --version", "node --version",
        "node -v", "npm -v", "go version", "cargo --version", "rustc --version",
        "python3 -m pytest:*", "python -m pytest:*", "pytest:*", "python3 -m mypy:*",
        "python3 -m ruff:*", "ruff:*", "mypy:*", "black:*", "flake8:*", "uv run pytest:*",
        "npm test:*", "npm run:*", "yarn test:*", "pnpm test:*", "npx tsc:*", "npx jest:*",
        "npx prettier:*", "npx eslint:*", "cargo test:*", "cargo build:*", "cargo check:*",
        "cargo clippy:*", "cargo fmt:*", "go test:*", "go build:*", "go vet:*", "gofmt:*",
        "make:*", "xargs:*", "cd:*",
    )
)  # fmt: skip
"""A user's rules for reading, searching, read-only git, versions, tests, lints and builds."""

WORKSPACE = PurePosixPath("/work/repo")


def measure() -> tuple[int, int, int, int]:
    """(commands, in the subset, named by the rules word for word, auto-allowed)."""
    policy = Policy(
        WORKSPACE, Mode.DEFAULT, RuleSet.parse(allow=TYPICAL_ALLOW), sandbox=WorkspaceWrite()
    )
    rules = RuleSet.parse(allow=TYPICAL_ALLOW).allow
    in_subset = named = allowed = 0
    for command in COMMANDS:
        request = resolve_request(
            "bash", {"command": command}, Effects(subprocess=True, unknown=True),
            cwd=WORKSPACE, canonical=lambda p: p,
        )  # fmt: skip
        assert request.shell is not None
        in_subset += request.shell.checkable
        if request.shell.checkable and all(
            any(r.matches("bash", CommandSubject(s.words)) for r in rules)
            for s in request.shell.segments
        ):
            named += 1
        allowed += policy.decide(request) == Allow()
    return len(COMMANDS), in_subset, named, allowed


def test_most_agent_commands_stay_in_the_subset_and_the_rules_still_allow_them() -> None:
    total, in_subset, named, allowed = measure()
    if os.environ.get("ANVIL_CORPUS_REPORT"):
        print(
            f"\n{total} commands; {in_subset} in the subset ({in_subset / total:.0%}); "
            f"{named} covered word for word by the typical rules; {allowed} auto-allowed "
            f"({allowed / total:.0%} of all, {allowed / named:.0%} of those covered)"
        )
    assert total >= 200
    assert in_subset / total >= 0.80
    assert allowed / named >= 0.90
