"""read_file, write_file and edit_file: the native file tools.

Every path goes through the context's `FileAccess` (canonical paths, roots, protected and
credential files, hard links); blocking I/O runs in a worker thread. Freshness is by content:
`FileTracker` (re-exported here) keeps the sha256 of what the agent last read or wrote per
canonical path, and a write or edit of an existing file is refused unless the file on disk still
hashes to it. After the agent's own write the tracker is refreshed, so the agent can edit the same
file twice in a row while an edit by someone else in between is caught.

The freshness check runs inside the same worker call as the atomic replace, just before it; the
short window between the two is race 4 of docs/decisions.md, "Module notes" (sandbox.files).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import trio

from anvild.agent.tools.base import (
    Args,
    Cancellation,
    Effects,
    Failed,
    FileTracker,
    InvalidArgs,
    ToolContext,
    ToolOutput,
    object_schema,
)
from anvild.sandbox.files import AccessDenied, ReadResult, WriteResult

__all__ = ["EditFile", "FileTracker", "ReadFile", "WriteFile"]

MAX_FILE_BYTES: Final = 32 * 1024 * 1024
DEFAULT_LIMIT: Final = 2000
MAX_LINE_CHARS: Final = 2000
BINARY_PROBE: Final = 8192
FILE_PATH: Final[dict[str, Any]] = {
    "type": "string",
    "minLength": 1,
    "description": "Path of the file, absolute or relative to the working directory.",
}
"""The `file_path` argument of every tool here (one schema: the same rules for each)."""
CONTEXT_LINES: Final = 4


def is_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB, the heuristic git and ripgrep use."""
    return b"\x00" in data[:BINARY_PROBE]


def display_path(ctx: ToolContext, path: Path) -> str:
    """`path` relative to the cwd when it is below it, else absolute."""
    try:
        rel = path.relative_to(ctx.cwd)
    except ValueError:
        return str(path)
    return str(rel) if rel.parts else "."


def _os_failure(user_path: str, exc: OSError) -> Failed:
    if isinstance(exc, FileNotFoundError):
        return Failed(f"{user_path} does not exist. Check the path, or use glob to find the file.")
    if isinstance(exc, IsADirectoryError):
        return Failed(f"{user_path} is a directory, not a file. Use glob to list its contents.")
    if isinstance(exc, NotADirectoryError):
        return Failed(f"A component of {user_path} is a file, not a directory.")
    if exc.errno == errno.EFBIG:
        return Failed(
            f"{user_path} is larger than {MAX_FILE_BYTES} bytes; use grep or bash (head, tail) "
            "to look at parts of it."
        )
    return Failed(f"{user_path}: {exc.strerror or exc}")


def _number(lines: list[str], first: int) -> str:
    out = []
    for n, line in enumerate(lines, start=first):
        if len(line) > MAX_LINE_CHARS:
            line = (
                line[:MAX_LINE_CHARS]
                + f" [... line cut: {len(line) - MAX_LINE_CHARS} more characters]"
            )
        out.append(f"{n:>6}\t{line}")
    return "\n".join(out)


def _lines(text: str) -> list[str]:
    """Lines without their terminators (LF or CRLF); a final newline does not start a line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _decode(user_path: str, data: bytes) -> str:
    if is_binary(data):
        raise Failed(f"{user_path} is a binary file; read_file shows text files only.")
    return data.decode("utf-8", errors="replace")


class ReadFile:
    name = "read_file"
    description = (
        "Read a text file. Returns its lines numbered like `     1\\t<line>` (the number and tab "
        "are not part of the file: never copy them into edit_file's old_string). By default "
        f"reads up to {DEFAULT_LIMIT} lines from the start; for longer files pass `offset` (the "
        "1-based line to start at) and `limit` to read the rest, as the footer tells you. Lines "
        f"longer than {MAX_LINE_CHARS} characters are cut. Binary files are refused. You must "
        "read a file with this tool before editing or overwriting it, and read it again if it "
        "changed. Prefer this tool to `cat`, `head` or `sed` in bash. Credential files (.env*, "
        ".ssh, .aws, private keys, .netrc ...) cannot be read."
    )
    summary = (
        "Read a text file; each line comes numbered (`N<tab>`, not part of the file). "
        "`offset` and `limit` read part of a long file. Read a file before you edit or "
        "overwrite it."
    )
    input_schema: Final[dict[str, Any]] = object_schema(
        {
            "file_path": FILE_PATH,
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "1-based line number to start reading at (default 1).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"Maximum number of lines to return (default {DEFAULT_LIMIT}).",
            },
        },
        required=("file_path",),
    )
    cancellation = Cancellation.SAFE_TO_ABANDON

    def effects(self, args: Args) -> Effects:
        return Effects.read(args["file_path"])

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        user_path: str = args["file_path"]
        offset: int = args.get("offset", 1)
        limit: int = args.get("limit", DEFAULT_LIMIT)
        result = await _read(ctx, user_path)
        text = _decode(user_path, result.data)
        # Recorded only once the agent is shown the content.
        ctx.tracker.record(result.canonical, result.data)
        lines = _lines(text)
        if not lines:
            return ToolOutput(f"({display_path(ctx, result.canonical)} is empty)")
        if offset > len(lines):
            raise Failed(
                f"offset {offset} is past the end of {user_path}, which has {len(lines)} lines."
            )
        shown = lines[offset - 1 : offset - 1 + limit]
        body = _number(shown, offset)
        last = offset - 1 + len(shown)
        if last < len(lines):
            body += (
                f"\n[... {len(lines) - last} more lines; read again with offset={last + 1} "
                "to continue]"
            )
        return ToolOutput(body)


async def _read(ctx: ToolContext, user_path: str) -> ReadResult:
    try:
        return await trio.to_thread.run_sync(
            lambda: ctx.files.read(ctx.cwd, user_path, max_bytes=MAX_FILE_BYTES),
            abandon_on_cancel=True,
        )
    except AccessDenied as exc:
        raise Failed(str(exc)) from exc
    except OSError as exc:
        raise _os_failure(user_path, exc) from exc


async def _update(
    ctx: ToolContext, user_path: str, transform: Callable[[Path, bytes | None], bytes]
) -> WriteResult:
    """Atomically replace a file through FileAccess and refresh the tracker. Not abandoned on
    cancel: the replace finishes (or never starts) before the cancel is delivered. The
    temporary file carries the call's `temp_tag`, so a crash mid-write leaves one whose name
    the session can derive (`anvild.session.leftovers`)."""
    try:
        result = await trio.to_thread.run_sync(
            lambda: ctx.files.update(
                ctx.cwd, user_path, transform, max_bytes=MAX_FILE_BYTES, temp_tag=ctx.temp_tag
            )
        )
    except AccessDenied as exc:
        raise Failed(str(exc)) from exc
    except OSError as exc:
        raise _os_failure(user_path, exc) from exc
    ctx.tracker.record(result.canonical, result.data)
    return result


class _Writer:
    """What write_file and edit_file share: a write of `file_path` (which also reads it), done
    atomically (`_update`), so a cancel never leaves it half done."""

    cancellation = Cancellation.ATOMIC

    def effects(self, args: Args) -> Effects:
        return Effects.write(args["file_path"])


class WriteFile(_Writer):
    name = "write_file"
    description = (
        "Write a whole file, replacing its content, or create it (missing parent directories "
        "are created). To overwrite an existing file you must have read it with read_file "
        "first, and it must not have changed since. For changes to part of an existing file "
        "use edit_file instead: it is safer and cheaper. The write is atomic (a temporary file "
        "renamed into place) and keeps the file's permissions. Protected paths (.git, .anvil, "
        ".env*, credential files) and files with several hard links cannot be written."
    )
    summary = (
        "Create a file or replace all of it (read an existing file first). Use edit_file to "
        "change part of a file."
    )
    input_schema: Final[dict[str, Any]] = object_schema(
        {
            "file_path": FILE_PATH,
            "content": {"type": "string", "description": "The complete new content."},
        },
        required=("file_path", "content"),
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        user_path: str = args["file_path"]
        content: str = args["content"]
        data = content.encode("utf-8")

        def transform(canonical: Path, current: bytes | None) -> bytes:
            if current is not None:
                ctx.tracker.check_fresh(canonical, current)
            return data

        result = await _update(ctx, user_path, transform)
        verb = "Created" if result.created else "Wrote"
        lines = len(_lines(content))
        return ToolOutput(
            f"{verb} {display_path(ctx, result.canonical)} ({lines} lines, {len(data)} bytes)."
        )


class EditFile(_Writer):
    name = "edit_file"
    description = (
        "Replace exact text in a file. `old_string` must match the file's text exactly, "
        "including whitespace and indentation, and must be unique in the file: include enough "
        "surrounding lines to make it unique, or set `replace_all` to true to replace every "
        "occurrence (e.g. renaming a variable). Copy the text from read_file output without the "
        "line-number prefix. You must read the file with read_file before editing it; after a "
        "successful edit you may edit it again without re-reading. `old_string` must not be "
        "empty (use write_file to create files) and must differ from `new_string`. Line endings "
        "are kept: an old_string written with \\n also matches a file that uses \\r\\n. Returns "
        "the edited region with line numbers."
    )
    summary = (
        "Replace `old_string` with `new_string` in a file you have read. old_string must "
        "match the file exactly (without read_file's line numbers) and once, unless "
        "`replace_all` is true."
    )
    input_schema: Final[dict[str, Any]] = object_schema(
        {
            "file_path": FILE_PATH,
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The replacement text."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one.",
            },
        },
        required=("file_path", "old_string", "new_string"),
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        user_path: str = args["file_path"]
        old: str = args["old_string"]
        new: str = args["new_string"]
        replace_all: bool = args.get("replace_all", False)
        if not old:
            raise InvalidArgs(
                "old_string must not be empty. To create a file or replace all of it, use "
                "write_file."
            )
        if old == new:
            raise InvalidArgs("old_string and new_string are the same; there is nothing to change.")
        edit = _Edit(user_path, old, new, replace_all)

        def transform(canonical: Path, current: bytes | None) -> bytes:
            if current is None:
                raise Failed(
                    f"{user_path} does not exist. Use write_file to create it, or glob to find "
                    "the right path."
                )
            ctx.tracker.check_fresh(canonical, current)
            return edit.apply(current)

        result = await _update(ctx, user_path, transform)
        noun = "occurrence" if edit.count == 1 else "occurrences"
        return ToolOutput(
            f"Edited {display_path(ctx, result.canonical)}: replaced {edit.count} {noun}.\n"
            + edit.snippet
        )


class _Edit:
    """One edit_file operation; `apply` runs in the worker thread on the current bytes."""

    def __init__(self, user_path: str, old: str, new: str, replace_all: bool) -> None:
        self.user_path = user_path
        self.old = old
        self.new = new
        self.replace_all = replace_all
        self.count = 0
        self.snippet = ""

    def apply(self, current: bytes) -> bytes:
        if is_binary(current):
            raise Failed(f"{self.user_path} is a binary file; edit_file edits text files only.")
        try:
            text = current.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Failed(
                f"{self.user_path} is not valid UTF-8 text; edit it with bash instead."
            ) from exc
        old, new = self.old, self.new
        count = text.count(old)
        if count == 0 and "\r\n" in text:
            # The model writes \n; the file uses \r\n. Match and write in the file's convention.
            old = _to_crlf(old)
            new = _to_crlf(new)
            count = text.count(old)
        if count == 0:
            raise Failed(
                f"old_string was not found in {self.user_path}. Check whitespace and "
                "indentation (tabs vs spaces, trailing spaces, line breaks) and read_file the "
                "file again to copy the exact current text."
            )
        if count > 1 and not self.replace_all:
            raise Failed(
                f"old_string has {count} matches in {self.user_path}. Add surrounding lines to "
                "old_string to make it unique, or set replace_all to true to replace every match."
            )
        start = text.index(old)
        result = text.replace(old, new) if self.replace_all else text.replace(old, new, 1)
        self.count = count if self.replace_all else 1
        self.snippet = _snippet(result, start, len(new))
        return result.encode("utf-8")


def _to_crlf(s: str) -> str:
    return s.replace("\r\n", "\n").replace("\n", "\r\n")


def _snippet(text: str, start: int, length: int) -> str:
    """Numbered lines around text[start:start+length], with CONTEXT_LINES on each side."""
    end = start + length
    if length and text[end - 1] == "\n":
        end -= 1  # a replacement ending in a newline ends on the line before
    first_line = text.count("\n", 0, start)  # 0-based
    last_line = first_line + text.count("\n", start, end)
    lines = _lines(text)
    lo = max(0, first_line - CONTEXT_LINES)
    hi = min(len(lines), last_line + CONTEXT_LINES + 1)
    return _number(lines[lo:hi], lo + 1)
