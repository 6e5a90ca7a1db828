"""The temporary files a write left when anvild died in the middle of it.

The file tools write through a temporary file renamed over the target once complete
(`anvild.sandbox.files.temp_name`: `.<name>.anvil-<tag>.tmp` beside the target). A session gives
each call the tag `tag(session id, call id)`, so the name is known before the write starts: the
call's `ToolStarted` (synced before it runs) and its arguments in the transcript are enough to
find it. At restart, for each write call whose outcome is unknown, `remove` deletes that file
if it is there (a regular file; a symlink is never followed) and returns what it removed, which
recovery names in the call's result and the log (`anvild.store.recovery`). A temporary file
still there means its rename never happened: that write did not reach its target. Blocking file
I/O: run it in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import structlog

from anvild.llm.types import ToolCall
from anvild.sandbox.files import FileAccess, temp_name

log = structlog.get_logger(__name__)

WRITE_TOOLS: Final = frozenset({"write_file", "edit_file"})
"""The tools that write through a temporary file (`anvild.agent.tools.files`)."""


def tag(session_id: str, call_id: str) -> str:
    """The temp-file tag of one call: 12 hex digits, like the random tags of other writes."""
    return hashlib.sha256(f"{session_id}\0{call_id}".encode()).hexdigest()[:12]


def candidates(session_id: str, cwd: str, call: ToolCall) -> tuple[Path, ...]:
    """Where `call`'s temporary file would be: beside its target as written and as resolved
    now (the tools write beside the canonical path; a symlink in the path leads there)."""
    if call.name not in WRITE_TOOLS or not isinstance(call.arguments, dict):
        return ()
    user_path = call.arguments.get("file_path")
    if not isinstance(user_path, str) or not user_path:
        return ()
    target = FileAccess.absolute(cwd, user_path)
    name = temp_name(target.name, tag(session_id, call.id))
    found = [target.parent / name]
    with contextlib.suppress(OSError, ValueError):
        real = Path(os.path.realpath(target))
        found.append(real.parent / temp_name(real.name, tag(session_id, call.id)))
    return tuple(dict.fromkeys(found))


def remove(session_id: str, cwd: str, calls: Iterable[ToolCall]) -> dict[str, tuple[str, ...]]:
    """Delete the temporary files `calls` left; the paths removed, by call id."""
    removed: dict[str, tuple[str, ...]] = {}
    for call in calls:
        gone = []
        for path in candidates(session_id, cwd, call):
            try:
                if not stat.S_ISREG(path.lstat().st_mode):
                    continue
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning(
                    "session.temp_not_removed",
                    session=session_id,
                    path=str(path),
                    call=call.id,
                    error=str(exc),
                )
                continue
            gone.append(str(path))
        if gone:
            log.warning("session.temp_removed", session=session_id, call=call.id, paths=gone)
            removed[call.id] = tuple(gone)
    return removed


__all__ = ["WRITE_TOOLS", "candidates", "remove", "tag"]
