"""Generated session records for `anvilctl stats` (its test and bench/stats.py): valid
journals with turns, tool calls (some failing), usage reports, model and role changes and
compactions, written through `SessionStore`, so the reducer accepts every file. Requests are
minutes apart and turns up to half a day apart, so many sessions span hours and days."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

from anvild.llm.stream import Usage
from anvild.llm.types import Message, Role, Text, ToolCall, ToolResult
from anvild.store import SessionStore
from anvild.store.records import (
    Compacted,
    MessageAppended,
    ModelChanged,
    RoleChanged,
    SessionStarted,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UsageReported,
)

MODELS = ("sonnet", "haiku", "local")  # `local` has no pricing in the tests' config
ROLES = ("developer", "reviewer", "tester")
OUTCOMES = ("done", "done", "done", "error", "max_steps", "budget_exceeded")
START = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def _usage(rng: random.Random, unreported_share: float = 0.0) -> Usage:
    unreported = rng.random() < unreported_share  # some providers say nothing of their cache
    return Usage(
        input=rng.randint(100, 5000),
        output=rng.randint(10, 2000),
        cache_read=None if unreported else rng.randint(0, 20000),
        cache_write=None if unreported else rng.randint(0, 3000),
    )


def write_sessions(
    data_dir: Path,
    count: int,
    *,
    seed: int = 0,
    turns: int = 3,
    text_bytes: int = 200,
    unreported: float = 0.0,
    undated: float = 0.0,
) -> list[str]:
    """`count` sessions under `data_dir/sessions`, started over 30 days; their ids.
    `unreported`: the share of usage reports without cache counts; `undated`: the share of
    sessions whose usage records carry no `at` (as written before it existed)."""
    rng = random.Random(seed)
    clock = random.Random(seed + 1)  # the times: `rng` draws what it drew before they existed
    store = SessionStore(data_dir / "sessions")
    ids = []
    filler = "x" * text_bytes
    for index in range(count):
        session_id = f"s{index:06d}"
        started = SessionStarted(
            id=session_id,
            alias=None,
            role=rng.choice(ROLES),
            model=rng.choice(MODELS),
            cwd="/work",
            sandbox="workspace-write",
            created_at=START + dt.timedelta(minutes=rng.randint(0, 30 * 24 * 60)),
        )
        journal = store.create(started)
        now, dated = started.created_at, clock.random() >= undated
        for turn in range(rng.randint(1, turns)):
            now += dt.timedelta(minutes=clock.randint(0, 12 * 60))
            if rng.random() < 0.1:
                journal.append(ModelChanged(rng.choice(MODELS)), sync=False)
            if rng.random() < 0.05:
                journal.append(RoleChanged(rng.choice(ROLES)), sync=False)
            journal.append(MessageAppended(Message(Role.USER, (Text(filler),))), sync=False)
            for step in range(rng.randint(0, 4)):
                call = f"t{turn}c{step}"
                now += dt.timedelta(seconds=clock.randint(5, 900))  # the response finished
                reported = UsageReported(_usage(rng, unreported), at=now if dated else None)
                journal.append(reported, sync=False)
                asked = Message(Role.ASSISTANT, (ToolCall(call, "read_file", {"path": "a"}),))
                journal.append(MessageAppended(asked), sync=False)
                journal.append(ToolStarted(call, "read_file"), sync=False)
                result = ToolResult(call, filler, is_error=rng.random() < 0.2)
                journal.append(ToolFinished(result), sync=False)
                journal.append(MessageAppended(Message(Role.USER, (result,))), sync=False)
            now += dt.timedelta(seconds=clock.randint(5, 900))
            reported = UsageReported(_usage(rng, unreported), at=now if dated else None)
            journal.append(reported, sync=False)
            journal.append(MessageAppended(Message(Role.ASSISTANT, (Text(filler),))), sync=False)
            if rng.random() < 0.1:
                summary = (
                    Message(Role.USER, (Text("summary"),)),
                    Message(Role.ASSISTANT, (Text("noted"),)),
                )
                compacted = Compacted(
                    summary, "summary", 2, 1000, 100, "haiku", "auto", now, usage=_usage(rng)
                )
                journal.append(compacted, sync=False)
            journal.append(TurnEnded(rng.choice(OUTCOMES)), sync=False)
        journal.close()
        ids.append(session_id)
    return ids
