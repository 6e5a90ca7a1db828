"""`Cards`: what the board shows of every session (`session_info`), building none.

A built session answers from itself. One at rest and not built (restored, or unloaded for
idleness) answers from its summary and model (`SessionManager.peek`) and, for what a summary
lacks (its first prompt, status detail, context used, recorded cost), from one read of its
file in a thread, kept while that summary is the manager's (the file of a session not built
does not change). Each card equals what the session shows once built; the one exception, a
request made with another model than the session's now, is priced as `anvilctl stats` prices
it (docs/decisions.md). Nothing here uses a session: a board never keeps one from idle unload.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from anvild.llm.registry import Pricing, ResolvedModel
from anvild.llm.stream import Usage
from anvild.session import Session, SessionManager, accounting
from anvild.session.output import first_line
from anvild.store import SessionSummary, StoreError, read_journal

__all__ = ["NEEDS_PERSON", "Card", "Cards", "PricingOf", "session_info", "usd_of"]

PricingOf = Callable[[str], Pricing | None]
"""A model alias's prices (the user config's, as `anvilctl stats` prices), None: unknown."""
NEEDS_PERSON: Final = ("await_approval", "error")
_USD = re.compile(r"^(?:total_)?usd (\S+)$", re.MULTILINE)
_ROUNDS: Final = 3  # reads of files summarised anew meanwhile, before a card makes do without


def usd_of(cost_text: str) -> str:
    """The session's cost in USD from its `cost` file (the total with children when given)."""
    found = _USD.findall(cost_text)
    return found[-1] if found else "n/a"


def session_info(s: Session, convoys: tuple[str, ...] = ()) -> dict[str, Any]:
    """What the board shows of one built session (each value as its file shows it);
    `convoys`: those of the beads it works on."""
    return {
        "id": s.id,
        "alias": s.alias,
        "role": s.role,
        "state": s.status.value,
        "detail": s.status_detail,
        "model": s.model,
        "usage": s.usage_line(),
        "used": s.usage_used(),
        "window": s.target.limits.context_window,
        "usd": usd_of(s.cost_text()),
        "created": s.created,
        "first_prompt": s.first_prompt,
        "cwd": s.cwd,
        "needs_person": s.status.value in NEEDS_PERSON or s.pending_result is not None,
        "convoys": list(convoys),
    }


@attrs.frozen
class Card:
    """One session on the board: `info` (`session_info`'s values) and its recorded usage."""

    info: dict[str, Any]
    usage: Usage


@attrs.frozen
class _Read:
    """What a session's file gives that its summary does not."""

    first_prompt: str
    detail: str
    used: int | None
    usd: float | None


def _read(path: Path, model: str, target: ResolvedModel, pricing_of: PricingOf) -> _Read | None:
    """Blocking: the file of a session not built, its requests priced as the built session
    prices them (those with `model`, the session's now, at `target`'s prices)."""
    try:
        contents = read_journal(path)
    except (OSError, StoreError, ValueError):
        return None
    state = contents.state
    usd = accounting.priced(
        contents.records, lambda name: target.pricing if name == model else pricing_of(name)
    )
    return _Read(
        first_line(state.first_prompt or ""),
        state.status_detail,
        accounting.context_used(state.baseline, state.messages),
        usd,
    )


class Cards:
    """Every session's card, in creation order (module docstring). `pricing_of`: the prices
    of a model other than a session's own; `convoys_of(id)`: the convoys it works on."""

    def __init__(
        self,
        manager: SessionManager,
        pricing_of: PricingOf,
        convoys_of: Callable[[str], Sequence[str]] = lambda session_id: (),
    ) -> None:
        self._manager, self._pricing_of, self._convoys_of = manager, pricing_of, convoys_of
        self._files: dict[str, tuple[SessionSummary, _Read | None]] = {}

    async def all(self) -> list[Card]:
        """The card of every live session now, reading in a thread the files of those not
        built that were not read yet; builds none, uses none."""
        for _ in range(_ROUNDS):
            unread = self._unread()
            if not unread:
                break
            found = await trio.to_thread.run_sync(self._read_all, unread)
            self._files.update(found)
        cards: list[Card] = []
        resting: set[str] = set()
        for session_id in self._manager.ids():
            entry = self._manager.peek(session_id)
            if isinstance(entry, Session):
                info = session_info(entry, tuple(self._convoys_of(entry.id)))
                cards.append(Card(info, entry.record.usage))
            elif entry is not None:
                resting.add(session_id)
                cards.append(self._resting(*entry))
        self._files = {key: value for key, value in self._files.items() if key in resting}
        return cards

    def _unread(self) -> list[tuple[SessionSummary, ResolvedModel, Path]]:
        unread = []
        for session_id in self._manager.ids():
            entry = self._manager.peek(session_id)
            if isinstance(entry, tuple):
                summary, target = entry
                known = self._files.get(session_id)
                if known is None or known[0] is not summary:
                    unread.append((summary, target, self._manager.store.path_for(session_id)))
        return unread

    def _read_all(
        self, unread: list[tuple[SessionSummary, ResolvedModel, Path]]
    ) -> dict[str, tuple[SessionSummary, _Read | None]]:
        return {
            summary.id: (summary, _read(path, summary.model, target, self._pricing_of))
            for summary, target, path in unread
        }

    def _resting(self, summary: SessionSummary, target: ResolvedModel) -> Card:
        known = self._files.get(summary.id)
        read = known[1] if known is not None and known[0] is summary else None
        if read is None:  # unreadable (or read again too often): what the summary says
            pricing = target.pricing
            own = None if pricing is None else pricing.cost(summary.usage)
            read = _Read("", "", None, own)
        children = self._manager.children_costs(summary.id)
        compact_at = self._manager.settings.context.auto_compact or None
        window = target.limits.context_window
        info = {
            "id": summary.id,
            "alias": summary.alias,
            "role": summary.role,
            "state": summary.status.value,
            "detail": read.detail,
            "model": target.name,
            "usage": accounting.usage_line(read.used, window, compact_at),
            "used": read.used,
            "window": window,
            "usd": usd_of(accounting.cost_text(summary.usage, read.usd, (), children)),
            "created": summary.created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "first_prompt": read.first_prompt,
            "cwd": summary.cwd,
            "needs_person": summary.status.value in NEEDS_PERSON,
            "convoys": list(self._convoys_of(summary.id)),
        }
        return Card(info, summary.usage)
