"""Body files check each Twrite: `BodyBuffer` framings, `JsonScanner`, and the handle's timing
(commit at the Twrite that completes a line or JSON value, refusals on the Twrite)."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from anvild.fs import BodyFile, Framing
from anvild.fs.body import (
    BodyBuffer,
    BodyMalformed,
    BodyNotText,
    BodyTooLarge,
    OneMessagePerOpen,
)
from anvild.fs.jsonscan import JsonMalformed, JsonScanner
from anvild.ninep import FsError, OpenMode
from anvild.ninep.errors import ERRNO, Busy, InvalidInput, NotFound, TooLarge, errno_of

WRITE = OpenMode(read=False, write=True, truncate=True)


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


# --- the errno table --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (InvalidInput, errno.EINVAL),
        (NotFound, errno.ENOENT),
        (Busy, errno.EBUSY),
        (TooLarge, errno.EFBIG),
        (FsError, errno.EIO),
    ],
)
def test_each_kind_carries_its_errno_from_the_one_table(kind: type[FsError], code: int) -> None:
    assert ERRNO[kind] == code
    assert kind("x").errno == code
    assert FsError("x", errno.EBADF).errno == errno.EBADF  # protocol refusals name theirs

    class Narrower(kind):  # type: ignore[valid-type,misc]
        pass

    assert errno_of(Narrower) == code


# --- UTF-8 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 4096])
def test_a_character_split_across_writes_is_fine(size: int) -> None:
    text = "héllo wörld — 日本語 🎉\n".encode() * 50
    body = BodyBuffer(text=True)
    offset = 0
    for piece in pieces(text, size):
        body.write(offset, piece)
        offset += len(piece)
    assert body.value() == text


@pytest.mark.parametrize(
    ("writes", "bad_offset"),
    [
        ([b"ok \xff"], 3),
        ([b"abc", b"\xe2\x82", b"x"], 3),  # a character cut, then not continued
        ([b"ab\xed\xa0\x80"], 2),  # an encoded surrogate
    ],
)
def test_invalid_utf8_is_refused_by_the_write_that_makes_it(
    writes: list[bytes], bad_offset: int
) -> None:
    body = BodyBuffer(text=True)
    offset = 0
    for data in writes[:-1]:
        body.write(offset, data)
        offset += len(data)
    with pytest.raises(BodyNotText, match=f"bad byte at offset {bad_offset}"):
        body.write(offset, writes[-1])


# --- lines ----------------------------------------------------------------------------------------


def test_a_line_is_complete_at_its_newline() -> None:
    body = BodyBuffer(framing=Framing.LINE)
    body.write(0, b"revie")
    assert body.message is None
    body.write(5, b"wer\n")
    assert body.message == b"reviewer\n"
    body.write(9, b"\n  ")  # blanks after it are harmless
    with pytest.raises(OneMessagePerOpen, match="one message per open"):
        body.write(12, b"tester\n")


def test_text_after_the_line_in_one_write_is_refused() -> None:
    with pytest.raises(BodyMalformed, match="one line per open"):
        BodyBuffer(framing=Framing.LINE).write(0, b"a\nb\n")


# --- JSON ---------------------------------------------------------------------------------------


def scan(*parts: str, max_depth: int | None = None) -> int | None:
    scanner = JsonScanner(max_depth=max_depth)
    text = ""
    result = None
    for part in parts:
        text += part
        result = scanner.feed(text)
    return result


@pytest.mark.parametrize(
    ("parts", "end"),
    [
        (['{"a": 1}'], 8),
        (['{"a": 1', "}\n"], 8),
        (['{"a": "x\\', "u00e9", '"}'], 16),
        (['{"a": tr', "ue}"], 11),
        (["[1, 2.5e", "3, null]"], 16),
        (['"text"'], 6),
        (["12"], None),  # may become 123
        (["12 "], 2),
        (['{"a": [', "{}, []"], None),
    ],
)
def test_the_scanner_finds_where_the_value_ends(parts: list[str], end: int | None) -> None:
    assert scan(*parts) == end


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{bad", "line 1 column 2"),
        ('{"a" 1}', "line 1 column 6"),
        ('{"a": 1,}', "line 1 column 9"),
        ("[1 2]", "line 1 column 4"),
        ('{"a": 01}', "line 1 column 7"),
        ('{"a": trux}', "line 1 column 7"),
        ('{\n "a": "\x01"}', "line 2 column 8"),
        ("]", "line 1 column 1"),
    ],
)
def test_the_scanner_refuses_at_the_first_impossible_character(text: str, where: str) -> None:
    with pytest.raises(JsonMalformed, match=f"malformed JSON at {where}"):
        scan(text)


@pytest.mark.parametrize("name", ["NaN", "Infinity", "-Infinity"])
def test_the_scanner_names_what_python_writes_for_non_finite_numbers(name: str) -> None:
    with pytest.raises(JsonMalformed, match=f"^{name} is not a JSON number"):
        scan('{"x": [1, ' + name[:2])


def test_the_scanner_bounds_nesting() -> None:
    with pytest.raises(JsonMalformed, match="JSON nested deeper than 64 levels"):
        scan("[" * 65, max_depth=64)
    assert scan("[" * 64, max_depth=64) is None


@settings(max_examples=200, deadline=None)
@given(
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=20,
    ),
    cuts=st.lists(st.integers(min_value=0), max_size=6),
    ascii_only=st.booleans(),
)
def test_any_value_cut_anywhere_ends_exactly_where_json_says(
    value: object, cuts: list[int], ascii_only: bool
) -> None:
    text = json.dumps({"v": value}, ensure_ascii=ascii_only)
    points = sorted({c % len(text) for c in cuts} - {0})
    parts = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert scan(*parts) == len(text)


def test_a_json_message_in_8k_writes_is_complete_at_its_last_write() -> None:
    message = json.dumps({"to": "rev", "body": "é" * 40_000}).encode()  # 80 KiB
    body = BodyBuffer(1 << 20, framing=Framing.JSON)
    offset = 0
    parts = pieces(message, 8192)
    for i, part in enumerate(parts):
        body.write(offset, part)
        offset += len(part)
        assert (body.message is not None) == (i == len(parts) - 1)
    assert body.message == message


def test_a_second_value_in_one_write_is_refused() -> None:
    with pytest.raises(OneMessagePerOpen, match="more than one JSON value"):
        BodyBuffer(framing=Framing.JSON).write(0, b'{"a":1} {"b":2}')


def test_the_limit_still_applies() -> None:
    with pytest.raises(BodyTooLarge, match="limit of 8 bytes"):
        BodyBuffer(8, framing=Framing.JSON).write(0, b'{"a": 12}')


# --- the handle: when a body is committed, and what a refused open does --------------------------


def make(framing: Framing, admit: Callable[[], None] | None = None) -> tuple[BodyFile, list[bytes]]:
    committed: list[bytes] = []

    async def commit(data: bytes) -> None:
        if b"nosuch" in data:
            raise InvalidInput("role: unknown role 'nosuch'")
        committed.append(data)

    return BodyFile("f", commit, framing=framing, admit=admit), committed


async def test_a_line_is_committed_by_the_write_that_ends_it() -> None:
    node, committed = make(Framing.LINE)
    handle = await node.open(WRITE)
    assert handle.write_blocks  # it may wait for the commit: the server gives it a task
    await handle.write(0, b"tes")
    assert committed == []
    await handle.write(3, b"ter\n")
    assert committed == [b"tester\n"]
    with pytest.raises(InvalidInput, match="one message per open"):
        await handle.write(7, b"more\n")
    await handle.clunk()
    assert committed == [b"tester\n"]


async def test_a_refused_commit_fails_its_twrite_then_every_later_call() -> None:
    node, committed = make(Framing.LINE)
    handle = await node.open(WRITE)
    with pytest.raises(InvalidInput, match="unknown role 'nosuch'") as info:
        await handle.write(0, b"nosuch\n")
    assert info.value.errno == errno.EINVAL
    with pytest.raises(InvalidInput, match="unknown role"):
        await handle.write(7, b"\n")
    with pytest.raises(InvalidInput, match="unknown role"):
        await handle.clunk()
    assert committed == []


async def test_a_line_without_its_newline_is_committed_at_clunk() -> None:
    node, committed = make(Framing.LINE)
    handle = await node.open(WRITE)
    await handle.write(0, b"tester")  # `9p rdwr`, `echo -n`
    await handle.clunk()
    assert committed == [b"tester"]


async def test_a_truncating_open_without_writes_is_no_message() -> None:
    node, committed = make(Framing.JSON)
    handle = await node.open(WRITE)  # 9pfuse's OWRITE|OTRUNC before a shell's `>`
    await handle.clunk()
    assert committed == []


async def test_admit_is_asked_at_every_write_of_a_whole_body() -> None:
    state = {"open": True}

    def admit() -> None:
        if not state["open"]:
            raise Busy("in: session s1 is stopped: write `start` to its ctl to resume it")

    node, committed = make(Framing.WHOLE, admit)
    handle = await node.open(WRITE)
    assert not handle.write_blocks  # checked inline: no task per write
    await handle.write(0, b"part one ")
    state["open"] = False
    with pytest.raises(Busy, match="is stopped") as info:
        await handle.write(9, b"part two")
    assert info.value.errno == errno.EBUSY
    with pytest.raises(Busy):
        await handle.clunk()
    assert committed == []


async def test_invalid_utf8_fails_the_write_with_einval() -> None:
    node, committed = make(Framing.WHOLE)
    handle = await node.open(WRITE)
    with pytest.raises(InvalidInput, match=r"f: not valid UTF-8 \(bad byte at offset 0\)") as info:
        await handle.write(0, b"\xff" * 1000)
    assert info.value.errno == errno.EINVAL
    with pytest.raises(InvalidInput):
        await handle.clunk()
    assert committed == []


async def test_a_clunk_pipelined_behind_the_completing_write_delivers_nothing_twice() -> None:
    gate = trio.Event()
    committed: list[bytes] = []

    async def commit(data: bytes) -> None:
        await gate.wait()  # the delivery takes a while (a disk write)
        committed.append(data)

    node = BodyFile("outbox", commit, framing=Framing.JSON)
    handle = await node.open(WRITE)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handle.write, 0, b'{"a": 1}')
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(handle.clunk)  # sent before the Rwrite came back
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert committed == [b'{"a": 1}']
