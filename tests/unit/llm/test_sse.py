"""SSE decoder: WHATWG event-stream interpretation, chunking independence and size bounds.

Expected events in the hand-written cases are written out by hand from the specification, not
produced by the decoder.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterable
from pathlib import Path

import pytest

from anvild.llm.errors import DecodeError
from anvild.llm.sse import SseDecoder, SseEvent

RECORDED = Path(__file__).resolve().parents[3] / "fixtures" / "recorded"
RAW_FIXTURES = sorted(RECORDED.rglob("*.sse"))


def decode(chunks: Iterable[bytes], **limits: int) -> list[SseEvent]:
    decoder = SseDecoder(**limits)
    events: list[SseEvent] = []
    for chunk in chunks:
        events.extend(decoder.push(chunk))
    events.extend(decoder.finish())
    return events


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_there_are_raw_fixtures() -> None:
    assert len(RAW_FIXTURES) >= 15


@pytest.mark.parametrize("path", RAW_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_fixture_decodes_identically_however_it_is_chunked(path: Path) -> None:
    data = path.read_bytes()
    whole = decode([data])
    assert whole, "every recorded stream carries events"
    assert decode(bytewise(data)) == whole
    for cut in range(len(data) + 1):
        two = decode([data[:cut], data[cut:]])
        assert two == whole, f"split at byte {cut} changed the events"


E = SseEvent

HAND_WRITTEN = [
    ("bom_then_data", [b"\xef\xbb\xbfdata: hello\n\n"], [E("message", "hello")]),
    ("bom_split_across_chunks", [b"\xef", b"\xbb", b"\xbfdata: x\n\n"], [E("message", "x")]),
    (
        "bom_only_stripped_once",  # the second BOM belongs to the field name: an unknown field
        [b"\xef\xbb\xbf\xef\xbb\xbfdata: lost\n\ndata: kept\n\n"],
        [E("message", "kept")],
    ),
    (
        "crlf",
        [b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n"],
        [E("a", "1"), E("message", "2")],
    ),
    ("crlf_split_between_cr_and_lf", [b"data: a\r", b"\n\r", b"\n"], [E("message", "a")]),
    ("lone_cr", [b"data: x\rdata: y\r\rdata: z\r\r"], [E("message", "x\ny"), E("message", "z")]),
    ("comment_only", [b": keep-alive\n\n:another\n\n"], []),
    ("data_less_event_not_dispatched", [b"event: ping\n\n"], []),
    (
        "type_resets_but_id_persists",
        [b"event: ping\nid: 7\n\ndata: z\n\nid: 8\ndata: w\n\n"],
        [E("message", "z", "7"), E("message", "w", "8")],
    ),
    (
        "id_with_nul_ignored",
        [b"id: 1\ndata: a\n\nid: 2\x00\ndata: b\n\n"],
        [E("message", "a", "1"), E("message", "b", "1")],
    ),
    ("unterminated_tail_discarded", [b"data: a\n\ndata: b\n"], [E("message", "a")]),
    ("unterminated_without_newline", [b"data: a\n\ndata: b"], [E("message", "a")]),
    ("multi_line_data", [b"data: l1\ndata: l2\ndata:\n\n"], [E("message", "l1\nl2\n")]),
    (
        "emoji_split_across_chunks",
        ["data: 🦀 é\n\n".encode()[:7], "data: 🦀 é\n\n".encode()[7:]],
        [E("message", "🦀 é")],
    ),
    (
        "space_after_colon_optional",
        [b"data:x\n\ndata: x\n\ndata:  x\n\n"],
        [E("message", "x"), E("message", "x"), E("message", " x")],
    ),
    ("field_without_colon", [b"data\n\n"], [E("message", "")]),
    ("empty_event_type_means_message", [b"event:\ndata: d\n\n"], [E("message", "d")]),
    ("unknown_fields_ignored", [b"foo: bar\ndata: d\nretry: 10\n\n"], [E("message", "d")]),
    ("leading_blank_lines", [b"\n\n\ndata: d\n\n"], [E("message", "d")]),
    (
        "blank_line_across_chunks",
        [b"data: a\n", b"\n", b"data: b\n", b"\ndata: c\n\n"],
        [E("message", "a"), E("message", "b"), E("message", "c")],
    ),
]


@pytest.mark.parametrize(
    ("chunks", "expected"), [c[1:] for c in HAND_WRITTEN], ids=[c[0] for c in HAND_WRITTEN]
)
def test_hand_written_case(chunks: list[bytes], expected: list[SseEvent]) -> None:
    assert decode(chunks) == expected
    joined = b"".join(chunks)
    assert decode([joined]) == expected
    assert decode(bytewise(joined)) == expected


def test_retry_field_is_recorded() -> None:
    decoder = SseDecoder()
    decoder.push(b"retry: 1500\n\nretry: soon\n\n")
    assert decoder.retry_ms == 1500


def test_finish_reports_discarded_bytes_and_refuses_more_input() -> None:
    decoder = SseDecoder()
    assert decoder.push(b"data: a\n\ndata: partial") == [E("message", "a")]
    assert decoder.finish() == []
    assert decoder.discarded_bytes == len(b"data: partial")
    with pytest.raises(DecodeError):
        decoder.push(b"\n\n")


def test_oversized_line_fails_while_still_incomplete() -> None:
    decoder = SseDecoder(max_line_bytes=100, max_event_bytes=10_000)
    decoder.push(b"data: " + b"x" * 50)
    with pytest.raises(DecodeError, match="line exceeds 100 bytes"):
        decoder.push(b"x" * 60)


def test_oversized_line_fails_inside_one_chunk() -> None:
    with pytest.raises(DecodeError, match="line exceeds 100 bytes"):
        decode([b"data: " + b"x" * 200 + b"\n\n"], max_line_bytes=100)


def test_oversized_event_fails_before_buffering_it() -> None:
    decoder = SseDecoder(max_line_bytes=100, max_event_bytes=1000)
    line = b"data: " + b"y" * 90 + b"\n"
    with pytest.raises(DecodeError, match="event exceeds 1000 bytes"):
        for _ in range(20):
            decoder.push(line)
    assert decoder._pending_len <= 1000


def test_oversized_event_fails_inside_one_chunk() -> None:
    line = b"data: " + b"y" * 90 + b"\n"
    with pytest.raises(DecodeError, match="event exceeds 1000 bytes"):
        decode([line * 20 + b"\n"], max_line_bytes=100, max_event_bytes=1000)


def test_many_short_lines_are_fine_under_the_line_limit() -> None:
    line = b"data: " + b"z" * 90 + b"\n"
    events = decode([line * 20 + b"\n"], max_line_bytes=100, max_event_bytes=10_000)
    assert len(events) == 1
    assert events[0].data.count("\n") == 19


def _stream(n_events: int) -> Iterable[bytes]:
    """A synthetic provider-like stream, produced lazily in 4 KiB chunks."""
    buffer = bytearray()
    for i in range(n_events):
        payload = b'{"type":"content_block_delta","index":0,"delta":{"text":"' + b"w" * (i % 97)
        buffer += b"event: content_block_delta\r\ndata: " + payload + b'"}}\r\n\r\n'
        while len(buffer) >= 4096:
            yield bytes(buffer[:4096])
            del buffer[:4096]
    yield bytes(buffer)


def _peak_while_decoding(n_events: int) -> tuple[int, int]:
    decoder = SseDecoder()
    count = 0
    tracemalloc.start()
    try:
        for chunk in _stream(n_events):
            count += len(decoder.push(chunk))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return count, peak


def test_memory_is_flat_in_stream_length() -> None:
    # ~1 MB and ~10 MB of stream (about 125 bytes per event).
    small_count, small_peak = _peak_while_decoding(8_000)
    large_count, large_peak = _peak_while_decoding(80_000)
    assert (small_count, large_count) == (8_000, 80_000)
    assert large_peak <= small_peak * 1.10, (small_peak, large_peak)
