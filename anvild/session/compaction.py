"""`Compactions`: a session's context management, applied (the policy is `anvild.agent.context`).

It gives the session's agent its window (`window_for`: the model's context window with the
`[context]` shares), records each compaction the agent makes (`record`, the agent's
`on_compaction`: one synced `Compacted` record before the agent adopts the new transcript, so a
crash leaves the whole old or the whole new one), serves the `compact [FOCUS]` verb
(`compact`: now between turns, under the verb lock so no prompt starts meanwhile; at the next
step boundary during a turn) and the `compactions` file (`text`). The log gets a line for each
compaction; the records before a `Compacted` keep the full history.
"""

from __future__ import annotations

import datetime as dt

import attrs

from anvild.agent.context import Compaction, ContextSettings, ContextWindow
from anvild.agent.loop import NOT_RECORDED
from anvild.llm.registry import ResolvedModel
from anvild.session.errors import RecordWriteFailed, SessionRefused
from anvild.session.part import SessionPart
from anvild.session.state import BUSY
from anvild.store import Compacted, SessionStatus

MIN_SUMMARY_TOKENS = 64


@attrs.frozen
class ContextPolicy:
    """`[context]` as the daemon gives it: `auto_compact` and `clear_at` in percent of the
    window (0: off), the model that writes summaries (None: the session's), and how many recent
    tool results are never cleared."""

    auto_compact: float = 85.0
    clear_at: float = 60.0
    compaction_model: str | None = None
    keep_tool_results: int = 3


def window_for(target: ResolvedModel, policy: ContextPolicy) -> ContextWindow:
    """The context window of a session on `target`: the summary is at most the model's output
    limit (a sixteenth of the window by default)."""
    window = target.limits.context_window
    summary = max(MIN_SUMMARY_TOKENS, min(target.limits.max_output_tokens, window // 16, 4096))
    return ContextWindow(
        ContextSettings(
            window=window,
            auto_compact=policy.auto_compact / 100,
            clear_at=policy.clear_at / 100,
            keep_tool_results=policy.keep_tool_results,
            summary_tokens=summary,
        )
    )


class Compactions(SessionPart):
    """The compactions of one session (a `SessionPart`)."""

    async def record(self, compaction: Compaction) -> bool:
        """Record `compaction` (synced); False when it could not be (the agent keeps its
        transcript and the session is in error)."""
        record = Compacted(
            compaction.messages,
            compaction.summary,
            compaction.dropped,
            compaction.before,
            compaction.after,
            compaction.model,
            compaction.trigger,
            dt.datetime.now(dt.UTC),
            compaction.focus,
            compaction.usage,
        )
        if not await self._recorder.append_synced(record):
            return False
        self._notify()
        return True

    async def compact(self, focus: str = "") -> str:
        """`compact [FOCUS]`: summarise the history now (between turns), or before the running
        turn's next request. Returns what the writer is told; refuses what cannot be done."""
        session = self._session
        if session.status is SessionStatus.EXITED:
            raise SessionRefused(f"session {session.id} has exited")
        if self._turn_active() or session.status in BUSY:
            self._agent().request_compaction(focus)
            self._output.log_lines(["NOTE: compaction asked: before the turn's next request"])
            return "compaction before the running turn's next request"
        async with self._held():
            if session.status in (SessionStatus.STOPPED, SessionStatus.ERROR):
                raise SessionRefused(
                    f"session {session.id} is {session.status.value}: write start to its ctl first"
                )
            why = await self._agent().compact(focus)
        if why == NOT_RECORDED:
            raise RecordWriteFailed(f"{why}: {session.status_detail}")
        if why:
            raise SessionRefused(f"nothing compacted: {why}")
        return "compacted"

    def text(self) -> str:
        """The `compactions` file: TIME TRIGGER BEFORE AFTER DROPPED MODEL, tab-separated, one
        compaction a line, oldest first (BEFORE and AFTER in estimated tokens)."""
        return "".join(
            "\t".join(
                (
                    c.at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    c.trigger,
                    str(c.before),
                    str(c.after),
                    str(c.dropped),
                    c.model,
                )
            )
            + "\n"
            for c in self._session.record.compactions
        )


__all__ = ["Compactions", "ContextPolicy", "window_for"]
