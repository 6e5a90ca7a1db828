"""glob and grep: the search tools, walking through `FileAccess`.

Both walk descriptor-relative without following symlinks (`FileAccess.walk`, credential files
already removed), skip `.git` and what every `.gitignore` from the root down excludes (git's
precedence; an ignored directory is pruned), and search hidden files. `.git/info/exclude` and
global excludes are not read. Patterns: `*` and `?` within a component, `**` across, `[...]` and
`{a,b}`; one without `/` matches names at any depth. The walk runs in a worker thread and stops
promptly when cancelled. grep uses Python `re` line by line (a match never spans lines); a file
without the literal its pattern needs is not decoded. Where ripgrep is installed it is only a
prefilter: it lists the files holding that literal, and each is taken as the walk would take it
(every rule above, from the walk's own descriptor, no symlink followed) and matched by `re`, so
the answer is the pure search's. Without rg, or when it fails, the pure search runs.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, TypeAlias, TypeVar

import attrs
import pathspec
import trio

from anvild.agent.tools.base import (
    Args,
    Cancellation,
    Effects,
    Failed,
    InvalidArgs,
    ToolContext,
    ToolOutput,
    object_schema,
)
from anvild.agent.tools.files import MAX_FILE_BYTES, display_path, is_binary
from anvild.sandbox.files import AccessDenied, FileAccess, WalkDir, is_credential_name

MAX_GLOB_RESULTS: Final = 200
MAX_GREP_LINES: Final = 200
MAX_GREP_FILES: Final = 200
MAX_MATCH_LINE_CHARS: Final = 500
GITIGNORE: Final = ".gitignore"
ALWAYS_SKIPPED: Final = frozenset({".git"})

T = TypeVar("T")


class SearchCancelled(Exception):
    """Raised inside the worker thread when the call was cancelled."""


def translate_glob(pattern: str) -> re.Pattern[str]:
    """Compile a path glob (module docstring) to a regex over `/`-separated relative paths."""
    if "/" not in pattern.strip("/"):
        pattern = "**/" + pattern.strip("/")
    pattern = pattern.lstrip("/")
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : j]
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        elif c == "{":
            out.append("(?:")
            depth += 1
            i += 1
        elif c == "}" and depth:
            out.append(")")
            depth -= 1
            i += 1
        elif c == "," and depth:
            out.append("|")
            i += 1
        else:
            out.append(re.escape(c))
            i += 1
    if depth:
        raise InvalidArgs(f"Unbalanced '{{' in glob pattern {pattern!r}.")
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as exc:
        raise InvalidArgs(f"Invalid glob pattern {pattern!r}: {exc}.") from exc


_GROUP: Final = re.compile(r"(?<!\\)\(\?P<\w+>")


class _AnyPattern:
    """Whether some pattern of a .gitignore can match a path, answered without trying each
    pattern in turn (that was most of a search's time): first a literal every match of each
    pattern holds (one alternation of plain strings), then the patterns' own alternation.
    Either check is left out when the patterns do not allow it; a "maybe" is decided by the
    spec itself."""

    __slots__ = ("checks",)

    def __init__(self, spec: pathspec.GitIgnoreSpec) -> None:
        regexes = [p.regex for p in spec.patterns if p.include is not None and p.regex is not None]
        self.checks: list[re.Pattern[str]] = []
        if (
            not all(isinstance(r.pattern, str) for r in regexes)
            or len({r.flags for r in regexes}) > 1
        ):
            return
        if not regexes:
            self.checks.append(re.compile(r"(?!)"))
            return
        flags = regexes[0].flags
        literals = [_required_literal(r.pattern, flags) for r in regexes]
        if all(literals):
            self.checks.append(re.compile("|".join(re.escape(lit or "") for lit in literals)))
        try:
            joined = "|".join(f"(?:{_GROUP.sub('(?:', r.pattern)})" for r in regexes)
            self.checks.append(re.compile(joined, flags))
        except re.error:
            pass

    def may_match(self, path: str) -> bool:
        return all(check.search(path) is not None for check in self.checks)


_Spec: TypeAlias = tuple[str, pathspec.GitIgnoreSpec, _AnyPattern]


class _Ignores:
    """The .gitignore files that apply to one directory, outermost first."""

    __slots__ = ("specs",)

    def __init__(self, specs: tuple[_Spec, ...]) -> None:
        # (prefix of the .gitignore's directory relative to the walk root, spec, any pattern)
        self.specs = specs

    def with_file(self, prefix: str, lines: list[str]) -> _Ignores:
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        return _Ignores((*self.specs, (prefix, spec, _AnyPattern(spec))))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        probe_suffix = "/" if is_dir else ""
        for prefix, spec, any_pattern in reversed(self.specs):
            if prefix and not rel.startswith(prefix):
                continue
            probe = rel[len(prefix) :] + probe_suffix
            # pathspec matches a normalised path: the same as `probe` unless it starts so.
            if not probe.startswith(("/", "./")) and not any_pattern.may_match(probe):
                continue
            result = spec.check_file(probe)
            if result.include is not None:
                return bool(result.include)
        return False


def _read_small(walkdir: WalkDir, name: str) -> bytes | None:
    try:
        fd = FileAccess.open_in(walkdir, name)
    except OSError:
        return None
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def _read_fd(fd: int) -> bytes | None:
    chunks = []
    total = 0
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if total > MAX_FILE_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _outer_ignores(files: FileAccess, top: Path) -> tuple[_Ignores, str]:
    """The .gitignore files of `top`'s ancestors from its readable root down (not `top`'s own:
    the walk reads that), and `top`'s path relative to the root as a prefix."""
    root = max(
        (r for r in files.readable_roots if r == top or r in top.parents),
        key=lambda r: len(r.parts),
        default=top,
    )
    ignores = _Ignores(())
    below_root = [p for p in top.parents if root in p.parents]
    for directory in [root, *reversed(below_root)] if top != root else []:
        try:
            data = files.read(directory, GITIGNORE, max_bytes=MAX_FILE_BYTES).data
        except (OSError, AccessDenied):
            continue
        prefix = "" if directory == root else directory.relative_to(root).as_posix() + "/"
        ignores = ignores.with_file(prefix, data.decode("utf-8", "replace").splitlines())
    top_prefix = "" if top == root else top.relative_to(root).as_posix() + "/"
    return ignores, top_prefix


def walk_files(
    files: FileAccess, top: Path, cancelled: Callable[[], bool]
) -> Iterator[tuple[WalkDir, str, str]]:
    """(walk directory, file name, path relative to `top`) for every searchable file below
    `top`: credentials, `.git` and gitignored entries removed."""
    ignores, top_prefix = _outer_ignores(files, top)
    stack: dict[Path, _Ignores] = {}
    for walkdir in files.walk(top, cancelled=cancelled):
        if cancelled():
            raise SearchCancelled
        rel_dir = walkdir.path.relative_to(top).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        here = stack.pop(walkdir.path, ignores if walkdir.path == top else _Ignores(()))
        if GITIGNORE in walkdir.files:
            data = _read_small(walkdir, GITIGNORE)
            if data is not None:
                here = here.with_file(
                    top_prefix + rel_dir, data.decode("utf-8", "replace").splitlines()
                )
        walkdir.dirs[:] = [
            d
            for d in walkdir.dirs
            if d not in ALWAYS_SKIPPED and not here.ignored(top_prefix + rel_dir + d, True)
        ]
        for d in walkdir.dirs:
            stack[walkdir.path / d] = here
        for name in walkdir.files:
            if cancelled():
                raise SearchCancelled
            # A `.git` file (worktree or submodule pointer) is git metadata too.
            if name not in ALWAYS_SKIPPED and not here.ignored(top_prefix + rel_dir + name, False):
                yield walkdir, name, rel_dir + name


async def _in_thread(work: Callable[[Callable[[], bool]], T]) -> T:
    """Run `work(cancelled)` in a worker thread; on cancel, abandon it and raise its flag."""
    flag = threading.Event()
    try:
        return await trio.to_thread.run_sync(lambda: work(flag.is_set), abandon_on_cancel=True)
    finally:
        flag.set()


def _search_root(ctx: ToolContext, path: str | None) -> Path:
    try:
        return ctx.files.resolve_dir(ctx.cwd, path or ".")
    except AccessDenied as exc:
        raise Failed(str(exc)) from exc
    except FileNotFoundError as exc:
        raise Failed(f"{path} does not exist.") from exc
    except NotADirectoryError as exc:
        raise Failed(f"{path} is not a directory.") from exc
    except OSError as exc:
        raise Failed(f"{path}: {exc.strerror or exc}") from exc


def _search_schema(pattern: str, path: str, **more: Mapping[str, Any]) -> dict[str, Any]:
    """A search tool's arguments: `pattern` (required) and `path`, then the tool's own."""
    return object_schema(
        {
            "pattern": {"type": "string", "minLength": 1, "description": pattern},
            "path": {"type": "string", "description": path},
            **more,
        },
        required=("pattern",),
    )


class _ReadSearch:
    """What glob and grep share: they read the tree under `path` (default: the working
    directory) and may be abandoned at any point."""

    cancellation = Cancellation.SAFE_TO_ABANDON

    def effects(self, args: Args) -> Effects:
        return Effects.read(args.get("path") or ".")


class Glob(_ReadSearch):
    name = "glob"
    description = (
        "Find files by name pattern, e.g. `**/*.py`, `src/**/test_*.ts`, `*.{yml,yaml}`. `*` "
        "matches within one directory level, `**` across levels; a pattern without `/` matches "
        "file names at any depth. Returns matching file paths, newest first (most recently "
        f"modified), at most {MAX_GLOB_RESULTS}. Files ignored by .gitignore, the .git "
        "directory and credential files are never listed. Use this instead of `find` or `ls` "
        "in bash; use grep to search file contents."
    )
    summary = "Find files by name pattern such as `**/*.py`; newest first, at most 200."
    input_schema: Final = _search_schema(
        "The glob pattern.",
        "Directory to search in (default: the working directory). The pattern is matched "
        "against paths relative to it.",
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        regex = translate_glob(args["pattern"])
        top = await trio.to_thread.run_sync(lambda: _search_root(ctx, args.get("path")))

        def work(cancelled: Callable[[], bool]) -> list[tuple[float, str, Path]]:
            found: list[tuple[float, str, Path]] = []
            for walkdir, name, rel in walk_files(ctx.files, top, cancelled):
                if regex.match(rel):
                    try:
                        st = os.stat(name, dir_fd=walkdir.dir_fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found.append((st.st_mtime, rel, walkdir.path / name))
            return found

        try:
            found = await _in_thread(work)
        except AccessDenied as exc:
            raise Failed(str(exc)) from exc
        if not found:
            return ToolOutput(f"No files match {args['pattern']!r} in {display_path(ctx, top)}.")
        found.sort(key=lambda item: (-item[0], item[1]))
        lines = [display_path(ctx, path) for _, _, path in found[:MAX_GLOB_RESULTS]]
        if len(found) > MAX_GLOB_RESULTS:
            lines.append(
                f"[showing {MAX_GLOB_RESULTS} of {len(found)} matches, newest first; narrow the "
                "pattern or the path to see the rest]"
            )
        return ToolOutput("\n".join(lines))


def matching_lines(regex: re.Pattern[str], text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its terminator) for every line `regex` matches.

    The whole text is searched for a candidate, and the line holding it is confirmed on its
    own, so a match never spans lines and lines without candidates cost nothing."""
    n = len(text)
    pos = 0  # start of the line the next search begins at
    line_no = 1
    counted_to = 0
    while pos < n:
        m = regex.search(text, pos)
        if m is None:
            return
        newline = text.rfind("\n", pos, m.start())
        start = pos if newline == -1 else newline + 1
        if start >= n:
            return  # an empty match after the final newline: there is no line there
        end = text.find("\n", start)
        if end == -1:
            end = n
        line = text[start:end]
        if line.endswith("\r"):
            line = line[:-1]
        if regex.search(line):
            line_no += text.count("\n", counted_to, start)
            counted_to = start
            yield line_no, line
        pos = end + 1


def required_bytes(regex: re.Pattern[str]) -> bytes | None:
    """Bytes every file with a match contains: the UTF-8 of `_required_literal` (a file
    decoded with replacement holds a literal without U+FFFD only where its bytes are). A file
    without them is skipped unread by `re`. None when there is no such literal."""
    literal = _required_literal(regex.pattern, regex.flags)
    if literal is None or "\ufffd" in literal:
        return None
    try:
        return literal.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return None


def _required_literal(pattern: str, flags: int) -> str | None:
    """The longest run of literal characters `pattern` needs outside any group, repetition or
    alternation: every match contains it. None when there is none or case is ignored."""
    if flags & re.IGNORECASE:
        return None
    try:
        parsed = re._parser.parse(pattern, flags)  # type: ignore[attr-defined]
    except Exception:  # CPython's own parser, private: without it, no shortcut
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    literal = re._constants.LITERAL  # type: ignore[attr-defined]
    runs, run = [], []
    for op, value in parsed:
        if op is literal:
            run.append(chr(value))
        else:
            runs.append("".join(run))
            run = []
    runs.append("".join(run))
    return max(runs, key=len) or None


class Grep(_ReadSearch):
    name = "grep"
    description = (
        "Search file contents with a regular expression (Python `re` syntax; escape literal "
        'characters such as `(`, `.`, `{`). Matches line by line. `mode` "files" (default) '
        'lists the files that contain a match; "content" shows matching lines as '
        f"`path:line:text`, at most {MAX_GREP_LINES}. Narrow with `path` (a directory or one "
        "file) and `glob` (e.g. `*.py`, `src/**/*.ts`); set `case_insensitive` to ignore case. "
        "Binary files, files ignored by .gitignore, the .git directory and credential files are "
        "skipped. Use this instead of grep or rg in bash."
    )
    summary = (
        'Search file contents with a Python regular expression; mode "content" shows matching '
        'lines, "files" (default) the files.'
    )
    input_schema: Final = _search_schema(
        "The regular expression.",
        "File or directory to search (default: the working directory).",
        glob={
            "type": "string",
            "minLength": 1,
            "description": "Only search files whose path matches this glob, e.g. `*.py`.",
        },
        case_insensitive={"type": "boolean", "description": "Ignore case when matching."},
        mode={
            "type": "string",
            "enum": ["files", "content"],
            "description": '"files": paths of matching files (default); "content": '
            "matching lines as path:line:text.",
        },
    )

    def __init__(self, *, ripgrep: str | None = "rg") -> None:
        self.ripgrep = ripgrep  # looked up on PATH at each call; None: never used

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        flags = re.MULTILINE | (re.IGNORECASE if args.get("case_insensitive") else 0)
        try:
            regex = re.compile(args["pattern"], flags)
        except re.error as exc:
            raise InvalidArgs(f"Invalid regular expression {args['pattern']!r}: {exc}.") from exc
        glob = translate_glob(args["glob"]) if args.get("glob") else None
        content = args.get("mode", "files") == "content"
        path = args.get("path")
        rg = None if self.ripgrep is None else shutil.which(self.ripgrep)
        search = _GrepSearch(ctx, regex, glob, content, rg)
        try:
            result = await _in_thread(lambda cancelled: search.run(path, cancelled))
        except AccessDenied as exc:
            raise Failed(str(exc)) from exc
        return ToolOutput(result)


@attrs.define
class _GrepSearch:
    """One grep call: what it looks for, and the matches found so far (in its worker thread)."""

    ctx: ToolContext
    regex: re.Pattern[str]
    glob: re.Pattern[str] | None
    content: bool
    ripgrep: str | None = None
    files: list[str] = attrs.field(init=False, factory=list)
    lines: list[str] = attrs.field(init=False, factory=list)
    total_files: int = attrs.field(init=False, default=0)
    total_lines: int = attrs.field(init=False, default=0)

    def run(self, path: str | None, cancelled: Callable[[], bool]) -> str:
        files = self.ctx.files
        try:
            top = files.resolve_dir(self.ctx.cwd, path or ".")
        except NotADirectoryError:
            # One file, named explicitly: searched even when .gitignore excludes it.
            assert path is not None
            try:
                result = files.read(self.ctx.cwd, path, max_bytes=MAX_FILE_BYTES)
            except OSError as exc:
                raise Failed(f"{path}: {exc.strerror or exc}") from exc
            self._scan(result.canonical, result.data)
        except FileNotFoundError as exc:
            raise Failed(f"{path} does not exist.") from exc
        except OSError as exc:
            raise Failed(f"{path}: {exc.strerror or exc}") from exc
        else:
            needed = required_bytes(self.regex)
            rg = self.ripgrep if needed is not None and b"\n" not in needed else None
            if rg is None or not self._prefiltered(rg, needed or b"", top, cancelled):
                for walkdir, name, rel in walk_files(files, top, cancelled):
                    if self.glob is not None and not self.glob.match(rel):
                        continue
                    data = _read_small(walkdir, name)
                    if data is not None and (needed is None or needed in data):
                        self._scan(walkdir.path / name, data)
        return self._render(path)

    def _prefiltered(
        self, rg: str, needed: bytes, top: Path, cancelled: Callable[[], bool]
    ) -> bool:
        """The search with ripgrep as the prefilter; False (nothing scanned) when rg failed.

        rg lists every file below `top` whose bytes hold `needed`: a superset of the files
        with a match (no ignore files; hidden and binary files searched; no symlink followed).
        Each listed path is then taken as the walk would reach it (`_Beneath`: every rule of
        `walk_files`, every component opened with no symlink followed) and scanned, in walk
        order. So the answer is the pure search's; rg only spares reading the other files."""
        with _Beneath(self.ctx.files, top) as beneath:
            try:
                ripgrep = _Ripgrep(rg, needed, top, beneath.pruned_top_dirs())
            except (OSError, ValueError):  # not started: a NUL in the literal, a broken binary
                return False
            with ripgrep as listed:
                candidates = listed.wait(cancelled)
            if candidates is None:
                return False
            chosen = sorted((os.fsdecode(path) for path in candidates), key=_walk_order)
            for rel in chosen:
                if cancelled():
                    raise SearchCancelled
                if self.glob is not None and not self.glob.match(rel):
                    continue
                data = beneath.read(rel)
                if data is not None:
                    self._scan(top / rel, data)
        return True

    def _scan(self, path: Path, data: bytes) -> None:
        if is_binary(data):
            return
        text = data.decode("utf-8", "replace")
        if self.regex.search(text) is None:
            return
        shown = display_path(self.ctx, path)
        matched = False
        for line_no, line in matching_lines(self.regex, text):
            matched = True
            if not self.content:
                break
            self.total_lines += 1
            if len(self.lines) < MAX_GREP_LINES:
                if len(line) > MAX_MATCH_LINE_CHARS:
                    cut = len(line) - MAX_MATCH_LINE_CHARS
                    line = line[:MAX_MATCH_LINE_CHARS] + f" [... {cut} characters cut]"
                self.lines.append(f"{shown}:{line_no}:{line}")
        if matched:
            self.total_files += 1
            if len(self.files) < MAX_GREP_FILES:
                self.files.append(shown)

    def _render(self, path: str | None) -> str:
        where = path or "."
        if not self.total_files:
            return f"No matches for {self.regex.pattern!r} in {where}."
        if self.content:
            out = list(self.lines)
            if self.total_lines > len(self.lines):
                out.append(
                    f"[showing {len(self.lines)} of {self.total_lines} matching lines in "
                    f"{self.total_files} files; narrow the pattern, path or glob to see the rest]"
                )
            return "\n".join(out)
        out = list(self.files)
        if self.total_files > len(self.files):
            out.append(
                f"[showing {len(self.files)} of {self.total_files} matching files; narrow the "
                "pattern, path or glob to see the rest]"
            )
        return "\n".join(out)


RIPGREP_ARGS: Final = (
    "--files-with-matches",
    "--null",
    "--fixed-strings",  # the bytes, not a pattern in rg's own regex dialect
    "--case-sensitive",
    "--text",  # binary files too: a NUL after our 8 KiB probe must not hide a match
    "--encoding=none",  # raw bytes: no BOM sniffing and transcoding
    "--no-ignore",  # every ignore rule is the walk's
    "--hidden",
    "--no-config",
    "--no-messages",
    "--glob=!.git",  # never walked (ALWAYS_SKIPPED)
)


class _Ripgrep:
    """`rg` listing the files below `top` that contain `needed`, running beside the caller."""

    def __init__(self, rg: str, needed: bytes, top: Path, skipped: list[str]) -> None:
        # Directories of `top` the walk never enters are not searched (node_modules, say).
        excluded = [f"--glob=!/{name}" for name in skipped if _PLAIN_NAME.fullmatch(name)]
        self.proc = subprocess.Popen(
            [rg, *RIPGREP_ARGS, *excluded, "--", needed.decode("utf-8"), "."],
            cwd=top,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.out = b""
        self.reader = threading.Thread(target=self._read, daemon=True)  # the pipe never fills
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        self.out = self.proc.stdout.read()

    def wait(self, cancelled: Callable[[], bool]) -> set[bytes] | None:
        """The listed paths relative to `top`; None when rg did not finish cleanly (exit 0, or
        1 for none: 2 means a file or directory it could not read)."""
        while self.reader.is_alive():
            if cancelled():
                raise SearchCancelled
            self.reader.join(0.05)
        if self.proc.wait() not in (0, 1):
            return None
        return {path.removeprefix(b"./") for path in self.out.split(b"\0") if path}

    def __enter__(self) -> _Ripgrep:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.reader.join()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _walk_order(rel: str) -> tuple[tuple[int, str], ...]:
    """Where `walk_files` yields `rel`: a directory's files (sorted) before its subdirectories
    (sorted, each in turn)."""
    *dirs, name = rel.split("/")
    return (*((1, d) for d in dirs), (0, name))


class _Beneath:
    """Files by their path below `top`, taken as `walk_files` takes them: each directory
    reachable (a real directory, not `.git`, not a credential name, not ignored), its own
    .gitignore read, the file a listed regular file that is not ignored; every component is
    opened from the walk's own descriptor of `top` with no symlink followed."""

    def __init__(self, files: FileAccess, top: Path) -> None:
        self.outer, self.top_prefix = _outer_ignores(files, top)
        walk = files.walk(top)  # the same checks of `top` and the same descriptor
        try:
            first = next(walk)
            self.top = os.dup(first.dir_fd)
            self.top_dirs = list(first.dirs)
        finally:
            if isinstance(walk, Generator):
                walk.close()  # closes the walk's own descriptors now
        self.ignores: dict[str, _Ignores | None] = {}  # None: the walk does not enter it
        self.dir_rel: str | None = None  # the directory `dir_fd` is open on (walk order)
        self.dir_fd = -1

    def pruned_top_dirs(self) -> list[str]:
        """The directories of `top` that the walk prunes (`.git`, ignored ones)."""
        return [name for name in self.top_dirs if self._ignores_of(name) is None]

    def read(self, rel: str) -> bytes | None:
        """The file's bytes; None when the walk would not yield it or cannot read it."""
        parent, _, name = rel.rpartition("/")
        if self._pruned(self._ignores_of(parent), rel, name, is_dir=False):
            return None
        try:
            return _read_small(self._walkdir(parent), name)
        except OSError:
            return None

    def _pruned(self, here: _Ignores | None, rel: str, name: str, *, is_dir: bool) -> bool:
        """Whether the walk leaves `rel` out (its directory `here`, None when not entered)."""
        return (
            here is None
            or name in ALWAYS_SKIPPED
            or is_credential_name(name, is_dir=is_dir)
            or here.ignored(self.top_prefix + rel, is_dir)
        )

    def _ignores_of(self, rel_dir: str) -> _Ignores | None:
        if rel_dir in self.ignores:
            return self.ignores[rel_dir]
        here: _Ignores | None = self.outer
        if rel_dir:
            parent, _, name = rel_dir.rpartition("/")
            here = self._ignores_of(parent)
            if self._pruned(here, rel_dir, name, is_dir=True):
                here = None
        if here is not None:
            try:
                data = _read_small(self._walkdir(rel_dir), GITIGNORE)
            except OSError:  # not a directory the walk can open
                here = None
            else:
                if data is not None:
                    prefix = self.top_prefix + (rel_dir + "/" if rel_dir else "")
                    here = here.with_file(prefix, data.decode("utf-8", "replace").splitlines())
        self.ignores[rel_dir] = here
        return here

    def _walkdir(self, rel_dir: str) -> WalkDir:
        if rel_dir != self.dir_rel:
            self._close_dir()
            fd = os.dup(self.top)
            for part in rel_dir.split("/") if rel_dir else ():
                try:
                    child = os.open(part, _BENEATH_DIR, dir_fd=fd)
                finally:
                    os.close(fd)
                fd = child
            self.dir_fd, self.dir_rel = fd, rel_dir
        return WalkDir(Path(rel_dir), self.dir_fd, [], [])

    def _close_dir(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
        self.dir_fd, self.dir_rel = -1, None

    def __enter__(self) -> _Beneath:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_dir()
        os.close(self.top)


_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9._-]+")  # nothing special to a glob
_BENEATH_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
