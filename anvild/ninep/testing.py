"""Test doubles for `anvild.ninep`: an in-memory tree and a raw trio 9P client.

Not used by the daemon. Tests (ours, the fs layer's, the benchmarks) use these to drive the server
without a real file tree:

* `MemDir` / `MemFile`: a small tree implementing the `Node` protocol. `MemFile` holds bytes,
  optionally writable (writes at an offset) and optionally accepting truncation by wstat.
* `BlockingFile`: every read blocks until `push()` adds data (a stand-in for `events`); it counts
  reads that were cancelled, so Tflush tests can see the blocked read was really abandoned.
* `RawClient`: sends any `Message` on a trio stream and receives decoded replies, in order, so a
  test can have several tags outstanding and check exactly what comes back.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Sequence

import trio

from anvild.ninep import messages as m
from anvild.ninep.backend import Handle, Node, NodeStat, OpenMode, StatChange
from anvild.ninep.constants import DMDIR, Dialect
from anvild.ninep.errors import FsError
from anvild.ninep.framing import FrameReader

__all__ = ["BlockingFile", "MemDir", "MemFile", "RawClient"]

_paths = itertools.count(1)


class MemDir(Node):
    """A directory holding a fixed (but mutable in tests) list of children."""

    open_blocks = False

    def __init__(self, name: str, children: Sequence[Node] = (), *, owner: str = "anvil") -> None:
        self.name = name
        self.owner = owner
        self.children: dict[str, Node] = {c.stat().name: c for c in children}
        self.path = next(_paths)
        self.wstats: list[StatChange] = []

    def stat(self) -> NodeStat:
        return NodeStat(self.name, DMDIR | 0o755, self.path, owner=self.owner, muid=self.owner)

    async def walk(self, name: str) -> Node | None:
        return self.children.get(name)

    async def list(self) -> Sequence[Node]:
        return list(self.children.values())

    async def wstat(self, change: StatChange) -> None:
        self.wstats.append(change)
        raise FsError(f"{self.name}: attributes cannot be changed", errno.EPERM)


class _MemHandle(Handle):
    # Reads and writes checkpoint (as a slow file would), so they run in tasks; clunk is inline.
    clunk_blocks = False

    def __init__(self, file: MemFile, mode: OpenMode) -> None:
        self.file = file
        self.mode = mode

    async def read(self, offset: int, count: int) -> bytes:
        await trio.lowlevel.checkpoint()
        return bytes(self.file.data[offset : offset + count])

    async def write(self, offset: int, data: bytes) -> int:
        await trio.lowlevel.checkpoint()
        if self.file.take_nothing:
            return 0
        if self.file.append_only:
            self.file.data += data
        else:
            end = offset + len(data)
            if len(self.file.data) < end:
                self.file.data += bytes(end - len(self.file.data))
            self.file.data[offset:end] = data
        self.file.writes.append((offset, data))
        return len(data)

    async def clunk(self) -> None:
        self.file.clunks += 1
        if self.file.reject_at_clunk is not None:
            raise FsError(self.file.reject_at_clunk, errno.EINVAL)

    async def abort(self) -> None:
        self.file.aborts += 1


class MemFile(Node):
    """A file with bytes in memory. ``mode`` decides readable/writable (the server checks it)."""

    open_blocks = False

    def __init__(
        self,
        name: str,
        data: bytes = b"",
        *,
        mode: int = 0o644,
        owner: str = "anvil",
        truncatable: bool = False,
        append_only: bool = False,
    ) -> None:
        self.name = name
        self.data = bytearray(data)
        self.mode = mode
        self.owner = owner
        self.truncatable = truncatable
        self.append_only = append_only
        self.path = next(_paths)
        self.take_nothing = False
        self.reject_at_clunk: str | None = None
        self.writes: list[tuple[int, bytes]] = []
        self.opens: list[OpenMode] = []
        self.wstats: list[StatChange] = []
        self.clunks = 0
        self.aborts = 0

    def stat(self) -> NodeStat:
        return NodeStat(
            self.name, self.mode, self.path, length=len(self.data), owner=self.owner,
            muid=self.owner,
        )  # fmt: skip

    async def open(self, mode: OpenMode) -> Handle:
        self.opens.append(mode)
        return _MemHandle(self, mode)

    async def wstat(self, change: StatChange) -> None:
        self.wstats.append(change)
        if self.truncatable and change.is_truncate_only():
            return
        raise FsError(f"{self.name}: only truncation to length 0 is allowed", errno.EPERM)


class _BlockingHandle(Handle):
    write_blocks = False
    clunk_blocks = False

    def __init__(self, file: BlockingFile) -> None:
        self.file = file
        self.cursor = 0

    async def read(self, offset: int, count: int) -> bytes:
        try:
            while self.cursor >= len(self.file.data):
                await self.file.changed.wait()
        except trio.Cancelled:
            self.file.cancelled_reads += 1
            raise
        data = bytes(self.file.data[self.cursor : self.cursor + count])
        self.cursor += len(data)
        return data

    async def abort(self) -> None:
        self.file.aborts += 1


class BlockingFile(Node):
    """A read-only stream: each open has a cursor; a read waits until there is new data."""

    open_blocks = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = next(_paths)
        self.data = bytearray()
        self.changed = trio.Event()
        self.cancelled_reads = 0
        self.aborts = 0

    def stat(self) -> NodeStat:
        return NodeStat(self.name, 0o444, self.path)

    async def open(self, mode: OpenMode) -> Handle:
        return _BlockingHandle(self)

    def push(self, data: bytes) -> None:
        self.data += data
        self.changed.set()
        self.changed = trio.Event()


class RawClient:
    """Speak raw 9P on a trio stream: `send` any message, `receive` the next decoded reply."""

    def __init__(self, stream: trio.abc.Stream, dialect: Dialect = Dialect.P9P2000) -> None:
        self.stream = stream
        self.dialect = dialect
        self.reader = FrameReader(1 << 24)

    async def send(self, msg: m.Message) -> None:
        await self.stream.send_all(m.encode(msg, self.dialect))

    async def send_raw(self, frame: bytes) -> None:
        await self.stream.send_all(frame)

    async def receive(self) -> m.Message:
        while (frame := self.reader.next_frame()) is None:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the server closed the connection")
            self.reader.feed(bytes(data))
        return m.decode(frame, self.dialect)

    async def at_eof(self) -> bool:
        """True if the server closed the connection (and sent nothing more)."""
        if self.reader.buffered:
            return False
        return await self.stream.receive_some(65536) == b""

    async def rpc(self, msg: m.Message) -> m.Message:
        await self.send(msg)
        return await self.receive()

    async def handshake(
        self, *, msize: int = 8192, aname: str = "", uname: str = "tester", fid: int = 0
    ) -> m.Rattach:
        version = await self.rpc(m.Tversion(0xFFFF, msize, self.dialect.value))
        assert isinstance(version, m.Rversion), version
        reply = await self.rpc(m.Tattach(0, fid, 0xFFFFFFFF, uname, aname))
        assert isinstance(reply, m.Rattach), reply
        return reply
