"""AnviLLM's positional form of `new` (`new kiro /project reviewer`), turned into key=value.

Each positional word is recognised by what it is: an absolute path is `cwd`, a role name is
`role`, a configured model alias is `model`, and an AnviLLM backend name that is not an alias is
mapped where its model is known (`claude`, Claude Code: the one alias on the `anthropic`
provider). Positional words come before every key=value word; each key is given once, either way.
A word that could be two things, an unknown word, a relative path or an unmapped backend
(`kiro`) is refused with a `CommandError` giving the key=value spelling to use. Pure: the
vocabulary (`Vocabulary`) is handed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, Protocol

import attrs

from anvild.fs.ctl import Command, CommandError, tokenize

__all__ = ["BACKENDS", "MAX_POSITIONAL", "Vocabulary", "positional_options"]

MAX_POSITIONAL: Final = 3
"""At most one model, one directory and one role."""

BACKENDS: Final[Mapping[str, str | None]] = {"claude": "anthropic", "kiro": None}
"""AnviLLM's backends and the provider whose model each runs (None: the AnviLLM docs do not say;
kiro is the Kiro CLI)."""


class _ModelLine(Protocol):
    @property
    def alias(self) -> str: ...
    @property
    def provider(self) -> str: ...


@attrs.frozen
class Vocabulary:
    """What a positional word may name: model aliases (alias -> provider name) and roles."""

    models: Mapping[str, str]
    roles: tuple[str, ...]

    @classmethod
    def from_lines(cls, lines: Iterable[_ModelLine], roles: Iterable[str]) -> Vocabulary:
        return cls({line.alias: line.provider for line in lines}, tuple(roles))


def _aliases(vocab: Vocabulary) -> str:
    return ", ".join(sorted(vocab.models)) or "none configured"


def _backend(word: str, vocab: Vocabulary) -> str:
    provider = BACKENDS[word]
    if provider is None:
        raise CommandError(
            f"new: {word!r} is an AnviLLM backend whose model anvild cannot tell; write "
            f"model=ALIAS with one of: {_aliases(vocab)} (or name a model alias {word!r} in the "
            "[models] of the daemon's config, and the AnviLLM line works as it is)"
        )
    matches = sorted(a for a, p in vocab.models.items() if p == provider)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CommandError(
            f"new: {word!r} is AnviLLM's backend for the {provider} provider, and no model alias "
            f"uses it; write model=ALIAS with one of: {_aliases(vocab)}"
        )
    raise CommandError(
        f"new: {word!r} could be any of the {provider} models {', '.join(matches)}; write "
        f"model={matches[0]} (or another of them)"
    )


def _meaning(word: str, vocab: Vocabulary) -> tuple[str, str]:
    """(key, value) for one positional word."""
    if word.startswith("/"):
        return "cwd", word
    meanings = [("model", word)] if word in vocab.models else []
    if word in vocab.roles:
        meanings.append(("role", word))
    if len(meanings) > 1:
        spelled = " or ".join(f"{k}={v}" for k, v in meanings)
        raise CommandError(f"new: {word!r} is both a model alias and a role; write {spelled}")
    if meanings:
        return meanings[0]
    if word in BACKENDS:
        return "model", _backend(word, vocab)
    if word.startswith(("~", ".")) or "/" in word:
        raise CommandError(
            f"new: the directory {word!r} is not absolute; write cwd=ABSOLUTE-PATH (the daemon "
            "does not know your shell's directory)"
        )
    raise CommandError(
        f"new: {word!r} is not a model alias ({_aliases(vocab)}), a role "
        f"({', '.join(vocab.roles)}) or an absolute directory; write model={word}, role={word} "
        f"or cwd=/ABSOLUTE/PATH"
    )


def positional_options(command: Command, vocab: Vocabulary) -> dict[str, str]:
    """The key=value options `command`'s positional words stand for. Raises `CommandError`."""
    if not command.args:
        return {}
    seen_option = False
    for word in tokenize(command.line)[1:]:
        key, eq, _ = word.partition("=")
        if eq and key in command.options:
            seen_option = True
        elif seen_option and word in command.args:
            raise CommandError(
                f"new: {word!r} comes after a key=value word; put the positional words (model, "
                "directory, role) first, or spell it as key=value"
            )
    found: dict[str, str] = {}
    for word in command.args:
        key, value = _meaning(word, vocab)
        if key in found:
            raise CommandError(
                f"new: two words give the {key}: {found[key]!r} and {word!r}; give one "
                f"(write {key}=VALUE)"
            )
        if key in command.options:
            raise CommandError(
                f"new: {word!r} gives the {key} and so does {key}={command.options[key]}; "
                "give it once"
            )
        found[key] = value
    return found
