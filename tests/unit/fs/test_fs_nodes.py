"""The node kinds of `anvild.fs.nodes`, driven directly through the `Node`/`Handle` interface."""

from __future__ import annotations

import errno
import json

import pytest
import trio
import trio.testing

from anvild.fs import (
    BodyFile,
    Command,
    CommandError,
    CommandSpec,
    CommandTable,
    CtlFile,
    Directory,
    DynamicChildren,
    LineStream,
    SnapshotFile,
    StreamFile,
    StreamLimits,
    ValueFile,
    owner_names,
)
from anvild.ninep import DMDIR, FsError, Handle, Node, OpenMode, StatChange

READ = OpenMode(read=True, write=False)
WRITE = OpenMode(read=False, write=True, truncate=True)  # plan9port `9p write`: OWRITE|OTRUNC
RDWR = OpenMode(read=True, write=True)


async def read_all(handle: Handle, count: int = 7) -> bytes:
    """Read a file the way `cat` does: sequential offsets until an empty read."""
    out = b""
    while chunk := await handle.read(len(out), count):
        out += chunk
    return out


# --- qids and stat --------------------------------------------------------------------------


def test_qid_paths_are_unique_and_stable() -> None:
    nodes = [SnapshotFile(f"f{i}", lambda: "") for i in range(100)]
    paths = {n.stat().qid_path for n in nodes}
    assert len(paths) == 100
    assert [n.stat().qid_path for n in nodes] == [n.stat().qid_path for n in nodes]


def test_stat_reports_owner_mode_and_zero_length() -> None:
    f = SnapshotFile("version", lambda: "x" * 100)
    st = f.stat()
    assert (st.name, st.mode, st.length) == ("version", 0o444, 0)
    assert (st.owner, st.group) == owner_names()
    assert st.mtime_ns > 0
    d = Directory("d")
    assert d.stat().mode == DMDIR | 0o555
    assert d.stat().qid.type & 0x80


def test_touch_moves_mtime_and_a_file_keeps_qid_version_0() -> None:
    # Linux's v9fs caches a file whose qid.version is not 0; ours are made per open.
    f = SnapshotFile("list", lambda: "")
    before = f.stat()
    f.touch()
    after = f.stat()
    assert (before.version, after.version, after.qid.version) == (0, 0, 0)
    assert after.mtime_ns >= before.mtime_ns
    assert after.qid_path == before.qid_path
    assert after.length == 0
    assert after.qid.type == 0  # QTFILE: no QTAPPEND/QTEXCL, which v9fs would cache


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "nul\x00"])
def test_invalid_names_are_bugs(name: str) -> None:
    with pytest.raises(ValueError, match="invalid file name"):
        SnapshotFile(name, lambda: "")


# --- directories ----------------------------------------------------------------------------


class Sessions(DynamicChildren):
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}

    async def entries(self) -> list[Node]:
        return list(self.nodes.values())

    async def lookup(self, name: str) -> Node | None:
        if name == "alias":  # reachable, not listed
            return self.nodes.get("r1")
        return await super().lookup(name)


async def test_directory_static_then_dynamic_children() -> None:
    sessions = Sessions()
    ctl = SnapshotFile("ctl", lambda: "")
    d = Directory("agent", [ctl], dynamic=sessions)
    r1 = Directory("r1")
    sessions.nodes["r1"] = r1
    assert [n.stat().name for n in await d.list()] == ["ctl", "r1"]
    assert await d.walk("ctl") is ctl
    assert await d.walk("r1") is r1
    assert await d.walk("alias") is r1
    assert await d.walk("nope") is None


async def test_dynamic_children_can_be_set_once_after_construction() -> None:
    sessions = Sessions()
    sessions.nodes["r1"] = r1 = Directory("r1")
    d = Directory("agent", [SnapshotFile("ctl", lambda: "")])
    assert await d.walk("r1") is None
    before = d.stat().version
    d.set_dynamic(sessions)
    assert d.stat().version != before
    assert [n.stat().name for n in await d.list()] == ["ctl", "r1"]
    assert await d.walk("alias") is r1
    with pytest.raises(ValueError, match="already set"):
        d.set_dynamic(Sessions())


async def test_directory_add_and_discard() -> None:
    d = Directory("d")
    v0 = d.stat().version
    f = d.add(SnapshotFile("a", lambda: ""))
    assert d.stat().version == v0 + 1
    with pytest.raises(ValueError, match="already exists"):
        d.add(SnapshotFile("a", lambda: ""))
    assert d.child("a") is f
    assert d.discard("a") is f
    assert d.discard("a") is None
    assert await d.list() == []


async def test_directory_with_ten_thousand_entries_lists_in_order() -> None:
    d = Directory("big", [SnapshotFile(f"f{i:05}", lambda: "") for i in range(10_000)])
    names = [n.stat().name for n in await d.list()]
    assert names == [f"f{i:05}" for i in range(10_000)]
    assert (await d.walk("f09999")) is not None


# --- snapshot files -------------------------------------------------------------------------


async def test_snapshot_is_taken_at_open_and_stable_at_any_offset() -> None:
    content = ["first version\n"]
    f = SnapshotFile("list", lambda: content[0])
    handle = await f.open(READ)
    content[0] = "second, longer version\n"
    assert await read_all(handle) == b"first version\n"
    assert await handle.read(6, 7) == b"version"
    assert await handle.read(100, 7) == b""
    assert await read_all(await f.open(READ)) == b"second, longer version\n"


async def test_snapshot_generator_may_be_async_and_return_bytes() -> None:
    async def gen() -> bytes:
        await trio.lowlevel.checkpoint()
        return b"\x00\xff"

    assert await read_all(await SnapshotFile("b", gen).open(READ)) == b"\x00\xff"


# --- ctl files ------------------------------------------------------------------------------


def make_ctl() -> tuple[CtlFile, list[Command]]:
    seen: list[Command] = []

    async def ping(c: Command) -> str:
        seen.append(c)
        return "pong"

    async def new(c: Command) -> str:
        seen.append(c)
        if c.option("model") == "bad":
            raise CommandError("new: no such model 'bad'; see agent/models")
        return f"r{len(seen)}\n"

    async def quiet(c: Command) -> str:
        seen.append(c)
        return ""

    table = CommandTable(
        [
            CommandSpec("ping", ping),
            CommandSpec("new", new, usage="new [model=M]", options={"model"}),
            CommandSpec("quiet", quiet),
        ]
    )
    return CtlFile("ctl", table), seen


async def test_ctl_read_before_any_write_returns_nothing_at_once() -> None:
    ctl, _ = make_ctl()
    handle = await ctl.open(RDWR)
    with trio.fail_after(1):
        assert await handle.read(0, 4096) == b""


@pytest.mark.parametrize(
    ("writes", "answer"),
    [
        ([b"ping\n"], b"pong\n"),
        ([b"ping"], b"pong\n"),  # `9p rdwr` strips the newline
        ([b"new model=x"], b"r1\n"),
        ([b"ping\nnew\n"], b"pong\nr2\n"),  # one write, two commands, both answers
        ([b"ping", b"quiet"], b""),  # the answer is that of the last write
        ([b""], b""),  # plan9port sends one empty write for empty stdin
    ],
)
async def test_ctl_answers_the_last_write_on_the_same_fid(
    writes: list[bytes], answer: bytes
) -> None:
    ctl, _ = make_ctl()
    handle = await ctl.open(RDWR)
    for data in writes:
        assert await handle.write(0, data) == len(data)
    assert await read_all(handle) == answer
    # `9p rdwr` re-reads at offset 0 after each write
    assert await handle.read(0, 4096) == answer


async def test_ctl_ignores_write_offsets() -> None:
    ctl, seen = make_ctl()
    handle = await ctl.open(RDWR)
    assert await handle.read(0, 4096) == b""
    assert await handle.write(8, b"ping") == 4  # rdwr writes at offset = bytes read
    assert await handle.write(12345, b"ping\n") == 5
    assert [c.verb for c in seen] == ["ping", "ping"]


async def test_ctl_each_open_has_its_own_answer() -> None:
    ctl, _ = make_ctl()
    a = await ctl.open(RDWR)
    b = await ctl.open(RDWR)
    await a.write(0, b"new")
    assert await b.read(0, 100) == b""
    assert await a.read(0, 100) == b"r1\n"


@pytest.mark.parametrize(
    ("data", "message", "ran"),
    [
        (b"frob\n", "ctl: unknown command 'frob'; known commands: new, ping, quiet", 0),
        (b"ping\nfrob", "ctl: line 2: unknown command 'frob'", 0),  # nothing ran
        (b"new model=bad", "ctl: new: no such model 'bad'; see agent/models", 1),
        (b"ping\nnew model=bad\nping", "ctl: line 2: new: no such model 'bad'", 2),
        (b"\xff", "ctl: command is not valid UTF-8", 0),
    ],
)
async def test_ctl_invalid_command_fails_that_write(data: bytes, message: str, ran: int) -> None:
    ctl, seen = make_ctl()
    handle = await ctl.open(WRITE)
    with pytest.raises(FsError) as info:
        await handle.write(0, data)
    assert info.value.message.startswith(message)
    assert info.value.errno == errno.EINVAL
    assert len(seen) == ran
    # the fid keeps working after a refused write
    assert await handle.write(0, b"ping") == 4


async def test_ctl_accepts_truncate_only_wstat_and_refuses_others() -> None:
    ctl, _ = make_ctl()
    await ctl.wstat(StatChange(length=0))  # 9pfuse's shell `>`
    with pytest.raises(FsError, match="cannot be changed"):
        await ctl.wstat(StatChange(mode=0o777))
    with pytest.raises(FsError):
        await ctl.wstat(StatChange(length=5))


async def test_ctl_writes_on_one_fid_run_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    order: list[str] = []

    async def slow(c: Command) -> str:
        order.append(f"start {c.args[0]}")
        await trio.sleep(1 if c.args[0] == "a" else 0)
        order.append(f"end {c.args[0]}")
        return c.args[0]

    ctl = CtlFile("ctl", CommandTable([CommandSpec("x", slow, min_args=1, max_args=1)]))
    handle = await ctl.open(RDWR)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handle.write, 0, b"x a")
        await trio.sleep(0.1)
        nursery.start_soon(handle.write, 0, b"x b")
    assert order == ["start a", "end a", "start b", "end b"]


# --- body and value files -------------------------------------------------------------------


def make_body(*, limit: int = 1 << 20) -> tuple[BodyFile, list[bytes]]:
    committed: list[bytes] = []

    async def commit(body: bytes) -> None:
        if body.strip() == b"reject":
            raise FsError("in: the session is stopped; write `start` to its ctl first", errno.EBUSY)
        if body.strip() == b"invalid":
            raise ValueError("prompt must not be only whitespace")
        committed.append(body)

    return BodyFile("in", commit, limit=limit), committed


async def test_body_split_writes_are_committed_once_at_clunk() -> None:
    body, committed = make_body()
    handle = await body.open(WRITE)
    text = b"x" * 10_000
    for off in range(0, len(text), 4096):  # plan9port splits at 4096 bytes
        await handle.write(off, text[off : off + 4096])
    assert committed == []
    await handle.clunk()
    assert committed == [text]


async def test_body_refusal_fails_the_clunk_with_the_reason() -> None:
    body, committed = make_body()
    handle = await body.open(WRITE)
    await handle.write(0, b"reject\n")
    with pytest.raises(FsError, match="write `start` to its ctl") as info:
        await handle.clunk()
    assert info.value.errno == errno.EBUSY
    handle = await body.open(WRITE)
    await handle.write(0, b"invalid")
    with pytest.raises(FsError, match="in: prompt must not be only whitespace") as info:
        await handle.clunk()
    assert info.value.errno == errno.EINVAL
    assert committed == []


async def test_body_refusal_is_reported_to_on_reject() -> None:
    body, _ = make_body()
    rejected: list[FsError] = []

    async def on_reject(exc: FsError, seen: bool) -> None:
        assert not seen  # refused at clunk
        rejected.append(exc)

    body.on_reject = on_reject
    handle = await body.open(WRITE)
    await handle.write(0, b"invalid")
    with pytest.raises(FsError) as info:
        await handle.clunk()
    assert rejected == [info.value]
    handle = await body.open(WRITE)
    await handle.write(0, b"fine")
    await handle.clunk()
    assert len(rejected) == 1


async def test_body_abort_commits_nothing() -> None:
    body, committed = make_body()
    handle = await body.open(WRITE)
    await handle.write(0, b"half a prompt")
    await handle.abort()  # the connection went away
    assert committed == []


@pytest.mark.parametrize(
    ("mode", "writes", "expected"),
    [
        (WRITE, [b""], [b""]),  # empty stdin: the writer meant an empty body
        (WRITE, [], [b""]),  # OTRUNC then clunk: a shell `: > in`
        (OpenMode(read=False, write=True), [], []),  # opened, nothing written: nothing to do
        (READ, [], []),
    ],
)
async def test_body_commit_only_when_something_was_meant(
    mode: OpenMode, writes: list[bytes], expected: list[bytes]
) -> None:
    body, committed = make_body()
    handle = await body.open(mode)
    for data in writes:
        await handle.write(0, data)
    await handle.clunk()
    assert committed == expected


async def test_body_limit_fails_the_write() -> None:
    body, _ = make_body(limit=10)
    handle = await body.open(WRITE)
    await handle.write(0, b"0123456789")
    with pytest.raises(FsError, match="in: body too large") as info:
        await handle.write(10, b"x")
    assert info.value.errno == errno.EFBIG


async def test_a_body_over_its_limit_is_refused_whole_naming_the_setting() -> None:
    committed: list[bytes] = []

    async def commit(body: bytes) -> None:
        committed.append(body)

    body = BodyFile("in", commit, limit=8, limit_name="[sessions] max_prompt_bytes")
    handle = await body.open(WRITE)
    await handle.write(0, b"01234567")
    with pytest.raises(FsError) as info:
        await handle.write(8, b"8")
    assert str(info.value) == (
        "in: body too large: 9 bytes exceeds the limit of 8 bytes ([sessions] max_prompt_bytes); "
        "send a shorter text or put it in a file and send its path; nothing written on this "
        "open is kept"
    )
    with pytest.raises(FsError, match="body too large"):  # a client that writes on anyway
        await handle.write(8, b"")
    with pytest.raises(FsError, match="body too large") as info:
        await handle.clunk()
    assert info.value.errno == errno.EFBIG
    assert committed == []  # the first 8 bytes are not a prompt of their own
    handle = await body.open(WRITE)  # the next open starts afresh
    await handle.write(0, b"short")
    await handle.clunk()
    assert committed == [b"short"]


async def test_body_accepts_truncate_only_wstat() -> None:
    body, _ = make_body()
    await body.wstat(StatChange(length=0))
    with pytest.raises(FsError):
        await body.wstat(StatChange(name="other"))


async def test_value_file_reads_the_value_and_replaces_it_at_clunk() -> None:
    value = [b"reviewer\n"]

    async def commit(data: bytes) -> None:
        value[0] = data

    f = ValueFile("role", lambda: value[0], commit)
    v0 = f.stat().version
    assert await read_all(await f.open(READ)) == b"reviewer\n"
    handle = await f.open(RDWR)
    assert await handle.read(0, 100) == b"reviewer\n"  # snapshot at open
    await handle.write(0, b"tester\n")
    assert await handle.read(0, 100) == b"reviewer\n"
    await handle.clunk()
    assert value == [b"tester\n"]
    assert f.stat().version == v0 == 0
    assert await read_all(await f.open(READ)) == b"tester\n"


# --- stream files ---------------------------------------------------------------------------


async def test_stream_file_each_open_has_a_cursor_and_the_backlog(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = LineStream(StreamLimits(backlog_lines=2))
    f = StreamFile("events", stream)
    for i in range(3):
        stream.publish(json.dumps({"n": i}))
    a = await f.open(READ)
    assert await a.read(0, 1000) == b'{"n": 1}\n{"n": 2}\n'
    b = await f.open(READ)
    stream.publish('{"n": 3}')
    assert await a.read(0, 1000) == b'{"n": 3}\n'
    assert await b.read(0, 1000) == b'{"n": 1}\n{"n": 2}\n{"n": 3}\n'
    assert f.stat().version == 0
    assert f.stat().length == 0


async def test_stream_file_read_blocks_until_a_line_arrives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = LineStream()
    handle = await StreamFile("events", stream).open(READ)
    got: list[bytes] = []

    async def reader() -> None:
        got.append(await handle.read(0, 100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(60)
        assert got == []
        stream.publish("late")
    assert got == [b"late\n"]


@pytest.mark.parametrize("how", ["clunk", "abort", "flush"])
async def test_stream_file_release_leaves_no_reader_behind(
    how: str, autojump_clock: trio.testing.MockClock
) -> None:
    stream = LineStream()
    handle = await StreamFile("events", stream).open(READ)
    assert stream.statistics().readers == 1
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def blocked() -> None:
            with scope:
                await handle.read(0, 100)

        nursery.start_soon(blocked)
        await trio.sleep(1)
        if how == "flush":
            scope.cancel()  # what a Tflush does to the request
            await trio.lowlevel.checkpoint()
            await handle.clunk()
        elif how == "clunk":
            await handle.clunk()
        else:
            await handle.abort()
    assert stream.statistics().readers == 0


async def test_a_slow_stream_reader_gets_a_lag_marker() -> None:
    stream = LineStream(StreamLimits(reader_lines=4))
    handle = await StreamFile("events", stream).open(READ)
    for i in range(10):
        stream.publish(str(i))
    assert await handle.read(0, 1000) == b"0\n1\n2\n3\n"
    assert json.loads(await handle.read(0, 1000)) == {"type": "lagged", "dropped": 6}
