"""The one broadcaster (`anvild.lines.broadcast`) as the tree's and the session's streams use it.

The core's reads, bounds and markers are tested through both users (tests/unit/fs/test_fs_stream.py,
tests/unit/session/test_stream_*.py); here: what the two users differ in, and what they share.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from anvild.fs.stream import LineStream
from anvild.lines.broadcast import Broadcast, StreamLimits, lag_marker
from anvild.session.stream import LineBroadcast, is_turn_finished


def test_a_closed_stream_refuses_a_publish_and_a_session_stream_drops_it() -> None:
    plain, session = Broadcast(), LineBroadcast()
    for stream in (plain, session):
        stream.publish("last")
        stream.close()
    with pytest.raises(RuntimeError, match="closed"):
        plain.publish("more")
    session.publish("more")  # a session publishes while it shuts down
    assert session.backlog() == ("last",)
    assert session.statistics().published == 1


@pytest.mark.parametrize("line", ["caf\u00e9 \udcff", b"caf\xc3\xa9 \xff\n"])
def test_text_and_bytes_make_the_same_line(line: str | bytes) -> None:
    stream = Broadcast()
    stream.publish(line)
    assert stream.subscribe().read_nowait(100) == b"caf\xc3\xa9 \xff\n"
    assert stream.backlog() == ("caf\u00e9 \udcff",)  # undecodable bytes come back escaped


def test_a_publish_nobody_waits_for_makes_no_event() -> None:
    stream = Broadcast()
    cursor = stream.subscribe()
    for i in range(100):
        stream.publish(str(i))
    assert stream._changed is None
    assert cursor.ready()


async def test_both_users_wait_on_the_same_core(autojump_clock: trio.testing.MockClock) -> None:
    tree, session = LineStream(), LineBroadcast(terminal=is_turn_finished)
    got: list[bytes] = []

    async def read(reader: LineStream | LineBroadcast) -> None:
        opened = reader.open_reader()
        got.append(await opened.read(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read, tree)
        nursery.start_soon(read, session)
        await trio.sleep(1)
        tree.publish("to the tree")
        session.publish("to the session")
    assert sorted(got) == [b"to the session\n", b"to the tree\n"]


def test_limits_are_checked_for_both_users() -> None:
    with pytest.raises(ValueError, match="backlog_lines must be at least 1, got 0"):
        LineBroadcast(StreamLimits(backlog_lines=0))
    stream = LineBroadcast(StreamLimits(reader_lines=1))
    reader = stream.open_reader()
    stream.publish("kept")
    stream.publish("dropped")
    assert reader.read_nowait(100) == b"kept\n"
    assert reader.read_nowait(100) == lag_marker(1)
