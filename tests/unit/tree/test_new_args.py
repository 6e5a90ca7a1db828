"""`new_args`: AnviLLM's positional `new` words, each recognition and each refusal."""

from __future__ import annotations

import pytest

from anvild.fs.ctl import Command, CommandError, CommandSpec
from anvild.session.manager import NEW_FLAGS, NEW_KEYS
from anvild.session.roles import ROLES
from anvild.tree.new_args import MAX_POSITIONAL, Vocabulary, positional_options

VOCAB = Vocabulary(
    {"fake": "fake", "sonnet": "anthropic", "gpt": "openai", "tester": "fake"},
    ROLES,
)
ONE_ANTHROPIC = Vocabulary({"fake": "fake", "sonnet": "anthropic"}, ROLES)
TWO_ANTHROPIC = Vocabulary({"opus": "anthropic", "sonnet": "anthropic"}, ROLES)
NO_ANTHROPIC = Vocabulary({"fake": "fake"}, ROLES)
WITH_KIRO = Vocabulary({"fake": "fake", "kiro": "fake"}, ROLES)


async def _unused(command: Command) -> str:
    raise AssertionError("not run")


SPEC = CommandSpec(
    "new",
    _unused,
    usage="new ...",
    options=frozenset({*NEW_KEYS, *NEW_FLAGS}),
    flags=frozenset(NEW_FLAGS),
    max_args=MAX_POSITIONAL,
)


def parse(line: str, vocab: Vocabulary) -> dict[str, str]:
    return positional_options(SPEC.parse(line.split(), line), vocab)


@pytest.mark.parametrize(
    ("line", "vocab", "expected"),
    [
        # AnviLLM's scripts (IDEAS.md: DevReview, ephemeral sessions), as they are written
        (
            "new kiro /project reviewer",
            WITH_KIRO,
            {"model": "kiro", "cwd": "/project", "role": "reviewer"},
        ),
        (
            "new kiro /project developer",
            WITH_KIRO,
            {"model": "kiro", "cwd": "/project", "role": "developer"},
        ),
        ("new claude /project ephemeral", ONE_ANTHROPIC, {"model": "sonnet", "cwd": "/project"}),
        # each word by what it is, in any order among themselves
        ("new fake", VOCAB, {"model": "fake"}),
        ("new /src/app", VOCAB, {"cwd": "/src/app"}),
        ("new planner", VOCAB, {"role": "planner"}),
        ("new reviewer /w gpt", VOCAB, {"role": "reviewer", "cwd": "/w", "model": "gpt"}),
        ("new /w=x", VOCAB, {"cwd": "/w=x"}),
        # mixed with key=value and flags: positional words first
        ("new fake /w alias=x role=planner", VOCAB, {"model": "fake", "cwd": "/w"}),
        ("new /w headless ephemeral", VOCAB, {"cwd": "/w"}),
        ("new ephemeral /w", VOCAB, {"cwd": "/w"}),
        ("new cwd=/w", VOCAB, {}),
        ("new", VOCAB, {}),
        # a configured alias wins over a backend name
        (
            "new claude",
            Vocabulary({"claude": "fake", "sonnet": "anthropic"}, ROLES),
            {"model": "claude"},
        ),
    ],
)
def test_each_positional_word_is_recognised(
    line: str, vocab: Vocabulary, expected: dict[str, str]
) -> None:
    assert parse(line, vocab) == expected


@pytest.mark.parametrize(
    ("line", "vocab", "message"),
    [
        (
            "new tester /w",
            VOCAB,
            "new: 'tester' is both a model alias and a role; write model=tester or role=tester",
        ),
        (
            "new kiro /project reviewer",
            VOCAB,
            "new: 'kiro' is an AnviLLM backend whose model anvild cannot tell; write model=ALIAS "
            "with one of: fake, gpt, sonnet, tester (or name a model alias 'kiro' in the [models] "
            "of the daemon's config, and the AnviLLM line works as it is)",
        ),
        (
            "new claude /w",
            TWO_ANTHROPIC,
            "new: 'claude' could be any of the anthropic models opus, sonnet; write model=opus "
            "(or another of them)",
        ),
        (
            "new claude /w",
            NO_ANTHROPIC,
            "new: 'claude' is AnviLLM's backend for the anthropic provider, and no model alias "
            "uses it; write model=ALIAS with one of: fake",
        ),
        (
            "new bogus",
            VOCAB,
            "new: 'bogus' is not a model alias (fake, gpt, sonnet, tester), a role "
            "(developer, reviewer, planner, tester, conductor) or an absolute directory; "
            "write model=bogus, role=bogus or cwd=/ABSOLUTE/PATH",
        ),
        (
            "new ./project",
            VOCAB,
            "new: the directory './project' is not absolute; write cwd=ABSOLUTE-PATH (the daemon "
            "does not know your shell's directory)",
        ),
        ("new ~/p", VOCAB, "new: the directory '~/p' is not absolute"),
        ("new src/app", VOCAB, "new: the directory 'src/app' is not absolute"),
        (
            "new /a /b",
            VOCAB,
            "new: two words give the cwd: '/a' and '/b'; give one (write cwd=VALUE)",
        ),
        ("new fake gpt", VOCAB, "new: two words give the model: 'fake' and 'gpt'"),
        ("new planner reviewer", VOCAB, "new: two words give the role: 'planner' and 'reviewer'"),
        ("new /a cwd=/b", VOCAB, "new: '/a' gives the cwd and so does cwd=/b; give it once"),
        ("new fake model=gpt", VOCAB, "new: 'fake' gives the model and so does model=gpt"),
        (
            "new cwd=/w fake",
            VOCAB,
            "new: 'fake' comes after a key=value word; put the positional words (model, "
            "directory, role) first, or spell it as key=value",
        ),
    ],
)
def test_each_ambiguity_or_unknown_word_is_refused(
    line: str, vocab: Vocabulary, message: str
) -> None:
    with pytest.raises(CommandError) as caught:
        parse(line, vocab)
    assert str(caught.value).startswith(message)


def test_a_fourth_positional_word_is_refused_by_the_spec() -> None:
    with pytest.raises(CommandError, match=r"wrong number of arguments \(4\)"):
        line = "new fake /w reviewer x"
        SPEC.parse(line.split(" "), line)
