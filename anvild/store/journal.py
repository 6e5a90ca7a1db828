"""Session journals: one append-only JSONL file per session, written and loaded.

    store = SessionStore(dir)   # .create(SessionStarted) / .open(id) / .read(id) / .ids()
    journal.append(record)      # apply, write, (sync), then publish the state
    store.begin(started)        # create's write; then journal.sync_created() before it is shown

`append` applies the record first (`RecordError`: nothing written), writes the whole line through
an `O_APPEND` descriptor, then replaces `state`: a mutation is recorded before it is visible.
`needs_sync` records are fsynced before `append` returns: `SessionStarted` (and the directory),
`ToolStarted` (before the side effect), `ToolFinished`, `SessionEnded`, `Compacted`. A failed
write raises `JournalWriteError` and cuts the file back to its last record; if that or an fsync
fails, every later append is refused (the session goes to `error`, the daemon carries on).
Loading splits at b"\\n"; a torn last line is dropped (`open` truncates it), any other bad line is
`CorruptJournalError` naming file and line. Older schemas are upgraded and rewritten (`.bak`
kept); a newer one is `SchemaVersionError`, untouched. Blocking I/O: run synced appends, `open`,
`read`, `recover` in a thread; one session's appends never overlap (docs/decisions.md).
"""

from __future__ import annotations

import errno as errno_codes
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

import attrs
import structlog

from anvild.llm.integrity import TranscriptError, validate_transcript
from anvild.llm.types import Json
from anvild.store.errors import (
    CorruptJournalError,
    JournalError,
    JournalWriteError,
    RecordError,
    SchemaVersionError,
)
from anvild.store.records import (
    OLDEST_SCHEMA,
    SCHEMA_VERSION,
    Compacted,
    Record,
    SessionEnded,
    SessionStarted,
    ToolFinished,
    ToolStarted,
    decode,
    encode,
    schema_of,
    upgrade_lines,
)
from anvild.store.recovery import Recovery, recover
from anvild.store.reducer import apply
from anvild.store.state import SessionState

log = structlog.get_logger(__name__)

SUFFIX: Final = ".jsonl"
SYNCED_RECORDS: Final[frozenset[type[Record]]] = frozenset(
    {SessionStarted, ToolStarted, ToolFinished, SessionEnded, Compacted}
)
SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700


def needs_sync(record: Record) -> bool:
    """Whether the durability policy fsyncs `record` before `append` returns."""
    return type(record) in SYNCED_RECORDS


@attrs.frozen
class JournalContents:
    """A session file as loaded: its records (current schema), the state they build, the
    schema it was written in, the length of its complete records, and what a torn final line
    left after them (`torn_bytes`, at 1-based `torn_line`; 0 and None when there is none)."""

    path: Path
    records: tuple[Record, ...]
    state: SessionState
    schema: int
    good_length: int
    torn_bytes: int = 0
    torn_line: int | None = None


def read_journal(path: Path) -> JournalContents:
    """Load a session file without modifying it.

    Raises `CorruptJournalError` (file and line), `SchemaVersionError` (a newer or unknown
    schema) or `JournalError` (the file cannot be read)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise JournalError(path, f"cannot read: {exc.strerror or exc}") from exc
    pieces = data.split(b"\n")
    lines, tail = pieces[:-1], pieces[-1]
    good_length = len(data) - len(tail)
    decoded: list[Json] = []
    for index, raw in enumerate(lines):
        try:
            decoded.append(json.loads(raw.decode("utf-8")))  # UTF-8 only: no encoding sniffing
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            if index == len(lines) - 1 and not tail:  # the last line, complete but unparsable
                tail = raw + b"\n"
                good_length -= len(tail)
                break
            raise CorruptJournalError(path, index + 1, f"not a JSON line ({exc})") from exc
    torn_line = len(decoded) + 1 if tail else None
    if not decoded:
        raise CorruptJournalError(
            path, None, "no complete record: the session was never fully created"
        )
    try:
        schema = schema_of(decoded[0])
    except RecordError as exc:
        raise CorruptJournalError(path, 1, str(exc)) from exc
    if schema > SCHEMA_VERSION or schema < OLDEST_SCHEMA:
        newer = schema > SCHEMA_VERSION
        raise SchemaVersionError(
            path,
            schema,
            f"written with record schema {schema}, "
            + (
                f"newer than this anvild's {SCHEMA_VERSION}; upgrade anvild to load it "
                "(the file was left untouched)"
                if newer
                else "which is not a known version"
            ),
        )
    records, state = _replay_lines(path, decoded, schema)
    try:
        validate_transcript(state.messages, allow_pending_tail=True)
    except TranscriptError as exc:
        raise CorruptJournalError(path, None, f"the recorded transcript is invalid: {exc}") from exc
    return JournalContents(path, records, state, schema, good_length, len(tail), torn_line)


def _replay_lines(
    path: Path, decoded: list[Json], schema: int
) -> tuple[tuple[Record, ...], SessionState]:
    if schema < SCHEMA_VERSION:
        try:
            decoded = upgrade_lines(decoded, schema)
        except RecordError as exc:
            message = f"cannot upgrade from schema {schema}: {exc}"
            raise CorruptJournalError(path, None, message) from exc
    records: list[Record] = []
    state: SessionState | None = None
    for index, obj in enumerate(decoded):
        line = index + 1
        try:
            seq, record = decode(obj)
            if seq != line:
                raise RecordError(
                    f"seq {seq} where {line} was expected (records lost or reordered)"
                )
            state = apply(state, record)
        except RecordError as exc:
            raise CorruptJournalError(path, line, str(exc)) from exc
        records.append(record)
    assert state is not None  # decoded is not empty
    return tuple(records), state


class Journal:
    """One session's open record file. Make one with `create` or `open` (or `SessionStore`)."""

    def __init__(self, path: Path, fd: int, state: SessionState, seq: int, size: int) -> None:
        self.path = path
        self._fd: int | None = fd
        self._state = state
        self._seq = seq
        self._size = size
        self._broken: str | None = None  # why appends are refused, after an unrecoverable failure
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: Path, started: SessionStarted) -> Journal:
        """A new session file holding `started`, synced with its directory. Raises
        `JournalError` if the file exists, `JournalWriteError` if it cannot be written (nothing
        is left behind)."""
        journal = cls.begin(path, started)
        journal.sync_created()
        return journal

    @classmethod
    def begin(cls, path: Path, started: SessionStarted) -> Journal:
        """`create` without its fsyncs: the file made and `started` written. The caller runs
        `sync_created` and shows the session to nobody before it returned (meanwhile it may
        build what needs the journal). Raises as `create` does; a missing directory raises
        `JournalWriteError` with errno ENOENT. Blocking (a file creation: tenths of a ms)."""
        state = apply(None, started)
        line = encode(1, started)
        try:
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, FILE_MODE
            )
        except FileExistsError as exc:
            raise JournalError(path, "a session file with this id already exists") from exc
        except OSError as exc:
            raise _write_error(path, "cannot create the session file", exc, intact=True) from exc
        try:
            _write_all(fd, line)
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise _write_error(path, "cannot write the session header", exc, intact=True) from exc
        return cls(path, fd, state, 1, len(line))

    def sync_created(self) -> None:
        """The second half of `create` after `begin`: fsync the file, then its directory (so
        the new entry survives a power loss). On a failure the file is closed and removed
        (nothing is left behind) and `JournalWriteError` raised. Blocking."""
        with self._lock:
            fd = self._writable()
            try:
                os.fsync(fd)
                sync_directory(self.path.parent)
            except OSError as exc:
                self._fd = None
                os.close(fd)
                self.path.unlink(missing_ok=True)
                message = "cannot write the session header"
                raise _write_error(self.path, message, exc, intact=True) from exc

    @classmethod
    def open(cls, path: Path) -> Journal:
        """Load a session file for appending: a torn final line is cut away (and logged), an
        older schema is rewritten in the current one, a newer schema is refused untouched."""
        return cls.load(path)[0]

    @classmethod
    def load(cls, path: Path) -> tuple[Journal, JournalContents]:
        """`open`, and the contents it loaded (its records, in the current schema)."""
        contents = read_journal(path)
        if contents.schema < SCHEMA_VERSION:
            _rewrite(path, contents)
            size = path.stat().st_size
        else:
            size = contents.good_length
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as exc:
            raise JournalError(path, f"cannot open for appending: {exc.strerror or exc}") from exc
        if contents.torn_bytes and contents.schema == SCHEMA_VERSION:
            try:
                os.ftruncate(fd, contents.good_length)
                os.fsync(fd)
            except OSError as exc:
                os.close(fd)
                raise _write_error(
                    path, "cannot cut the torn final line", exc, intact=False
                ) from exc
            log.warning(
                "store.torn_tail",
                path=str(path),
                line=contents.torn_line,
                dropped_bytes=contents.torn_bytes,
            )
        return cls(path, fd, contents.state, len(contents.records), size), contents

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def seq(self) -> int:
        """The sequence number of the last record in the file."""
        return self._seq

    @property
    def size(self) -> int:
        """The file's length: every complete record, nothing else."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._fd is None

    def snapshot(self) -> tuple[SessionState, int, int] | None:
        """The state, seq and size at one moment, or None while an append (in another thread)
        holds the journal: never the state of one moment with the size of another."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._state, self._seq, self._size
        finally:
            self._lock.release()

    def fileno(self) -> int:
        """The descriptor appends go through (for diagnostics and fault-injection tests)."""
        if self._fd is None:
            raise JournalError(self.path, "the journal is closed")
        return self._fd

    def append(self, record: Record, *, sync: bool | None = None) -> SessionState:
        """Record `record` and return the new state (also `self.state`).

        Synced when `sync` is True, or when it is None and the policy says so (`needs_sync`).
        Raises `RecordError` (the record does not fit: nothing written) or `JournalWriteError`
        (nothing of it kept; see the module doc). Blocks: see "Calling from trio"."""
        with self._lock:
            fd = self._writable()
            state = apply(self._state, record)
            line = encode(self._seq + 1, record)
            synced = needs_sync(record) if sync is None else sync
            step = "write"
            try:
                _write_all(fd, line)
                step = "fsync"
                if synced:
                    os.fsync(fd)
            except OSError as exc:
                raise self._roll_back(fd, record, step, exc) from exc
            self._size += len(line)
            self._seq += 1
            self._state = state
            return state

    def recover(self, removed: Mapping[str, Sequence[str]] | None = None) -> Recovery:
        """Append what a crash left undone (`recover(self.state, removed)`), then sync.
        Returns what was found; a session at rest gets no records. Never re-runs anything."""
        found = recover(self._state, removed)
        for record in found.records:
            self.append(record, sync=False)
        if found.records:
            self.sync()
        return found

    def sync(self) -> None:
        """fsync the file: every record appended so far survives a power loss."""
        with self._lock:
            fd = self._writable()
            try:
                os.fsync(fd)
            except OSError as exc:
                self._broken = f"fsync failed ({exc.strerror or exc})"
                raise _write_error(self.path, "fsync failed", exc, intact=False) from exc

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _writable(self) -> int:
        if self._fd is None:
            raise JournalError(self.path, "the journal is closed")
        if self._broken is not None:
            raise JournalWriteError(
                self.path,
                f"appends refused after an earlier failure: {self._broken}",
                errno=None,
                intact=False,
            )
        return self._fd

    def _roll_back(self, fd: int, record: Record, step: str, exc: OSError) -> JournalWriteError:
        """Cut the file back to its last complete record after a failed write or fsync."""
        try:
            os.ftruncate(fd, self._size)
            intact = True
        except OSError as cut:
            intact = False
            self._broken = f"cutting back a failed write failed ({cut.strerror or cut})"
        if step == "fsync":
            self._broken = f"fsync failed ({exc.strerror or exc})"
        log.error(
            "store.write_failed",
            path=str(self.path),
            record=record.TAG,
            step=step,
            error=str(exc),
            intact=intact,
        )
        return _write_error(self.path, f"cannot record {record.TAG} ({step})", exc, intact=intact)


def _write_all(fd: int, line: bytes) -> None:
    """Write all of `line`. A short write (the disk filled mid-line) continues; the next
    `write` then fails with the real error."""
    view = memoryview(line)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - write(2) returns >0 or fails for regular files
            raise OSError(errno_codes.EIO, "write made no progress")
        view = view[written:]


def _write_error(path: Path, what: str, exc: OSError, *, intact: bool) -> JournalWriteError:
    reason = exc.strerror or str(exc)
    state = "the file is intact" if intact else "the file may end in a partial record"
    return JournalWriteError(path, f"{what}: {reason}; {state}", errno=exc.errno, intact=intact)


def sync_directory(directory: Path) -> None:
    """fsync `directory`, so the entries created or renamed in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rewrite(path: Path, contents: JournalContents) -> None:
    """Replace an older-schema file with its records in the current schema, atomically, keeping
    the original as `<id>.schema<N>.bak`."""
    temp = path.with_name(path.name + ".upgrade")
    backup = path.with_name(f"{path.stem}.schema{contents.schema}.bak")
    data = b"".join(encode(seq, record) for seq, record in enumerate(contents.records, start=1))
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        backup.unlink(missing_ok=True)
        os.link(path, backup)
        os.replace(temp, path)
        sync_directory(path.parent)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise _write_error(path, "cannot rewrite in the current schema", exc, intact=True) from exc
    log.info(
        "store.upgraded",
        path=str(path),
        from_schema=contents.schema,
        to_schema=SCHEMA_VERSION,
        backup=str(backup),
        dropped_torn_bytes=contents.torn_bytes,
    )


class SessionStore:
    """The session files of one data dir: `<directory>/<id>.jsonl`.

    The daemon's data-dir lock makes it the only writer; `read` is safe alongside it (it may
    see a line being written as a torn tail, and reports it without cutting it)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, session_id: str) -> Path:
        if not SESSION_ID.fullmatch(session_id):
            raise ValueError(
                f"session id {session_id!r} is not 1-64 letters, digits, '-' or '_' "
                "(starting with a letter or digit)"
            )
        return self.directory / f"{session_id}{SUFFIX}"

    def create(self, started: SessionStarted) -> Journal:
        """A new session file (see `Journal.create`); creates the directory (0700) if needed."""
        path = self.path_for(started.id)
        if not self.directory.is_dir():
            try:
                self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
                sync_directory(self.directory.parent)  # the new directory's own entry
            except OSError as exc:
                message = "cannot create the sessions directory"
                raise _write_error(path, message, exc, intact=True) from exc
        return Journal.create(path, started)

    def begin(self, started: SessionStarted) -> Journal | None:
        """`Journal.begin` in this directory; None when the directory does not exist yet (then
        `create`, in a thread, makes it). Raises as `Journal.begin`."""
        try:
            return Journal.begin(self.path_for(started.id), started)
        except JournalWriteError as exc:
            if exc.errno == errno_codes.ENOENT and not self.directory.is_dir():
                return None
            raise

    def open(self, session_id: str) -> Journal:
        return Journal.open(self.path_for(session_id))

    def load(self, session_id: str) -> tuple[Journal, JournalContents]:
        return Journal.load(self.path_for(session_id))

    def read(self, session_id: str) -> JournalContents:
        return read_journal(self.path_for(session_id))

    def ids(self) -> list[str]:
        """Ids of the sessions with a file here, sorted (creation order is in each header)."""
        if not self.directory.is_dir():
            return []
        return sorted(
            path.name[: -len(SUFFIX)]
            for path in self.directory.iterdir()
            if path.name.endswith(SUFFIX) and SESSION_ID.fullmatch(path.name[: -len(SUFFIX)])
        )
