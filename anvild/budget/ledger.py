"""The durable record of spend per UTC day: one JSON-lines file per day in a directory.

`Ledger.add` appends one line per settled model request (its session, role, convoys, USD or
null when unknown, tokens) with a single `write` on an `O_APPEND` file, so a crash leaves at
most one torn last line, which `Ledger.read` skips. Lines are not fsynced: the spend survives a
daemon restart or crash, not a power loss of its last moments. Old days' files are kept (they
are small) until someone removes them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import attrs


@attrs.frozen
class Entry:
    """One settled request: who spent, USD (None: unknown) and tokens."""

    session: str
    role: str
    convoys: tuple[str, ...]
    usd: float | None
    tokens: int


def day_of(now: dt.datetime) -> dt.date:
    return now.astimezone(dt.UTC).date()


class Ledger:
    """Days of spend under `directory` (created on the first write)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def file(self, day: dt.date) -> Path:
        return self.directory / f"{day.isoformat()}.jsonl"

    def add(self, day: dt.date, entry: Entry) -> None:
        line = json.dumps(
            {
                "session": entry.session,
                "role": entry.role,
                "convoys": list(entry.convoys),
                "usd": entry.usd,
                "tokens": entry.tokens,
            },
            separators=(",", ":"),
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.file(day), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def read(self, day: dt.date) -> list[Entry]:
        """The day's entries; a line that does not parse (a torn last write) is skipped."""
        try:
            data = self.file(day).read_bytes()
        except FileNotFoundError:
            return []
        entries = []
        for raw in data.splitlines():
            try:
                item = json.loads(raw)
                usd = item["usd"]
                entries.append(
                    Entry(
                        str(item["session"]),
                        str(item["role"]),
                        tuple(str(c) for c in item["convoys"]),
                        None if usd is None else float(usd),
                        int(item["tokens"]),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue
        return entries


__all__ = ["Entry", "Ledger", "day_of"]
