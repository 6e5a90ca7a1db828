"""`Cursor.on_ready`: one callback, called once by the next publish or close, never when a read
would already return, never two at once, and forgotten on request."""

from __future__ import annotations

from anvild.lines.broadcast import Broadcast, StreamLimits


def test_the_next_publish_calls_it_once() -> None:
    lines = Broadcast()
    cursor = lines.subscribe()
    calls: list[int] = []
    assert cursor.on_ready(lambda: calls.append(cursor.buffered))
    lines.publish("one")
    assert calls == [4]  # called after the line was buffered: a read now returns it
    lines.publish("two")
    assert calls == [4]
    assert cursor.read_nowait(100) == b"one\ntwo\n"


def test_not_registered_when_ready_or_taken_and_none_forgets() -> None:
    lines = Broadcast()
    cursor = lines.subscribe()
    calls: list[str] = []
    assert cursor.on_ready(lambda: calls.append("first"))
    assert not cursor.on_ready(lambda: calls.append("second"))  # one at a time
    assert cursor.on_ready(None)
    lines.publish("x")
    assert calls == []  # forgotten
    assert not cursor.on_ready(lambda: calls.append("ready"))  # a read returns at once
    assert calls == []


def test_a_dropped_line_and_the_ends_call_it() -> None:
    lines = Broadcast(StreamLimits(reader_lines=1))
    full = lines.subscribe()
    lines.publish("kept")
    calls: list[str] = []
    assert full.read_nowait(100) == b"kept\n"
    assert full.on_ready(lambda: calls.append("published"))
    lines.publish("a")
    lines.publish("b")  # dropped: the marker comes after "a"
    assert calls == ["published"]
    closing = lines.subscribe(backlog=False)
    assert closing.on_ready(lambda: calls.append("cursor closed"))
    closing.close()
    assert closing.read_nowait(100) == b""
    ended = lines.subscribe(backlog=False)
    assert ended.on_ready(lambda: calls.append("stream closed"))
    lines.close()
    assert calls == ["published", "cursor closed", "stream closed"]
    assert ended.read_nowait(100) == b""
