"""The 9P codec: round trips for every message in every dialect, strictness, fuzzing, framing."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anvild.ninep import messages as m
from anvild.ninep.constants import MAXWELEM, NONUNAME, Dialect
from anvild.ninep.errors import ProtocolError, UnknownMessageError
from anvild.ninep.framing import FrameReader

DIALECTS = list(Dialect)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)
text = st.text(max_size=40)
qids = st.builds(m.Qid, u8, u32, u64)


def stats(dialect: Dialect) -> st.SearchStrategy[m.Stat]:
    if dialect is Dialect.P9P2000_U:
        return st.builds(m.Stat, u16, u32, qids, u32, u32, u32, u64, text, text, text, text,
                         text, u32, u32, u32)  # fmt: skip
    return st.builds(m.Stat, u16, u32, qids, u32, u32, u32, u64, text, text, text, text)


def field_strategy(kind: str, dialect: Dialect) -> st.SearchStrategy[Any]:
    return {
        "u8": u8,
        "u16": u16,
        "u32": u32,
        "u32opt": u32,
        "u64": u64,
        "s": text,
        "qid": qids,
        "data": st.binary(max_size=300),
        "wnames": st.lists(text, max_size=MAXWELEM).map(tuple),
        "qids": st.lists(qids, max_size=MAXWELEM).map(tuple),
        "stat": stats(dialect),
    }[kind]


def message_strategy(cls: type[m.Message], dialect: Dialect) -> st.SearchStrategy[m.Message]:
    fields = {name: field_strategy(kind, dialect) for name, kind in cls.layout(dialect)}
    return st.builds(cls, tag=u16, **fields)


CASES = [
    (dialect, cls)
    for dialect in DIALECTS
    for cls in m.MESSAGE_TYPES[dialect].values()
]  # fmt: skip


def test_every_dialect_has_its_messages() -> None:
    l_types = m.MESSAGE_TYPES[Dialect.P9P2000_L]
    for name in ("Tlopen", "Tgetattr", "Treaddir", "Tstatfs", "Rlerror", "Tfsync", "Tmkdir",
                 "Txattrwalk", "Treadlink", "Tsymlink", "Tmknod", "Trename", "Trenameat",
                 "Tunlinkat", "Tlink", "Txattrcreate", "Tlock", "Tgetlock", "Tsetattr",
                 "Tlcreate"):  # fmt: skip
        assert getattr(m, name).TYPE in l_types, name
    classic = m.MESSAGE_TYPES[Dialect.P9P2000]
    for name in ("Tversion", "Tauth", "Tattach", "Rerror", "Tflush", "Twalk", "Topen",
                 "Tcreate", "Tread", "Twrite", "Tclunk", "Tremove", "Tstat", "Twstat"):  # fmt: skip
        assert getattr(m, name).TYPE in classic, name
        reply = getattr(m, "R" + name[1:]) if name != "Rerror" else m.Rerror
        assert reply.TYPE in classic
    # Every T-message has its R-message in the same dialect (type + 1).
    for table in m.MESSAGE_TYPES.values():
        for number, cls in table.items():
            if cls.__name__.startswith("T"):
                assert table[number + 1].__name__ == "R" + cls.__name__[1:]


@pytest.mark.parametrize(("dialect", "cls"), CASES, ids=lambda x: getattr(x, "__name__", x))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_round_trip(dialect: Dialect, cls: type[m.Message], data: st.DataObject) -> None:
    msg = data.draw(message_strategy(cls, dialect))
    frame = m.encode(msg, dialect)
    assert struct.unpack_from("<I", frame)[0] == len(frame)
    assert frame[4] == cls.TYPE
    assert m.decode(frame, dialect) == msg
    # The frame reader gives the same frame back however the bytes are split.
    reader = FrameReader(len(frame))
    cut = data.draw(st.integers(0, len(frame)))
    reader.feed(frame[:cut])
    assert reader.frames() == ([] if cut < len(frame) else [frame])
    reader.feed(frame[cut:])
    assert reader.frames() == ([frame] if cut < len(frame) else [])


@pytest.mark.parametrize(("dialect", "cls"), CASES, ids=lambda x: getattr(x, "__name__", x))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_truncated_or_extended_frames_fail_cleanly(
    dialect: Dialect, cls: type[m.Message], data: st.DataObject
) -> None:
    frame = m.encode(data.draw(message_strategy(cls, dialect)), dialect)
    cut = data.draw(st.integers(0, len(frame) - 1))
    short = bytearray(frame[:cut])
    if len(short) >= 4:
        struct.pack_into("<I", short, 0, len(short))
    if not (cls is m.Tfsync and cut == 11):  # Tfsync without datasync is valid (older senders)
        with pytest.raises(ProtocolError):
            m.decode(bytes(short), dialect)
    extra = data.draw(st.binary(min_size=1, max_size=8))
    longer = bytearray(frame + extra)
    struct.pack_into("<I", longer, 0, len(longer))
    if cls is m.Tfsync and len(extra) == 4 and len(frame) == 11:
        return  # a Tfsync without datasync plus 4 bytes is a Tfsync with datasync
    with pytest.raises(ProtocolError):
        m.decode(bytes(longer), dialect)


def test_dialect_specific_layouts() -> None:
    attach = m.Tattach(1, 2, 3, "u", "a", 42)
    classic = m.encode(attach, Dialect.P9P2000)
    dotu = m.encode(attach, Dialect.P9P2000_U)
    assert len(dotu) == len(classic) + 4
    assert m.decode(classic, Dialect.P9P2000).n_uname == NONUNAME  # type: ignore[attr-defined]
    assert m.decode(dotu, Dialect.P9P2000_L) == attach
    err = m.Rerror(0, "gone", 2)
    assert m.decode(m.encode(err, Dialect.P9P2000_U), Dialect.P9P2000_U) == err
    assert m.decode(m.encode(err, Dialect.P9P2000), Dialect.P9P2000) == m.Rerror(0, "gone")
    # Tfsync without datasync (older senders) decodes with datasync 0.
    assert m.decode(bytes.fromhex("0b00000032010007000000"), Dialect.P9P2000_L) == m.Tfsync(1, 7, 0)


@pytest.mark.parametrize(
    ("frame", "dialect", "message"),
    [
        ("0700000064", Dialect.P9P2000, "shorter than a 9P header"),
        ("1400000064ffff002000000600395032303030", Dialect.P9P2000, "size field says 20"),
        ("1400000064ffff00200000060039503230303000", Dialect.P9P2000, "trailing"),
        ("1300000064ffff00200000070039503230303000"[:38], Dialect.P9P2000, "needs 7 bytes"),
        ("0e00000064ffff002000000200ff", Dialect.P9P2000, "truncated"),
        ("0f00000064ffff002000000200fffe", Dialect.P9P2000, "UTF-8"),
        ("0c0000007c00000100000000", Dialect.P9P2000, "trailing"),
    ],
)
def test_malformed_frames(frame: str, dialect: Dialect, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        m.decode(bytes.fromhex(frame), dialect)


def test_walk_limits() -> None:
    names = tuple(str(i) for i in range(MAXWELEM + 1))
    with pytest.raises(ProtocolError, match="at most 16"):
        m.encode(m.Twalk(0, 0, 1, names), Dialect.P9P2000)
    body = struct.pack("<IIH", 0, 1, MAXWELEM + 1) + b"\0\0" * (MAXWELEM + 1)
    frame = struct.pack("<IBH", 7 + len(body), m.Twalk.TYPE, 0) + body
    with pytest.raises(ProtocolError, match="at most 16"):
        m.decode(frame, Dialect.P9P2000)


def test_stat_size_must_agree() -> None:
    stat = m.Stat(0, 0, m.Qid(0, 0, 1), 0o644, 0, 0, 0, "f", "u", "g", "")
    frame = bytearray(m.encode(m.Rstat(3, stat), Dialect.P9P2000))
    frame[7] += 1  # outer stat length one more than the entry (and the frame)
    frame += b"\0"
    struct.pack_into("<I", frame, 0, len(frame))
    with pytest.raises(ProtocolError):
        m.decode(bytes(frame), Dialect.P9P2000)


def test_unknown_types_carry_the_tag() -> None:
    with pytest.raises(UnknownMessageError) as info:
        m.decode(bytes.fromhex("0b0000000c2a0001000000"), Dialect.P9P2000)  # Tlopen in 9P2000
    assert info.value.tag == 42
    assert info.value.msg_type == 12
    assert "not part of 9P2000" in str(info.value)
    with pytest.raises(UnknownMessageError):
        m.decode(bytes.fromhex("0b0000007c00000100000000"[:22]), Dialect.P9P2000_L)  # Tstat in .L
    with pytest.raises(UnknownMessageError):
        m.decode(bytes.fromhex("070000006a0000"), Dialect.P9P2000)  # Terror does not exist


def test_encode_rejects_out_of_range_values() -> None:
    with pytest.raises(ProtocolError):
        m.encode(m.Tclunk(0x10000, 1), Dialect.P9P2000)
    with pytest.raises(ProtocolError):
        m.encode(m.Tclunk(0, -1), Dialect.P9P2000)
    with pytest.raises(ProtocolError):
        m.encode(m.Rerror(0, "x" * 70000), Dialect.P9P2000)


def test_directory_entries() -> None:
    stat = m.Stat(0, 0, m.Qid(0x80, 1, 9), 0o40000755, 1, 2, 0, "dir", "u", "g", "m")
    for dialect in (Dialect.P9P2000, Dialect.P9P2000_U):
        data = m.encode_stat(stat, dialect) * 3
        assert m.decode_stats(data, dialect) == [stat] * 3
        assert m.decode_stat(m.encode_stat(stat, dialect), dialect) == stat
        with pytest.raises(ProtocolError):
            m.decode_stats(data[:-1], dialect)
    ents = [m.Dirent(m.Qid(0, 0, i), i + 1, 8, f"n{i}") for i in range(3)]
    assert m.decode_dirents(b"".join(m.encode_dirent(e) for e in ents)) == ents


@settings(max_examples=800, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(DIALECTS))
def test_random_bytes_raise_only_protocol_errors(data: bytes, dialect: Dialect) -> None:
    with contextlib.suppress(ProtocolError):
        m.decode(data, dialect)
    reader = FrameReader(4096)
    reader.feed(data)
    try:
        for frame in reader.frames():
            with contextlib.suppress(ProtocolError):
                m.decode(frame, dialect)
    except ProtocolError:
        pass


@settings(max_examples=800, deadline=None)
@given(
    st.sampled_from(sorted({c.TYPE for t in m.MESSAGE_TYPES.values() for c in t.values()})),
    st.binary(max_size=120),
    st.sampled_from(DIALECTS),
)
def test_random_bodies_of_real_types_raise_only_protocol_errors(
    type_: int, body: bytes, dialect: Dialect
) -> None:
    frame = struct.pack("<IBH", 7 + len(body), type_, 1) + body
    with contextlib.suppress(ProtocolError):
        m.decode(frame, dialect)


def test_frame_reader_bounds() -> None:
    reader = FrameReader(100)
    reader.feed(struct.pack("<I", 101))
    with pytest.raises(ProtocolError, match="exceeds the negotiated maximum"):
        reader.next_frame()
    reader = FrameReader(100)
    reader.feed(struct.pack("<I", 6) + b"\0\0")
    with pytest.raises(ProtocolError, match="smaller than the 7-byte"):
        reader.next_frame()
    reader = FrameReader(100)
    reader.feed(b"\x07\0")
    assert reader.next_frame() is None
    reader.feed(b"\0\0\x64\0\0" + b"\x07\0\0\0\x64\0\0")
    assert reader.frames() == [b"\x07\0\0\0\x64\0\0"] * 2
    assert reader.buffered == 0
