"""What programs do with their arguments: the one table of arguments that run code or write.

A prefix rule such as `bash(find:*)` names a program, not everything it can be told to do.
`findings(words)` lists the arguments that run a program or code or write files (`find -exec`,
`sed -i`, `git --output`, `xargs CMD`, ...), each with the index of the word naming it: an allow
rule covers it only when it spells that word out (`bash(sed -i:*)`), else the call asks.
`PROGRAMS` is the table (README, "Dangerous arguments"); long options match any unambiguous
prefix. `commands(words)` is every command a command runs (wrappers, `-exec`, `sh -c` text),
program names reduced; deny rules match all of them. `Finding.opaque` marks a command running
text it does not show (a shell on stdin, `sed s///e`). Pure and synchronous.
"""

from __future__ import annotations

import enum
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator
from typing import Final

import attrs


class Danger(enum.Enum):
    RUNS = "runs a program"
    CODE = "runs code"
    WRITES = "writes files"
    GIT = "changes the repository"


@attrs.frozen
class Finding:
    """One dangerous argument: `index` of the word naming it, what it does, the command it runs
    when that is visible (`runs`), code text to read for program names (`code`), and whether
    it runs text the command line does not show (`opaque`)."""

    index: int
    danger: Danger
    what: str
    runs: tuple[str, ...] | None = None
    code: str | None = None
    opaque: bool = False


Inspector = Callable[[tuple[str, ...]], Iterator[Finding]]

SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "ash", "busybox"})
INTERPRETERS: Final = frozenset(
    {"python", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "Rscript", "deno"}
)


def _long(word: str, *names: str) -> bool:
    """`--name` or `--name=...`, or an abbreviation (`sed --e=SCRIPT` is `--expression`)."""
    if not word.startswith("--") or len(word) < 3:
        return False
    key = word[2:].split("=", 1)[0]
    return bool(key) and any(name.startswith(key) for name in names)


def _short(word: str, letters: str, takes_value: str = "") -> bool:
    """A bundle of short options (`-ni`) that contains one of `letters` before any option that
    takes the rest of the word as its value."""
    if not word.startswith("-") or word.startswith("--") or len(word) < 2:
        return False
    for char in word[1:]:
        if char in letters:
            return True
        if char in takes_value:
            return False
    return False


def _value(words: tuple[str, ...], index: int) -> str:
    """The value of the option at `index`: after `=`, or the next word."""
    word = words[index]
    if word.startswith("--") and "=" in word:
        return word.split("=", 1)[1]
    if not word.startswith("--") and len(word) > 2:
        return word[2:]
    return words[index + 1] if index + 1 < len(words) else ""


_LOADER: Final = re.compile(r"ld(-linux[\w.-]*|64)?\.so(\.\d+)*")


def program_name(word: str) -> str:
    """The program a command word names: its base name, with the dynamic loader (which runs
    the program in its arguments: `/lib64/ld-linux-x86-64.so.2 /usr/bin/rm`) as `ld.so`."""
    name = posixpath.basename(word)
    return "ld.so" if _LOADER.fullmatch(name) else name


# -- wrappers: programs that run the command in their arguments ----------------------------------


@attrs.frozen
class Wrapper:
    """How to find the command a wrapper runs: options that take a value (short letters, long
    names), and how many operands come before the command (`timeout 5 CMD`: one)."""

    short_values: str = ""
    long_values: tuple[str, ...] = ()
    operands: int = 0
    assignments: bool = False  # `env NAME=value CMD`


WRAPPERS: Final[dict[str, Wrapper]] = {
    "env": Wrapper("uSC", ("unset", "chdir", "split-string"), assignments=True),
    "nice": Wrapper("n", ("adjustment",)),
    "ionice": Wrapper("cnp", ("class", "classdata", "pid")),
    "nohup": Wrapper(),
    "setsid": Wrapper(),
    "stdbuf": Wrapper("ioe", ("input", "output", "error")),
    "timeout": Wrapper("sk", ("signal", "kill-after"), operands=1),
    "chronic": Wrapper(),
    "unbuffer": Wrapper(),
    "sudo": Wrapper("ugpUChDrtT", ("user", "group", "prompt", "chdir", "role", "type")),
    "doas": Wrapper("uC"),
    "xargs": Wrapper(
        "EIlLnPsdaeia",
        (
            "eof",
            "replace",
            "max-lines",
            "max-args",
            "max-procs",
            "max-chars",
            "delimiter",
            "arg-file",
            "process-slot-var",
        ),
    ),
    "command": Wrapper(),
    "builtin": Wrapper(),
    "exec": Wrapper("a"),
    "time": Wrapper("fo", ("format", "output")),
    "strace": Wrapper("eoOpPsSuEXIbaU"),
    "ltrace": Wrapper("eoOpPsSuEnaAlLx"),
    "taskset": Wrapper("", (), operands=1),
    "chroot": Wrapper("", ("userspec", "groups"), operands=1),
    "flock": Wrapper("wEc", ("timeout", "conflict-exit-code", "command"), operands=1),
    "watch": Wrapper("nd", ("interval", "differences")),
    "unshare": Wrapper("S", ("setuid", "setgid", "wd", "root")),
    "nsenter": Wrapper("tSG", ("target", "setuid", "setgid", "wd", "root")),
    "setpriv": Wrapper("", ("reuid", "regid", "groups", "inh-caps", "bounding-set")),
    "runuser": Wrapper("ugc", ("user", "group", "command")),
    "firejail": Wrapper(),
    "parallel": Wrapper("jS", ("jobs",)),
    "ld.so": Wrapper("", ("library-path", "inhibit-rpath", "audit", "preload", "argv0")),
    "chrt": Wrapper("TPD", ("sched-runtime", "sched-period", "sched-deadline"), operands=1),
    "prlimit": Wrapper("po", ("pid", "output")),
    "setarch": Wrapper(operands=1),
    "linux32": Wrapper(),
    "linux64": Wrapper(),
}
"""Programs that run the command given in their arguments (beyond options and operands)."""


def unwrap(words: tuple[str, ...]) -> tuple[str, ...] | None:
    """The command a wrapper runs (`timeout 5 npm test` -> `npm test`), or None when `words`
    is not a wrapper or names no command (`env` alone prints the environment)."""
    spec = WRAPPERS.get(program_name(words[0])) if words else None
    if spec is None:
        return None
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if word.startswith("--"):
            takes = any(_long(word, name) for name in spec.long_values) and "=" not in word
            index += 2 if takes else 1
        elif word.startswith("-") and len(word) > 1:
            # `-n 5` or `-n5`: the value is the rest of the bundle, else the next word.
            letter = next((c for c in word[1:] if c in spec.short_values), None)
            index += 2 if letter is not None and word.endswith(letter) else 1
        elif spec.assignments and "=" in word and not word.startswith("="):
            index += 1
        else:
            break
    index += spec.operands
    return words[index:] if index < len(words) else None


# -- the table -----------------------------------------------------------------------------------


def _find(words: tuple[str, ...]) -> Iterator[Finding]:
    for index, word in enumerate(words):
        if word in ("-exec", "-execdir", "-ok", "-okdir"):
            end = next(
                (i for i in range(index + 1, len(words)) if words[i] in (";", "+")), len(words)
            )
            yield Finding(index, Danger.RUNS, f"find {word} runs a program", words[index + 1 : end])
        elif word in ("-delete", "-fprint", "-fprint0", "-fprintf", "-fls"):
            yield Finding(index, Danger.WRITES, f"find {word} deletes or writes files")


_SED_SAFE: Final = frozenset("=dDgGhHlnNpPqQxz#:btTFvl{}")


def _sed(words: tuple[str, ...]) -> Iterator[Finding]:
    script_given = False
    scripts: list[tuple[int, str]] = []
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--":
            if not script_given and index + 1 < len(words):
                scripts.append((index + 1, words[index + 1]))  # the script may follow `--`
            break
        if _long(word, "in-place") or _short(word, "i", "efl"):
            yield Finding(index, Danger.WRITES, "sed -i rewrites the files it reads")
        if (_short(word, "l", "efi") and word.endswith("l")) or (
            _long(word, "line-length") and "=" not in word
        ):
            index += 2  # `-l N`: N is the option's value, not the script
            continue
        if _long(word, "expression") or _short(word, "e", "fl"):
            separate = "=" not in word and word.endswith("e")
            scripts.append((index + separate, _value(words, index)))
            script_given = True
            index += 1 + separate
            continue
        if _long(word, "file") or _short(word, "f", "el"):
            yield Finding(index, Danger.CODE, "sed -f reads its script from a file", opaque=True)
            script_given = True
        elif not word.startswith("-") and not script_given:
            scripts.append((index, word))
            script_given = True
        index += 1
    for index, script in scripts:
        yield from _sed_script(index, script)


def _sed_script(index: int, script: str) -> Iterator[Finding]:
    """Findings of one sed script: `e` and `s///e` run commands, `w`/`W` and `s///w` write.
    A script this reader cannot follow is treated as running code."""
    pos = 0
    while pos < len(script):
        char = script[pos]
        if char in " \t;\n!0123456789$,~+":
            pos += 1
        elif char in "/\\":  # an address /re/ or \cREc
            delim = script[pos + 1] if char == "\\" else "/"
            end = _delimited(script, pos + 2 if char == "\\" else pos + 1, delim)
            if end < 0:
                break
            pos = end + 1
            while pos < len(script) and script[pos] in "IM":
                pos += 1
        elif char in "aic":
            return  # text to the end of the script
        elif char in _SED_SAFE:
            pos += 1
            if char in ":btTv":
                while pos < len(script) and script[pos] not in ";\n}":
                    pos += 1
        elif char in "rR":
            pos = len(script)  # reads a file: harmless here
        elif char in "wW":
            yield Finding(index, Danger.WRITES, "sed's w command writes a file")
            return
        elif char == "e":
            command = script[pos + 1 :].strip()
            yield Finding(
                index, Danger.CODE, "sed's e command runs a command", code=command or None,
                opaque=not command,
            )  # fmt: skip
            return
        elif char in "sy" and pos + 1 < len(script):
            delim = script[pos + 1]
            first = _delimited(script, pos + 2, delim)
            second = _delimited(script, first + 1, delim) if first >= 0 else -1
            if second < 0:
                break
            pos = second + 1
            flags = ""
            while pos < len(script) and script[pos] not in ";\n}":
                flags += script[pos]
                pos += 1
            if char == "s" and "e" in flags:
                yield Finding(index, Danger.CODE, "sed's s///e runs the result", opaque=True)
            if char == "s" and "w" in flags:
                yield Finding(index, Danger.WRITES, "sed's s///w writes a file")
                return  # the rest of the script is the file name
            if char == "s" and flags.strip("egipmIM0123456789 \t"):
                break
        else:
            break
    else:
        return
    yield Finding(index, Danger.CODE, "a sed script that cannot be read exactly", opaque=True)


def _delimited(text: str, start: int, delim: str) -> int:
    """The index of the first unescaped `delim` at or after `start`, or -1."""
    pos = start
    while pos < len(text):
        if text[pos] == "\\":
            pos += 2
            continue
        if text[pos] == delim:
            return pos
        pos += 1
    return -1


_AWK_RISK: Final = re.compile(r"system|getline|@load|@include|\|")
_AWK_PRINT_TO: Final = re.compile(r"print[f]?\b[^;}\n]*>")


def _awk(words: tuple[str, ...]) -> Iterator[Finding]:
    index = 1
    program_seen = False
    while index < len(words):
        word = words[index]
        if word in ("-f", "-i", "-l", "-E") or _long(word, "file", "include", "load", "exec"):
            yield Finding(index, Danger.CODE, f"awk {word} loads a program", opaque=True)
            return
        if word in ("-v", "-F"):
            index += 2
            continue
        if not word.startswith("-") and not program_seen:
            program_seen = True
            program = word.replace("||", "")
            if _AWK_RISK.search(program):
                yield Finding(
                    index, Danger.CODE, "awk's system, getline and pipes run commands",
                    code=word, opaque=True,
                )  # fmt: skip
            elif _AWK_PRINT_TO.search(program):
                yield Finding(index, Danger.WRITES, "awk's print > file writes a file")
        index += 1


def _git(words: tuple[str, ...]) -> Iterator[Finding]:
    index = 1
    while index < len(words) and words[index].startswith("-"):
        word = words[index]
        if word == "-c" or _long(word, "config-env"):
            value = _value(words, index)
            yield Finding(
                index, Danger.RUNS, f"git {word} sets configuration, which can run programs",
                code=value.split("=", 1)[1] if "=" in value else None, opaque=word != "-c",
            )  # fmt: skip
        elif _long(word, "exec-path", "upload-pack", "receive-pack"):
            yield Finding(index, Danger.RUNS, f"git {word} chooses the programs git runs")
        elif word in ("-C",) or _long(word, "git-dir", "work-tree", "namespace"):
            yield Finding(
                index, Danger.RUNS, f"git {word} works in another repository, whose "
                "configuration can run programs",
            )  # fmt: skip
        if word in ("-c", "-C") or (
            _long(word, "git-dir", "work-tree", "namespace", "exec-path", "config-env")
            and "=" not in word
        ):
            index += 1
        index += 1
    if index >= len(words):
        return
    sub = words[index]
    if (change := mutating_git(words)) is not None:
        yield Finding(index, Danger.GIT, f"{change} changes the repository")
    for position in range(index + 1, len(words)):
        word = words[position]
        if word == "--":
            break
        if _long(word, "output", "output-directory"):
            yield Finding(position, Danger.WRITES, f"git {sub} {word} writes a file")
        elif sub in ("format-patch", "archive") and word == "-o":
            yield Finding(position, Danger.WRITES, f"git {sub} -o writes files")
        elif (
            _long(word, "upload-pack", "receive-pack", "exec", "open-files-in-pager", "extcmd")
            or (sub == "grep" and _short(word, "O"))
            or (sub in ("rebase", "difftool") and word in ("-x", "-t"))
        ):
            yield Finding(position, Danger.RUNS, f"git {sub} {word} runs a program",
                          code=_value(words, position))  # fmt: skip
        elif _long(word, "ext-diff", "textconv", "tool"):
            yield Finding(position, Danger.RUNS, f"git {sub} {word} runs a configured program")
    if sub in ("bisect", "submodule", "filter-branch", "filter-repo") and any(
        w in ("run", "foreach") or w.startswith("--") for w in words[index + 1 :]
    ):
        yield Finding(index + 1, Danger.RUNS, f"git {sub} runs commands", opaque=True)


_NPM_SAFE: Final = frozenset(
    {"-s", "--silent", "-q", "--quiet", "--if-present", "--workspaces", "--ws", "-ws",
     "--json", "--long", "-l", "--verbose", "-d", "--version", "-v", "--help", "-h",
     "--offline", "--prefer-offline", "--no-audit", "--no-fund", "--ci", "--frozen-lockfile",
     "--immutable", "--recursive", "-r"}
)  # fmt: skip


def _npm(words: tuple[str, ...]) -> Iterator[Finding]:
    name = program_name(words[0])
    for index, word in enumerate(words[1:], 1):
        if word == "--" or (name == "npx" and not word.startswith("-")):
            return  # what follows goes to the project's script, or to the package npx runs
        if word.startswith("-") and word not in _NPM_SAFE and not word.startswith("--workspace="):
            following = words[index + 1] if index + 1 < len(words) else ""
            value = word.split("=", 1)[1] if "=" in word else following
            yield Finding(
                index, Danger.RUNS, f"{name} takes any configuration as an option, and {word} "
                "could choose the shell or programs it runs", code=value or None,
            )  # fmt: skip
        if word in ("exec", "x", "dlx") or (word == "config" and index == 1):
            yield Finding(index, Danger.RUNS, f"{name} {word} runs or configures programs")


def _tar(words: tuple[str, ...]) -> Iterator[Finding]:
    for index, word in enumerate(words[1:], 1):
        if _long(
            word, "to-command", "checkpoint-action", "use-compress-program", "info-script",
            "new-volume-script", "rsh-command", "rmt-command",
        ) or word in ("-I", "-F"):  # fmt: skip
            yield Finding(index, Danger.RUNS, f"tar {word} runs a program",
                          code=_value(words, index))  # fmt: skip


def _option_runs(program: str, shorts: tuple[str, ...], longs: tuple[str, ...]) -> Inspector:
    """An inspector for a program whose listed options take a command to run (`rsync -e`)."""

    def inspect(words: tuple[str, ...]) -> Iterator[Finding]:
        for index, word in enumerate(words[1:], 1):
            short = not word.startswith("--") and any(word.startswith(s) for s in shorts)
            if short or _long(word, *longs):
                yield Finding(index, Danger.RUNS, f"{program} {word} runs a program",
                              code=_value(words, index))  # fmt: skip

    return inspect


def _pager(words: tuple[str, ...]) -> Iterator[Finding]:
    name = program_name(words[0])
    for index, word in enumerate(words[1:], 1):
        if word.startswith("+"):
            yield Finding(index, Danger.CODE, f"{name} {word} runs a pager command",
                          code=word[1:].lstrip("!"))  # fmt: skip
        elif word in ("-o", "-O") or _long(word, "log-file", "LOG-FILE"):
            yield Finding(index, Danger.WRITES, f"{name} {word} writes a file")
        elif word == "-k" or _long(word, "lesskey-file", "lesskey-src"):
            yield Finding(index, Danger.CODE, f"{name} {word} loads key bindings", opaque=True)


def _sort(words: tuple[str, ...]) -> Iterator[Finding]:
    for index, word in enumerate(words[1:], 1):
        if _short(word, "o", "kStT") or _long(word, "output"):
            yield Finding(index, Danger.WRITES, f"sort {word} writes a file")
        elif _long(word, "compress-program"):
            yield Finding(index, Danger.RUNS, f"sort {word} runs a program",
                          code=_value(words, index))  # fmt: skip


def _uniq(words: tuple[str, ...]) -> Iterator[Finding]:
    operands = [i for i, w in enumerate(words[1:], 1) if not w.startswith("-") or w == "-"]
    if len(operands) >= 2:
        yield Finding(operands[1], Danger.WRITES, "uniq writes its second operand")


def _shell(words: tuple[str, ...]) -> Iterator[Finding]:
    name = program_name(words[0])
    for index, word in enumerate(words[1:], 1):
        if _short(word, "c") and not word.startswith("+"):
            code = words[index + 1] if index + 1 < len(words) else ""
            yield Finding(index, Danger.CODE, f"{name} -c runs shell code", code=code)
            return
        if word == "-s" or (word.startswith("-") and "s" in word[1:] and not word.startswith("--")):
            break
        if not word.startswith(("-", "+")):
            yield Finding(index, Danger.RUNS, f"{name} runs the script {word}")
            return
    yield Finding(0, Danger.CODE, f"{name} runs commands from its input", opaque=True)


def _interpreter(words: tuple[str, ...]) -> Iterator[Finding]:
    name = program_name(words[0])
    for index, word in enumerate(words[1:], 1):
        if word in ("-c", "-e", "-E", "-r", "-p", "--eval", "--print") or _short(word, "ce"):
            code = words[index + 1] if index + 1 < len(words) else ""
            yield Finding(index, Danger.CODE, f"{name} {word} runs code", code=code)
            return
        if not word.startswith("-"):
            return  # a script or module: what the rule allows
        if word == "-m":
            return
    if len(words) == 1 or words[-1] == "-":
        yield Finding(0, Danger.CODE, f"{name} runs code from its input", opaque=True)


def _make(words: tuple[str, ...]) -> Iterator[Finding]:
    for index, word in enumerate(words[1:], 1):
        if _long(word, "eval"):
            yield Finding(index, Danger.CODE, "make --eval runs makefile code",
                          code=_value(words, index))  # fmt: skip
        elif word in ("-f", "--file", "--makefile") or word.startswith("-f"):
            yield Finding(index, Danger.RUNS, f"make {word} runs another makefile's recipes")


def _script(words: tuple[str, ...]) -> Iterator[Finding]:
    for index, word in enumerate(words[1:], 1):
        if _long(word, "command"):
            yield Finding(index, Danger.CODE, "script --command runs shell code",
                          code=_value(words, index))  # fmt: skip
        elif _short(word, "c", "BEIOTmo"):
            rest = word[word.index("c") + 1 :]
            following = words[index + 1] if index + 1 < len(words) else ""
            yield Finding(index, Danger.CODE, "script -c runs shell code", code=rest or following)


def _wrapper(words: tuple[str, ...]) -> Iterator[Finding]:
    name = program_name(words[0])
    inner = unwrap(words)
    if inner is not None:
        yield Finding(len(words) - len(inner), Danger.RUNS, f"{name} runs {inner[0]}", inner)
    if inner is not None and inner[0].startswith("-"):  # `setarch ARCH -R CMD`: options after
        yield Finding(len(words) - len(inner), Danger.RUNS,
                      f"{name} takes options the table does not know", opaque=True)  # fmt: skip
    for index, word in enumerate(words[1 : len(words) - len(inner or ())], 1):
        if name in ("env",) and (_short(word, "S") or _long(word, "split-string")):
            yield Finding(index, Danger.CODE, "env -S splits a string into a command",
                          code=_value(words, index))  # fmt: skip
        elif name in ("flock", "runuser") and (word == "-c" or _long(word, "command")):
            yield Finding(index, Danger.CODE, f"{name} -c runs shell code",
                          code=_value(words, index))  # fmt: skip
        elif name in ("time", "strace", "ltrace") and (word == "-o" or _long(word, "output")):
            yield Finding(index, Danger.WRITES, f"{name} {word} writes a file")
        elif name in ("sudo", "doas") and word in ("-s", "-i"):
            yield Finding(index, Danger.CODE, f"{name} {word} runs a shell", opaque=True)
    if name == "watch" and inner is not None:
        yield Finding(len(words) - len(inner), Danger.CODE, "watch runs its command with sh -c",
                      code=" ".join(inner))  # fmt: skip
    if name == "xargs" and inner is not None and any("{}" in w or "%" in w for w in inner[:1]):
        yield Finding(len(words) - len(inner), Danger.RUNS, "xargs builds the command name",
                      opaque=True)  # fmt: skip
    elif name == "xargs" and inner is not None and program_name(inner[0]) in PROGRAMS:
        # Words from the input can be options: a line `-e1e touch X` makes `xargs sed` run it.
        yield Finding(len(words) - len(inner), Danger.RUNS,
                      f"xargs gives {inner[0]} words from its input, which can be options",
                      opaque=True)  # fmt: skip


PROGRAMS: Final[dict[str, Inspector]] = {
    "find": _find,
    "sed": _sed,
    "gsed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "git": _git,
    "npm": _npm,
    "npx": _npm,
    "yarn": _npm,
    "pnpm": _npm,
    "tar": _tar,
    "rsync": _option_runs("rsync", ("-e",), ("rsh", "rsync-path")),
    "rg": _option_runs("rg", (), ("pre",)),
    "ssh": _option_runs("ssh", ("-o",), ()),
    "zip": _option_runs("zip", ("-TT",), ("unzip-command",)),
    "man": _option_runs("man", ("-P", "-H"), ("pager", "html", "browser")),
    "cargo": _option_runs("cargo", (), ("config",)),
    "less": _pager,
    "more": _pager,
    "most": _pager,
    "sort": _sort,
    "uniq": _uniq,
    "make": _make,
    "script": _script,
    **dict.fromkeys(SHELLS, _shell),
    **dict.fromkeys(INTERPRETERS, _interpreter),
    **dict.fromkeys(WRAPPERS, _wrapper),
}
"""Program name -> its inspector. README's "Dangerous arguments" documents every entry."""


def findings(words: tuple[str, ...]) -> tuple[Finding, ...]:
    """The dangerous arguments of one command (see the module docstring)."""
    if not words:
        return ()
    inspect = PROGRAMS.get(program_name(words[0]))
    return () if inspect is None else tuple(inspect(words))


def named_files(words: tuple[str, ...]) -> tuple[str, ...]:
    """Files a command names inside the text of an argument, for path deny rules: sed's `r`,
    `R`, `w` and `W` take the rest of the script line as a file name (`sed 'r .env' x` reads
    .env, `1r.env` too). Over-approximated: the rest of the line after every such letter."""
    if len(words) < 2 or program_name(words[0]) not in ("sed", "gsed"):
        return ()
    return tuple(
        rest
        for word in words[1:]
        for index, char in enumerate(word)
        if char in "rRwW" and (rest := word[index + 1 :].split("\n", 1)[0].strip())
    )


# -- every command a command runs ----------------------------------------------------------------


@attrs.frozen
class Runs:
    """What one command line can run: `commands` (word tuples, program names reduced to their
    base names), `texts` (code whose tokens are read like an outside line's), and `opaque`:
    why it can run something its text does not show, or None."""

    commands: tuple[tuple[str, ...], ...] = ()
    texts: tuple[str, ...] = ()
    opaque: str | None = None


def runs(words: tuple[str, ...], depth: int = 0) -> Runs:
    """Every command `words` runs, itself first (see `Runs`)."""
    if not words or depth > 8:
        return Runs(opaque="it nests commands too deeply to follow" if words else None)
    commands = [(program_name(words[0]), *words[1:])]
    texts: list[str] = []
    opaque: str | None = None
    for finding in findings(words):
        if finding.runs:
            inner = runs(finding.runs, depth + 1)
            commands.extend(inner.commands)
            texts.extend(inner.texts)
            opaque = opaque or inner.opaque
        if finding.code:
            texts.append(finding.code)
        if finding.opaque and opaque is None:
            opaque = finding.what
    return Runs(tuple(commands), tuple(texts), opaque)


# -- hard denies and git ---------------------------------------------------------------------------

_ROOT_TARGETS: Final = frozenset(
    {"/", "~", "$HOME", "${HOME}", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64",
     "/opt", "/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/var"}
)  # fmt: skip
_DISK_TOOLS: Final = frozenset(
    {"mkfs", "mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted", "shred"}
)
_POWER: Final = frozenset({"shutdown", "reboot", "halt", "poweroff"})
BLOCK_DEVICES: Final = (
    "/dev/sd", "/dev/nvme", "/dev/hd", "/dev/vd", "/dev/xvd", "/dev/mmcblk", "/dev/mem",
    "/dev/kmem", "/dev/disk",
)  # fmt: skip


def _recursive(words: tuple[str, ...]) -> bool:
    return any(
        w in ("--recursive", "-R")
        or (w.startswith("-") and not w.startswith("--") and ("r" in w or "R" in w))
        for w in words
    )


def _is_root_target(word: str) -> bool:
    text = word.strip('"').rstrip("*").rstrip("/") or "/"
    if text in _ROOT_TARGETS:
        return True
    if text.startswith(("$HOME", "${HOME}", "~")) and text.strip("/.*") in _ROOT_TARGETS:
        return True
    return text.startswith("/") and posixpath.normpath(text) == "/"


def hard_deny_reason(words: tuple[str, ...]) -> str | None:
    """Why this command may never run, whatever the rules and the mode say; None if it may.
    `words` is one command as `runs` gives it (wrappers are separate commands there)."""
    if not words:
        return None
    name, args = program_name(words[0]), words[1:]
    text = shlex.join(words)
    if name == "rm":
        if "--no-preserve-root" in args:
            return "it runs rm with --no-preserve-root"
        targets = [w for w in args if not w.startswith("-")]
        if _recursive(args) and any(_is_root_target(t) for t in targets):
            return f"it deletes a system or home directory recursively ({text})"
    elif name in ("chmod", "chown", "chgrp") and _recursive(args):
        if any(_is_root_target(t) for t in args[1:] if not t.startswith("-")):
            return f"it changes ownership or modes of a system directory ({text})"
    elif name in _DISK_TOOLS or name.startswith("mkfs"):
        return f"it formats or erases disks ({name})"
    elif name == "dd" and any(w[3:].startswith(BLOCK_DEVICES) for w in args if w[:3] == "of="):
        return "it writes a block device with dd"
    elif (
        name in _POWER
        or (name == "systemctl" and set(args) & (_POWER | {"kexec"}))
        or (name == "init" and args[:1] in (("0",), ("6",)))
    ):
        return "it shuts down or restarts the machine"
    return None


READ_ONLY_GIT: Final = frozenset(
    {"status", "log", "diff", "show", "blame", "annotate", "grep", "ls-files", "ls-tree",
     "ls-remote", "rev-parse", "rev-list", "describe", "shortlog", "cat-file", "merge-base",
     "name-rev", "for-each-ref", "show-ref", "show-branch", "version", "help", "whatchanged",
     "count-objects", "var", "check-ignore", "check-attr", "check-ref-format", "diff-tree",
     "diff-files", "diff-index", "range-diff", "cherry", "verify-commit", "verify-tag", "fsck"}
)  # fmt: skip
"""git subcommands that never change a repository (the listing forms of branch, tag, stash,
remote, config, reflog, worktree, notes and submodule are read-only too)."""

_GIT_OPTIONS_WITH_VALUE: Final = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--exec-path",
     "--config-env"}
)  # fmt: skip
_GIT_LISTING: Final[dict[str, frozenset[str]]] = {
    "stash": frozenset({"list", "show"}),
    "remote": frozenset({"show", "get-url", "-v", "--verbose"}),
    "reflog": frozenset({"show"}),
    "worktree": frozenset({"list"}),
    "notes": frozenset({"list", "show"}),
    "submodule": frozenset({"status", "summary"}),
}
_GIT_CONFIG_WRITES: Final = frozenset(
    {"--add", "--unset", "--unset-all", "--replace-all", "--rename-section", "--remove-section",
     "-e", "--edit"}
)  # fmt: skip
_BRANCH_LIST_FLAGS: Final = frozenset(
    {"-a", "--all", "-r", "--remotes", "-l", "--list", "-v", "-vv", "--verbose",
     "--show-current", "--contains", "--no-contains", "--merged", "--no-merged", "--points-at",
     "--sort", "--format", "--color", "--no-color", "--column", "--no-column", "-i",
     "--ignore-case", "--omit-empty"}
)  # fmt: skip
_BRANCH_CHANGES: Final = frozenset(
    {"-d", "-D", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "-f", "--force"}
)
_TAG_CHANGES: Final = frozenset({"-d", "--delete", "-a", "-s", "-f", "-m"})


def mutating_git(words: tuple[str, ...]) -> str | None:
    """`git SUB` when this git command may change a repository (commit, add, push, reset,
    branch -d, config without --get, ...); None for read-only ones and for other programs."""
    if not words or program_name(words[0]) != "git":
        return None
    args = list(words[1:])
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option in _GIT_OPTIONS_WITH_VALUE and args:
            args.pop(0)
    if not args:
        return None
    sub, rest = args[0], set(args[1:])
    if sub in READ_ONLY_GIT:
        return None
    if sub == "branch" and all(
        w in _BRANCH_LIST_FLAGS or w.startswith(("--format=", "--sort=")) for w in rest
    ):
        return None
    if sub == "branch" and rest & {"--list", "-l"} and not rest & _BRANCH_CHANGES:
        return None
    if sub == "tag" and (not rest or rest & {"-l", "--list"}) and not rest & _TAG_CHANGES:
        return None
    reads = any(w.startswith("--get") or w in ("--list", "-l") for w in rest)
    if sub == "config" and reads and not rest & _GIT_CONFIG_WRITES:
        return None
    if sub in _GIT_LISTING and (
        (not rest and sub != "stash") or (args[1:2] and args[1] in _GIT_LISTING[sub])
    ):
        return None
    return f"git {sub}"


def suggested_rule(words: tuple[str, ...], tool: str = "bash") -> str:
    """The rule an "always" answer adds for one command: `tool(name sub:*)` when it has a plain
    subcommand word and no dangerous argument past it (`cargo test --lib` ->
    `bash(cargo test:*)`), else the exact command. The table still applies to what a prefix
    rule covers, so a prefix never grants `--output` or `-exec` by itself."""
    if (
        len(words) >= 2
        and all(f.index <= 1 for f in findings(words))
        and _plain_word(words[0])
        and _plain_word(words[1])
    ):
        return f"{tool}({shlex.join(words[:2])}:*)"
    return f"{tool}({shlex.join(words)})"


def _plain_word(word: str) -> bool:
    return (
        bool(word)
        and not word.startswith(("-", ".", "/", "~"))
        and all(c.isalnum() or c in "_-.+" for c in word)
    )


__all__ = [
    "BLOCK_DEVICES",
    "INTERPRETERS",
    "PROGRAMS",
    "READ_ONLY_GIT",
    "SHELLS",
    "WRAPPERS",
    "Danger",
    "Finding",
    "Runs",
    "findings",
    "hard_deny_reason",
    "mutating_git",
    "named_files",
    "program_name",
    "runs",
    "suggested_rule",
    "unwrap",
]
