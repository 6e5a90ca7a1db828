"""The store's errors: one root, `StoreError`.

    StoreError
     ├── RecordError              a record does not apply to the state, or a line is no record
     └── JournalError             a session file (`path`) cannot be read or written
          ├── CorruptJournalError   a bad interior line, a seq gap, no header: file and line
          ├── SchemaVersionError    a newer or unknown schema (refused, the file untouched)
          └── JournalWriteError     an append or sync failed; `intact`: cut back to a record

`JournalWriteError` puts that session in `error`, never stops the daemon. A corrupt or newer
file at start leaves that one session out of the tree (and in the log), untouched on disk.
"""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Root of every error the store raises."""


class RecordError(StoreError):
    """A record that does not fit: it does not apply to the state, or is not a valid record."""


class JournalError(StoreError):
    """A session file could not be read or written."""

    def __init__(self, path: Path, message: str, *, line: int | None = None) -> None:
        self.path = path
        where = str(path) if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {message}")


class CorruptJournalError(JournalError):
    """A session file that cannot be loaded; `line` is 1-based (None: the file as a whole)."""

    def __init__(self, path: Path, line: int | None, message: str) -> None:
        self.line = line
        super().__init__(path, message, line=line)


class SchemaVersionError(JournalError):
    """A file whose record schema this anvild cannot read. It is never modified."""

    def __init__(self, path: Path, schema: int, message: str) -> None:
        self.schema = schema
        super().__init__(path, message)


class JournalWriteError(JournalError):
    """Appending (or syncing) a record failed. The record is not in the session's state.

    `intact` is True when the file was cut back to its last complete record (it loads as
    before the attempt); then the journal takes further appends (they may fail again). When the
    cut failed too, the journal refuses every further append, so the partial line stays the
    file's last and is recovered as a torn tail when the session is next loaded.
    """

    def __init__(self, path: Path, message: str, *, errno: int | None, intact: bool) -> None:
        self.errno = errno
        self.intact = intact
        super().__init__(path, message)
