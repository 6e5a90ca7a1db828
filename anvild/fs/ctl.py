"""Command lines written to ctl files: splitting, tokenizing and validating them.

Pure: the bytes of one Twrite become validated `Command`s, or `CommandError` with a message a
person can act on; `anvild.fs.nodes.CtlFile` runs them. A Twrite holds one or more complete
lines (a last line without newline counts; `\\r\\n` accepted; blank lines skipped, so an empty
write succeeds). Words split like Plan 9's tokenize(2) (single quotes group, `''` is a quote).
`key=value` words are options when the command declares the key, declared bare words are flags,
the rest positional. Every line of a write is validated before any runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType

import attrs

__all__ = [
    "Command",
    "CommandError",
    "CommandSpec",
    "CommandTable",
    "Handler",
    "split_lines",
    "tokenize",
]


class CommandError(ValueError):
    """A ctl write that cannot be run; the message is what the writer sees."""


def split_lines(data: bytes) -> list[str]:
    """The non-blank lines of one write, without their line ends."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(
            f"command is not valid UTF-8 (bad byte at offset {exc.start}); write text commands"
        ) from exc
    if "\x00" in text:
        raise CommandError("command contains a NUL byte; write text commands")
    lines = []
    for raw in text.split("\n"):
        line = raw.removesuffix("\r")
        if line.strip():
            lines.append(line)
    return lines


def tokenize(line: str) -> list[str]:
    """Split `line` into words the way Plan 9's tokenize(2) does (single quotes, `''` escapes)."""
    if "'" not in line:  # no quoting: words are the runs between spaces and tabs
        return [word for word in line.replace("\t", " ").split(" ") if word]
    return _tokenize_quoted(line)


def _tokenize_quoted(line: str) -> list[str]:
    words: list[str] = []
    word: list[str] = []
    in_word = False
    quoted = False
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if quoted:
            if c == "'":
                if i + 1 < n and line[i + 1] == "'":
                    word.append("'")
                    i += 2
                    continue
                quoted = False
            else:
                word.append(c)
        elif c == "'":
            quoted = True
            in_word = True
        elif c in " \t":
            if in_word:
                words.append("".join(word))
                word = []
                in_word = False
        else:
            word.append(c)
            in_word = True
        i += 1
    if quoted:
        raise CommandError(f"unbalanced quote in {line!r}: close it with ' (write '' for a quote)")
    if in_word:
        words.append("".join(word))
    return words


def _frozen_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@attrs.frozen
class Command:
    """One parsed command line."""

    verb: str
    args: tuple[str, ...] = ()
    options: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_mapping)
    flags: frozenset[str] = frozenset()
    line: str = ""

    def option(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)


Handler = Callable[[Command], Awaitable[str]]
"""Runs one validated command; returns its answer ("" for none), raises CommandError to refuse."""


def _valid_verb(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if not value or any(c.isspace() for c in value) or "=" in value or "'" in value:
        raise ValueError(f"invalid command verb {value!r}")


def _words(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen
class CommandSpec:
    """What one verb accepts, and the handler that runs it."""

    verb: str = attrs.field(validator=_valid_verb)
    handler: Handler
    usage: str = ""  # e.g. "kill ID"; defaults to the verb
    min_args: int = 0
    max_args: int = 0
    options: frozenset[str] = attrs.field(default=frozenset(), converter=_words)
    flags: frozenset[str] = attrs.field(default=frozenset(), converter=_words)

    @property
    def synopsis(self) -> str:
        return self.usage or self.verb

    def parse(self, words: list[str], line: str) -> Command:
        args: list[str] = []
        options: dict[str, str] = {}
        flags: set[str] = set()
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if eq and key in self.options:
                if key in options:
                    raise CommandError(
                        f"{self.verb}: option {key}= given twice; usage: {self.synopsis}"
                    )
                options[key] = value
            elif eq and self.options and key.isidentifier():
                known = ", ".join(sorted(self.options))
                raise CommandError(
                    f"{self.verb}: unknown option {key}=; known options: {known}; "
                    f"usage: {self.synopsis}"
                )
            elif word in self.flags:
                flags.add(word)
            else:
                args.append(word)
        if not self.min_args <= len(args) <= self.max_args:
            if self.max_args == 0:
                raise CommandError(
                    f"{self.verb}: takes no arguments, got {' '.join(args)!r}; "
                    f"usage: {self.synopsis}"
                )
            raise CommandError(
                f"{self.verb}: wrong number of arguments ({len(args)}); usage: {self.synopsis}"
            )
        return Command(
            verb=self.verb, args=tuple(args), options=options, flags=frozenset(flags), line=line
        )


class CommandTable:
    """The verbs one ctl file understands."""

    def __init__(self, specs: Iterable[CommandSpec] = ()) -> None:
        self._specs: dict[str, CommandSpec] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: CommandSpec) -> None:
        if spec.verb in self._specs:
            raise ValueError(f"command {spec.verb!r} is already defined")
        self._specs[spec.verb] = spec

    def __contains__(self, verb: object) -> bool:
        return verb in self._specs

    def __getitem__(self, verb: str) -> CommandSpec:
        return self._specs[verb]

    @property
    def verbs(self) -> list[str]:
        return sorted(self._specs)

    def parse_line(self, line: str) -> Command:
        words = tokenize(line)
        if not words:
            raise CommandError("empty command")
        spec = self._specs.get(words[0])
        if spec is None:
            known = ", ".join(self.verbs) or "none"
            raise CommandError(f"unknown command {words[0]!r}; known commands: {known}")
        return spec.parse(words, line)

    def parse(self, data: bytes) -> list[Command]:
        """Every command of one write, all validated; the error names the failing line."""
        lines = split_lines(data)
        commands = []
        for number, line in enumerate(lines, 1):
            try:
                commands.append(self.parse_line(line))
            except CommandError as exc:
                if len(lines) > 1:
                    raise CommandError(f"line {number}: {exc}") from exc
                raise
        return commands
