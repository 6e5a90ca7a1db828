"""Every way a command line can be read, as deny rules and hard denies see it.

Allow rules need a line's exact commands; deny rules must hold against any reading of any line.
`readings(analysis)` gives `commands` (exact commands, base program names, including what
wrappers and arguments run: `programs.runs`), `texts` (token runs where any suffix may be a
command: the decoded text of an out-of-subset line, code in arguments such as `sh -c '...'`) and
`opaque` (why the line may run a program named in none of them, or None).
`command_hits` matches one deny rule against all of it (glob words match what they could match;
in texts an exact rule matches as a prefix). A line too long to read whole is opaque. Pure.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Iterator
from typing import Final

import attrs

from anvild.agent.permissions import programs, shell
from anvild.agent.permissions.rules import CommandSubject, Exact, Glob, Prefix, Rule, text_glob

TOKEN_LIMIT: Final = 200
"""Tokens of one text read as commands; past it a line is opaque (every suffix is a reading)."""


@attrs.frozen
class Readings:
    """See the module docstring."""

    commands: tuple[tuple[str, ...], ...] = ()
    texts: tuple[tuple[str, ...], ...] = ()
    opaque: str | None = None

    def candidates(self) -> Iterator[tuple[str, ...]]:
        """Every command a reading may run: the exact ones, then each suffix of each text."""
        yield from self.commands
        for tokens in self.texts:
            for start in range(len(tokens)):
                yield tokens[start:]


def readings(analysis: shell.ShellAnalysis) -> Readings:
    """The readings of one analysed line (see the module docstring)."""
    commands: list[tuple[str, ...]] = []
    texts: list[tuple[str, ...]] = []
    opaque: str | None = None
    codes: list[str] = []
    if analysis.checkable:
        for segment in analysis.segments:
            found = programs.runs(segment.words)
            commands.extend(found.commands)
            codes.extend(found.texts)
            opaque = opaque or found.opaque
    else:
        reading = analysis.reading
        texts.append(reading.tokens)
        opaque = reading.opaque
        for start in range(min(len(reading.tokens), TOKEN_LIMIT)):
            found = programs.runs(_basename_first(reading.tokens[start:]))
            codes.extend(found.texts)
            opaque = opaque or found.opaque
    for depth, code in enumerate(codes):
        if depth > 32:
            opaque = opaque or "it nests code too deeply to read"
            break
        reading = shell.read_text(code)
        texts.append(reading.tokens)
        opaque = opaque or reading.opaque
    if any(len(t) > TOKEN_LIMIT for t in texts):
        opaque = opaque or f"it is longer than {TOKEN_LIMIT} words"
    return Readings(tuple(commands), tuple(t[: TOKEN_LIMIT * 2] for t in texts), opaque)


def _basename_first(tokens: tuple[str, ...]) -> tuple[str, ...]:
    return (programs.program_name(tokens[0]), *tokens[1:]) if tokens else tokens


def _pattern(word: str) -> bool:
    return any(c in word for c in "*?[")


def _words_match(rule_words: tuple[str, ...], words: tuple[str, ...], *, prefix: bool) -> bool:
    if len(words) < len(rule_words) or (not prefix and len(words) != len(rule_words)):
        return False
    for position, (want, have) in enumerate(zip(rule_words, words, strict=False)):
        if position == 0:
            want, have = want.rsplit("/", 1)[-1] or want, have.rsplit("/", 1)[-1] or have
        if want == have or (_pattern(have) and fnmatch.fnmatchcase(want, have)):
            continue
        return False
    return True


def command_hits(rule: Rule, tool: str, found: Readings) -> bool:
    """Whether a deny (or ask) rule for commands matches any reading of the line."""
    if not rule.selects(tool):
        return False
    pattern = rule.pattern
    if pattern is None:
        return True
    match pattern:
        case Prefix(words=words) | Exact(words=words) if words:
            exact = isinstance(pattern, Exact)
            if any(_words_match(words, c, prefix=not exact) for c in found.commands):
                return True
            return any(
                _words_match(words, tokens[start:], prefix=True)
                for tokens in found.texts
                for start in range(len(tokens))
            )
        case Glob(text=text):
            if any(text_glob(text, shlex.join(c)) for c in found.commands):
                return True
            return any(
                text_glob(text, shlex.join(tokens[start:end]))
                for tokens in found.texts
                for start in range(min(len(tokens), TOKEN_LIMIT))
                for end in range(start + 1, min(len(tokens), start + 32) + 1)
            )
    return any(rule.matches(tool, CommandSubject(c)) for c in found.candidates())


__all__ = ["TOKEN_LIMIT", "Readings", "command_hits", "readings"]
