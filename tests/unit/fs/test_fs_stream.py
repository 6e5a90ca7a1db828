"""The pure line broadcast (`anvild.fs.stream.Broadcast`) and its trio reader."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import trio
import trio.testing

from anvild.fs.stream import Broadcast, LineStream, StreamLimits, lag_marker


def drain(read: Callable[[int], bytes | None], count: int = 1 << 20) -> bytes:
    out = b""
    while True:
        chunk = read(count)
        if not chunk:
            return out
        out += chunk


def test_lag_marker_is_one_json_line() -> None:
    line = lag_marker(7)
    assert line.endswith(b"\n")
    assert json.loads(line) == {"type": "lagged", "dropped": 7}


@pytest.mark.parametrize(
    ("published", "backlog", "expected"),
    [
        ([], 3, b""),
        (["a"], 3, b"a\n"),
        (["a", "b", "c", "d"], 3, b"b\nc\nd\n"),
        (["a\n", b"b"], 3, b"a\nb\n"),
    ],
)
def test_new_reader_starts_with_the_bounded_backlog(
    published: list[str | bytes], backlog: int, expected: bytes
) -> None:
    b = Broadcast(StreamLimits(backlog_lines=backlog))
    for line in published:
        b.publish(line)
    cursor = b.subscribe()
    assert drain(cursor.read_nowait) == expected
    assert cursor.read_nowait(10) is None  # nothing more, not the end


def test_reader_without_backlog_sees_only_new_lines() -> None:
    b = Broadcast()
    b.publish("old")
    cursor = b.subscribe(backlog=False)
    assert cursor.read_nowait(100) is None
    b.publish("new")
    assert cursor.read_nowait(100) == b"new\n"


def test_each_reader_has_its_own_cursor() -> None:
    b = Broadcast()
    first = b.subscribe()
    b.publish("one")
    second = b.subscribe()
    b.publish("two")
    assert first.read_nowait(100) == b"one\ntwo\n"
    assert second.read_nowait(100) == b"one\ntwo\n"
    b.publish("three")
    assert first.read_nowait(100) == b"three\n"
    assert second.read_nowait(100) == b"three\n"


@pytest.mark.parametrize(
    ("lines", "count", "reads"),
    [
        # whole lines while they fit
        (["aa", "bb", "cc"], 6, [b"aa\nbb\n", b"cc\n"]),
        # a line is not split when it would fit into a later read
        (["aa", "bbbb"], 4, [b"aa\n", b"bbbb", b"\n"]),
        # a line longer than the count is split across reads
        (["abcdefgh"], 3, [b"abc", b"def", b"gh\n"]),
        # the rest of a split line comes first, then whole lines
        (["abcde", "x"], 4, [b"abcd", b"e\nx\n"]),
    ],
)
def test_reads_return_whole_lines_and_split_only_long_ones(
    lines: list[str], count: int, reads: list[bytes]
) -> None:
    b = Broadcast()
    cursor = b.subscribe()
    for line in lines:
        b.publish(line)
    assert [cursor.read_nowait(count) for _ in reads] == reads
    assert cursor.read_nowait(count) is None


def test_overflow_drops_lines_and_says_so_where_the_gap_is() -> None:
    b = Broadcast(StreamLimits(reader_lines=3))
    cursor = b.subscribe()
    for i in range(10):
        b.publish(str(i))
    # 0, 1, 2 fit; 3..9 are dropped; the buffer is full so no marker is queued yet.
    assert cursor.dropped == 7
    assert cursor.read_nowait(1 << 10) == b"0\n1\n2\n"
    b.publish("10")
    assert cursor.read_nowait(1 << 10) == lag_marker(7) + b"10\n"
    assert cursor.dropped == 0


def test_a_drained_reader_gets_the_marker_even_if_nothing_else_comes() -> None:
    b = Broadcast(StreamLimits(reader_lines=2))
    cursor = b.subscribe()
    for i in range(5):
        b.publish(str(i))
    assert cursor.read_nowait(100) == b"0\n1\n"
    assert cursor.read_nowait(100) == lag_marker(3)
    assert cursor.read_nowait(100) is None


def test_byte_bound_applies_too() -> None:
    b = Broadcast(StreamLimits(reader_lines=1000, reader_bytes=10))
    cursor = b.subscribe()
    b.publish("12345678")  # 9 bytes with the newline
    b.publish("abc")  # would make 13: dropped
    assert cursor.buffered == 9
    assert cursor.dropped == 1


def test_memory_per_reader_is_bounded_however_much_is_published() -> None:
    limits = StreamLimits(reader_lines=16, reader_bytes=1 << 10)
    b = Broadcast(limits)
    cursor = b.subscribe()
    for i in range(100_000):
        b.publish(f"line {i}")
    assert cursor.buffered <= limits.reader_bytes
    assert cursor.dropped == 100_000 - 16


def test_close_ends_every_reader_after_what_it_holds() -> None:
    b = Broadcast()
    cursor = b.subscribe()
    b.publish("last")
    b.close()
    assert cursor.read_nowait(100) == b"last\n"
    assert cursor.read_nowait(100) == b""
    late = b.subscribe()  # a reader arriving after the end sees the backlog, then EOF
    assert late.read_nowait(100) == b"last\n"
    assert late.read_nowait(100) == b""
    with pytest.raises(RuntimeError, match="closed"):
        b.publish("more")


def test_unsubscribe_forgets_the_reader() -> None:
    b = Broadcast()
    cursor = b.subscribe()
    assert b.statistics().readers == 1
    b.unsubscribe(cursor)
    b.unsubscribe(cursor)  # harmless twice
    assert b.statistics().readers == 0
    b.publish("x")
    assert cursor.read_nowait(10) is None


@pytest.mark.parametrize("line", ["a\nb", "\n\n", b"x\ny\n"])
def test_a_line_with_an_inner_newline_is_refused(line: str | bytes) -> None:
    with pytest.raises(ValueError, match="newline"):
        Broadcast().publish(line)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="reader_lines"):
        StreamLimits(reader_lines=0)


def test_zero_count_read_returns_nothing_and_keeps_data() -> None:
    b = Broadcast()
    cursor = b.subscribe()
    b.publish("x")
    assert cursor.read_nowait(0) == b""
    assert cursor.read_nowait(10) == b"x\n"


# --- the trio side --------------------------------------------------------------------------


async def test_read_waits_for_the_next_line(autojump_clock: trio.testing.MockClock) -> None:
    stream = LineStream()
    reader = stream.open_reader()
    got: list[bytes] = []

    async def read() -> None:
        got.append(await reader.read(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.sleep(5)
        assert got == []
        stream.publish("hello")
    assert got == [b"hello\n"]
    assert stream.last_publish_ns > 0


async def test_cancelling_a_blocked_read_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = LineStream()
    reader = stream.open_reader()
    with trio.move_on_after(1) as scope:
        await reader.read(100)
    assert scope.cancelled_caught
    reader.close()
    assert stream.statistics().readers == 0
    stream.publish("after")  # the closed reader no longer buffers anything
    assert reader.cursor.read_nowait(100) == b""


async def test_close_of_the_reader_releases_a_waiting_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = LineStream()
    reader = stream.open_reader()
    got: list[bytes] = []

    async def read() -> None:
        got.append(await reader.read(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.sleep(1)
        reader.close()
    assert got == [b""]


async def test_closing_the_stream_ends_waiting_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = LineStream()
    readers = [stream.open_reader() for _ in range(3)]
    got: list[bytes] = []

    async def read(i: int) -> None:
        got.append(await readers[i].read(100))

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(read, i)
        await trio.sleep(1)
        stream.close()
    assert got == [b"", b"", b""]
