"""Approvers: headless, the broker behind the `approval` file, and the scripted test double."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from anvild.agent.permissions.approval import (
    HEADLESS_MESSAGE,
    ApprovalBroker,
    ApprovalClosed,
    ApprovalRequest,
    ApproveAlways,
    ApproveOnce,
    HeadlessApprover,
    Reject,
    Unavailable,
)
from anvild.agent.permissions.testing import HANG, ScriptedApprover

REQUEST = ApprovalRequest("c1", "bash", {"command": "ls"}, "commands need approval")


async def test_headless_denies_with_the_exact_message() -> None:
    assert await HeadlessApprover().request_approval(REQUEST) == Unavailable(
        "This action requires approval, which isn't available in headless mode. Re-run with "
        "--permission-mode accept-edits or add an allow rule."
    )
    assert HEADLESS_MESSAGE.startswith("This action requires approval")


async def test_broker_round_trip() -> None:
    changes: list[int] = []
    broker = ApprovalBroker(on_change=lambda: changes.append(len(broker.pending())))
    answers: list[object] = []

    async def ask(request: ApprovalRequest) -> None:
        answers.append(await broker.request_approval(request))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, REQUEST)
        await trio.testing.wait_all_tasks_blocked()
        assert broker.pending() == (REQUEST,)
        with pytest.raises(KeyError):
            broker.answer("nope", ApproveOnce())
        broker.answer("c1", Reject("use the grep tool"))
    assert answers == [Reject("use the grep tool")]
    assert broker.pending() == ()
    assert changes == [1, 0]


async def test_broker_refuses_duplicate_ids() -> None:
    broker = ApprovalBroker()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.request_approval, REQUEST)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ValueError, match="already pending"):
            await broker.request_approval(REQUEST)
        broker.answer("c1", ApproveOnce())


async def test_cancelling_a_wait_never_approves_and_forgets_the_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = ApprovalBroker()
    with trio.move_on_after(1) as scope:
        await broker.request_approval(REQUEST)
    assert scope.cancelled_caught
    assert broker.pending() == ()
    with pytest.raises(KeyError):  # a late answer has nothing to approve
        broker.answer("c1", ApproveAlways())


async def test_closing_never_approves_pending_or_later_requests() -> None:
    broker = ApprovalBroker()
    answers: list[object] = []

    async def ask() -> None:
        answers.append(await broker.request_approval(REQUEST))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        broker.close("the client went away")
        broker.close("closed twice")  # idempotent
    assert answers == [Unavailable("the client went away")]
    assert await broker.request_approval(REQUEST) == Unavailable("the client went away")
    with pytest.raises(ApprovalClosed):
        broker.answer("c1", ApproveOnce())
    assert broker.closed


async def test_scripted_approver() -> None:
    approver = ScriptedApprover([ApproveOnce(), lambda r: Reject(r.tool)])
    assert await approver.request_approval(REQUEST) == ApproveOnce()
    assert await approver.request_approval(REQUEST) == Reject("bash")
    exhausted = await approver.request_approval(REQUEST)
    assert isinstance(exhausted, Unavailable)
    assert (approver.exhausted, approver.remaining, len(approver.requests)) == (1, 0, 3)


async def test_scripted_hang_waits_until_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    approver = ScriptedApprover([HANG])
    with trio.move_on_after(5) as scope:
        await approver.request_approval(REQUEST)
    assert scope.cancelled_caught
