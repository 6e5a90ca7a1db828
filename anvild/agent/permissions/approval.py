"""Approvals: asking a person about a call the policy could not decide.

    Approver.request_approval(ApprovalRequest) -> ApproveOnce | ApproveAlways | Reject | Unavailable

- `ApproveOnce` runs this call; `ApproveAlways` runs it and adds what the request's `always`
  lists (session rules, grants) so the same question is not asked again; `Reject(feedback)` does
  not run it, and the feedback goes back to the model as the call's result; `Unavailable(reason)`
  means nobody could answer (headless, closed), and the reason goes back to the model.
- `HeadlessApprover` answers every request with `HEADLESS_MESSAGE`.
- `ApprovalBroker` is the approver a session's `approval` file serves: requests wait in
  `pending()` until `answer(id, ...)` settles them.

Nothing but an explicit answer approves: a cancelled wait raises `trio.Cancelled` (the call was
never run), and closing the broker settles every pending and later request as `Unavailable`, so
no approval wait outlives its session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeAlias

import attrs
import trio

HEADLESS_MESSAGE: Final = (
    "This action requires approval, which isn't available in headless mode. Re-run with "
    "--permission-mode accept-edits or add an allow rule."
)


@attrs.frozen
class ApprovalRequest:
    """What a person is asked: the call (`id` is the model's call id), why, and what answering
    "always" would add for the rest of the session (empty: "always" counts as once)."""

    id: str
    tool: str
    arguments: Mapping[str, Any]
    reason: str
    always: tuple[str, ...] = ()


@attrs.frozen
class ApproveOnce:
    """Run this call."""


@attrs.frozen
class ApproveAlways:
    """Run this call, and allow what the request's `always` lists for the session."""


@attrs.frozen
class Reject:
    """Do not run it; `feedback` (may be empty) tells the model what to do instead."""

    feedback: str = ""


@attrs.frozen
class Unavailable:
    """Nobody could answer; the call is not run and `reason` goes back to the model."""

    reason: str


ApprovalAnswer: TypeAlias = ApproveOnce | ApproveAlways | Reject | Unavailable


class Approver(Protocol):
    async def request_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        """Wait for the answer to `request`. Cancellation raises; it never approves."""
        ...


@attrs.frozen
class HeadlessApprover:
    """For sessions nobody watches: every request is unavailable, with `HEADLESS_MESSAGE`."""

    async def request_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        return Unavailable(HEADLESS_MESSAGE)


class ApprovalClosed(Exception):
    """`answer` on a broker that was closed."""


@attrs.define
class _Pending:
    request: ApprovalRequest
    done: trio.Event = attrs.Factory(trio.Event)
    answer: ApprovalAnswer | None = None


def _ignore() -> None:
    return None


class ApprovalBroker:
    """Pending approval requests of one session, answered from outside (the `approval` file).

    `on_change` is called (synchronously; it must not block) whenever the pending set changes,
    so a reader blocked on the file can be woken up."""

    def __init__(self, *, on_change: Callable[[], None] = _ignore) -> None:
        self._pending: dict[str, _Pending] = {}
        self._closed: str | None = None
        self._on_change = on_change

    def pending(self) -> tuple[ApprovalRequest, ...]:
        """The requests waiting for an answer, oldest first."""
        return tuple(p.request for p in self._pending.values())

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def request_approval(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self._closed is not None:
            return Unavailable(self._closed)
        if request.id in self._pending:
            raise ValueError(f"an approval for call {request.id!r} is already pending")
        slot = self._pending[request.id] = _Pending(request)
        self._on_change()
        try:
            await slot.done.wait()
        finally:
            # Cancelled or answered, the request is no longer pending.
            if self._pending.get(request.id) is slot:
                del self._pending[request.id]
                self._on_change()
        assert slot.answer is not None
        return slot.answer

    def answer(self, request_id: str, answer: ApprovalAnswer) -> None:
        """Settle a pending request. `KeyError` if none is pending under that id (answered,
        cancelled, or never asked); `ApprovalClosed` after `close`."""
        if self._closed is not None:
            raise ApprovalClosed(f"approvals are closed: {self._closed}")
        slot = self._pending.pop(request_id)
        slot.answer = answer
        slot.done.set()
        self._on_change()

    def close(self, reason: str = "The approval channel was closed before an answer came.") -> None:
        """Settle every pending and later request as `Unavailable(reason)`; never approves."""
        if self._closed is not None:
            return
        self._closed = reason
        pending, self._pending = self._pending, {}
        for slot in pending.values():
            slot.answer = Unavailable(reason)
            slot.done.set()
        if pending:
            self._on_change()


__all__ = [
    "HEADLESS_MESSAGE",
    "ApprovalAnswer",
    "ApprovalBroker",
    "ApprovalClosed",
    "ApprovalRequest",
    "ApproveAlways",
    "ApproveOnce",
    "Approver",
    "HeadlessApprover",
    "Reject",
    "Unavailable",
]
