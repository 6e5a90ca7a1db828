"""`Turns`: a session's checkpoints applied (the shadow repositories are `anvild.checkpoints`).

It tells the session's `SessionCheckpoints` where each turn starts and ends (the end snapshot is
taken before the session leaves running, shielded, so `wait` returns after it), serves `undo
[force]` and `rewind N [conversation] [force]` (between turns only, under the verb lock so no
prompt starts meanwhile) and what `agent/ID/turns/` reads. `rewind N conversation` rewinds the
files first, then records one `Rewound` (synced) and gives the agent the cut transcript; it is
refused when the transcript was replaced since turn N (clear, restart, compaction, handoff).
Without checkpoints (`SessionSettings.checkpoints` None) the verbs say so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

import attrs
import trio

from anvild.agent import events as ev
from anvild.agent.snapshots import NO_SNAPSHOTS, Snapshots
from anvild.checkpoints import GitFailed, SessionCheckpoints, Step, UndoRefused
from anvild.llm.types import Message
from anvild.session.errors import InvalidSessionRequest, RecordWriteFailed, SessionRefused
from anvild.session.part import SessionPart
from anvild.session.state import BUSY
from anvild.store import SessionStatus
from anvild.store.records import Rewound

END_SNAPSHOT_SECONDS: Final = 60.0
"""How long the end-of-turn snapshot may hold the turn's end (also while the daemon stops)."""


def anchor(messages: Sequence[Message]) -> str:
    """What identifies a transcript's history: its first and last message, hashed."""
    if not messages:
        return ""
    return hashlib.sha256(repr((messages[0], messages[-1])).encode()).hexdigest()[:16]


def cut(messages: Sequence[Message], step: Step) -> tuple[Message, ...] | None:
    """The transcript as it was before the turn of `step`, or None when it was replaced since."""
    if len(messages) < step.messages:
        return None
    kept = tuple(messages[: step.messages])
    if kept and anchor(kept) != step.anchor:
        last = kept[-1]  # the turn's prompt may have been merged into it: try without its blocks
        for size in range(len(last.content) - 1, 0, -1):
            shorter = (*kept[:-1], Message(last.role, last.content[:size]))
            if anchor(shorter) == step.anchor:
                return shorter
        return None
    return kept


@attrs.define(eq=False)
class Turns(SessionPart):
    """The checkpoints of one session (a `SessionPart`; None: not checkpointed)."""

    checkpoints: SessionCheckpoints | None

    @property
    def snapshots(self) -> Snapshots:
        """The agent's hook point (`anvild.agent.snapshots`)."""
        return NO_SNAPSHOTS if self.checkpoints is None else self.checkpoints

    def steps(self) -> list[Step]:
        return [] if self.checkpoints is None else self.checkpoints.turns()

    async def diff(self, step: Step) -> bytes:
        return b"" if self.checkpoints is None else await self.checkpoints.diff(step)

    async def recover(self) -> None:
        if self.checkpoints is not None:
            await self.checkpoints.recover()

    def begin(self, prompt: str) -> None:
        if self.checkpoints is not None:
            messages = self._agent().messages
            number = self._session.record.turn_count
            self.checkpoints.begin_turn(number, prompt, len(messages), anchor(messages))

    async def end(self, finished: ev.TurnFinished | None) -> None:
        if self.checkpoints is None:
            return
        outcome = "cancelled" if finished is None else finished.outcome.value
        if finished is not None and (detail := " ".join(finished.detail.split())):
            outcome += f" {detail}"
        with trio.CancelScope(deadline=trio.current_time() + END_SNAPSHOT_SECONDS, shield=True):
            await self.checkpoints.end_turn(outcome)

    # -- the verbs -----------------------------------------------------------------------------

    async def undo(self, force: bool = False) -> str:
        """`undo [force]`: revert the last step that changed files."""
        async with self._held():
            store = self._ready("undo")
            try:
                text = await store.undo(force=force)
            except UndoRefused as exc:
                raise SessionRefused(str(exc)) from exc
            except (GitFailed, OSError) as exc:
                raise SessionRefused(_failed("undo", exc)) from exc
            self._output.log_lines([f"UNDO: {text.splitlines()[0]}"])
            self._notify()
            return text

    async def rewind(self, number: int, conversation: bool = False, force: bool = False) -> str:
        """`rewind N [conversation] [force]`: the files (and the transcript) before turn N."""
        async with self._held():
            store = self._ready("rewind")
            step = store.turn(number)
            before: tuple[Message, ...] | None = None
            if conversation and step is not None:
                before = cut(self._agent().messages, step)
                if before is None:
                    raise SessionRefused(
                        f"rewind {number} conversation: the transcript was replaced since turn "
                        f"{number} (clear, restart, compaction or a model handoff); write "
                        f"`rewind {number}` to rewind only the files"
                    )
            try:
                text, step = await store.rewind(number, force=force)
            except UndoRefused as exc:
                raise SessionRefused(str(exc)) from exc
            except (GitFailed, OSError) as exc:
                raise SessionRefused(_failed(f"rewind {number}", exc)) from exc
            if before is not None:
                if not await self._recorder.append_synced(Rewound(number, before)):
                    raise RecordWriteFailed(
                        f"{text}; the transcript was not cut: {self._session.status_detail}"
                    )
                self._agent().reset(before)
                text += f"\nconversation: back to before turn {number} ({len(before)} messages)"
            self._output.log_lines([f"REWIND: {line}" for line in text.splitlines()])
            self._notify()
            return text

    def _ready(self, verb: str) -> SessionCheckpoints:
        session = self._session
        if self.checkpoints is None:
            raise SessionRefused(f"{verb}: this daemon keeps no checkpoints ([checkpoints])")
        if session.status is SessionStatus.EXITED:
            raise SessionRefused(f"session {session.id} has exited")
        if self._turn_active() or session.status in BUSY:
            raise SessionRefused(
                f"{verb}: a turn is running in session {session.id}; write cancel (or wait) first"
            )
        return self.checkpoints


def _failed(verb: str, exc: Exception) -> str:
    return (
        f"{verb} failed: {exc}; a change it began is finished at the session's next checkpoint "
        "(its intent is recorded), so check the files after fixing the cause"
    )


def parse_rewind(words: Sequence[str]) -> tuple[int, bool, bool]:
    """`N [conversation] [force]` as (N, conversation, force)."""
    usage = "rewind N [conversation] [force]"
    if not words or not words[0].isdigit() or int(words[0]) < 1:
        raise InvalidSessionRequest(f"rewind needs a turn number (1 or more): {usage}")
    rest = set(words[1:])
    if unknown := rest - {"conversation", "force"}:
        raise InvalidSessionRequest(f"rewind: unknown word {sorted(unknown)[0]!r}: {usage}")
    return int(words[0]), "conversation" in rest, "force" in rest


__all__ = ["Turns", "anchor", "cut", "parse_rewind"]
