"""The daemon's stop: request_shutdown, the shutdown sequence, children in its nursery."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
import trio.lowlevel
from structlog.testing import capture_logs

from anvild.daemon.app import Daemon, DaemonConfig


async def test_the_shutdown_sequence_runs_in_order_after_accepting_stops(tmp_path: Path) -> None:
    order: list[str] = []
    daemon = Daemon(DaemonConfig(namespace=tmp_path / "ns"))

    async def first() -> None:
        # Listeners are closed: a new client is refused, but the socket file is still there.
        with socket.socket(socket.AF_UNIX) as client, pytest.raises(ConnectionRefusedError):
            client.connect(str(tmp_path / "ns" / "agent"))
        order.append("first")
        await trio.lowlevel.checkpoint()

    async def broken() -> None:
        order.append("broken")
        raise RuntimeError("flush failed")

    async def last() -> None:
        assert (tmp_path / "ns" / "agent.pid").exists()
        order.append("last")

    daemon.add_shutdown_step("first", first)
    daemon.add_shutdown_step("broken", broken)
    daemon.add_shutdown_step("last", last)
    with capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.run)
            before = daemon.stopping
            daemon.request_shutdown("test over")
            daemon.request_shutdown("ignored: already stopping")
            assert (before, daemon.stopping) == (False, True)
    assert order == ["first", "broken", "last"]
    assert not (tmp_path / "ns" / "agent").exists()
    failed = [e for e in logs if e["event"] == "daemon.shutdown_step_failed"]
    assert [e["step"] for e in failed] == ["broken"]
    assert {"event": "daemon.stopping", "reason": "test over", "log_level": "info"} in logs


async def test_a_cancelled_daemon_still_runs_the_sequence_within_the_grace(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    order: list[str] = []
    daemon = Daemon(DaemonConfig(namespace=tmp_path / "ns", shutdown_grace=5.0))

    async def slow() -> None:
        order.append("slow")
        await trio.sleep(60)
        order.append("never")

    async def after() -> None:
        order.append("never either")

    daemon.add_shutdown_step("slow", slow)
    daemon.add_shutdown_step("after", after)
    with capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.run)
            started = trio.current_time()
            nursery.cancel_scope.cancel()
    assert order == ["slow"]
    assert trio.current_time() - started == pytest.approx(5.0)
    cut = [e for e in logs if e["event"] == "daemon.shutdown_step_cut"]
    assert cut == [
        {
            "event": "daemon.shutdown_step_cut",
            "step": "slow",
            "grace_seconds": 5.0,
            "log_level": "error",
        }
    ]
    assert not (tmp_path / "ns" / "agent").exists()


async def test_children_start_in_the_daemon_nursery_and_are_cancelled_last(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def child(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        seen.append("started")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            seen.append("cancelled")

    async def step() -> None:
        seen.append("step")  # the child is still running during the sequence

    daemon = Daemon(DaemonConfig(namespace=tmp_path / "ns"), children=[child])
    daemon.add_shutdown_step("step", step)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        assert seen == ["started"]
        daemon.request_shutdown()
    assert seen == ["started", "step", "cancelled"]
