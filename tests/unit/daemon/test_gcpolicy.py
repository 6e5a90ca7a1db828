"""The daemon's GC policy: thresholds, freezes after start-up and settled creations, and a
collection after a session ended that frees cycles the freeze had kept (memory stays bounded).

The policy changes the whole process: each test restores the thresholds and unfreezes."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from anvild.daemon.gcpolicy import GEN0_THRESHOLD, GcPolicy
from anvild.session.events import SessionCreated, SessionEnded, SessionStateChanged


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def created(session_id: str, *, restored: bool = False) -> SessionCreated:
    return SessionCreated(session_id, None, "developer", "m", "/tmp", False, restored)


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.mark.usefixtures("restore_gc")
async def test_freezes_after_start_and_settled_creations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    policy = GcPolicy(settle=1.0)
    policy.configure()
    assert gc.get_threshold()[0] == GEN0_THRESHOLD
    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        assert policy.freezes == 1
        assert gc.get_freeze_count() > 0
        policy.on_event(created("a", restored=True))  # start-up restores: already frozen
        policy.on_event(SessionStateChanged("a", "idle"))
        await trio.sleep(5)
        assert policy.freezes == 1
        for name in "bcd":  # a burst of `new`: one freeze once it settled
            policy.on_event(created(name))
            await trio.sleep(0.1)
        await trio.sleep(0.5)
        assert policy.freezes == 1
        await trio.sleep(1)
        assert (policy.freezes, policy.collections) == (2, 0)
        nursery.cancel_scope.cancel()


@pytest.mark.usefixtures("restore_gc")
async def test_a_session_end_collects_frozen_cycles(autojump_clock: trio.testing.MockClock) -> None:
    policy = GcPolicy(settle=1.0)
    node = Node()
    ref = weakref.ref(node)
    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)  # freezes the node with everything else
        del node
        gc.collect()
        assert ref() is not None  # frozen: no collection looks at it
        policy.on_event(SessionEnded("a", "killed"))
        policy.on_event(SessionEnded("b", "killed"))  # a burst of kills: one collection
        await trio.sleep(2)
        assert ref() is None
        assert (policy.freezes, policy.collections) == (2, 1)
        assert gc.get_freeze_count() > 0  # frozen again
        nursery.cancel_scope.cancel()


@pytest.mark.usefixtures("restore_gc")
async def test_freeze_soon_freezes_once_settled(autojump_clock: trio.testing.MockClock) -> None:
    policy = GcPolicy(settle=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        policy.freeze_soon()  # a lazy restart built its sessions after the start
        await trio.sleep(0.5)
        assert policy.freezes == 1
        await trio.sleep(1)
        assert (policy.freezes, policy.collections) == (2, 0)
        nursery.cancel_scope.cancel()
