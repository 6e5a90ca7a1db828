"""The one reducer: `apply(state, record) -> state`, used live and when loading.

The journal calls `apply` before publishing a state and the loader folds it over the file
(`replay`), so `replay(records) == live state` after every mutation, by construction. `apply` is
pure and cheap; a record that does not fit raises `RecordError` and is never written. Rules:
`SessionStarted` first and once, nothing after `SessionEnded` (which needs no calls in flight and
no pending approval); roles alternate, the user first; no transcript change while an approval is
pending; each call started and finished once; one approval pending at a time, a result approval
never `always`; `PermissionsRemembered` is never undone; the queue is FIFO; `Compacted` replaces
the transcript as `ContextReplaced` does, `Rewound` cuts it back; `TextStreamed` is display only,
never the transcript. `message_records(old, new)` gives the records that turn one transcript
into the next.
The full rule list: docs/decisions.md, "Module notes" (anvild.store.reducer).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from anvild.llm import stream
from anvild.llm.types import Message, Role
from anvild.store.errors import RecordError
from anvild.store.records import (
    SCHEMA_VERSION,
    AliasChanged,
    ApprovalAnswered,
    ApprovalRequested,
    Compacted,
    ContextFileChanged,
    ContextReplaced,
    FileSeen,
    MessageAppended,
    MessageExtended,
    ModelChanged,
    Note,
    PermissionsRemembered,
    PromptDropped,
    PromptQueued,
    PromptTaken,
    Record,
    ReplaceReason,
    ResultApprovalAnswered,
    ResultApprovalRequested,
    Rewound,
    RoleChanged,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    StateChanged,
    TextStreamed,
    TodosChanged,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    UsageReported,
    Verdict,
)
from anvild.store.state import (
    RECENT_TURNS,
    ZERO_USAGE,
    CompactionInfo,
    DecidedResult,
    PendingApproval,
    PendingResult,
    QueuedPrompt,
    Remembered,
    SessionState,
    ToolRun,
    TurnUsage,
    UsageBaseline,
)


def replay(records: Iterable[Record]) -> SessionState:
    """The state a sequence of records builds (the first must be `SessionStarted`)."""
    state: SessionState | None = None
    for record in records:
        state = apply(state, record)
    if state is None:
        raise RecordError("no records: a session starts with SessionStarted")
    return state


def apply(state: SessionState | None, record: Record) -> SessionState:
    """The state after `record`. Pure; raises `RecordError` if the record does not fit."""
    if state is None:
        if not isinstance(record, SessionStarted):
            raise RecordError(f"a session starts with SessionStarted, not {record.TAG}")
        return _started(record)
    if state.ended is not None:
        raise RecordError(f"{record.TAG} after the session ended")
    match record:
        case SessionStarted():
            raise RecordError("a second SessionStarted")
        case MessageAppended(message=message):
            return _appended(state, message)
        case MessageExtended(blocks=blocks):
            _no_approval(state, record)
            if not state.messages:
                raise RecordError("message_extended with no message to extend")
            if not blocks:
                raise RecordError("message_extended without blocks")
            if state.tools:
                raise RecordError("message_extended while tool calls are in flight")
            last = state.messages[-1]
            extended = Message(last.role, (*last.content, *blocks))
            return attrs.evolve(state, messages=(*state.messages[:-1], extended))
        case ContextReplaced(messages=messages):
            _no_approval(state, record)
            if state.tools:
                raise RecordError("context_replaced while tool calls are in flight")
            return attrs.evolve(state, messages=messages, baseline=None, streamed="")
        case Compacted(messages=messages, usage=usage):
            _no_approval(state, record)
            if state.tools:
                raise RecordError("compacted while tool calls are in flight")
            info = CompactionInfo(
                record.at, record.before, record.after, record.trigger, record.model, record.dropped
            )
            after = UsageBaseline(stream.Usage(record.after, 0, 0, 0), len(messages))
            return attrs.evolve(
                state,
                messages=messages,
                baseline=after,
                streamed="",
                usage=state.usage.plus(usage),
                compactions=(*state.compactions, info),
            )
        case Rewound(messages=messages):
            _no_approval(state, record)
            if state.tools:
                raise RecordError("rewound while tool calls are in flight")
            if not _is_cut(messages, state.messages):
                raise RecordError("rewound to a transcript that is not a cut of the current one")
            return attrs.evolve(state, messages=messages, baseline=None, streamed="")
        case ModelChanged(model=model):
            return attrs.evolve(state, model=model, baseline=None)
        case StateChanged(status=status, detail=detail):
            return attrs.evolve(state, status=status, status_detail=detail)
        case TodosChanged(todos=todos):
            return attrs.evolve(state, todos=todos)
        case ToolStarted(call_id=call_id, name=name):
            _pending_call(state, call_id, name, record)
            if state.run(call_id) is not None:
                raise RecordError(f"tool call {call_id!r} started twice")
            return attrs.evolve(state, tools=(*state.tools, ToolRun(call_id, name)))
        case ToolFinished(result=result):
            run = state.run(result.call_id)
            if run is None:
                raise RecordError(f"tool_finished for {result.call_id!r}, which is not running")
            if run.result is not None:
                raise RecordError(f"tool call {result.call_id!r} finished twice")
            done = attrs.evolve(run, result=result)
            return attrs.evolve(state, tools=tuple(done if r is run else r for r in state.tools))
        case UsageReported(usage=usage):
            baseline = UsageBaseline(usage, len(state.messages))
            return attrs.evolve(
                state,
                usage=state.usage.plus(usage),
                baseline=baseline,
                turn_usage=state.turn_usage.plus(usage),
            )
        case TurnEnded():
            turns = (*state.turns, TurnUsage(state.turn_count, state.turn_usage))
            return attrs.evolve(state, last_turn=record, turns=turns[-RECENT_TURNS:])
        case ContextFileChanged(text=text):
            return attrs.evolve(state, context=text)
        case RoleChanged(role=role):
            return attrs.evolve(state, role=role)
        case AliasChanged(alias=alias):
            return attrs.evolve(state, alias=alias)
        case PromptQueued(prompt_id=prompt_id, text=text):
            if any(p.prompt_id == prompt_id for p in state.queue):
                raise RecordError(f"prompt {prompt_id!r} is already queued")
            return attrs.evolve(state, queue=(*state.queue, QueuedPrompt(prompt_id, text)))
        case PromptTaken(prompt_id=prompt_id):
            if not state.queue or state.queue[0].prompt_id != prompt_id:
                raise RecordError(f"prompt {prompt_id!r} is not at the head of the queue")
            return attrs.evolve(
                state,
                queue=state.queue[1:],
                streamed="",
                turn_count=state.turn_count + 1,
                turn_usage=ZERO_USAGE,
            )
        case PromptDropped(prompt_ids=ids):
            queued = {p.prompt_id for p in state.queue}
            if missing := [i for i in ids if i not in queued]:
                raise RecordError(f"prompt_dropped names prompts not queued: {missing}")
            dropped = set(ids)
            return attrs.evolve(
                state, queue=tuple(p for p in state.queue if p.prompt_id not in dropped)
            )
        case ApprovalRequested(call_id=call_id, tool=tool, arguments=arguments, reason=reason):
            if state.approval is not None:
                raise RecordError(f"approval for {state.approval.call_id!r} is still pending")
            _pending_call(state, call_id, tool, record)
            if state.run(call_id) is not None:
                raise RecordError(f"approval requested for {call_id!r}, which already started")
            pending = PendingApproval(call_id, tool, arguments, reason)
            return attrs.evolve(state, approval=pending)
        case ApprovalAnswered(call_id=call_id, verdict=verdict):
            if state.approval is None or state.approval.call_id != call_id:
                raise RecordError(f"approval_answered for {call_id!r}, which is not pending")
            always = state.always_allowed
            if verdict is Verdict.ALWAYS:
                always = tuple(sorted({*always, state.approval.tool}))
            return attrs.evolve(state, approval=None, always_allowed=always)
        case PermissionsRemembered(
            rules=rules,
            read_roots=reads,
            write_roots=writes,
            network=network,
            full_access=full_access,
        ):
            added = Remembered(rules, reads, writes, network, full_access)
            return attrs.evolve(state, remembered=state.remembered.plus(added))
        case ResultApprovalRequested(
            summary=summary, asked_by=asked_by, ref=ref, approver=approver
        ):
            if state.approval is not None or state.result_approval is not None:
                raise RecordError("result_approval_requested while another approval is pending")
            others = tuple(d for d in state.result_decisions if d.asked_by != asked_by)
            return attrs.evolve(
                state,
                result_approval=PendingResult(summary, asked_by, ref, approver),
                result_decisions=others,
            )
        case ResultApprovalAnswered(verdict=verdict, reason=reason, by=by):
            gate = state.result_approval
            if gate is None:
                raise RecordError("result_approval_answered with no result approval pending")
            if verdict is Verdict.ALWAYS:
                raise RecordError("a result approval is never answered `always`")
            decided = DecidedResult(gate.asked_by, gate.ref, verdict.value, reason, by)
            others = tuple(d for d in state.result_decisions if d.asked_by != gate.asked_by)
            return attrs.evolve(state, result_approval=None, result_decisions=(*others, decided))
        case Note(text=text):
            return attrs.evolve(state, notes=(*state.notes, text))
        case FileSeen(path=path, sha256=sha256):
            seen = state.seen_files()
            seen[path] = sha256
            return attrs.evolve(state, files_seen=tuple(sorted(seen.items())))
        case TextStreamed(text=text):
            return attrs.evolve(state, streamed=state.streamed + text)
        case SessionEnded(reason=reason):
            _no_approval(state, record)
            if state.pending_calls:
                raise RecordError("session_ended with unanswered tool calls: end the turn first")
            return attrs.evolve(state, ended=reason, status=SessionStatus.EXITED)
    raise RecordError(f"unknown record {record!r}")  # pragma: no cover - the match is exhaustive


def _started(record: SessionStarted) -> SessionState:
    if record.schema != SCHEMA_VERSION:
        raise RecordError(
            f"session_started has schema {record.schema}; records are applied in schema "
            f"{SCHEMA_VERSION} (the loader upgrades older files)"
        )
    return SessionState(
        id=record.id,
        alias=record.alias,
        role=record.role,
        model=record.model,
        cwd=record.cwd,
        sandbox=record.sandbox,
        created_at=record.created_at,
        ephemeral=record.ephemeral,
        context=record.context,
        max_steps=record.max_steps,
        permission=record.permission,
        token_budget=record.token_budget,
        headless=record.headless,
        approver=record.approver,
        parent=record.parent,
    )


def _appended(state: SessionState, message: Message) -> SessionState:
    _no_approval(state, MessageAppended(message))
    if not message.content:
        raise RecordError("message_appended with an empty message")
    if not state.messages and message.role is not Role.USER:
        raise RecordError("the first message must be from the user")
    if state.messages and state.messages[-1].role is message.role:
        raise RecordError(
            f"two {message.role.value} messages in a row: extend the last one instead"
        )
    first_prompt = state.first_prompt
    if first_prompt is None and message.role is Role.USER:
        first_prompt = message.text().strip() or None
    tools = state.tools if message.role is Role.ASSISTANT else ()
    # the step's streamed text is in the transcript now, as the committed answer
    streamed = "" if message.role is Role.ASSISTANT else state.streamed
    return attrs.evolve(
        state,
        messages=(*state.messages, message),
        tools=tools,
        first_prompt=first_prompt,
        streamed=streamed,
    )


def _is_cut(new: tuple[Message, ...], old: tuple[Message, ...]) -> bool:
    """Whether `new` is `old` cut back: a prefix, its last message maybe with fewer blocks."""
    if not new:
        return True
    if len(new) > len(old) or new[:-1] != old[: len(new) - 1]:
        return False
    last, was = new[-1], old[len(new) - 1]
    return last.role is was.role and last.content == was.content[: len(last.content)]


def _no_approval(state: SessionState, record: Record) -> None:
    if state.approval is not None:
        raise RecordError(
            f"{record.TAG} while approval for {state.approval.call_id!r} is pending: "
            "answer it (approval_answered) first"
        )


def _pending_call(state: SessionState, call_id: str, name: str, record: Record) -> None:
    for call in state.pending_calls:
        if call.id == call_id:
            if call.name != name:
                raise RecordError(f"{record.TAG} names {name!r}, but {call_id!r} is {call.name!r}")
            return
    raise RecordError(f"{record.TAG} for {call_id!r}, which is not a call of the last message")


def message_records(
    old: Sequence[Message],
    new: Sequence[Message],
    *,
    replace_reason: ReplaceReason | None = None,
) -> tuple[Record, ...]:
    """The records that turn transcript `old` into `new`.

    `new` extends `old`: one `MessageAppended` per new message. `new` adds blocks to `old`'s last
    message (the agent merged a prompt into a trailing user message), then maybe more messages:
    a `MessageExtended`, then appends. Anything else is a replacement, allowed only when the
    caller names its `replace_reason` (clear, restart, compaction, handoff); otherwise
    `RecordError`, because an unexplained rewrite of history is a bug in the caller.
    """
    old, new = tuple(old), tuple(new)
    if new[: len(old)] == old:
        return tuple(MessageAppended(message) for message in new[len(old) :])
    if old and len(new) >= len(old) and new[: len(old) - 1] == old[:-1]:
        before, after = old[-1], new[len(old) - 1]
        size = len(before.content)
        if (
            after.role is before.role
            and len(after.content) > size
            and after.content[:size] == before.content
        ):
            extended = MessageExtended(after.content[size:])
            return (extended, *(MessageAppended(m) for m in new[len(old) :]))
    if replace_reason is None:
        raise RecordError(
            "the new transcript neither extends nor appends to the old one; a replacement "
            "needs a reason (clear, restart, compaction, handoff)"
        )
    return (ContextReplaced(new, replace_reason),)
