"""Shell command analysis: which simple commands a command line runs, and what cannot be checked.

A permission rule like `bash(cargo test:*)` must not allow `cargo test && rm -rf /`, nor
`echo $(cat ~/.ssh/id_rsa)`. So a command line is parsed, and every simple command it would run
becomes a `Segment` that the policy judges on its own: the parts of lists (`&&`, `||`, `;`, `&`,
newlines), pipelines (`|`, `|&`), subshells `( )`, groups `{ }`, command substitutions `$( )` and
backticks (wherever they appear: arguments, strings, assignments, redirect targets, heredoc
bodies, `[[ ]]` tests, arithmetic), process substitutions `<( )` and `>( )`, and the bodies of
`if`, `while`, `until`, `for` and `case`. Every segment must be allowed for the line to be allowed
(course 11.1; review finding 2).

The parser is tree-sitter-bash (docs/decisions.md says why): a maintained, MIT-licensed grammar
with prebuilt wheels that parses what agents actually write, heredocs and nested substitutions
included, and marks what it cannot parse with ERROR or MISSING nodes.

What is refused or flagged, and why:

- Unparsable text (an ERROR or MISSING node) and an empty command (only blanks or comments):
  `ShellAnalysis.error` is set, and such a command never auto-allows: there is nothing that
  every segment could be checked against (an empty segment list must not make "all allowed"
  vacuously true).
- Unsupported constructs (`ShellAnalysis.unsupported`, each with a reason): a command can hide
  what it runs, so the line always asks (deny rules and hard denies still apply to the segments
  that are visible):
  function definitions (a function can shadow any command name that follows it);
  `eval`, `source`/`.`, `trap` and `alias` (they run or define code from a string);
  a shell run with `-c` (`bash -c '...'`, `sh -c`, ...: its code is a string);
  a command name computed at run time (`$CMD args`, `git${IFS}push`).
- Output redirects to files (`>`, `>>`, `&>`, `>|`, `<>` to anything but /dev/null, /dev/stdout,
  /dev/stderr or a descriptor) are recorded per segment (`Segment.redirects`): a rule for the
  command does not cover the file it writes, so the policy asks for them, and denies them where
  writes are not allowed at all (plan mode, reviewer and planner roles).
- Input redirects, heredocs and here-strings are data, not commands; the substitutions inside an
  unquoted heredoc body are segments like any other.

`hard_deny_reason` names the commands no rule or mode may allow (`rm -rf /` and friends, mkfs,
writing to a block device, shutting the machine down); `mutating_git` names git invocations that
change a repository (for the reviewer and planner ceilings). Both look through command wrappers
(`env`, `sudo`, `timeout`, `xargs`, ...). They are defence in depth in front of the sandbox, not
a complete list of harmful commands.

Everything here is pure and synchronous.
"""

from __future__ import annotations

import functools
import posixpath
import shlex
from collections.abc import Iterator
from typing import Final

import attrs
import tree_sitter
import tree_sitter_bash

from anvild.agent.permissions.rules import CommandSubject

WRAPPERS: Final = frozenset(
    {
        "env",
        "command",
        "builtin",
        "exec",
        "nice",
        "ionice",
        "nohup",
        "setsid",
        "time",
        "timeout",
        "stdbuf",
        "sudo",
        "doas",
        "xargs",
        "chronic",
        "unbuffer",
        "watch",
        "strace",
        "ltrace",
        "flock",
        "chroot",
        "taskset",
    }
)
"""Commands that run another command given in their arguments."""

STRING_EVALUATORS: Final = frozenset({"eval", "source", ".", "trap", "alias"})
SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox"})
HARMLESS_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_WRITE_REDIRECTS: Final = frozenset({">", ">>", "&>", "&>>", ">|", "<>", ">&"})

# Targets of a recursive rm (or chmod/chown -R) that destroy the system or the user's home.
_ROOT_TARGETS: Final = frozenset(
    {
        "/",
        "~",
        "$HOME",
        "${HOME}",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/opt",
        "/proc",
        "/root",
        "/sbin",
        "/srv",
        "/sys",
        "/usr",
        "/var",
    }
)
_DISK_TOOLS: Final = frozenset(
    {"mkfs", "mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted", "shred"}
)
_POWER: Final = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_BLOCK_DEVICES: Final = (
    "/dev/sd",
    "/dev/nvme",
    "/dev/hd",
    "/dev/vd",
    "/dev/xvd",
    "/dev/mmcblk",
    "/dev/mem",
    "/dev/kmem",
    "/dev/disk",
)

READ_ONLY_GIT: Final = frozenset(
    {
        "status",
        "log",
        "diff",
        "show",
        "blame",
        "annotate",
        "grep",
        "ls-files",
        "ls-tree",
        "ls-remote",
        "rev-parse",
        "rev-list",
        "describe",
        "shortlog",
        "cat-file",
        "merge-base",
        "name-rev",
        "for-each-ref",
        "show-ref",
        "show-branch",
        "version",
        "help",
        "whatchanged",
        "count-objects",
        "var",
        "check-ignore",
        "check-attr",
        "check-ref-format",
        "diff-tree",
        "diff-files",
        "diff-index",
        "range-diff",
        "cherry",
        "verify-commit",
        "verify-tag",
        "fsck",
    }
)
"""git subcommands that never change a repository (anything not listed is treated as mutating,
except the listing forms of branch, tag, stash, remote, config, reflog, worktree and notes)."""

_GIT_OPTIONS_WITH_VALUE: Final = frozenset(
    {"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--exec-path"}
)
_GIT_LISTING: Final[dict[str, frozenset[str]]] = {
    "stash": frozenset({"list", "show"}),
    "remote": frozenset({"show", "get-url", "-v", "--verbose"}),
    "reflog": frozenset({"show"}),
    "worktree": frozenset({"list"}),
    "notes": frozenset({"list", "show"}),
    "submodule": frozenset({"status", "summary"}),
}
_GIT_CONFIG_WRITES: Final = frozenset(
    {
        "--add",
        "--unset",
        "--unset-all",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "-e",
        "--edit",
    }
)
_BRANCH_LIST_FLAGS: Final = frozenset(
    {
        "-a",
        "--all",
        "-r",
        "--remotes",
        "-l",
        "--list",
        "-v",
        "-vv",
        "--verbose",
        "--show-current",
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "--points-at",
        "--sort",
        "--format",
        "--color",
        "--no-color",
        "--column",
        "--no-column",
        "-i",
        "--ignore-case",
        "--omit-empty",
    }
)


@attrs.frozen
class Redirect:
    """An output redirect of a segment to a file (the target as written, and its literal value
    or None when it is computed at run time)."""

    operator: str
    target: str
    literal: str | None


@attrs.frozen
class Segment:
    """One simple command: its words as the shell will see them (a word computed at run time is
    kept as written), whether every word is literal, and its output redirects to files.
    Leading variable assignments (`FOO=1 cmd`) are words too, so a rule for `cmd` does not
    cover a command run with a changed environment."""

    words: tuple[str, ...]
    literal_words: tuple[bool, ...]
    redirects: tuple[Redirect, ...] = ()
    assignments: int = 0  # how many leading words are `NAME=value`

    @property
    def subject(self) -> CommandSubject:
        return CommandSubject(self.words)

    @property
    def text(self) -> str:
        return shlex.join(self.words)

    @property
    def command(self) -> tuple[str, ...]:
        """The words after the leading assignments."""
        return self.words[self.assignments :]

    @property
    def name_is_literal(self) -> bool:
        return not self.command or self.literal_words[self.assignments]


@attrs.frozen
class ShellAnalysis:
    """What a command line runs. `error` (unparsable or empty) and `unsupported` (constructs
    that cannot be checked) each keep the line from being allowed by rules."""

    command: str
    segments: tuple[Segment, ...] = ()
    unsupported: tuple[str, ...] = ()
    error: str | None = None

    @property
    def checkable(self) -> bool:
        """True when every segment is known: rules may then decide the line."""
        return self.error is None and not self.unsupported and bool(self.segments)


@functools.cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def analyze(command: str) -> ShellAnalysis:
    """Parse `command` and collect its segments, unsupported constructs and errors."""
    if not command.strip():
        return ShellAnalysis(command, error="the command is empty")
    data = command.encode("utf-8", "surrogatepass")
    tree = _parser().parse(data)
    root = tree.root_node
    if root.has_error:
        where = _first_error(root)
        at = "" if where is None else f" near {_snippet(data, where)}"
        return ShellAnalysis(command, error=f"the command could not be parsed{at}")
    walker = _Walker()
    walker.visit(root)
    if not walker.segments and not walker.unsupported:
        return ShellAnalysis(command, error="the command has nothing to run (only comments)")
    return ShellAnalysis(command, tuple(walker.segments), tuple(dict.fromkeys(walker.unsupported)))


def _first_error(node: tree_sitter.Node) -> tree_sitter.Node | None:
    if node.type == "ERROR" or node.is_missing:
        return node
    for child in node.children:
        if child.has_error or child.is_missing:
            found = _first_error(child)
            if found is not None:
                return found
    return None


def _snippet(data: bytes, node: tree_sitter.Node) -> str:
    start = max(0, node.start_byte - 10)
    text = data[start : node.end_byte + 10].decode("utf-8", "replace")
    return repr(text.strip() or text)


def _text(node: tree_sitter.Node) -> str:
    raw = node.text
    return "" if raw is None else raw.decode("utf-8", "surrogateescape")


def _unescape_word(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            nxt = next(chars, "")
            if nxt != "\n":  # a backslash-newline is a line continuation
                out.append(nxt)
        else:
            out.append(char)
    return "".join(out)


def _unescape_double(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in '$`"\\\n':
            if text[index + 1] != "\n":
                out.append(text[index + 1])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def literal_value(node: tree_sitter.Node) -> str | None:
    """The value of a word node when the shell cannot change it at run time, else None."""
    kind = node.type
    if kind in ("word", "number"):
        return _unescape_word(_text(node))
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "string":
        parts = []
        for child in node.children:
            if child.type == '"':
                continue
            if child.type != "string_content":
                return None
            parts.append(_unescape_double(_text(child)))
        return "".join(parts)
    if kind == "concatenation":
        values = [literal_value(child) for child in node.children]
        if any(v is None for v in values):
            return None
        return "".join(v for v in values if v is not None)
    return None


class _Walker:
    """Collects segments and unsupported constructs from a tree-sitter-bash tree."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.unsupported: list[str] = []

    def visit(self, node: tree_sitter.Node) -> None:
        kind = node.type
        if kind == "command":
            self._command(node, ())
        elif kind == "redirected_statement":
            self._redirected(node)
        elif kind == "declaration_command" or kind == "unset_command":
            self._words_segment(node, [c for c in node.children if c.is_named])
        elif kind == "variable_assignment":
            self._words_segment(node, [node])
        elif kind == "function_definition":
            self.unsupported.append(
                f"it defines a shell function ({_text(node.children[0])}), which can stand in "
                "for any command"
            )
            self._children(node)
        elif kind == "comment":
            return
        else:
            self._children(node)

    def _children(self, node: tree_sitter.Node) -> None:
        for child in node.children:
            self.visit(child)

    def _redirected(self, node: tree_sitter.Node) -> None:
        body = node.child_by_field_name("body")
        redirects: list[Redirect] = []
        for child in node.children:
            if child is body or child == body:
                continue
            redirects.extend(self._redirect(child))
        if body is not None and body.type == "command":
            self._command(body, tuple(redirects))
        else:
            if body is not None:
                self.visit(body)
            if redirects:
                # A redirect of a compound statement (`{ a; b; } > out`) writes for all of it.
                self.segments.append(Segment((":",), (True,), tuple(redirects)))

    def _redirect(self, node: tree_sitter.Node) -> list[Redirect]:
        """Output redirects to files among `node`; substitutions inside are visited."""
        if node.type == "heredoc_redirect" or node.type == "herestring_redirect":
            self._children(node)
            return []
        if node.type != "file_redirect":
            self.visit(node)
            return []
        operator = ""
        targets: list[tree_sitter.Node] = []
        for child in node.children:
            if child.type == "file_descriptor":
                continue
            if not child.is_named:
                operator = _text(child)
            else:
                targets.append(child)
        found: list[Redirect] = []
        for target in targets:
            self.visit(target)
            if operator not in _WRITE_REDIRECTS:
                continue
            value = literal_value(target)
            if operator == ">&" and value is not None and (value.isdigit() or value == "-"):
                continue  # duplicating a descriptor: `2>&1`, `>&2`
            if value in HARMLESS_TARGETS:
                continue
            found.append(Redirect(operator, _text(target), value))
        return found

    def _command(self, node: tree_sitter.Node, redirects: tuple[Redirect, ...]) -> None:
        words: list[str] = []
        literal: list[bool] = []
        assignments = 0
        for child in node.children:
            if child.type == "variable_assignment":
                self._children(child)
                value = _assignment_value(child)
                words.append(value if value is not None else _text(child))
                literal.append(value is not None)
                assignments += 1
            elif child.type == "command_name":
                word = child.children[0] if child.children else child
                self._children(child)
                self._word(word, words, literal)
            elif child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                redirects = (*redirects, *self._redirect(child))
            elif child.type == "comment":
                continue
            elif child.is_named:
                self._children(child)
                self._word(child, words, literal)
        segment = Segment(tuple(words), tuple(literal), redirects, assignments)
        self.segments.append(segment)
        self._check_unsupported(segment)

    def _words_segment(self, node: tree_sitter.Node, parts: list[tree_sitter.Node]) -> None:
        """export/declare/local/readonly/unset, and bare assignments: one segment of words."""
        words: list[str] = []
        literal: list[bool] = []
        head = node.children[0] if node.type != "variable_assignment" and node.children else None
        if head is not None and not head.is_named:
            words.append(_text(head))
            literal.append(True)
        for part in parts:
            self._children(part)
            value = (
                _assignment_value(part)
                if part.type == "variable_assignment"
                else literal_value(part)
            )
            words.append(value if value is not None else _text(part))
            literal.append(value is not None)
        self.segments.append(Segment(tuple(words), tuple(literal)))

    @staticmethod
    def _word(node: tree_sitter.Node, words: list[str], literal: list[bool]) -> None:
        value = literal_value(node)
        words.append(value if value is not None else _text(node))
        literal.append(value is not None)

    def _check_unsupported(self, segment: Segment) -> None:
        command = segment.command
        if not command:
            return
        if not segment.name_is_literal:
            self.unsupported.append(
                f"its command name {command[0]!r} is computed when it runs, so what runs "
                "cannot be known in advance"
            )
            return
        for words in _unwrapped(command):
            name = posixpath.basename(words[0])
            if name in STRING_EVALUATORS:
                self.unsupported.append(
                    f"it runs code from a string with {name!r}, which cannot be checked"
                )
            elif name in SHELLS and any(_is_short_flag(w, "c") for w in words[1:]):
                self.unsupported.append(
                    f"it runs code from a string with '{name} -c', which cannot be checked"
                )


def _assignment_value(node: tree_sitter.Node) -> str | None:
    """`NAME=value` with the value's quotes removed, or None when the value is computed."""
    name = node.child_by_field_name("name")
    value = node.child_by_field_name("value")
    if name is None:
        return None
    if value is None:
        return _text(name) + "="
    literal = literal_value(value)
    return None if literal is None else f"{_text(name)}={literal}"


def _is_short_flag(word: str, flag: str) -> bool:
    return word.startswith("-") and not word.startswith("--") and flag in word[1:]


def _unwrapped(words: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """`words`, then each command a wrapper in it would run: for `sudo env X=1 git push`, the
    whole, `env X=1 git push` and `git push`. Wrapper options are skipped loosely: an option's
    value may be taken for the command, which only makes the checks stricter."""
    current = words
    while current:
        yield current
        if posixpath.basename(current[0]) not in WRAPPERS:
            return
        rest = current[1:]
        index = 0
        while index < len(rest) and (
            rest[index].startswith("-") or "=" in rest[index] or _is_duration(rest[index])
        ):
            index += 1
        current = rest[index:]


def _is_duration(word: str) -> bool:
    return bool(word) and word[0].isdigit() and word.rstrip("smhd").replace(".", "", 1).isdigit()


def _recursive(words: tuple[str, ...]) -> bool:
    return any(
        w in ("--recursive", "-R")
        or (w.startswith("-") and not w.startswith("--") and ("r" in w or "R" in w))
        for w in words
    )


def _is_root_target(word: str) -> bool:
    text = word.rstrip("*").rstrip("/") or "/"
    if text in _ROOT_TARGETS:
        return True
    if text.startswith(("$HOME", "${HOME}", "~")) and text.strip("/.*") in (
        "~",
        "$HOME",
        "${HOME}",
    ):
        return True
    return posixpath.normpath(text) == "/" if text.startswith("/") else False


def _powers_off(name: str, args: tuple[str, ...]) -> bool:
    if name in _POWER:
        return True
    if name == "systemctl":
        return bool(set(args) & (_POWER | {"kexec"}))
    return name == "init" and args[:1] in (("0",), ("6",))


def hard_deny_reason(segment: Segment) -> str | None:
    """Why this segment may never run, whatever the rules and the mode say; None if it may."""
    for words in _unwrapped(segment.command):
        name = posixpath.basename(words[0])
        args = words[1:]
        if name == "rm":
            if "--no-preserve-root" in args:
                return "it runs rm with --no-preserve-root"
            targets = [w.strip('"') for w in args if not w.startswith("-")]
            if _recursive(args) and any(_is_root_target(t) for t in targets):
                return f"it deletes a system or home directory recursively ({segment.text})"
        elif name in ("chmod", "chown", "chgrp") and _recursive(args):
            targets = [w.strip('"') for w in args[1:] if not w.startswith("-")]
            if any(_is_root_target(t) for t in targets):
                return f"it changes ownership or modes of a system directory ({segment.text})"
        elif name in _DISK_TOOLS or name.startswith(("mkfs.", "mkfs")):
            return f"it formats or erases disks ({name})"
        elif name == "dd" and any(
            w.startswith("of=") and w[3:].startswith(_BLOCK_DEVICES) for w in args
        ):
            return "it writes a block device with dd"
        elif _powers_off(name, args):
            return "it shuts down or restarts the machine"
    for redirect in segment.redirects:
        if redirect.literal is not None and redirect.literal.startswith(_BLOCK_DEVICES):
            return f"it writes a block device ({redirect.literal})"
    return None


def mutating_git(segment: Segment) -> str | None:
    """A description of the repository change when this segment runs a git command that may
    change a repository (commit, add, push, reset, checkout, rebase, merge, branch -d, ...);
    None for read-only git commands and for commands that are not git."""
    for words in _unwrapped(segment.command):
        if posixpath.basename(words[0]) != "git":
            continue
        args = list(words[1:])
        while args and args[0].startswith("-"):
            option = args.pop(0)
            if option in ("-c", "--config-env"):
                return "git with -c (configuration that can run programs)"
            if option in _GIT_OPTIONS_WITH_VALUE and args:
                args.pop(0)
        if not args:
            return None
        sub, rest = args[0], args[1:]
        if sub in READ_ONLY_GIT:
            return None
        if sub == "branch" and all(
            w in _BRANCH_LIST_FLAGS or w.startswith(("--format=", "--sort=")) for w in rest
        ):
            return None
        if (
            sub == "branch"
            and ("--list" in rest or "-l" in rest)
            and not (
                {
                    "-d",
                    "-D",
                    "--delete",
                    "-m",
                    "-M",
                    "--move",
                    "-c",
                    "-C",
                    "--copy",
                    "-f",
                    "--force",
                }
                & set(rest)
            )
        ):
            return None
        if (
            sub == "tag"
            and (not rest or "-l" in rest or "--list" in rest)
            and not ({"-d", "--delete", "-a", "-s", "-f", "-m"} & set(rest))
        ):
            return None
        if sub == "config" and _config_reads(rest):
            return None
        bare_lists = sub != "stash"  # a bare `git stash` stashes; the others list
        if sub in _GIT_LISTING and (
            (not rest and bare_lists) or (rest[:1] and rest[0] in _GIT_LISTING[sub])
        ):
            return None
        return f"git {sub}"
    return None


def _config_reads(rest: list[str]) -> bool:
    """`git config --get ...`, `--list`, `--get-regexp`: reads; anything that may set is not."""
    reads = any(w.startswith("--get") or w in ("--list", "-l") for w in rest)
    writes = any(w in _GIT_CONFIG_WRITES for w in rest)
    return reads and not writes


def suggested_rule(segment: Segment, tool: str = "bash") -> str:
    """The rule an "always" answer adds for this segment: `tool(name sub:*)` when the command
    has a plain subcommand word (`cargo test --lib` -> `bash(cargo test:*)`), else the exact
    command. Paths, options and computed words are never generalised over."""
    command = segment.words
    if (
        segment.assignments == 0
        and all(segment.literal_words)
        and not segment.redirects
        and len(command) >= 2
        and posixpath.basename(command[0]) not in WRAPPERS | SHELLS | STRING_EVALUATORS
        and _plain_word(command[0])
        and _plain_word(command[1])
    ):
        return f"{tool}({shlex.join(command[:2])}:*)"
    return f"{tool}({segment.text})"


def _plain_word(word: str) -> bool:
    return (
        bool(word)
        and not word.startswith(("-", ".", "/", "~"))
        and all(c.isalnum() or c in "_-.+" for c in word)
    )


__all__ = [
    "Redirect",
    "Segment",
    "ShellAnalysis",
    "analyze",
    "hard_deny_reason",
    "literal_value",
    "mutating_git",
    "suggested_rule",
]
