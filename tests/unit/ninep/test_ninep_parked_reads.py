"""Parked reads (server.py, `_ParkedRead` and `_Answerer`): a Tread that waits on a stream file
holds its tag with no task; the next line or the stream's end wakes it, and the run's one
answerer task replies. Each test runs over a real socket pair (the poller's path) and checks a
semantic the parked read must keep: one line answers it, Tflush cancels it (no reply ever for
its tag), a second read pipelined on the same fid still gets the next line, clunk and EOF and
Tversion end it cleanly, one publish answers the reads of many connections, and the answerer
task lives only while a connection that parked a read does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from anvild.fs import Directory, StreamFile
from anvild.fs.stream import LineStream
from anvild.ninep import messages as m
from anvild.ninep.constants import OREAD, Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import RawClient

P = Dialect.P9P2000
ANSWERER = "anvild.ninep.answerer"


def _task_names() -> list[str]:
    names = []
    root = trio.lowlevel.current_root_task()
    assert root is not None
    stack = [root]
    while stack:
        task = stack.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return names


@asynccontextmanager
async def served(stream: LineStream) -> AsyncIterator[tuple[RawClient, Server]]:
    """A client over a socket pair with fid 1 open on `events`, of a server of its own."""
    tree = Directory("/", [StreamFile("events", stream)])
    server = Server(lambda req: tree)
    a, b = trio.socket.socketpair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: server.serve(trio.SocketStream(b), peer="sock"))
            sock = trio.SocketStream(a)
            client = RawClient(sock, P)
            await client.handshake()
            assert isinstance(await client.rpc(m.Twalk(0, 0, 1, ("events",))), m.Rwalk)
            assert isinstance(await client.rpc(m.Topen(0, 1, OREAD)), m.Ropen)
            yield client, server
            await sock.aclose()
            while server.statistics().connections_open:  # noqa: ASYNC110 - polling stats
                await trio.sleep(0.01)
    assert server.statistics().requests_in_flight == 0
    assert server.statistics().open_handles == 0


async def test_a_waiting_read_parks_without_a_task_and_one_line_answers_it() -> None:
    events = LineStream()
    async with served(events) as (client, server):
        await client.send(m.Tread(1, 1, 0, 4096))
        await trio.testing.wait_all_tasks_blocked()
        assert server.statistics().requests_in_flight == 1
        assert not [name for name in _task_names() if "_run_request" in name]
        events.publish("one")
        assert await client.receive() == m.Rread(1, b"one\n")
        assert server.statistics().requests_in_flight == 0
        events.publish("two")  # a reader that is behind is answered at once
        assert await client.rpc(m.Tread(2, 1, 0, 4096)) == m.Rread(2, b"two\n")


async def test_a_flushed_parked_read_is_never_answered() -> None:
    events = LineStream()
    async with served(events) as (client, server):
        await client.send(m.Tread(1, 1, 0, 4096))
        await trio.testing.wait_all_tasks_blocked()
        assert await client.rpc(m.Tflush(2, 1)) == m.Rflush(2)
        assert server.statistics().requests_in_flight == 0
        events.publish("late")
        # The line waits for the next read; tag 1 (reused here) gets no stale reply first.
        assert await client.rpc(m.Tread(1, 1, 0, 4096)) == m.Rread(1, b"late\n")


async def test_a_second_read_on_the_same_fid_gets_the_next_line() -> None:
    events = LineStream()
    async with served(events) as (client, server):
        await client.send(m.Tread(1, 1, 0, 4096))  # parks
        await client.send(m.Tread(2, 1, 0, 4096))  # the fid's wake-up is taken: a task waits
        await trio.testing.wait_all_tasks_blocked()
        assert server.statistics().requests_in_flight == 2
        events.publish("a")
        first = await client.receive()
        events.publish("b")
        second = await client.receive()
        # Both reads wait on the same cursor: either may take "a", each line comes once.
        assert isinstance(first, m.Rread)
        assert isinstance(second, m.Rread)
        assert {first.tag, second.tag} == {1, 2}
        assert (first.data, second.data) == (b"a\n", b"b\n")


async def test_clunk_ends_a_parked_read_with_end_of_file() -> None:
    events = LineStream()
    async with served(events) as (client, _):
        await client.send(m.Tread(1, 1, 0, 4096))
        await trio.testing.wait_all_tasks_blocked()
        await client.send(m.Tclunk(2, 1))
        replies = {reply.tag: reply for reply in [await client.receive(), await client.receive()]}
        assert replies == {1: m.Rread(1, b""), 2: m.Rclunk(2)}


async def test_the_stream_ending_answers_a_parked_read_with_end_of_file() -> None:
    events = LineStream()
    async with served(events) as (client, _):
        await client.send(m.Tread(1, 1, 0, 4096))
        await trio.testing.wait_all_tasks_blocked()
        events.close()
        assert await client.receive() == m.Rread(1, b"")


async def test_eof_and_tversion_with_a_parked_read_leave_nothing_behind() -> None:
    events = LineStream()
    async with served(events) as (client, server):
        await client.send(m.Tread(1, 1, 0, 4096))
        await trio.testing.wait_all_tasks_blocked()
        reply = await client.rpc(m.Tversion(0xFFFF, 8192, "9P2000"))
        assert isinstance(reply, m.Rversion)
        assert server.statistics().requests_in_flight == 0
        assert server.statistics().fids == 0
        events.publish("after the reset")  # answers nothing: the read and its fid are gone
        await trio.testing.wait_all_tasks_blocked()
    async with served(LineStream()) as (client, server):  # EOF with a read parked
        await client.send(m.Tread(1, 1, 0, 4096))
        await trio.testing.wait_all_tasks_blocked()
        assert server.statistics().requests_in_flight == 1


async def test_one_publish_answers_the_parked_reads_of_every_connection() -> None:
    events = LineStream()
    async with (
        served(events) as (c1, s1),
        served(events) as (c2, s2),
        served(events) as (c3, s3),
    ):
        for client in (c1, c2, c3):
            await client.send(m.Tread(4, 1, 0, 4096))
        await trio.testing.wait_all_tasks_blocked()
        assert [s.statistics().requests_in_flight for s in (s1, s2, s3)] == [1, 1, 1]
        assert _task_names().count(ANSWERER) == 0  # no task until a read is woken
        events.publish("all")
        for client in (c1, c2, c3):
            assert await client.receive() == m.Rread(4, b"all\n")
        await trio.testing.wait_all_tasks_blocked()
        assert _task_names().count(ANSWERER) == 1  # it lives while those connections do
    await trio.testing.wait_all_tasks_blocked()
    assert ANSWERER not in _task_names()  # and ends with the last of them
