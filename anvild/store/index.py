"""The session index: one summary per session file, so a restart lists sessions unreplayed.

    index.json in the sessions directory: {"version": 1, "sessions": {ID: entry}}

An entry is a `SessionSummary` (what `agent/list`, the family maps and a restart's choices need,
no transcript) and the `Fingerprint` of the file it was computed from (size, mtime_ns, inode,
last seq). The index is a cache, never trusted over the records: `trusted` keeps an entry only
when the file's stat matches its fingerprint; any other file (no entry, a changed file, an
unreadable, corrupt or other-version index) is replayed by the caller. `write_index` (or an
`IndexWriter`, which re-encodes only the entries that changed since its last write) replaces
the file atomically (temp file, fsync, rename, directory fsync); blocking: call it in a thread.
An entry of a live session is written only when the file's size is the one its summary was
read at (`Pending`), so a record appended meanwhile drops the entry instead of mislabelling it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import structlog

from anvild.llm.stream import Usage
from anvild.store.durable import replace_durably
from anvild.store.journal import FILE_MODE
from anvild.store.records import SessionStatus
from anvild.store.state import SessionState

log = structlog.get_logger(__name__)

INDEX_NAME: Final = "index.json"
INDEX_VERSION: Final = 1
_FINGERPRINT_KEYS: Final = ("size", "mtime_ns", "ino", "seq")
_RESTING: Final = frozenset({SessionStatus.IDLE, SessionStatus.AWAIT})


def at_rest(state: SessionState) -> bool:
    """Whether a session may wait unbuilt (restored, or unloaded for idleness): nothing its task
    would do at once (no queued prompt, approval, gate or call; not ephemeral, not ended)."""
    return (
        state.ended is None
        and state.status in _RESTING
        and not state.queue
        and state.approval is None
        and state.result_approval is None
        and not state.tools
        and not state.pending_calls
        and not state.ephemeral
    )


@attrs.frozen
class SessionSummary:
    """A session without its transcript: its `agent/list` fields, its place in creation order
    and in the family maps, its usage and last outcome (a parent's `children` and `cost`), and
    whether it was at rest (`at_rest`) or ended when its file was last read."""

    id: str
    alias: str | None
    role: str
    model: str
    cwd: str
    created_at: dt.datetime
    status: SessionStatus
    parent: str | None
    ended: bool
    at_rest: bool
    usage: Usage
    outcome: str  # how its last turn ended ("-": none has)

    @classmethod
    def of(cls, state: SessionState) -> SessionSummary:
        turn = state.last_turn
        return cls(
            state.id,
            state.alias,
            state.role,
            state.model,
            state.cwd,
            state.created_at,
            state.status,
            state.parent,
            state.ended is not None,
            at_rest(state),
            state.usage,
            turn.outcome if turn else "-",
        )

    def to_json(self) -> dict[str, Any]:
        u = self.usage
        return {
            "alias": self.alias,
            "role": self.role,
            "model": self.model,
            "cwd": self.cwd,
            "created_at": self.created_at.isoformat(),
            "status": self.status.value,
            "parent": self.parent,
            "ended": self.ended,
            "at_rest": self.at_rest,
            "usage": [u.input, u.output, u.cache_read, u.cache_write],
            "outcome": self.outcome,
        }

    @classmethod
    def from_json(cls, session_id: str, obj: Mapping[str, Any]) -> SessionSummary:
        """The summary of an entry; `ValueError`, `KeyError` or `TypeError` when malformed."""
        created = dt.datetime.fromisoformat(_str(obj["created_at"]))
        if created.tzinfo is None:
            raise ValueError("created_at has no time zone")
        usage = obj["usage"]
        if not isinstance(usage, list) or len(usage) != 4:
            raise ValueError("usage is not four counts")
        return cls(
            session_id,
            _opt_str(obj["alias"]),
            _str(obj["role"]),
            _str(obj["model"]),
            _str(obj["cwd"]),
            created,
            SessionStatus(obj["status"]),
            _opt_str(obj["parent"]),
            _bool(obj["ended"]),
            _bool(obj["at_rest"]),
            Usage(*(_opt_int(n) for n in usage)),
            _str(obj["outcome"]),
        )


@attrs.frozen
class Fingerprint:
    """What a session file looked like when its summary was taken."""

    size: int
    mtime_ns: int
    inode: int
    seq: int

    def matches(self, st: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.inode) == (st.st_size, st.st_mtime_ns, st.st_ino)


@attrs.frozen
class IndexEntry:
    summary: SessionSummary
    fingerprint: Fingerprint


@attrs.frozen
class Pending:
    """An entry to write for a session whose file is open: its summary as of `size` bytes and
    `seq` records; `write_index` stats the file and keeps the entry only if the size is that."""

    summary: SessionSummary
    size: int
    seq: int


def index_path(directory: Path) -> Path:
    return directory / INDEX_NAME


def read_index(directory: Path) -> dict[str, IndexEntry]:
    """The entries of the index, by id; {} when it is missing, unreadable, corrupt or of
    another version (logged: every file is then replayed). A malformed entry is left out."""
    path = index_path(directory)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("store.index_unreadable", path=str(path), error=str(exc))
        return {}
    try:
        document = json.loads(data)
        if not isinstance(document, dict) or document.get("version") != INDEX_VERSION:
            raise ValueError(f"not an index of version {INDEX_VERSION}")
        sessions = document["sessions"]
        if not isinstance(sessions, dict):
            raise ValueError("sessions is not an object")
    except (ValueError, KeyError) as exc:
        log.warning("store.index_ignored", path=str(path), error=str(exc))
        return {}
    found: dict[str, IndexEntry] = {}
    for session_id, obj in sessions.items():
        try:
            fp = obj["file"]
            fingerprint = Fingerprint(*(_int(fp[key]) for key in _FINGERPRINT_KEYS))
            found[session_id] = IndexEntry(SessionSummary.from_json(session_id, obj), fingerprint)
        except (ValueError, KeyError, TypeError):
            continue
    return found


def trusted(entry: IndexEntry | None, path: Path) -> IndexEntry | None:
    """`entry` when the file at `path` is the one it was taken from, else None (replay it)."""
    if entry is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return entry if entry.fingerprint.matches(st) else None


class IndexWriter:
    """Writes the index of one sessions directory, again and again: each entry's JSON text is
    kept with the entry it was made from, so a write re-encodes only the entries that are not
    the very objects of the last write (a `Pending` always is new: its file is stat'ed). The
    file is the same document `json.dumps` would make. One write at a time (a lock)."""

    def __init__(self, directory: Path, path_for: Callable[[str], Path]) -> None:
        self.directory = directory
        self._path_for = path_for
        self._texts: dict[str, tuple[IndexEntry, str]] = {}  # id -> (entry, `"ID":{...}`)
        self._lock = threading.Lock()

    def write(self, entries: Iterable[IndexEntry | Pending]) -> dict[str, IndexEntry]:
        """Replace the index with `entries` (a `Pending` one is checked against its file first).
        Returns what was written, by id. Raises `OSError` when the index cannot be written (the
        old one, if any, is left in place)."""
        with self._lock:
            written: dict[str, IndexEntry] = {}
            texts: dict[str, tuple[IndexEntry, str]] = {}
            for item in entries:
                session_id = item.summary.id
                if isinstance(item, Pending):
                    try:
                        st = os.stat(self._path_for(session_id))
                    except OSError:
                        continue
                    if st.st_size != item.size:  # appended since the summary was taken: replay
                        continue
                    fingerprint = Fingerprint(st.st_size, st.st_mtime_ns, st.st_ino, item.seq)
                    item = IndexEntry(item.summary, fingerprint)
                written[session_id] = item
                known = self._texts.get(session_id)
                if known is not None and known[0] is item:
                    texts[session_id] = known
                else:
                    texts[session_id] = (item, _entry_text(session_id, item))
            body = ",".join(text for _, text in texts.values())
            data = f'{{"version":{INDEX_VERSION},"sessions":{{{body}}}}}'.encode()
            path = index_path(self.directory)
            replace_durably(path, data, temp=path.with_name(path.name + ".tmp"), mode=FILE_MODE)
            self._texts = texts  # only after the write: a failed one re-encodes nothing wrongly
            return written


def write_index(
    directory: Path,
    entries: Iterable[IndexEntry | Pending],
    path_for: Callable[[str], Path],
) -> dict[str, IndexEntry]:
    """Replace the index with `entries` once (`IndexWriter.write`; `path_for(id)` gives a
    session's file)."""
    return IndexWriter(directory, path_for).write(entries)


def _entry_text(session_id: str, entry: IndexEntry) -> str:
    """One member of the document's `sessions` object, as `json.dumps` writes it."""
    obj = {**entry.summary.to_json(), "file": _fingerprint_json(entry.fingerprint)}
    return json.dumps(session_id) + ":" + json.dumps(obj, separators=(",", ":"))


def _fingerprint_json(fp: Fingerprint) -> dict[str, int]:
    return {"size": fp.size, "mtime_ns": fp.mtime_ns, "ino": fp.inode, "seq": fp.seq}


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("not an integer")
    return value


def _opt_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("not a boolean")
    return value


__all__ = [
    "INDEX_NAME",
    "INDEX_VERSION",
    "Fingerprint",
    "IndexEntry",
    "IndexWriter",
    "Pending",
    "SessionSummary",
    "at_rest",
    "index_path",
    "read_index",
    "trusted",
    "write_index",
]
