"""Builders and hypothesis strategies for session records.

`valid_records()` draws a random *valid* record sequence: each record is chosen among those the
state built so far accepts (the reducer's rules), and the transcript it builds always passes
`validate_transcript(..., allow_pending_tail=True)`, as a real session's does.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import strategies as st

from anvild.llm import stream
from anvild.llm.types import ContentBlock, Message, ProviderMeta, Reasoning, Role, Text, ToolCall
from anvild.llm.types import ToolResult as Result
from anvild.store import (
    AliasChanged,
    ApprovalAnswered,
    ApprovalRequested,
    ContextFileChanged,
    ContextReplaced,
    FileSeen,
    MessageAppended,
    MessageExtended,
    ModelChanged,
    Note,
    PromptDropped,
    PromptQueued,
    PromptTaken,
    Record,
    ReplaceReason,
    RoleChanged,
    SessionEnded,
    SessionStarted,
    SessionState,
    SessionStatus,
    StateChanged,
    TextStreamed,
    TodoItem,
    TodosChanged,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UsageReported,
    Verdict,
    apply,
)

CREATED = dt.datetime(2026, 10, 10, 12, 0, tzinfo=dt.UTC)

# A schema 0 file (the course prototype's shape, see anvild.store.records), one dict per line.
V0_LINES = [
    {"type": "meta", "id": "old1", "model": "sonnet", "cwd": "/src", "created_at": 1760097600},
    {"type": "message_appended", "message": {"role": "user", "content": [
        {"type": "text", "text": "list files"}]}},
    {"type": "message_appended", "message": {"role": "assistant", "content": [
        {"type": "tool_call", "id": "c1", "name": "bash", "arguments": {"command": "ls"}}]}},
    {"type": "tool_started", "call_id": "c1", "name": "bash"},
    {"type": "tool_finished", "call_id": "c1", "content": "a.txt", "is_error": False},
    {"type": "message_appended", "message": {"role": "user", "content": [
        {"type": "tool_result", "call_id": "c1", "content": "a.txt", "is_error": False}]}},
    {"type": "message_appended", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "One file: a.txt."}]}},
    {"type": "context_replaced", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summary: the directory holds a.txt."}]}]},
]  # fmt: skip


def started(session_id: str = "s1", **fields: Any) -> SessionStarted:
    values: dict[str, Any] = {
        "alias": None,
        "role": "developer",
        "model": "sonnet",
        "cwd": "/src/app",
        "sandbox": "workspace-write",
        "created_at": CREATED,
    } | fields
    return SessionStarted(id=session_id, **values)


def user(*texts: str) -> Message:
    return Message(Role.USER, tuple(Text(t) for t in texts))


def assistant(text: str = "", *calls: ToolCall) -> Message:
    blocks: list[ContentBlock] = [Text(text)] if text else []
    return Message(Role.ASSISTANT, (*blocks, *calls))


def results(*pairs: tuple[str, str]) -> Message:
    return Message(Role.USER, tuple(Result(call_id, content) for call_id, content in pairs))


texts = st.text(max_size=12)  # any code point but surrogates: newlines, U+2028, NUL included
names = st.sampled_from(["bash", "read_file", "write_file", "edit_file", "grep"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
counts = st.none() | st.integers(0, 10**7)
usages = st.builds(stream.Usage, counts, counts, counts, counts)
utc_times = st.datetimes(timezones=st.just(dt.UTC))
todos = st.lists(
    st.builds(TodoItem, texts, st.sampled_from(["pending", "in_progress", "completed"])),
    max_size=3,
)
session_started = st.builds(
    SessionStarted,
    id=st.from_regex(r"[a-z0-9][a-z0-9_-]{0,8}", fullmatch=True),
    alias=st.none() | st.from_regex(r"[a-z]{1,6}", fullmatch=True),
    role=st.sampled_from(["developer", "reviewer", "tester"]),
    model=st.sampled_from(["sonnet", "gpt", "local"]),
    cwd=texts,
    sandbox=st.sampled_from(["read-only", "workspace-write"]),
    created_at=st.datetimes(timezones=st.just(dt.UTC)),
    ephemeral=st.booleans(),
    context=texts,
)


@st.composite
def text_blocks(draw: st.DrawFn) -> tuple[ContentBlock, ...]:
    return tuple(Text(t) for t in draw(st.lists(texts, min_size=1, max_size=2)))


@st.composite
def assistant_message(draw: st.DrawFn, ids: Iterator[int]) -> Message:
    blocks: list[ContentBlock] = []
    if draw(st.booleans()):
        meta = draw(st.none() | st.builds(ProviderMeta, st.just("gemini"), json_values))
        blocks.append(Reasoning(draw(texts), meta))
    blocks.extend(draw(text_blocks()))
    for _ in range(draw(st.integers(0, 2))):
        blocks.append(ToolCall(f"call_{next(ids)}", draw(names), draw(json_values)))
    return Message(Role.ASSISTANT, blocks)


@st.composite
def user_message(draw: st.DrawFn, state: SessionState) -> Message:
    answers: list[ContentBlock] = []
    for call in state.pending_calls:
        run = state.run(call.id)
        if run is not None and run.result is not None and draw(st.booleans()):
            answers.append(run.result)
        else:
            answers.append(Result(call.id, draw(texts), draw(st.booleans())))
    extra = draw(text_blocks()) if not answers or draw(st.booleans()) else ()
    return Message(Role.USER, (*answers, *extra))


@st.composite
def replacement(draw: st.DrawFn, ids: Iterator[int]) -> ContextReplaced:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message(Role.USER, draw(text_blocks())))
        if draw(st.booleans()):
            answer = draw(assistant_message(ids))
            messages.append(Message(Role.ASSISTANT, answer.content[:1]))  # no calls: no tail
    return ContextReplaced(messages, draw(st.sampled_from(list(ReplaceReason))))


def _choices(state: SessionState, ids: Iterator[int]) -> dict[str, Callable[[st.DrawFn], Record]]:
    """Strategies for every record `state` accepts, by name."""
    choices: dict[str, Callable[[st.DrawFn], Record]] = {
        "model": lambda d: ModelChanged(d(st.sampled_from(["sonnet", "gpt", "local"]))),
        "status": lambda d: StateChanged(d(st.sampled_from(list(SessionStatus))), d(texts)),
        "todos": lambda d: TodosChanged(d(todos)),
        "usage": lambda d: UsageReported(d(usages), at=d(st.none() | utc_times)),
        "turn": lambda d: TurnEnded(
            d(st.sampled_from(["done", "cancelled", "error"])), d(texts), d(st.booleans())
        ),
        "streamed": lambda d: TextStreamed(d(st.text(min_size=1, max_size=20))),
        "context": lambda d: ContextFileChanged(d(texts)),
        "role": lambda d: RoleChanged(d(st.sampled_from(["developer", "reviewer"]))),
        "alias": lambda d: AliasChanged(d(st.none() | st.just("r1"))),
        "note": lambda d: Note(d(texts)),
        "seen": lambda d: FileSeen(
            d(st.sampled_from(["/src/app/a.py", "/src/app/b.txt"])),
            d(st.sampled_from(["ab", "cd"])),
        ),
        "queue": lambda d: PromptQueued(f"p{next(ids)}", d(texts)),
    }
    if state.approval is None:
        last = state.messages[-1] if state.messages else None
        if last is None or last.role is Role.ASSISTANT:
            choices["append"] = lambda d: MessageAppended(d(user_message(state)))
        else:
            choices["append"] = lambda d: MessageAppended(d(assistant_message(ids)))
        if not state.tools:
            choices["replace"] = lambda d: d(replacement(ids))
            if last is not None:
                choices["extend"] = lambda d: MessageExtended(d(text_blocks()))
        waiting = [call for call in state.pending_calls if state.run(call.id) is None]
        if waiting:
            calls = st.sampled_from(waiting)
            choices["start"] = lambda d: ToolStarted(*_id_name(d(calls)))
            choices["ask"] = lambda d: _ask(d(calls), d(texts))
    else:
        approval = state.approval
        verdicts = st.sampled_from(list(Verdict))
        choices["answer"] = lambda d: ApprovalAnswered(approval.call_id, d(verdicts), d(texts))
    if state.approval is None and not state.pending_calls:
        choices["end"] = lambda d: SessionEnded(d(texts))
    running = [run for run in state.tools if run.result is None]
    if running:
        runs = st.sampled_from(running)
        choices["finish"] = lambda d: _finish(d(runs).call_id, d(texts), d(st.booleans()))
    if state.queue:
        head = state.queue[0].prompt_id
        ids_queued = [p.prompt_id for p in state.queue]
        choices["take"] = lambda _: PromptTaken(head)
        choices["drop"] = lambda d: PromptDropped(d(st.sets(st.sampled_from(ids_queued))))
    return choices


def _id_name(call: ToolCall) -> tuple[str, str]:
    return call.id, call.name


def _ask(call: ToolCall, reason: str) -> ApprovalRequested:
    return ApprovalRequested(call.id, call.name, call.arguments, reason)


def _finish(call_id: str, content: str, is_error: bool) -> ToolFinished:
    return ToolFinished(Result(call_id, content, is_error))


# Transcript and tool records carry the interesting rules: draw them more often.
WEIGHTS = {"append": 6, "start": 6, "finish": 5, "ask": 2, "answer": 3, "extend": 2}
PRIORITY = ["start", "finish", "answer", "append", "ask", "extend", "replace", "take", "drop"]
PRIORITY += ["queue", "status", "usage", "todos", "turn", "note", "model", "context", "role"]
PRIORITY += ["alias", "seen", "streamed", "end"]


@st.composite
def valid_records(draw: st.DrawFn, max_size: int = 30) -> list[Record]:
    """A SessionStarted, then up to `max_size` records each valid for the state before it."""
    ids = itertools.count(1)
    first = draw(session_started)
    records: list[Record] = [first]
    state = apply(None, first)
    for _ in range(draw(st.integers(0, max_size))):
        choices = _choices(state, ids)
        # Hypothesis favours early elements: the interesting records come first.
        ordered = sorted(choices, key=lambda name: (PRIORITY.index(name), name))
        weighted = [name for name in ordered for _ in range(WEIGHTS.get(name, 1))]
        record = choices[draw(st.sampled_from(weighted))](draw)
        state = apply(state, record)
        records.append(record)
        if state.ended is not None:
            break
    return records


def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the inode of every file or directory fsynced (in any thread), in order."""
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced
