"""Shell command syntax: the subset of the shell language the policy understands exactly.

`analyze` lexes strictly. A line is *in the subset* when it is simple commands of literal words
(no expansion, no control character in a word) joined by `;`, `&&`, `||`, `|` and newlines, with
literal redirect targets; only then are its `segments` exactly what bash runs, and only then may
allow rules or a mode allow it. Otherwise `outside` names each construct and the policy asks; the
text is still read (`Reading`) so deny rules and hard denies apply to every way bash might read
it. Unquoted `*`/`?` stay globs (`Word.glob`); `cd DIR` moves where later paths resolve.
tree-sitter-bash must read an in-subset line the same way, else it is put outside: two parsers
must agree before anything is allowed (docs/sandbox-escapes.md, "Permission layer"). Pure.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from typing import Final

import attrs
import tree_sitter
import tree_sitter_bash

RESERVED: Final = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until",
     "do", "done", "function", "time", "coproc", "{", "}", "!", "[[", "]]", "in"}
)  # fmt: skip
"""Reserved words: in command position they open compound commands, outside the subset."""

SHELL_STATE_BUILTINS: Final = frozenset(
    {"eval", "source", ".", "exec", "trap", "alias", "unalias", "set", "shopt", "enable",
     "declare", "typeset", "local", "export", "readonly", "unset", "let", "hash", "fc", "bind",
     "complete", "compgen", "compopt", "mapfile", "readarray", "read", "getopts", "ulimit",
     "umask", "pushd", "popd", "dirs", "history", "builtin", "command", "caller", "shift",
     "return", "break", "continue", "wait", "jobs", "fg", "bg", "disown", "suspend", "logout"}
)  # fmt: skip
"""Builtins that run code from text, change how later words are read, or change the shell's
state (`command` and `builtin` bypass functions and the PATH lookup): outside the subset."""

HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_OPERATORS: Final = frozenset({";", "&&", "||", "|", "\n"})
_WORD_END: Final = frozenset(" \t\n;&|<>()")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_TEXT_SPLIT: Final = re.compile(r"[\s;&|<>()`$={},]+")
_BRACE_EXPANSION: Final = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")
_EXPANSION_START: Final = re.compile(r"\$[A-Za-z0-9_{(@*#?$!\-'\"\[]")
_ANSI_C: Final = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)


class _Outside(Exception):
    """The line leaves the subset; the message says with which construct."""


@attrs.frozen
class Word:
    """One word after quote removal. `pattern` is the word as a glob pattern (quoted glob
    characters escaped) when it has unquoted `*` or `?`; `start`/`end` are its byte span."""

    value: str
    start: int
    end: int
    pattern: str | None = None

    @property
    def glob(self) -> bool:
        return self.pattern is not None


@attrs.frozen
class Redirect:
    """A redirect to a file: `>`, `>>`, `>|`, `&>`, `&>>`, `>&FILE` write; `<` reads.
    Descriptor duplications (`2>&1`, `>&2`) are not recorded."""

    operator: str
    target: str
    fd: int | None = None

    @property
    def writes(self) -> bool:
        return self.operator != "<"


@attrs.frozen
class Segment:
    """One simple command of an in-subset line, exactly as bash will run it.
    `globs` are the indices of words with unquoted `*`/`?` (their `patterns` in the same order);
    `dirs` the directories (relative to the start, `.` first) it may run in after `cd`;
    `after` the operator that joins it to the segment before (`""` for the first)."""

    words: tuple[str, ...]
    redirects: tuple[Redirect, ...] = ()
    globs: tuple[int, ...] = ()
    patterns: tuple[str, ...] = ()
    dirs: tuple[str, ...] = (".",)
    after: str = ""
    spans: tuple[tuple[int, int], ...] = attrs.field(default=(), eq=False, repr=False)

    @property
    def text(self) -> str:
        return shlex.join(self.words)

    @property
    def command(self) -> tuple[str, ...]:
        return self.words


@attrs.frozen
class Reading:
    """A line outside the subset as deny rules see it: `tokens`, every word-like run of the
    text with quotes, backslashes and `$'...'` decoded; `opaque`, why it can run command text
    that appears nowhere in it (an expansion, a substitution, brace expansion), or None."""

    tokens: tuple[str, ...]
    opaque: str | None = None


@attrs.frozen
class ShellAnalysis:
    """What a command line runs. `segments` are exact when `outside` is empty and `error` None;
    `reading` is the text's reading (always set, used for outside lines)."""

    command: str
    segments: tuple[Segment, ...] = ()
    outside: tuple[str, ...] = ()
    error: str | None = None
    reading: Reading = Reading(())

    @property
    def checkable(self) -> bool:
        """True when the line is in the subset: rules and modes may then allow it."""
        return self.error is None and not self.outside and bool(self.segments)


def analyze(command: str) -> ShellAnalysis:
    """Read `command`: exact segments when it is in the subset, else why not and its reading."""
    reading = read_text(command)
    if not command.strip():
        return ShellAnalysis(command, error="the command is empty", reading=reading)
    try:
        segments = _parse(command)
    except _Outside as exc:
        return ShellAnalysis(command, outside=(str(exc),), reading=reading)
    except _Unparsable as exc:
        return ShellAnalysis(command, error=str(exc), reading=reading)
    if not segments:
        return ShellAnalysis(
            command, error="the command has nothing to run (only comments)", reading=reading
        )
    disagreement = _cross_check(command, segments)
    if disagreement is not None:
        return ShellAnalysis(command, outside=(disagreement,), reading=reading)
    return ShellAnalysis(command, segments, reading=reading)


class _Unparsable(Exception):
    """bash itself would refuse the line (a dangling operator, an unclosed quote)."""


# -- the lexer -----------------------------------------------------------------------------------


def _printable(char: str) -> bool:
    return char.isprintable() and char not in "\x7f"


class _Lexer:
    """Tokens of an in-subset line; raises `_Outside` at the first construct beyond it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        # Byte offset of each character, for spans comparable with tree-sitter's.
        self.offsets = [0]
        for char in text:
            self.offsets.append(self.offsets[-1] + len(char.encode("utf-8", "surrogatepass")))

    def tokens(self) -> list[str | Word | tuple[str, int | None]]:
        out: list[str | Word | tuple[str, int | None]] = []
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            nxt = text[self.pos + 1 : self.pos + 2]
            if char in " \t":
                self.pos += 1
            elif char == "\n":
                out.append("\n")
                self.pos += 1
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            elif char == "\\" and nxt == "\n":
                self.pos += 2  # a line continuation between words
            elif char == ";":
                if nxt == ";":
                    raise _Outside("';;' belongs to a case statement")
                out.append(";")
                self.pos += 1
            elif char == "&":
                if nxt == "&":
                    out.append("&&")
                    self.pos += 2
                elif nxt == ">":
                    self.pos += 2
                    op = "&>>" if text[self.pos : self.pos + 1] == ">" else "&>"
                    self.pos += len(op) - 2
                    out.append((op, None))
                else:
                    raise _Outside("'&' runs a command in the background")
            elif char == "|":
                if nxt == "|":
                    out.append("||")
                    self.pos += 2
                elif nxt == "&":
                    raise _Outside("'|&' pipes standard error too")
                else:
                    out.append("|")
                    self.pos += 1
            elif char in "()":
                raise _Outside("parentheses make a subshell, a function or a pattern")
            elif char in "<>":
                out.append(self._redirect(None))
            else:
                word, digits = self._word()
                if digits and text[self.pos : self.pos + 1] in ("<", ">"):
                    out.append(self._redirect(int(word.value)))
                else:
                    out.append(word)
        return out

    def _redirect(self, fd: int | None) -> tuple[str, int | None]:
        text = self.text
        for op in (">>", ">|", ">&", "<&", "<<", "<>", ">(", "<(", ">", "<"):
            if text.startswith(op, self.pos):
                break
        if op in ("<<", "<>", "<&"):
            raise _Outside(
                "heredocs, here-strings and '<>' or '<&' redirects are read in ways that "
                "differ between parsers"
            )
        if op in (">(", "<("):
            raise _Outside("process substitution runs a command")
        self.pos += len(op)
        return (op, fd)

    def _word(self) -> tuple[Word, bool]:
        """One word from `self.pos`; also whether it is unquoted digits (a descriptor)."""
        text = self.text
        start = self.pos
        value: list[str] = []
        pattern: list[str] = []
        glob = False
        digits = True
        while self.pos < len(text):
            char = text[self.pos]
            if char in _WORD_END:
                break
            if char == "\\":
                nxt = text[self.pos + 1 : self.pos + 2]
                if not nxt:
                    raise _Unparsable("the command ends with a lone backslash")
                self.pos += 2
                if nxt == "\n":
                    continue  # a line continuation inside a word
                if not _printable(nxt):
                    raise _Outside("a control character is part of a word")
                value.append(nxt)
                pattern.append(_escape_glob(nxt))
                digits = False
                continue
            if char == "'":
                end = text.find("'", self.pos + 1)
                if end < 0:
                    raise _Unparsable("a single quote is never closed")
                body = text[self.pos + 1 : end]
                if not all(_printable(c) for c in body):
                    raise _Outside("a quoted word holds a newline or a control character")
                value.append(body)
                pattern.append("".join(_escape_glob(c) for c in body))
                self.pos = end + 1
                digits = False
                continue
            if char == '"':
                body = self._double_quoted()
                value.append(body)
                pattern.append("".join(_escape_glob(c) for c in body))
                digits = False
                continue
            if char == "$":
                raise _Outside(_dollar(text, self.pos))
            if char == "`":
                raise _Outside("backticks run a command substitution")
            if char in "*?":
                glob = True
            elif char == "[":
                if not (self.pos == start and text[self.pos + 1 : self.pos + 2] in ("", " ", "\t")):
                    raise _Outside("'[' opens a glob bracket pattern")
            elif char == "{" or char == "}":
                if not text.startswith("{}", self.pos - (char == "}")):
                    raise _Outside("braces group commands or expand into several words")
            elif char == "~":
                previous = text[self.pos - 1] if self.pos > start else ""
                if not previous or previous in "=:":
                    raise _Outside("'~' expands to a home directory")
            elif char == "!":
                raise _Outside("'!' negates a pipeline or expands history")
            elif char == "=" and self.pos > start and _NAME.fullmatch(text[start : self.pos + 1]):
                pass  # assignments are found at the command level
            elif not _printable(char):
                raise _Outside("a control character is part of a word")
            value.append(char)
            pattern.append(char if char in "*?" else _escape_glob(char))
            digits = digits and char in "0123456789"
            self.pos += 1
        word = Word(
            "".join(value),
            self.offsets[start],
            self.offsets[self.pos],
            "".join(pattern) if glob else None,
        )
        return word, digits and bool(value)

    def _double_quoted(self) -> str:
        text = self.text
        index = self.pos + 1
        out: list[str] = []
        while index < len(text):
            char = text[index]
            if char == '"':
                self.pos = index + 1
                return "".join(out)
            if char == "\\":
                nxt = text[index + 1 : index + 2]
                if nxt in ('"', "\\", "$", "`"):
                    out.append(nxt)
                    index += 2
                    continue
                if nxt == "\n" or (nxt and not _printable(nxt)):
                    raise _Outside("a quoted word holds a newline or a control character")
                out.append("\\")
                index += 1
                continue
            if char == "$":
                raise _Outside(_dollar(text, index) + " inside double quotes")
            if char == "`":
                raise _Outside("backticks inside double quotes run a command substitution")
            if char == "!":
                raise _Outside("'!' inside double quotes can expand history")
            if not _printable(char):
                raise _Outside("a quoted word holds a newline or a control character")
            out.append(char)
            index += 1
        raise _Unparsable("a double quote is never closed")


def _escape_glob(char: str) -> str:
    return f"[{char}]" if char in "*?[" else char


def _dollar(text: str, index: int) -> str:
    nxt = text[index + 1 : index + 3]
    if nxt.startswith("(("):
        return "'$((' is arithmetic expansion, which can run commands through array subscripts"
    if nxt.startswith("("):
        return "'$(' runs a command substitution"
    if nxt.startswith("{"):
        return "'${' is a parameter expansion, which can run or re-read text"
    if nxt.startswith("'"):
        return "$'...' is ANSI-C quoting, which can spell any word in escapes"
    return "'$' expands a variable at run time"


# -- the parser ----------------------------------------------------------------------------------


def _parse(command: str) -> tuple[Segment, ...]:
    lexer = _Lexer(command)
    tokens = lexer.tokens()
    segments: list[Segment] = []
    words: list[Word] = []
    redirects: list[Redirect] = []
    dirs: tuple[str, ...] = (".",)
    after = ""  # the operator before the segment being read
    pending: str | None = None  # an operator that still needs a command after it
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if isinstance(token, Word):
            words.append(token)
            continue
        if isinstance(token, tuple):
            op, fd = token
            target = tokens[index] if index < len(tokens) else None
            if not isinstance(target, Word):
                raise _Unparsable(f"the redirect {op!r} has no target")
            index += 1
            redirect = _redirect(op, fd, target)
            if redirect is not None:
                redirects.append(redirect)
            continue
        if words or redirects:
            segment = _segment(words, redirects, dirs, after)
            segments.append(segment)
            dirs = _after(segment, dirs)
            words, redirects, after = [], [], str(token)
            pending = None if token == "\n" or token == ";" else token
        elif token == "\n" and pending not in (None, ";"):
            continue  # `a &&` followed by a newline: the command comes on the next line
        elif token != "\n":
            raise _Unparsable(f"{token!r} has no command before it")
    if words or redirects:
        segments.append(_segment(words, redirects, dirs, after))
    elif pending is not None:
        raise _Unparsable(f"{pending!r} has no command after it")
    return tuple(segments)


def _redirect(op: str, fd: int | None, target: Word) -> Redirect | None:
    if target.glob:
        raise _Outside("a redirect target is a glob pattern")
    if not target.value:
        raise _Outside("a redirect target is empty")
    if op == ">&" and (target.value.isdigit() or target.value == "-"):
        return None  # duplicating a descriptor: `2>&1`, `>&2`
    if op in (">|", ">&"):
        op = ">"
    return Redirect(op, target.value, fd)


def _segment(
    words: list[Word], redirects: list[Redirect], dirs: tuple[str, ...], after: str
) -> Segment:
    if not words:
        raise _Outside("a redirect with no command truncates or reads a file by itself")
    name = words[0]
    if name.glob:
        raise _Outside("the command name is a glob pattern, which could name any program")
    if not name.value:
        raise _Outside("the command name is empty")
    if _NAME.match(name.value) and "=" in name.value:
        raise _Outside("a NAME=value assignment changes the environment of what runs")
    if name.value.startswith("%"):
        raise _Outside("a command name starting with '%' names a job")
    if name.value in RESERVED:
        raise _Outside(f"{name.value!r} opens a compound command")
    if name.value in SHELL_STATE_BUILTINS:
        raise _Outside(f"{name.value!r} runs text as code or changes the shell's state")
    if name.value == "cd" and (
        len(words) != 2 or words[1].glob or words[1].value.startswith("-") or not words[1].value
    ):
        raise _Outside("'cd' is understood only with one plain directory")
    globs = tuple(i for i, w in enumerate(words) if w.glob)
    return Segment(
        tuple(w.value for w in words),
        tuple(redirects),
        globs,
        tuple(words[i].pattern or "" for i in globs),
        dirs,
        after,
        tuple((w.start, w.end) for w in words),
    )


def _after(segment: Segment, dirs: tuple[str, ...]) -> tuple[str, ...]:
    """The directories later segments may run in: `cd` may or may not have happened."""
    if segment.words[0] != "cd":
        return dirs
    moved = (posixpath.normpath(posixpath.join(d, segment.words[1])) for d in dirs)
    return tuple(dict.fromkeys((*dirs, *moved)))[:16]


# -- the cross-check -----------------------------------------------------------------------------

_SUBSET_NODES: Final = frozenset(
    {"program", "list", "pipeline", "command", "command_name", "word", "string",
     "string_content", "raw_string", "concatenation", "file_redirect", "file_descriptor",
     "comment", "number", "redirected_statement"}
)  # fmt: skip


@functools.cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def _cross_check(command: str, segments: tuple[Segment, ...]) -> str | None:
    """None when tree-sitter-bash reads the same commands with the same words at the same
    byte spans; else why the two parsers disagree."""
    data = command.encode("utf-8", "surrogatepass")
    root = _parser().parse(data).root_node
    if root.has_error:
        return "the second parser cannot read it the same way"
    theirs: list[list[tuple[int, int]]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_named and node.type not in _SUBSET_NODES:
            return f"the second parser reads a {node.type.replace('_', ' ')} in it"
        if node.type == "command":
            spans = [
                (c.start_byte, c.end_byte)
                for c in node.named_children
                if c.type not in ("file_redirect", "comment")
            ]
            theirs.append(spans)
        stack.extend(reversed(node.children))
    ours = [list(s.spans) for s in segments]
    if sorted(theirs) != sorted(ours):
        return "the second parser splits it into other words"
    return None


# -- the textual reading -------------------------------------------------------------------------


def read_text(command: str) -> Reading:
    """Every word-like token of `command` as bash could see it, whatever the syntax."""
    opaque = None
    text = _ANSI_C.sub(lambda m: _ansi_c(m.group(1)), command)
    if (found := _EXPANSION_START.search(text)) is not None:
        opaque = f"it expands {found.group(0)!r} at run time"
    elif "`" in text:
        opaque = "it runs a command substitution"
    elif _BRACE_EXPANSION.search(text):
        opaque = "brace expansion joins pieces into words"
    # Quote removal joins pieces (`r''m`, `r\\m` are `rm`); what separates words splits.
    for mark in ("\\\n", "\\", "'", '"'):
        text = text.replace(mark, "")
    return Reading(tuple(t for t in _TEXT_SPLIT.split(text) if t), opaque)


_ANSI_SIMPLE: Final = dict(zip("abeEfnrtv\\'\"?", "\a\b\x1b\x1b\f\n\r\t\v\\'\"?", strict=True))
_ANSI_NUMERIC: Final = re.compile(
    r"x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}"
)


def _ansi_c(body: str) -> str:
    """The text of a `$'...'` string as bash decodes it (bash(1), QUOTING), between blanks."""
    out: list[str] = []
    pos = 0
    while pos < len(body):
        char = body[pos]
        if char != "\\" or pos + 1 >= len(body):
            out.append(char)
            pos += 1
            continue
        nxt = body[pos + 1]
        if nxt in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[nxt])
            pos += 2
        elif nxt == "c" and pos + 2 < len(body):
            out.append(chr(ord(body[pos + 2]) & 0x1F))
            pos += 3
        elif (found := _ANSI_NUMERIC.match(body, pos + 1)) is not None:
            digits = found.group(0)
            value = int(digits, 8) if digits[0] in "01234567" else int(digits[1:], 16)
            out.append(chr(value) if value <= 0x10FFFF else "\ufffd")
            pos = found.end()
        else:
            out.append("\\" + nxt)
            pos += 2
    return " " + "".join(out) + " "


__all__ = [
    "HARMLESS_TARGETS",
    "Reading",
    "Redirect",
    "Segment",
    "ShellAnalysis",
    "Word",
    "analyze",
    "read_text",
]
