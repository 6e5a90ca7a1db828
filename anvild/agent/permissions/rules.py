"""Permission rules: `tool(pattern)` strings, parsed once and matched against a call's subjects.

Claude Code's syntax with this harness's tool names (and Claude Code's, `Read`/`Edit`/`Bash`...,
as aliases): `read_file`, `bash(cargo test:*)` (word prefix), `bash(git status)` (exact, word by
word), `bash(git log *)` (glob over the line), `edit_file(src/**)` (gitignore-style over the
canonical workspace-relative path; `/x` or `./x` anchored, `~/x` home, `//x` absolute),
`mcp__github__*` or `mcp__github` (every tool of that MCP server).
The selector and the pattern are separate languages: `*` in the selector never reaches into the
pattern, whose meaning depends on the tool's `Subject` (a command, paths, or text). A rule with a
pattern never matches a call without a subject. `Rule.matches` answers for one subject; the
policy requires an allow rule to cover *every* subject and lets a deny rule hit *any*.
`RuleSyntaxError` (a `ValueError`) gives the rule, position and what was expected. Pure and
imports nothing else from the project, so `anvild.config` validates rules with it.
"""

from __future__ import annotations

import enum
import fnmatch
import re
import shlex
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Final, TypeAlias

import attrs
import pathspec

SHELL_TOOLS: Final = frozenset({"bash"})
"""Tools whose subject is a shell command (matched per segment, word by word)."""

PATH_TOOLS: Final = frozenset({"read_file", "write_file", "edit_file", "glob", "grep"})
"""Tools whose subjects are canonical paths (matched with gitignore-style globs)."""

ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "Bash": ("bash",),
    "Read": ("read_file", "glob", "grep"),
    "Edit": ("edit_file", "write_file"),
    "Write": ("write_file",),
    "Glob": ("glob",),
    "Grep": ("grep",),
}
"""Claude Code tool names users already have in their rules, and the tools they stand for."""

_SELECTOR_CHARS: Final = re.compile(r"[A-Za-z0-9_*-]")


class RuleKind(enum.Enum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class RuleSyntaxError(ValueError):
    """A rule string that cannot be parsed: the rule, where (0-based) and what was expected."""

    def __init__(self, rule: str, position: int, expected: str) -> None:
        self.rule = rule
        self.position = position
        self.expected = expected
        super().__init__(
            f"invalid permission rule {rule!r} at column {position + 1}: expected {expected}"
        )


# -- subjects ------------------------------------------------------------------------------------


def _to_words(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(words)


@attrs.frozen
class CommandSubject:
    """One simple command of a shell command line, as the words the shell will see (quotes
    removed; a word the shell computes at run time, like `$HOME`, is kept as written)."""

    words: tuple[str, ...] = attrs.field(converter=_to_words)

    @property
    def text(self) -> str:
        """The command as one line, each word quoted only where needed (what globs match)."""
        return shlex.join(self.words)


@attrs.frozen
class PathSubject:
    """A canonical path a call touches. `workspace` and `home` are the path relative to the
    workspace and the home directory (POSIX form, `.` for the directory itself), or None when the
    path is not below them."""

    absolute: str
    workspace: str | None = None
    home: str | None = None

    @classmethod
    def of(
        cls, canonical: PurePosixPath, workspace: PurePosixPath, home: PurePosixPath | None
    ) -> PathSubject:
        def below(root: PurePosixPath | None) -> str | None:
            if root is None or not canonical.is_relative_to(root):
                return None
            return canonical.relative_to(root).as_posix()

        return cls(canonical.as_posix(), below(workspace), below(home))


@attrs.frozen
class TextSubject:
    """Any other subject: matched as text (exact, prefix with `:*`, or `*` globs)."""

    text: str


Subject: TypeAlias = CommandSubject | PathSubject | TextSubject


# -- patterns ------------------------------------------------------------------------------------


@attrs.frozen
class AnySubject:
    """`tool(*)`: every subject."""

    def __str__(self) -> str:
        return "*"


@attrs.frozen
class Prefix:
    """`tool(prefix:*)`: the subject starts with `prefix` (for commands: with its words)."""

    text: str
    words: tuple[str, ...] = ()  # the prefix's words, for shell tools

    def __str__(self) -> str:
        return f"{self.text}:*"


@attrs.frozen
class Exact:
    """`tool(text)` without wildcards: the subject is exactly `text` (for paths, gitignore
    semantics: a directory covers what is below it)."""

    text: str
    words: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.text


@attrs.frozen
class Glob:
    """`tool(glob)`: `*` (commands, text) or gitignore globs (paths)."""

    text: str

    def __str__(self) -> str:
        return self.text


Pattern: TypeAlias = AnySubject | Prefix | Exact | Glob

_PATH_GLOB_CHARS: Final = frozenset("*?[")


def _path_matches(pattern: str, subject: PathSubject) -> bool:
    """gitignore-style matching, anchored as the pattern says (see the module docstring)."""
    if pattern.startswith("//"):
        relative: str | None = subject.absolute.lstrip("/") or "."
        spec = "/" + pattern[2:]
    elif pattern == "~":
        relative, spec = subject.home, "/**"
    elif pattern.startswith("~/"):
        relative, spec = subject.home, "/" + pattern[2:]
    elif pattern.startswith("./"):
        relative, spec = subject.workspace, "/" + pattern[2:]
    else:
        relative, spec = subject.workspace, pattern
    if relative is None:
        return False
    if relative == ".":
        return spec in ("/**", "**", "/.", ".")
    return _gitignore(spec).match_file(relative)


_SPECS: dict[str, pathspec.GitIgnoreSpec] = {}


def _gitignore(pattern: str) -> pathspec.GitIgnoreSpec:
    spec = _SPECS.get(pattern)
    if spec is None:
        spec = _SPECS[pattern] = pathspec.GitIgnoreSpec.from_lines([pattern])
    return spec


def text_glob(pattern: str, text: str) -> bool:
    # `*` is the only wildcard in command and text globs: `?` and `[` are common in commands.
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, text, re.DOTALL) is not None


def pattern_matches(pattern: Pattern, subject: Subject) -> bool:
    """Whether one pattern matches one subject (the module docstring gives the semantics)."""
    match pattern, subject:
        case AnySubject(), _:
            return True
        case Prefix(words=words), CommandSubject() if words:
            return subject.words[: len(words)] == words
        case Exact(words=words), CommandSubject() if words:
            return subject.words == words
        case Glob(text=text), CommandSubject():
            return text_glob(text, subject.text)
        case Prefix(text=text), PathSubject():
            return subject.workspace is not None and subject.workspace.startswith(text)
        case ((Exact(text=text) | Glob(text=text)), PathSubject()):
            return _path_matches(text, subject)
        case Prefix(text=text), (CommandSubject() | TextSubject()):
            return _subject_text(subject).startswith(text)
        case Exact(text=text), (CommandSubject() | TextSubject()):
            return _subject_text(subject) == text
        case Glob(text=text), TextSubject():
            return text_glob(text, subject.text)
    return False


def _subject_text(subject: CommandSubject | TextSubject) -> str:
    return subject.text


# -- rules ---------------------------------------------------------------------------------------


@attrs.frozen
class Rule:
    """One parsed rule: which tools (`selector`, wildcards allowed), which subjects (`pattern`,
    None for every call), and its kind. `str(rule)` is its canonical rule string."""

    kind: RuleKind
    selector: str
    pattern: Pattern | None = None

    def __str__(self) -> str:
        return self.selector if self.pattern is None else f"{self.selector}({self.pattern})"

    def selects(self, tool: str) -> bool:
        """Whether the rule is about `tool` (a name, an alias, or a name wildcard)."""
        if self.selector in ALIASES:
            return tool in ALIASES[self.selector]
        if "*" in self.selector:
            return fnmatch.fnmatchcase(tool, self.selector.replace("[", "[[]"))
        if tool == self.selector:
            return True
        # A bare MCP server name selects all of its tools: `mcp__github` -> `mcp__github__*`.
        return (
            self.selector.startswith("mcp__")
            and self.selector.count("__") == 1
            and tool.startswith(self.selector + "__")
        )

    def matches(self, tool: str, subject: Subject | None) -> bool:
        """Whether the rule covers a call of `tool` with this one subject (None: no subject)."""
        if not self.selects(tool):
            return False
        if self.pattern is None:
            return True
        return subject is not None and pattern_matches(self.pattern, subject)

    def covers(self, tool: str, subjects: Iterable[Subject]) -> bool:
        """For allow rules: the rule matches every one of the call's subjects (and there is at
        least one, unless the rule has no pattern)."""
        found = list(subjects)
        if not found:
            return self.pattern is None and self.selects(tool)
        return all(self.matches(tool, s) for s in found)

    def hits(self, tool: str, subjects: Iterable[Subject]) -> bool:
        """For deny and ask rules: the rule matches at least one subject (or the tool, for a
        rule without a pattern)."""
        if self.pattern is None:
            return self.selects(tool)
        return any(self.matches(tool, s) for s in subjects)


def _family(selector: str) -> str:
    """`shell`, `path` or `text`: how the selected tools' subjects are matched."""
    tools = ALIASES.get(selector, (selector,))
    if all(t in SHELL_TOOLS for t in tools):
        return "shell"
    if all(t in PATH_TOOLS for t in tools):
        return "path"
    return "text"


def _split_words(rule: str, start: int, text: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(text, comments=False, posix=True))
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise RuleSyntaxError(rule, start, f"a command with balanced quotes ({exc})") from exc
    if not words:
        raise RuleSyntaxError(rule, start, "a command")
    return words


def parse_rule(text: str, kind: RuleKind = RuleKind.ALLOW) -> Rule:
    """Parse one rule string (see the module docstring); raise `RuleSyntaxError` if invalid."""
    rule = text.strip()
    offset = len(text) - len(text.lstrip())  # positions refer to the string as given
    if not rule:
        raise RuleSyntaxError(text, offset, "a tool name, such as read_file or bash(cargo test:*)")
    open_at = rule.find("(")
    selector = rule if open_at < 0 else rule[:open_at]
    for index, char in enumerate(selector):
        if not _SELECTOR_CHARS.fullmatch(char):
            raise RuleSyntaxError(
                text,
                offset + index,
                "a tool name character (a letter, a digit, '_', '-' or the wildcard '*') or '('",
            )
    if not selector:
        raise RuleSyntaxError(text, offset, "a tool name before '('")
    if not selector.strip("*"):
        raise RuleSyntaxError(
            text, offset, "a tool name: a wildcard completes a name (mcp__github__*), not all of it"
        )
    if open_at < 0:
        return Rule(kind, selector)
    close_at = rule.rfind(")")
    if close_at <= open_at:
        raise RuleSyntaxError(
            text,
            offset + len(rule),
            f"')' to close the pattern opened at column {offset + open_at + 1}",
        )
    if close_at != len(rule) - 1:
        raise RuleSyntaxError(text, offset + close_at + 1, "the end of the rule after ')'")
    raw = rule[open_at + 1 : close_at]
    body = raw.strip()
    start = offset + open_at + 1 + (len(raw) - len(raw.lstrip()))
    if not body:
        raise RuleSyntaxError(
            text, offset + close_at, "a pattern inside '()' (or no parentheses, for every call)"
        )
    return Rule(kind, selector, _parse_pattern(text, start, selector, body))


def _parse_pattern(rule: str, start: int, selector: str, body: str) -> Pattern:
    family = _family(selector)
    if body == "*":
        return AnySubject()
    if family == "path":
        if body.startswith("!"):
            raise RuleSyntaxError(
                rule,
                start,
                "a path pattern ('!' negation has no meaning in a rule: use a deny rule)",
            )
        if body.endswith(":*"):
            raise RuleSyntaxError(
                rule,
                start + len(body) - 2,
                "a gitignore-style path pattern such as src/** (':*' prefixes are for commands)",
            )
        if _PATH_GLOB_CHARS & set(body):
            return Glob(body)
        return Exact(body)
    if body.endswith(":*"):
        prefix = body[:-2].rstrip()
        if not prefix:
            raise RuleSyntaxError(rule, start, "a prefix before ':*', as in bash(cargo test:*)")
        if "*" in prefix:
            raise RuleSyntaxError(
                rule,
                start + prefix.index("*"),
                "a literal prefix before ':*' (use either a prefix or a '*' glob, not both)",
            )
        words = _split_words(rule, start, prefix) if family == "shell" else ()
        return Prefix(prefix, words)
    if "*" in body:
        if family == "shell":
            _split_words(rule, start, body.replace("*", "x"))  # quotes must balance
        return Glob(body)
    words = _split_words(rule, start, body) if family == "shell" else ()
    return Exact(body, words)


def parse_rules(texts: Iterable[str], kind: RuleKind) -> tuple[Rule, ...]:
    return tuple(parse_rule(t, kind) for t in texts)


@attrs.frozen
class RuleSet:
    """The user's rules by kind. Precedence (deny > ask > allow) is the policy's business."""

    allow: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()

    def __attrs_post_init__(self) -> None:
        for kind, rules in (
            (RuleKind.ALLOW, self.allow),
            (RuleKind.ASK, self.ask),
            (RuleKind.DENY, self.deny),
        ):
            for rule in rules:
                if rule.kind is not kind:
                    raise ValueError(
                        f"{rule} is a {rule.kind.value} rule, listed under {kind.value}"
                    )

    @classmethod
    def parse(
        cls, *, allow: Iterable[str] = (), ask: Iterable[str] = (), deny: Iterable[str] = ()
    ) -> RuleSet:
        """Rules from strings (the user config's `permissions.allow/ask/deny`)."""
        return cls(
            parse_rules(allow, RuleKind.ALLOW),
            parse_rules(ask, RuleKind.ASK),
            parse_rules(deny, RuleKind.DENY),
        )


__all__ = [
    "ALIASES",
    "PATH_TOOLS",
    "SHELL_TOOLS",
    "AnySubject",
    "CommandSubject",
    "Exact",
    "Glob",
    "PathSubject",
    "Pattern",
    "Prefix",
    "Rule",
    "RuleKind",
    "RuleSet",
    "RuleSyntaxError",
    "Subject",
    "TextSubject",
    "parse_rule",
    "parse_rules",
    "pattern_matches",
    "text_glob",
]
