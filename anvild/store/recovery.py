"""Crash recovery for one session: `recover(state) -> Recovery`, pure.

Brings a valid record prefix that may end mid-turn back to rest. Nothing is ever re-run:
- a pending tool approval is answered `cancelled` (a restart never approves); a result approval
  with its state change recorded survives as it was (no turn runs while it waits);
- unanswered calls get results: the recorded one for a durable `ToolFinished`; "outcome unknown,
  not re-run" (plus a `Note`, naming removed temp files) for a start without a finish; "not run"
  for a call never started;
- a running or approval-waiting turn ends (`TurnEnded` error, `interrupted`) with a note in the
  transcript; it and a starting session go to `idle`. A turn whose `TurnEnded` is recorded is
  over (its session stopped before its next state: an ephemeral one's end, `await`): it keeps
  its outcome and only its status goes to `idle`.
Queued prompts are kept. Idempotent; afterwards `validate_transcript(state.messages)` holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from anvild.llm.types import ContentBlock, Message, Role, Text, ToolCall, ToolResult
from anvild.store.records import (
    ApprovalAnswered,
    MessageAppended,
    MessageExtended,
    Note,
    Record,
    ResultApprovalAnswered,
    SessionStatus,
    StateChanged,
    TurnEnded,
    Verdict,
)
from anvild.store.state import SessionState

UNKNOWN_OUTCOME: Final = (
    "Outcome unknown: anvild stopped (a crash, kill or power loss) while {name} was running, and "
    "no result was recorded. It was not re-run. It may have run partly, fully or not at all: "
    "check the current state before running it again."
)
NOT_RUN: Final = "Not run: anvild stopped before {name} started."
INTERRUPTED_NOTE: Final = (
    "[The previous turn was interrupted: anvild stopped before it finished. No tool call was "
    "re-run.]"
)
STREAMED_NOTE: Final = (
    "[The previous turn was interrupted: anvild stopped while the assistant was answering. The "
    "{chars} characters of the answer already shown to the user were not kept in this "
    "conversation. No tool call was re-run.]"
)
TEMP_REMOVED: Final = (
    " anvild removed the unfinished temporary file(s) it had left: {paths}. Such a file is "
    "renamed over its target only once complete, so that write did not reach its target."
)
APPROVAL_CANCELLED: Final = "anvild restarted before the approval was answered"
TURN_DETAIL: Final = "anvild stopped during the turn; the session was recovered at restart"
RECOVERED_DETAIL: Final = "recovered at restart: anvild had stopped while the session was active"


@attrs.frozen
class Recovery:
    """What `recover` found: the records to append, in order, and the calls whose outcome is
    unknown (already explained in `records`)."""

    records: tuple[Record, ...]
    unknown: tuple[ToolCall, ...]


def recover(state: SessionState, removed: Mapping[str, Sequence[str]] | None = None) -> Recovery:
    """The records that bring a loaded session back to rest after a crash (see module doc).
    `removed`: the temporary files removed for calls of unknown outcome, by call id."""
    removed = removed or {}
    if state.ended is not None:
        return Recovery((), ())
    records: list[Record] = []
    if state.approval is not None:
        call_id = state.approval.call_id
        records.append(ApprovalAnswered(call_id, Verdict.CANCELLED, APPROVAL_CANCELLED))
    gated = state.result_approval is not None and state.status is SessionStatus.AWAIT_APPROVAL
    if state.result_approval is not None and not gated:
        records.append(ResultApprovalAnswered(Verdict.CANCELLED, APPROVAL_CANCELLED))
    # a crash cut the session's start or a turn (a result gate is a rest, not a turn)
    interrupted = state.status.active and not gated
    turn_cut = (
        state.status in (SessionStatus.RUNNING, SessionStatus.AWAIT_APPROVAL)
        and not gated
        and not _turn_over(state)
    )
    results: list[ContentBlock] = []
    unknown: list[ToolCall] = []
    for call in state.pending_calls:
        run = state.run(call.id)
        if run is None:
            results.append(ToolResult(call.id, NOT_RUN.format(name=call.name), is_error=True))
        elif run.result is not None:
            results.append(run.result)
        else:
            text = UNKNOWN_OUTCOME.format(name=call.name) + _removed(removed.get(call.id))
            results.append(ToolResult(call.id, text, is_error=True))
            unknown.append(call)
    note = INTERRUPTED_NOTE
    if state.streamed:
        note = STREAMED_NOTE.format(chars=len(state.streamed))
    if results:
        if turn_cut:
            results.append(Text(note))
        records.append(MessageAppended(Message(Role.USER, results)))
    elif turn_cut and state.messages and state.messages[-1].role is Role.USER:
        records.append(MessageExtended((Text(note),)))
    records.extend(
        Note(
            f"tool call {call.id} ({call.name}): outcome unknown. anvild stopped while it was "
            "running and no result was recorded; it was not re-run."
            + _removed(removed.get(call.id))
        )
        for call in unknown
    )
    if turn_cut:
        records.append(TurnEnded("error", TURN_DETAIL, interrupted=True))
    if interrupted:
        records.append(StateChanged(SessionStatus.IDLE, RECOVERED_DETAIL))
        was = state.status.value
        if state.last_turn is not None and _turn_over(state):
            was += f" (its turn had ended: {state.last_turn.outcome})"
        records.append(Note(f"recovered after a restart: the session was {was}, now idle"))
    return Recovery(tuple(records), tuple(unknown))


def _turn_over(state: SessionState) -> bool:
    """Whether the session's last turn (the last prompt taken) has its `TurnEnded`."""
    turns = state.turns
    return state.turn_count > 0 and bool(turns) and turns[-1].turn == state.turn_count


def _removed(paths: Sequence[str] | None) -> str:
    return TEMP_REMOVED.format(paths=", ".join(paths)) if paths else ""
