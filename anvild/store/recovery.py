"""Crash recovery for one session: `recover(state) -> Recovery`, pure.

After a crash (kill -9, power loss) a session's records can stop anywhere. The journal's loader
already dropped a torn final line; what is left is a valid prefix of what the session did, and
it may end in the middle of a turn. `recover` says which records bring it back to rest:

- A pending approval is answered `cancelled` (a restart never approves anything).
- A result approval (`request_approval`) is not interrupted by a crash: no turn runs while it
  waits. A session in await_approval with a result approval pending stays exactly so, and comes
  back waiting for `approve` or `reject`. (A result approval recorded without the state change
  that follows it, cut by the crash, is answered `cancelled`.)
- A trailing assistant message whose calls have no results gets one user message of results,
  one per call, in call order:
  - a call with a durable `ToolFinished`: its recorded result (the work is known, not redone);
  - a call with `ToolStarted` but no durable finish: an error result saying the outcome is
    unknown and that it was not re-run, plus a `Note` for the session's log. The call may have
    run partly, fully or not at all; only the world can tell, so the model (and the human
    reading `log`) is told to check before trying again. Nothing is ever re-run automatically.
    The temporary files such a call left, which the caller removed before recovering (`removed`,
    by call id: `anvild.session.leftovers`), are named in its result and in a note;
  - a call never started (its `ToolStarted` was not written, so its side effect never began):
    an error result saying it was not run.
- A session that was running or awaiting approval ends its turn (`TurnEnded` with outcome
  `error`, the reason, `interrupted`) and gets a note in the transcript's trailing user message
  (so the model knows the turn was cut; if an answer was streaming, that its shown part is not
  in the conversation: `streamed` is display only). It, and a session that was still starting,
  goes to `idle`, and the log says so.

Queued prompts are kept: they were accepted and never handled. Sessions that were idle, await,
stopped, exited or in error stay as they were (their transcript is repaired all the same), and an
ended session needs nothing. Recovery is idempotent: the state it leads to needs no recovery.
After it, `validate_transcript(state.messages)` holds (the tests check it).
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
    turn_cut = state.status in (SessionStatus.RUNNING, SessionStatus.AWAIT_APPROVAL) and not gated
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
        records.append(
            Note(f"recovered after a restart: the session was {state.status.value}, now idle")
        )
    return Recovery(tuple(records), tuple(unknown))


def _removed(paths: Sequence[str] | None) -> str:
    return TEMP_REMOVED.format(paths=", ".join(paths)) if paths else ""
