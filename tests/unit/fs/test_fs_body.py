"""`anvild.fs.body.BodyBuffer`: a body written in many pieces on one open."""

from __future__ import annotations

import pytest

from anvild.fs.body import BodyBuffer, BodyError


@pytest.mark.parametrize(
    ("writes", "expected"),
    [
        ([], b""),
        ([(0, b"")], b""),
        ([(0, b"hello "), (6, b"world")], b"hello world"),
        # plan9port splits at 4096 bytes; v9fs at msize
        ([(i * 4096, b"x" * 4096) for i in range(5)], b"x" * 20480),
        # a resent tail after a short write overwrites in place
        ([(0, b"abcdef"), (3, b"DEF")], b"abcDEF"),
        ([(0, b"abcdef"), (2, b"Z")], b"abZdef"),
    ],
)
def test_writes_land_at_their_offsets(writes: list[tuple[int, bytes]], expected: bytes) -> None:
    body = BodyBuffer()
    for offset, data in writes:
        assert body.write(offset, data) == len(data)
    assert body.value() == expected
    assert body.writes == len(writes)
    assert len(body) == len(expected)


def test_a_gap_is_refused_with_what_to_do() -> None:
    body = BodyBuffer()
    body.write(0, b"abc")
    with pytest.raises(BodyError, match=r"offset 10 leaves a gap after the 3 bytes.*sequentially"):
        body.write(10, b"x")
    assert body.value() == b"abc"


def test_the_limit_is_enforced_without_growing() -> None:
    body = BodyBuffer(limit=8)
    body.write(0, b"12345678")
    with pytest.raises(BodyError, match="body too large: 9 bytes exceeds the limit of 8 bytes"):
        body.write(8, b"9")
    assert body.value() == b"12345678"


def test_truncate_starts_again() -> None:
    body = BodyBuffer()
    body.write(0, b"old")
    body.truncate()
    body.write(0, b"new")
    assert body.value() == b"new"


@pytest.mark.parametrize("limit", [-1, -100])
def test_negative_limit_is_a_bug(limit: int) -> None:
    with pytest.raises(ValueError, match="negative"):
        BodyBuffer(limit=limit)
