"""`anvilctl stats [--since 7d] [--by model|role|session|day] [--data-dir DIR]`: what the
sessions did and cost, summed from their records (the only source: no second ledger).

Per group: sessions, turns, outcomes, model requests (compaction summaries included), tokens
by kind (reported counts summed; requests with a count unreported counted apart), USD (known
prices summed; requests of unknown price counted apart, never as 0), tool calls and errors,
compactions; then a total. A request counts for the model and role the session had when it was
made, on the day its response finished (its record's `at`; a compaction's own time; the
session's start for records written before `at`); a turn's end and a tool call on the day of
the request before them, a session on each day it did something. `--since` keeps what was done
since then. Prices are the user config's, as for each session's `cost` file. A current-schema
file is scanned line by line without building records (`_fast_events`); an older one is read
and upgraded whole; an unreadable one is reported.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final, TypeAlias

import attrs

from anvilctl import add_command, add_data_dir, data_dir
from anvild.llm.registry import Pricing
from anvild.llm.stream import Usage
from anvild.store import SCHEMA_VERSION, StoreError, read_journal
from anvild.store.records import (
    Compacted,
    ModelChanged,
    Record,
    RoleChanged,
    SessionStarted,
    ToolFinished,
    TurnEnded,
    UsageReported,
    decode,
)

GROUPS: Final = ("model", "role", "session", "day")
_TYPE = re.compile(rb'^\{"seq":\d+,"type":"([a-z_]+)"')
_SINCE = re.compile(r"^(\d+)([dhm])$")


@attrs.define
class Row:
    """The sums of one group."""

    sessions: set[str] = attrs.Factory(set)
    turns: int = 0
    outcomes: Counter[str] = attrs.Factory(Counter)
    requests: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    usd: float = 0.0
    unknown_usd: int = 0  # requests whose cost is unknown (no price, or a count unreported)
    unreported: int = 0  # requests with a token count the provider did not report
    tool_calls: int = 0
    tool_errors: int = 0
    compactions: int = 0

    def charge(self, usage: Usage, usd: float | None) -> None:
        self.input += usage.input or 0
        self.output += usage.output or 0
        self.cache_read += usage.cache_read or 0
        self.cache_write += usage.cache_write or 0
        self.unreported += None in (usage.input, usage.output, usage.cache_read, usage.cache_write)
        if usd is None:
            self.unknown_usd += 1
        else:
            self.usd += usd


@attrs.define
class Stats:
    """Rows by group key, and the total."""

    by: str
    rows: dict[str, Row] = attrs.Factory(dict)
    total: Row = attrs.Factory(Row)
    skipped: list[str] = attrs.Factory(list)

    def rows_of(self, key: str) -> tuple[Row, Row]:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = Row()
        return row, self.total


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """`7d`, `24h`, `30m` before `now`, or a date (`2026-12-01`, UTC midnight)."""
    if match := _SINCE.match(text):
        count, unit = int(match[1]), match[2]
        return now - dt.timedelta(**{{"d": "days", "h": "hours", "m": "minutes"}[unit]: count})
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--since {text}: give an age (7d, 24h, 30m) or a date (2026-12-01)"
        ) from None
    return dt.datetime.combine(day, dt.time(), dt.UTC)


Event: TypeAlias = tuple[str, Any]
"""What stats count of one record: (`start`, SessionStarted), (`model` | `role`, name),
(`usage` | `compacted`, (Usage, when or None)), (`turn`, outcome), (`tool`, is_error)."""


_DECODE: Final = json.JSONDecoder().raw_decode


def _object(raw: bytes) -> Any:
    """The JSON value `raw` starts with (what follows it, a newline, is not looked at): about
    half the cost of `json.loads` on bytes, which detects the encoding and checks the rest."""
    return _DECODE(raw.decode())[0]


def _usage(raw: Any) -> Usage:
    return Usage(raw.get("input"), raw.get("output"), raw.get("cache_read"), raw.get("cache_write"))


def _fast_events(path: Path) -> list[Event] | None:
    """The counted records of a current-schema file, each from its line without building the
    record (a usage's `at` right after its counts; a tool result's outcome and a compaction's
    time and usage from the line's end); None when the file is in another schema or a line is
    not in the shape this scan knows: the file is read whole then."""
    events: list[Event] = []
    with path.open("rb") as file:
        for index, line in enumerate(file):
            if not line.endswith(b"\n"):
                break  # a torn last line: the journal ignores it too
            match = _TYPE.match(line)
            if match is None:
                return None
            tag = match[1]
            if index == 0:
                header = json.loads(line)
                if tag != b"session_started" or header.get("schema") != SCHEMA_VERSION:
                    return None
                events.append(("start", decode(header)[1]))
            elif tag == b"tool_finished":
                events.append(("tool", line.endswith(b'"is_error":true}}\n')))
            elif tag == b"usage":  # only its flat usage object: the line may carry a request head
                start = line.find(b'"usage":{', match.end()) + 8
                end = line.find(b"}", start) + 1
                if start < 8 or end < 1:
                    return None
                when = None
                if line.startswith(b',"at":"', end):
                    when = dt.datetime.fromisoformat(
                        line[end + 7 : line.index(b'"', end + 7)].decode()
                    )
                events.append(("usage", (_usage(_object(line[start:end])), when)))
            elif tag == b"compacted":
                at = line.rfind(b',"usage":{')
                focus = line.rfind(b',"focus":"', 0, at)  # `at` is written right before it
                stamp = line.rfind(b',"at":"', 0, focus)
                if min(at, focus, stamp) < 0 or not line.endswith(b"}}\n"):
                    return None
                when = dt.datetime.fromisoformat(line[stamp + 7 : focus - 1].decode())
                events.append(("compacted", (_usage(_object(line[at + 9 : -2])), when)))
            elif tag in (b"model_changed", b"role_changed", b"turn_ended"):
                item = _object(line)
                kind = {b"model_changed": "model", b"role_changed": "role"}.get(tag, "turn")
                events.append((kind, item["outcome" if kind == "turn" else kind]))
    return events or None


def _events(records: Iterable[Record]) -> list[Event]:
    events: list[Event] = []
    for record in records:
        match record:
            case SessionStarted():
                events.append(("start", record))
            case ModelChanged(model=model):
                events.append(("model", model))
            case RoleChanged(role=role):
                events.append(("role", role))
            case UsageReported(usage=usage, at=at):
                events.append(("usage", (usage, at)))
            case Compacted(usage=usage, at=at):
                events.append(("compacted", (usage, at)))
            case TurnEnded(outcome=outcome):
                events.append(("turn", outcome))
            case ToolFinished(result=result):
                events.append(("tool", result.is_error))
    return events


def events_of(path: Path) -> list[Event]:
    """What stats count of a session file (`StoreError`, `ValueError` if it is unreadable)."""
    fast = _fast_events(path)
    return fast if fast is not None else _events(read_journal(path).records)


def _keys(by: str, session: str, model: str, role: str, day: str) -> str:
    return {"model": model, "role": role, "session": session, "day": day}[by]


def _day(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).date().isoformat()


def add_session(
    stats: Stats,
    events: Iterable[Event],
    pricing_of: Callable[[str], Pricing | None],
    since: dt.datetime | None = None,
) -> None:
    """Fold one session's events into `stats`: those since `since` (all when None), each at
    its request's time (module docstring)."""
    session = model = role = day = ""
    by_day = stats.by == "day"
    started = when = dt.datetime.min.replace(tzinfo=dt.UTC)
    pricing: Pricing | None = None
    prices: dict[str, Pricing | None] = {}
    for kind, value in events:
        if kind == "start":
            session, model, role = value.id, value.model, value.role
            started = when = value.created_at
            day = _day(when)
            pricing = (
                prices[model] if model in prices else prices.setdefault(model, pricing_of(model))
            )
            if since is None or when >= since:
                for sums in stats.rows_of(_keys(stats.by, session, model, role, day)):
                    sums.sessions.add(session)  # counted even before its first request
            continue
        if kind == "model":
            model = value
            pricing = (
                prices[model] if model in prices else prices.setdefault(model, pricing_of(model))
            )
            continue
        if kind == "role":
            role = value
            continue
        if kind in ("usage", "compacted"):
            value, stamp = value[0], value[1] or started  # no `at`: an older record
            if stamp != when:
                when = stamp
                day = _day(stamp) if by_day else ""
        if since is not None and when < since:
            continue
        for sums in stats.rows_of(_keys(stats.by, session, model, role, day)):
            sums.sessions.add(session)
            if kind in ("usage", "compacted"):
                sums.requests += 1  # a compaction's summary was a model request too
                sums.compactions += kind == "compacted"
                sums.charge(value, None if pricing is None else pricing.cost(value))
            elif kind == "turn":
                sums.turns += 1
                sums.outcomes[value] += 1
            else:
                sums.tool_calls += 1
                sums.tool_errors += value


def session_files(data_dir: Path, since: dt.datetime | None) -> Iterator[Path]:
    """The session record files; one last changed before `since` cannot hold anything done
    since and is not opened."""
    directory = data_dir / "sessions"
    if not directory.is_dir():
        return
    cutoff = None if since is None else since.timestamp()
    for path in sorted(directory.glob("*.jsonl")):
        if cutoff is not None and path.stat().st_mtime < cutoff:
            continue
        yield path


def summarise(
    data_dir: Path,
    by: str,
    pricing_of: Callable[[str], Pricing | None],
    since: dt.datetime | None = None,
) -> Stats:
    stats = Stats(by)
    for path in session_files(data_dir, since):
        try:
            events = events_of(path)
        except (StoreError, ValueError, KeyError, OSError) as exc:
            stats.skipped.append(f"{path.name}: {exc}")
            continue
        if events and events[0][0] == "start":
            add_session(stats, events, pricing_of, since)
    return stats


HEADER: Final = (
    "sessions turns requests input output cache_read cache_write unreported usd unknown_usd "
    "tool_calls tool_errors compactions outcomes"
)


def _line(key: str, row: Row) -> str:
    outcomes = ",".join(f"{k}={v}" for k, v in sorted(row.outcomes.items())) or "-"
    return (
        f"{key}\t{len(row.sessions)}\t{row.turns}\t{row.requests}\t{row.input}\t{row.output}\t"
        f"{row.cache_read}\t{row.cache_write}\t{row.unreported}\t{row.usd:.6f}\t{row.unknown_usd}\t"
        f"{row.tool_calls}\t{row.tool_errors}\t{row.compactions}\t{outcomes}"
    )


def render(stats: Stats) -> str:
    """Tab-separated: a header, one line per group (sorted), then `total`."""
    lines = ["\t".join([stats.by, *HEADER.split()])]
    lines += [_line(key, stats.rows[key]) for key in sorted(stats.rows)]
    lines.append(_line("total", stats.total))
    return "\n".join(lines) + "\n"


def config_pricing(user_file: Path | None = None) -> Callable[[str], Pricing | None]:
    """Prices by model alias from the user config (a name without an alias has none)."""
    from anvild.config import load

    models = load(user_file=user_file, project=False).models
    return lambda name: models[name].pricing if name in models else None


def add_subcommand(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        sub,
        "stats",
        __doc__,
        help="tokens, cost, turns, outcomes and tool errors from the session records",
    )
    parser.add_argument("--since", metavar="AGE", help="7d, 24h, 30m or a date (2026-12-01)")
    parser.add_argument("--by", choices=GROUPS, default="model")
    add_data_dir(parser)


def run(args: argparse.Namespace) -> int:
    from anvild.llm.errors import ConfigError

    try:
        since = None if args.since is None else parse_since(args.since, dt.datetime.now(dt.UTC))
        pricing_of = config_pricing()
    except (ValueError, ConfigError) as exc:
        print(f"anvilctl stats: {exc}", file=sys.stderr)
        return 2
    stats = summarise(data_dir(args.data_dir), args.by, pricing_of, since)
    for skipped in stats.skipped:
        print(f"anvilctl stats: skipped {skipped}", file=sys.stderr)
    sys.stdout.write(render(stats))
    return 0


__all__ = [
    "GROUPS",
    "Row",
    "Stats",
    "add_session",
    "add_subcommand",
    "config_pricing",
    "events_of",
    "parse_since",
    "render",
    "run",
    "summarise",
]
