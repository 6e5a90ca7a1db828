"""A differential test of the permission layer: what the policy allows against what bash runs.

Hypothesis builds command lines from the constructs the known attacks use (substitutions,
arithmetic, parameter operators, compound commands, heredocs, here-strings, redirects, every
kind of quoting, escapes, newlines and CR, wrappers, paths and globs as program names, brace
expansion, the dangerous arguments of find, sed, git and npm) around the programs the rules of
tests/unit/permissions/test_attacks.py allow and programs they hide (touch, rm, a marker
script), plus the rows of its attack table. Each line is decided as the bash tool would be
(`resolve_request` in a real workspace): in default mode with the realistic rules, and in bypass
mode with a deny rule for each hidden program. Every line some policy allows is then run,
`bash -c LINE` under strace as uid 65534 in a fresh copy of a small git workspace, and:

- allowed in default mode, it may execute only programs an allow rule names (and the harness's
  and helpers' programs, `HELPERS`), create, write, rename or delete nothing in the workspace,
  and open no `.env` (the deny rule `read_file(.env)`);
- allowed in bypass mode, it may execute no program a deny rule names.

ANVIL_DIFF_EXAMPLES sets the number of lines (`make fuzz-permissions` runs 100,000); the run
goes on past a failure, each failure shrunk by hypothesis, and ANVIL_DIFF_REPORT names a JSON
file for the figures. docs/RELIABILITY.md has the last long run.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import posixpath
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvild.agent.permissions.policy import Allow, Decision, Mode, Policy, resolve_request
from anvild.agent.permissions.rules import RuleSet
from anvild.agent.tools.base import Effects
from anvild.sandbox import WorkspaceWrite
from tests.unit.permissions.test_attacks import ALLOW, ATTACKS, DENY

EXAMPLES = int(os.environ.get("ANVIL_DIFF_EXAMPLES", "200"))
SECONDS = float(os.environ.get("ANVIL_DIFF_SECONDS", "0")) or None  # stop after this long
REPORT = os.environ.get("ANVIL_DIFF_REPORT")
TIMEOUT = 15.0  # seconds for one traced line; npm under strace on a loaded machine needs ~2
NOBODY = 65534


def _programs_named(rules: tuple[str, ...]) -> frozenset[str]:
    """The programs `bash(...)` rules name (`bash(git log *)` names git)."""
    return frozenset(
        re.split(r"[ :)]", rule.removeprefix("bash("), maxsplit=1)[0]
        for rule in rules
        if rule.startswith("bash(")
    )


ALLOWED_PROGRAMS = _programs_named(ALLOW)
"""The programs the allow rules name: echo, cat, find, sed, ls, git, npm."""

HIDDEN = ("touch", "rm", "mark")
"""Programs the attacks hide; `mark` is tools/mark, a script in the workspace."""

DENIED_PROGRAMS = _programs_named(DENY)

HELPERS: dict[str, Callable[[list[str]], bool]] = {
    # npm is `#!/usr/bin/env node`: env execs node with npm's path as the script.
    "node": lambda argv: len(argv) > 1 and posixpath.basename(argv[1]) in ("npm", "npm-cli.js"),
    # npm runs the package's own test script (`echo ok`, extra arguments quoted) with sh -c.
    "sh": lambda argv: argv[:2] == ["sh", "-c"] and len(argv) > 2 and argv[2].startswith("echo ok"),
}
"""Programs the allowed programs legitimately run, beyond those the rules name. The harness's
own `setpriv` and the outer `bash -c LINE` are skipped by position, not by name: any other bash
counts. git log runs no helper (GIT_PAGER=cat, output not a terminal)."""

TRACED = (
    "execve,execveat,open,openat,creat,rename,renameat,renameat2,unlink,unlinkat,mkdir,"
    "mkdirat,link,linkat,symlink,symlinkat,truncate"
)


# -- the generator -------------------------------------------------------------------------------

WORDS = ("hi", "X", "F", "src", "README", "src/main.py", "'a b'", '"x y"', "*.py", "src/*", "-n")

# Hidden commands, each `{n}` being a spelling of the program's name.
HIDDEN_COMMANDS = ("{touch} X", "{touch} src/new.py", "{rm} -f README", "{rm} -r src", "{mark}",
                   "{mark} go")  # fmt: skip


def _spellings(name: str) -> list[str]:
    """Ways to write a program's name that bash runs as that program."""
    if name == "mark":
        return ["tools/mark", "./tools/mark", "tools/ma?k", "tools/m''ark", "t\\ools/mark",
                '"tools/mark"', "$PWD/tools/mark", "tools/{mark,}", "$'tools/\\x6dark'",
                "tools/ma[r]k", "`echo tools/mark`", "${x:-tools/mark}"]  # fmt: skip
    head, tail = name[0], name[1:]
    return [name, "\\" + name, f"/bin/{name}", f"/usr/bin/{name}", f"{head}''{tail}",
            f"{head}\\{tail}", f'"{name}"', f'{head}"{tail}"', f"$'\\x{ord(head):02x}{tail}'",
            f"/bin/{head}{tail[:-1]}?", f"/usr/bin/{head}*", f"{{{name},}}",
            f"{head}[{tail[0]}]{tail[1:]}", f"$(echo {name})", f"`echo {name}`",
            f"${{x:-{name}}}", f"$'{name}'", f"{head}$'{tail}'", f"$\"{name}\""]  # fmt: skip


SAFE_COMMANDS = (
    "echo hi", "echo ok done", "echo", "cat README", "cat src/main.py", "cat -n README",
    "cat < README", "find . -name '*.py'", "find src -type f", "find . -maxdepth 1",
    "find . -name x -print", "sed -n 1p README", "sed s/a/b/ README", "sed -n '/x/p' src/main.py",
    "sed -e s/x/y/ -e 1d README", "ls", "ls -la src", "ls *.py", "ls src/*", "ls -R",
    "git log --oneline", "git log -1 --format=%s", "git log -p -1", "npm test",
    "npm test --silent", "echo hi > /dev/null", "ls 2>/dev/null", "echo hi 2>&1", "cd src",
    "git log --stat", "sed -n p README | cat", "npm test -- a",
)  # fmt: skip
"""Commands of the allowed programs that the rules allow as they are."""

DANGEROUS = (
    "find . -exec {c} \\;", "find . -exec {c} +", "find src -execdir {c} \\;",
    "find . -name x -delete", "find . -fprintf F %p", "find . -ok {c} \\;",
    "sed -i s/a/b/ README", "sed -i.bak s/a/b/ README", "sed --in-place s/a/b/ README",
    "sed -ni p README", "sed '1e {c}' README", "sed 's/x/{c}/e' README", "sed 'w F' README",
    "sed -n 's/a/b/w F' README", "sed -e '1e {c}' README", "sed -n '$!{{e {c}\n}}' README",
    "sed 'r .env' README", "sed -f .env README",
    "git log --output=F", "git log --outp=F", "git log --output F", "git -c core.pager='{c}' log",
    "git log --ext-diff", "git -C src log", "git log --exec={c}",
    "npm test --script-shell={n}", "npm test --script-shell {n}", "npm test -- '$({c})'",
    "npm test --scripts-prepend-node-path {n}", "ls | xargs {n}", "echo X | xargs {n}",
    "echo X | xargs -I{{}} {n} {{}}", "cat .env", "cat < .env", "sed -n p .en?",
)  # fmt: skip
"""Dangerous arguments of allowed programs (`{c}` a hidden command, `{n}` a hidden name)."""

# Options of the allowed programs, drawn in any order and number before a script or operands
# (`{c}` a hidden command, `{n}` a hidden name): how each program reads its own command line.
OPTIONS = {
    "sed": ("-n", "-s", "-E", "-z", "-u", "--posix", "-l 5", "-l5", "-nl 5", "--line-length 5",
            "--line-length=5", "--l 5", "--", "--debug", "--sandbox", "--quiet", "--separate",
            "--follow-symlinks", "--e='1e {c}'", "--ex='1e {c}'", "-e '1e {c}'", "-e 1p",
            "--expression=1p", "--i", "--in", "-i", "-i.b", "-si", "--f=.env", "-f .env", "-E -n"),
    "find": ("-H", "-L", "-P", "-O2", "-D tree", "--", "-name '*.py'", "-type f", "-print",
             "-maxdepth 1", "-exec {c} \\;", "-execdir {c} +", "-delete", "-fls F", "-ok {c} \\;",
             "-newer README", "-print0", "-quit"),
    "git": ("--no-pager", "-P", "--literal-pathspecs", "-c core.pager={n}", "--exec-path=tools",
            "-C src", "--git-dir=.git", "--work-tree=.", "-p", "--paginate", "--bare"),
    "git log": ("--oneline", "-1", "--stat", "-p", "--ext-diff", "--textconv", "--output=F",
                "--o=F", "--ou=F", "--outp=F", "--out F", "--format=%s", "--", "-- README",
                "--no-ext-diff", "--output-indicator-new=x", "--all", "-O README", "--no-walk"),
    "npm test": ("--silent", "-s", "--if-present", "--script-shell={n}", "--script-shell {n}",
                 "--scr={n}", "--", "-- a", "-- '$({c})'", "--ignore-scripts", "-d",
                 "--workspace=src", "--userconfig=.env", "-ws", "--prefix src"),
    "ls": ("-la", "-R", "--color=never", "-d", "--", "src", "-I x", "--hide=x"),
    "cat": ("-n", "-A", "--", "-", "README", "src/main.py"),
    "echo": ("-n", "-e", "-E", "--", "'\\x41'"),
}  # fmt: skip
OPTION_NAMES = ("-e1e {c}", "--e=1e {c}", "-n", "-i", "--output=F", "-exec", "--script-shell={n}",
                "-fls", "--", "-delete", "-l")  # fmt: skip
"""Arguments shaped like options that reach a program through data: a file name a glob
expands to, a word xargs reads from its input."""
DATA = (
    "echo x > '{o}'; {p} *", "echo x > '{o}'; {p} *.py", "echo x > '{o}'; {p} ?*",
    "echo x > ./'{o}' && {p} * README", "echo \"'{o}'\" | xargs {p}",
    "echo \"'{o}'\" | xargs {p} README", "printf '%s\\n' '{o}' | xargs -d '\\n' {p}",
    "echo \"'{o}'\" | xargs -I{{{{}}}} {p} {{{{}}}} README", "ls | xargs {p}", "find . | xargs {p}",
)  # fmt: skip
"""Lines whose arguments come from data (`{o}` an option-like name, `{p}` an allowed program
with options)."""
DATA_PROGRAMS = ("sed -n p", "sed", "find", "git log", "npm test", "cat", "ls", "sed -n 1p")

SCRIPTS = ("1p", "s/a/b/", "'1e {c}'", "'s/x/{c}/e'", "'w F'", "'r .env'", "'1R .env'",
           "'$!{{e {c}\n}}'", "-", "p", "'y/a/b/'", "'s/a/b/w F'", "= README")  # fmt: skip
OPERANDS = ("README", "src/main.py", "src", ".", "-", "*.py", "X")

WRAPPERS = ("env ", "env A=1 ", "nice ", "nice -n 5 ", "timeout 5 ", "command ", "exec ",
            "sudo ", "A=1 ", "stdbuf -o0 ", "builtin ", "time ", "nohup ", "chrt -o 0 ",
            "prlimit --nofile=100 ", "setarch x86_64 ", "setarch x86_64 -R ", "linux64 ",
            "env -- ", "nice -- ", "timeout -k 1 5 ")  # fmt: skip

EMBEDDINGS = (
    "echo $({c})", "echo `{c}`", 'echo "$({c})"', "echo $(echo $({c}))",
    "echo `echo \\`{c}\\``", "echo \\`{c}\\`", "echo $(( '$({c})' ))", "echo $((1+1)); {c}",
    "echo ${{x:-'$({c})'}}", "echo \"${{x:-'$({c})'}}\"", "echo ${{a['$({c})']}}",
    "echo ${{x:='$({c})'}} ${{x@P}}", "x='$({c})'; echo ${{x@P}}", "echo ${{#x}}; {c}",
    "[[ 1 -eq 'a[$({c})]' ]]", "[[ -n x ]] && {c}", "(( a[$({c})] ))", "((1)); {c}",
    "for i in 1; do {c}; done", "if true; then {c}; fi", "while false; do :; done; {c}",
    "{{ {c}; }}", "( {c} )", "case x in x) {c};; esac", "{c} &", "{c} & echo hi",
    "cat <<EOF\n$({c})\nEOF", "cat <<'EOF'\n$({c})\nEOF", "cat <<E'O'F\nhi\nEOF\n{c}\nE'O'F",
    "cat <<EOF\"\"\nhi\nEOF\n{c}\nEOF", "cat <<EOF\nhi\\\nEOF\n{c}\nEOF",
    "cat <<\\EOF\nx\nEOF\n{c}",
    "cat <<-EOF\n\thi\n\tEOF\n{c}", "cat <<EOF > F\nx\nEOF", "cat > F <<EOF\nx\nEOF",
    "cat <<EOF >> F\nx\nEOF", "cat <<EOF &> F\nx\nEOF", "cat <<EOF 2> F\nx\nEOF",
    "cat <<EOF\nEOF\n{c}", "cat <<A <<B\nx\nA\ny\nB\n{c}", "cat <<< '{c}'", "cat <<< $({c})",
    "bash <<< '{c}'", "echo '{c}' | bash", "printf '{c}' | sh", "echo x | sh -c '{c}'",
    "bash -c '{c}'", "sh -c \"{c}\"", "eval '{c}'", ". /dev/stdin <<< '{c}'",
    "echo hi\n\\{c}", "echo hi\r\n{c}", "echo hi\r{c}", "echo hi \\\n; {c}", "echo $'\\n'; {c}",
    "echo hi # \n{c}", "echo '\n'{c}", "echo \"\n\"; {c}", "echo >(\n{c})", "cat <({c})",
    "echo {{a,b}} && {c}", "echo x |& {c}", "! {c}", "{c} >&2", "{c} > /dev/null",
    "echo $'\\x27'; {c}", "echo \\\"; {c}", "echo '\\''; {c}",
    "script -qc '{c}' /dev/null", "script -c \"{c}\" /dev/null",
)  # fmt: skip
"""Constructs around a command `{c}` (brace pairs doubled: this is a format string)."""

ATTACK_TEMPLATES = tuple(
    dict.fromkeys(
        command.replace("{", "{{").replace("}", "}}").replace("touch X", "{c}")
        for command, _ in ATTACKS
    )
)
"""The attack table's rows, with their hidden `touch X` a slot for any command."""

INSERTS = ("\\", "''", '""', "\n", "\r", " ", "\\\n", "$", "`", "#", "'", '"', "*", "?", "{",
           "}", "~", "!", "&", "|", ";", "<", ">", "(", ")", "\t", "$'", "=", "[", "]", ",",
           "\x0b", "\x0c", "\xa0", "\u2028", "-")  # fmt: skip
"""Characters inserted into lines. Never `.` or `/`: a mutation must not climb out of the
workspace (`find .. -delete` runs as uid 65534)."""

SEPARATORS = ("; ", " && ", " || ", " | ", " & ", "\n", "\r\n", " ;\n", " \\\n", "\n\n")


HIDDEN_LINES = st.sampled_from(
    [template.format(**{h: spelling for h in HIDDEN}) for template in HIDDEN_COMMANDS
     for name in HIDDEN if "{" + name + "}" in template for spelling in _spellings(name)]
)  # fmt: skip
HIDDEN_NAMES = st.sampled_from([spelling for name in HIDDEN for spelling in _spellings(name)])
PLAIN_HIDDEN = st.sampled_from(["touch X", "rm -f README", "tools/mark", "/bin/touch X"])
HIDDEN_PLAIN_NAMES = ("touch", "rm", "tools/mark", "/usr/bin/touch")
SAFE = st.sampled_from(SAFE_COMMANDS)
TABLES = [st.sampled_from(table) for table in (DANGEROUS, EMBEDDINGS, ATTACK_TEMPLATES)]
ATTACK_LINES = st.sampled_from([command for command, _ in ATTACKS])


@st.composite
def _with_options(draw: st.DrawFn) -> str:
    """An allowed program with options drawn from its table, then a script and operands."""
    program = draw(st.sampled_from(sorted(OPTIONS)))
    words = [program]
    if program == "git log" and draw(st.booleans()):
        words = ["git", *draw(st.lists(st.sampled_from(OPTIONS["git"]), max_size=2)), "log"]
    words += draw(st.lists(st.sampled_from(OPTIONS[program]), max_size=3))
    if program == "sed":
        words.append(draw(st.sampled_from(SCRIPTS)))
    if program in ("sed", "cat", "ls", "find") and draw(st.booleans()):
        words.append(draw(st.sampled_from(OPERANDS)))
    return " ".join(words)


@st.composite
def _statement(draw: st.DrawFn, depth: int = 0) -> str:
    """One command: safe, hidden, an allowed program with options, or a construct around
    another command."""
    kind = draw(st.integers(0, 12))
    # Plain spellings of hidden commands where what is tried is how programs read arguments.
    plain = {"c": draw(PLAIN_HIDDEN), "n": draw(st.sampled_from(HIDDEN_PLAIN_NAMES))}
    if kind <= 3:
        text = draw(SAFE)
    elif kind == 4:
        text = draw(HIDDEN_LINES)
    elif kind <= 8:
        text = draw(_with_options()).format(**plain)
    elif kind == 9:  # an argument from data: a file a glob expands to, xargs's input
        option, program = draw(st.sampled_from(OPTION_NAMES)), draw(st.sampled_from(DATA_PROGRAMS))
        text = draw(st.sampled_from(DATA)).format(o=option, p=program).format(**plain)
    else:
        if depth < 2 and draw(st.booleans()):
            inner = draw(_statement(depth + 1))
        else:
            inner = draw(HIDDEN_LINES if draw(st.booleans()) else SAFE)
        template = draw(TABLES[kind % 3])
        text = template.format(c=inner, n=draw(HIDDEN_NAMES) if "{n}" in template else "")
    decoration = draw(st.integers(0, 11))
    if decoration == 0:
        text = draw(st.sampled_from(WRAPPERS)) + text
    elif decoration == 1:
        text = f"{text} {draw(st.sampled_from(WORDS))}"
    return text


@st.composite
def command_lines(draw: st.DrawFn) -> str:
    """One command line (see the module docstring): an attack row, or one to three statements
    joined by separators, perhaps with characters inserted anywhere."""
    if draw(st.integers(0, 19)) == 0:
        return draw(ATTACK_LINES)
    line = draw(_statement())
    for _ in range(max(0, draw(st.integers(-2, 2)))):
        line += draw(st.sampled_from(SEPARATORS)) + draw(_statement())
    for _ in range(draw(st.integers(1, 3)) if draw(st.integers(0, 2)) == 0 else 0):
        position = draw(st.integers(0, len(line)))
        line = line[:position] + draw(st.sampled_from(INSERTS)) + line[position:]
    return line


# -- the workspace -------------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `root`: (mode, size, mtime) — what a write, a create, a rename or a
    delete changes."""
    out: dict[str, tuple[int, int, int]] = {}
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(directory, name)
            info = os.lstat(path)
            out[os.path.relpath(path, root)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return out


class Scratch:
    """A small workspace (a git repository with a commit, README, src/main.py, package.json,
    .env and the marker script tools/mark), fresh for every traced run and pristine while lines
    are decided.

    As root the layout keeps uid 65534 in it: `base` (0711, root) holds `private` (0700, root:
    the template, the traces, the next copy, the trash) and `ws`, `home`, `tmp` (uid 65534).
    The next copy is made, and the last one removed, on a thread while a line runs: directory
    operations cost milliseconds each on this file system."""

    def __init__(self) -> None:
        self.root = os.geteuid() == 0
        self.base = Path(tempfile.mkdtemp(prefix="anvil-permdiff-", dir="/var/tmp"))
        self.base.chmod(0o711)
        self.private = self.base / "private"
        self.private.mkdir(mode=0o700)
        self.template = self.private / "template"
        self.ws = self.base / "ws"
        self.home = self.base / "home"
        self.tmp = self.base / "tmp"
        self._build(self.template)
        self._count = 0
        self._worker = concurrent.futures.ThreadPoolExecutor(1)
        self._next = self._worker.submit(self._prepare, ())
        self.reset()
        self.pristine = _snapshot(self.ws)

    def _build(self, ws: Path) -> None:
        (ws / "src").mkdir(parents=True)
        (ws / "tools").mkdir()
        (ws / "README").write_text("a demo\nx\n")
        (ws / "src" / "main.py").write_text("print('x')\n")
        (ws / ".env").write_text("SECRET=1\n")
        scripts = {"test": "echo ok"}
        (ws / "package.json").write_text(json.dumps({"name": "demo", "scripts": scripts}))
        (ws / "tools" / "mark").write_text("#!/bin/sh\nexit 0\n")
        (ws / "tools" / "mark").chmod(0o755)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(ws)]
        subprocess.run([*git, "init", "-q", "--template="], check=True)
        subprocess.run([*git, "add", "README", "src", "package.json", "tools"], check=True)
        subprocess.run([*git, "commit", "-qm", "init"], check=True)
        # One pack, packed refs, no reflogs: directories are what copies cost.
        subprocess.run([*git, "repack", "-adq"], check=True)
        subprocess.run([*git, "prune-packed"], check=True)
        subprocess.run([*git, "pack-refs", "--all"], check=True)
        for extra in ("logs", "info", "objects/info", "refs/heads", "refs/tags"):
            shutil.rmtree(ws / ".git" / extra, ignore_errors=True)
        subprocess.run([*git, "log", "--oneline"], check=True, capture_output=True)

    def _prepare(self, trash: tuple[Path, ...]) -> tuple[Path, Path, Path]:
        """Remove `trash`; make the next workspace, HOME and TMPDIR."""
        for path in trash:
            _make_removable(path)
            shutil.rmtree(path, ignore_errors=True)
        self._count += 1
        fresh = self.private / f"next{self._count}"
        fresh.mkdir()
        ws, home, tmp = fresh / "ws", fresh / "home", fresh / "tmp"
        shutil.copytree(self.template, ws, symlinks=True)
        home.mkdir()
        tmp.mkdir()
        # copytree keeps modes and times of files, not of directories: make them the template's.
        for directory, _, _ in os.walk(self.template, topdown=False):
            info = os.stat(directory)
            copy = ws / os.path.relpath(directory, self.template)
            os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))
        if self.root:
            for directory, dirs, files in os.walk(fresh):
                for name in (*dirs, *files):
                    os.chown(os.path.join(directory, name), NOBODY, NOBODY, follow_symlinks=False)
        return ws, home, tmp

    def reset(self) -> None:
        """Put a fresh workspace, HOME and TMPDIR in place (the used ones go to the trash)."""
        ws, home, tmp = self._next.result()
        trash = self.private / f"trash{self._count}"
        trash.mkdir()
        for index, path in enumerate((self.ws, self.home, self.tmp)):
            if path.exists() or path.is_symlink():
                path.rename(trash / str(index))
        ws.rename(self.ws)
        home.rename(self.home)
        tmp.rename(self.tmp)
        self._next = self._worker.submit(self._prepare, (trash, ws.parent))

    def close(self) -> None:
        self._worker.shutdown()
        _make_removable(self.base)
        shutil.rmtree(self.base, ignore_errors=True)


def _make_removable(root: Path) -> None:
    """A line may leave directories without write or search permission (`chmod`, `find
    -delete` halfway): rmtree needs both."""
    for directory, _, _ in os.walk(root):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)


# -- the trace -----------------------------------------------------------------------------------


@attrs.frozen
class Exec:
    path: str
    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@attrs.frozen
class Trace:
    execs: tuple[Exec, ...]  # successful execve/execveat, in order per process
    changes: tuple[str, ...]  # "call path" for each successful change of a file system entry
    opened: tuple[str, ...]  # paths opened (any mode)
    tree_changed: tuple[str, ...]  # workspace entries that differ after the run
    output: str
    timed_out: bool


_LINE = re.compile(r"^(?P<call>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+)(?P<rest>.*)$")
_STRING = re.compile(r'(?:(?P<fd>-?\d+|AT_FDCWD)<(?P<dir>[^>]*)>,\s*)?"(?P<s>(?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)")
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"v": b"\v", b"f": b"\f", b"a": b"\a"}
_CHANGES = frozenset(
    {"rename", "renameat", "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat", "link",
     "linkat", "symlink", "symlinkat", "truncate"}
)  # fmt: skip
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC")


def _unescape(text: str) -> str:
    """A string as strace prints it (C escapes, octal for other bytes) back to its text."""

    def one(match: re.Match[bytes]) -> bytes:
        code = match[1]
        if code[:1] == b"x":
            return bytes([int(code[1:], 16)])
        if code[:1].isdigit():
            return bytes([int(code, 8) & 0xFF])
        return _SIMPLE_ESCAPES.get(code, code)

    raw = text.encode("utf-8", "surrogateescape")
    return _ESCAPE.sub(one, raw).decode("utf-8", "surrogateescape")


def parse_trace(lines: Iterator[str]) -> tuple[list[Exec], list[str], list[str]]:
    """Executions, changes (`call path`) and opened paths of one process's strace lines."""
    execs: list[Exec] = []
    changes: list[str] = []
    opened: list[str] = []
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if match is None or int(match["ret"]) < 0:
            continue
        call, args, rest = match["call"], match["args"], match["rest"]
        strings = list(_STRING.finditer(args))
        if call in ("execve", "execveat"):
            values = [_unescape(s["s"]) for s in strings]
            execs.append(Exec(values[0], tuple(values[1:]) if len(values) > 1 else ()))
        elif call in ("open", "openat", "creat"):
            where = re.match(r"<(.*)>", rest)
            path = where[1] if where else _path(strings[0]) if strings else "?"
            opened.append(path)
            if call == "creat" or any(flag in args for flag in _WRITE_FLAGS):
                changes.append(f"{call} {path}")
        elif call in _CHANGES:
            # symlink's first string is the link's content, not a path that changes.
            for found in strings[1:] if call in ("symlink", "symlinkat") else strings:
                changes.append(f"{call} {_path(found)}")
    return execs, changes, opened


def _path(found: re.Match[str]) -> str:
    """A path argument, absolute when strace showed the directory it is relative to; a
    relative one without a directory is kept relative (the caller treats it as inside)."""
    path = _unescape(found["s"])
    if found["dir"] is not None and not path.startswith("/"):
        path = posixpath.join(_unescape(found["dir"]), path)
    return posixpath.normpath(path) if path.startswith("/") else path


def run_traced(command: str, scratch: Scratch) -> Trace:
    """Run `bash -c command` under strace in a fresh copy of the workspace (and put a fresh
    one in place afterwards, for the next decisions)."""
    traces = scratch.private / "trace"
    shutil.rmtree(traces, ignore_errors=True)
    traces.mkdir()
    argv = ["strace", "-f", "-ff", "-qq", "-y", "-s", "65536", "-e", "signal=none",
            "-e", f"trace={TRACED}", "-o", str(traces / "t")]  # fmt: skip
    if scratch.root:
        argv += ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    argv += ["bash", "-c", command]
    env = {
        "PATH": "/usr/bin:/bin", "HOME": str(scratch.home), "TMPDIR": str(scratch.tmp),
        "GIT_PAGER": "cat", "PAGER": "cat", "LANG": "C.UTF-8",
        "NPM_CONFIG_UPDATE_NOTIFIER": "false", "NPM_CONFIG_FUND": "false",
    }  # fmt: skip
    process = subprocess.Popen(
        argv, cwd=scratch.ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    timed_out = False
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # a background job left behind
    execs: list[Exec] = []
    changes: list[str] = []
    opened: list[str] = []
    for path in sorted(traces.iterdir(), key=lambda p: int(p.suffix[1:])):
        with path.open(encoding="utf-8", errors="surrogateescape") as lines:
            found = parse_trace(lines)
        execs += found[0]
        changes += found[1]
        opened += found[2]
    after = _snapshot(scratch.ws)
    differ = sorted(
        name
        for name in scratch.pristine.keys() | after.keys()
        if scratch.pristine.get(name) != after.get(name)
    )
    scratch.reset()
    return Trace(
        tuple(execs), tuple(changes), tuple(opened), tuple(differ),
        output.decode("utf-8", "replace")[-2000:], timed_out,
    )  # fmt: skip


# -- the properties ------------------------------------------------------------------------------


def _programs(trace: Trace, command: str) -> list[Exec]:
    """The programs the line executed: without the harness's setpriv and outer bash (the
    first execution of each with the harness's arguments)."""
    execs = list(trace.execs)
    for harness in ("setpriv", "bash"):
        for index, found in enumerate(execs):
            if found.name == harness and found.argv[-3:] == ("bash", "-c", command):
                del execs[index]
                break
    return execs


def _inside(path: str, workspace: Path) -> bool:
    root = str(workspace)
    return not path.startswith("/") or path == root or path.startswith(root + "/")


def default_violations(command: str, trace: Trace, scratch: Scratch) -> list[str]:
    """What a line the default-mode rules allow did that no allow rule grants."""
    out = [
        f"executed {e.path} {list(e.argv)}"
        for e in _programs(trace, command)
        if e.name not in ALLOWED_PROGRAMS
        and not (e.name in HELPERS and HELPERS[e.name](list(e.argv)))
    ]
    out += [
        f"changed the workspace: {c}"
        for c in trace.changes
        if _inside(c.split(" ", 1)[1], scratch.ws)
    ]
    out += [f"the workspace differs afterwards: {name}" for name in trace.tree_changed]
    env = str(scratch.ws / ".env")
    out += [f"opened {env} (deny read_file(.env))" for path in trace.opened if path == env]
    return out


def bypass_violations(command: str, trace: Trace, denied: frozenset[str]) -> list[str]:
    """Which program a deny rule names a line allowed in bypass mode executed."""
    return [
        f"executed {e.path} {list(e.argv)}, which a deny rule names"
        for e in _programs(trace, command)
        if e.name in denied
    ]


# -- the check -----------------------------------------------------------------------------------


class Bypass(AssertionError):
    """A line the policy allows did what the rules forbid."""


@attrs.define
class Stats:
    generated: int = 0
    distinct: int = 0
    allowed_default: int = 0
    allowed_bypass: int = 0
    executed: int = 0
    timed_out: int = 0
    failures: list[dict[str, object]] = attrs.Factory(list)  # shrunk, one per kind
    failing: int = 0  # failing distinct lines, shrink steps included
    failing_lines: list[str] = attrs.Factory(list)  # the first 500 of them, as generated


class Differential:
    """Decides and runs lines; one per test run."""

    def __init__(self, scratch: Scratch) -> None:
        self.scratch = scratch
        self.stats = Stats()
        self.known: set[str] = set()  # kinds of failure already recorded (shrunk)
        self.last: dict[str, object] | None = None
        self.seen: dict[str, tuple[str, dict[str, object]] | None] = {}  # line -> failure
        ws = scratch.ws
        sandbox = WorkspaceWrite()
        self.default = Policy(
            ws, Mode.DEFAULT, RuleSet.parse(allow=ALLOW, deny=DENY), sandbox=sandbox
        )
        # One bypass policy per hidden program (rm's rule is in DENY already): a deny rule for
        # one program must hold by itself, not only beside the others.
        self.bypass = {
            hidden: Policy(
                ws,
                Mode.BYPASS,
                RuleSet.parse(allow=ALLOW, deny=(*DENY, f"bash({hidden}:*)")),
                sandbox=sandbox,
            )
            for hidden in HIDDEN
            if hidden != "rm"
        }

    def check(self, command: str) -> None:
        """Decide `command`; run it if a policy allows it; raise `Bypass` if it did what the
        policy forbids (unless a failure of its kind was recorded already)."""
        self.stats.generated += 1
        if command not in self.seen:
            self.stats.distinct += 1
            self.seen[command] = self._check(command)
            if self.seen[command] is not None:
                self.stats.failing += 1
                if len(self.stats.failing_lines) < 500:
                    self.stats.failing_lines.append(command)
        found = self.seen[command]
        if found is None:
            return
        kind, failure = found
        if kind in self.known:
            return  # recorded already (shrunk); the search goes on for other kinds
        self.last = failure
        problems = "\n  ".join(map(str, failure["problems"]))  # type: ignore[call-overload]
        raise Bypass(f"{command!r}:\n  {problems}\noutput: {failure['output']}")

    def _check(self, command: str) -> tuple[str, dict[str, object]] | None:
        request = resolve_request(
            "bash", {"command": command}, Effects(subprocess=True, unknown=True),
            cwd=self.scratch.ws,
        )  # fmt: skip
        default = self.default.decide(request)
        bypass: dict[str, Decision] = {h: p.decide(request) for h, p in self.bypass.items()}
        allowed = [h for h, d in bypass.items() if isinstance(d, Allow)]
        self.stats.allowed_default += isinstance(default, Allow)
        self.stats.allowed_bypass += bool(allowed)
        if not isinstance(default, Allow) and not allowed:
            return None
        trace = run_traced(command, self.scratch)
        self.stats.executed += 1
        self.stats.timed_out += trace.timed_out
        problems: list[str] = []
        if isinstance(default, Allow):
            found = default_violations(command, trace, self.scratch)
            problems += [f"default mode: {v}" for v in found]
        for hidden in allowed:
            denied = DENIED_PROGRAMS | {hidden}
            found = bypass_violations(command, trace, denied)
            problems += [f"bypass mode, deny bash({hidden}:*): {v}" for v in found]
        if not problems:
            return None
        kind = _kind(problems)
        return kind, {"command": command, "kind": kind, "problems": problems,
                      "output": trace.output}  # fmt: skip


def _kind(problems: list[str]) -> str:
    """A failure's kind, so a long run records each once: what broke, without the line's
    particulars (paths, arguments)."""
    kinds = set()
    for problem in problems:
        mode = problem.split(": ", 1)[0]
        if " executed " in problem or ": executed " in problem:
            program = posixpath.basename(problem.split("executed ", 1)[1].split(" ", 1)[0])
            kinds.add(f"{mode}: ran {program}")
        elif "opened" in problem:
            kinds.add(f"{mode}: read .env")
        else:
            kinds.add(f"{mode}: changed the workspace")
    return "; ".join(sorted(kinds))


def campaign(differential: Differential, examples: int, seconds: float | None) -> Stats:
    """Run `examples` lines (or as many as fit in `seconds`), in rounds of fresh searches;
    after a failure (shrunk by hypothesis) the next rounds skip failures of its kind."""
    stats = differential.stats
    deadline = None if seconds is None else time.monotonic() + seconds
    while stats.generated < examples and (deadline is None or time.monotonic() < deadline):

        @settings(
            max_examples=min(examples - stats.generated, 500),
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @given(command_lines())
        def search(command: str) -> None:
            differential.check(command)

        before = stats.generated
        try:
            search()
        except Bypass:
            assert differential.last is not None
            stats.failures.append(differential.last)  # the last raise is the shrunk example
            differential.known.add(str(differential.last["kind"]))
        if stats.generated == before:
            break  # hypothesis found nothing new to try
    return stats


# -- the tests -----------------------------------------------------------------------------------


def _traceable() -> str | None:
    """Why lines cannot be traced here, or None."""
    for program in ("strace", "bash", "git"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    probe = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=execve", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.decode(errors='replace')[:200]}"
    return None


@pytest.fixture(scope="module")
def scratch() -> Iterator[Scratch]:
    why = _traceable()
    if why is not None:
        pytest.skip(why)
    made = Scratch()
    yield made
    made.close()


def test_the_tracer_sees_what_a_line_runs_and_changes(scratch: Scratch) -> None:
    """The harness itself: a line that runs touch through a substitution and reads .env is
    seen doing all three, and the workspace is fresh again for the next line."""
    command = "echo $(touch X) && tools/mark && cat .env > /dev/null"
    trace = run_traced(command, scratch)
    problems = default_violations(command, trace, scratch)
    assert any(re.match(r"executed \S*/touch \['touch', 'X'\]", p) for p in problems), problems
    assert any("tools/mark" in p for p in problems), problems
    assert any(p.startswith("changed the workspace: openat") and p.endswith("/X") for p in problems)
    assert "the workspace differs afterwards: X" in problems
    assert any("opened" in p for p in problems), problems
    assert bypass_violations(command, trace, frozenset({"touch"}))
    clean = run_traced("echo hi; git log --oneline; npm test; ls src | cat", scratch)
    assert (
        default_violations("echo hi; git log --oneline; npm test; ls src | cat", clean, scratch)
        == []
    ), clean
    assert not (scratch.ws / "X").exists()


@pytest.mark.parametrize(
    "command",
    ["sed 'r .env' README", "sed -n 'R .env' README", "sed '1r.env' README",
     "env sed 's/a/b/;1R .env' README", "sed -- '1e touch X' README",
     "sed -n -- 's/x/touch X/e' README", "sed -l 5 '1e touch X' README",
     "sed -nl 5 '1e tools/mark' README", "sed --line-length 5 '1e touch X' README",
     "sed --l 5 '1e touch X' README", "sed -s --e='1e tools/mark' 'y/a/b/' README",
     "sed --i s/a/b/ README", "echo x > '-e1e touch X'; sed -n p *",
     "echo \"-e'1e touch X'\" | xargs sed -n p README", "chrt -o 0 touch X",
     "prlimit --nofile=100 touch X", "setarch x86_64 -R touch X", "linux64 tools/mark",
     "script -qc 'touch X' /dev/null"],
)  # fmt: skip
def test_found_lines_are_decided_as_they_run(scratch: Scratch, command: str) -> None:
    """Lines this test found allowed though they did what the rules forbid, each run as the
    differential test runs it: now none is allowed and does it. sed's r and R read the file
    named by the rest of the script line (the path deny rule read_file(.env) did not see it);
    a script after `--`, after `-l N`, or given with a one-letter abbreviation (`--e=`, `--i`)
    was not read as one; in bypass mode a glob or xargs's input gave sed an option that ran a
    denied program, and so did wrappers the table did not know (chrt, prlimit, setarch,
    linux64, script -c)."""
    assert Differential(scratch)._check(command) is None
    request = resolve_request(
        "bash", {"command": command}, Effects(subprocess=True, unknown=True), cwd=scratch.ws
    )
    assert not isinstance(Differential(scratch).default.decide(request), Allow)


def test_what_the_policy_allows_runs_only_what_the_rules_grant(scratch: Scratch) -> None:
    """The differential test: see the module docstring. Every failure is listed, shrunk."""
    differential = Differential(scratch)
    started = time.monotonic()
    stats = campaign(differential, EXAMPLES, SECONDS)
    seconds = time.monotonic() - started
    figures = {**attrs.asdict(stats), "seconds": round(seconds, 1), "examples": EXAMPLES}
    if REPORT:
        Path(REPORT).write_text(json.dumps(figures, indent=2))
    print(
        f"\ndifferential: {stats.generated} lines ({stats.distinct} distinct), "
        f"{stats.allowed_default} allowed in default mode, {stats.allowed_bypass} in bypass "
        f"mode, {stats.executed} run, "
        f"{stats.timed_out} timed out, {len(stats.failures)} failures in {seconds:.0f} s"
    )
    assert stats.executed > 0, "no generated line was allowed: the generator is broken"
    failures = "\n\n".join(
        f"{f['kind']}\n  {f['command']!r}\n  " + "\n  ".join(map(str, f["problems"]))  # type: ignore[call-overload]
        for f in stats.failures
    )
    raw = "\n".join(f"  {line!r}" for line in stats.failing_lines[:20])
    assert not stats.failures, (
        f"the policy allowed lines that did what it forbids (shrunk, one per kind):\n{failures}"
        f"\n\n{stats.failing} failing lines in all; the first as generated:\n{raw}"
    )
