"""A small trio 9P2000 client, for a daemon that drives another daemon's files.

    async with await Connection.dial("tcp!build-2!5640", aname=token, limit=30) as conn:
        session_id = await conn.write("ctl", "new role=reviewer", answer=True)
        state = await conn.read(f"{session_id}/wait")      # blocks, like `9p read`

One connection runs one request at a time (a blocking read holds it: open one connection per
blocked read). Paths are relative to the attach root. An Rerror is `RemoteRefused` (the
server's message); a failed dial, a closed connection or a step slower than `limit` seconds
is `RemoteUnreachable` (a blocking read is not limited: cancel it, and close the connection).
"""

from __future__ import annotations

import itertools
from types import TracebackType

import trio

from anvild.ninep import messages as m
from anvild.ninep.constants import IOHDRSZ, NOFID, NOTAG, ORDWR, OREAD, OTRUNC, OWRITE, Dialect
from anvild.ninep.errors import NinepError
from anvild.ninep.framing import FrameReader

__all__ = ["Connection", "RemoteError", "RemoteRefused", "RemoteUnreachable"]

MSIZE = 65536


class RemoteError(Exception):
    """A request to another daemon failed."""


class RemoteRefused(RemoteError):
    """The server answered with an error; `str(exc)` is its message."""


class RemoteUnreachable(RemoteError):
    """The server could not be reached, closed the connection or did not answer in time."""


class Connection:
    """One attached 9P connection (use `dial`)."""

    def __init__(self, stream: trio.abc.Stream, address: str, limit: float) -> None:
        self.stream = stream
        self.address = address
        self.limit = limit
        self.msize = MSIZE
        self._reader = FrameReader(MSIZE)
        self._fids = itertools.count(1)

    @classmethod
    async def dial(cls, address: str, *, aname: str, limit: float) -> Connection:
        """Connect to `tcp!HOST!PORT` or `unix!/path`, negotiate 9P2000 and attach as `aname`
        (an anvild TCP listener's token)."""
        parts = address.split("!")
        try:
            with trio.fail_after(limit):
                if len(parts) == 3 and parts[0] == "tcp":
                    stream: trio.abc.Stream = await trio.open_tcp_stream(parts[1], int(parts[2]))
                elif len(parts) == 2 and parts[0] == "unix":
                    stream = await trio.open_unix_socket(parts[1])
                else:
                    raise RemoteUnreachable(f"{address}: write tcp!HOST!PORT or unix!/path")
        except (OSError, ValueError, trio.TooSlowError) as exc:
            raise RemoteUnreachable(f"dial {address}: {exc or 'timed out'}") from exc
        conn = cls(stream, address, limit)
        try:
            await conn.attach(aname)
        except BaseException:
            await conn.aclose()
            raise
        return conn

    async def attach(self, aname: str) -> None:
        """Negotiate 9P2000 and attach fid 0 as `aname` (`dial` does it)."""
        version = await self._rpc(m.Tversion(NOTAG, MSIZE, Dialect.P9P2000.value))
        if not isinstance(version, m.Rversion) or version.version != "9P2000":
            raise RemoteUnreachable(f"{self.address}: not a 9P2000 server")
        self.msize = min(MSIZE, version.msize)
        try:
            await self._rpc(m.Tattach(0, 0, NOFID, "anvild", aname))
        except RemoteRefused as exc:
            raise RemoteRefused(f"attach: {exc}") from exc

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.stream.aclose()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _rpc(self, msg: m.Message, *, limit: float | None = None) -> m.Message:
        """Send `msg`, return its reply; an Rerror raises `RemoteRefused`."""
        try:
            with trio.fail_after(self.limit if limit is None else limit):
                await self.stream.send_all(m.encode(msg, Dialect.P9P2000))
                while (frame := self._reader.next_frame()) is None:
                    data = await self.stream.receive_some(MSIZE)
                    if not data:
                        raise RemoteUnreachable(f"{self.address}: the server closed the connection")
                    self._reader.feed(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise RemoteUnreachable(f"{self.address}: connection lost: {exc}") from exc
        except trio.TooSlowError as exc:
            raise RemoteUnreachable(f"{self.address}: no answer in {self.limit:g} s") from exc
        try:
            reply = m.decode(frame, Dialect.P9P2000)
        except NinepError as exc:
            raise RemoteUnreachable(f"{self.address}: a bad reply: {exc}") from exc
        if isinstance(reply, m.Rerror):
            raise RemoteRefused(reply.ename)
        return reply

    async def _open(self, path: str, mode: int) -> int:
        fid = next(self._fids)
        names = tuple(part for part in path.split("/") if part)
        try:
            await self._rpc(m.Twalk(0, 0, fid, names))
        except RemoteRefused as exc:
            raise RemoteRefused(f"{path}: {exc}") from exc
        try:
            await self._rpc(m.Topen(0, fid, mode))
        except BaseException:
            await self._clunk(fid, path)
            raise
        return fid

    async def _clunk(self, fid: int, path: str) -> None:
        try:
            await self._rpc(m.Tclunk(0, fid))
        except RemoteRefused as exc:
            raise RemoteRefused(f"{path}: {exc}") from exc

    async def _read_all(self, fid: int, path: str, *, limit: float | None) -> bytes:
        parts: list[bytes] = []
        offset = 0
        while True:
            try:
                reply = await self._rpc(m.Tread(0, fid, offset, self.msize - IOHDRSZ), limit=limit)
            except RemoteRefused as exc:
                raise RemoteRefused(f"{path}: {exc}") from exc
            assert isinstance(reply, m.Rread)
            if not reply.data:
                return b"".join(parts)
            parts.append(reply.data)
            offset += len(reply.data)

    async def read(self, path: str, *, blocking: bool = False) -> str:
        """The whole file; `blocking` (a `wait` file) waits for its first answer unbounded."""
        fid = await self._open(path, OREAD)
        data = await self._read_all(fid, path, limit=float("inf") if blocking else None)
        await self._clunk(fid, path)
        return data.decode("utf-8", "replace")

    async def write(self, path: str, text: str, *, answer: bool = False) -> str:
        """Write `text` on one open (truncating), then clunk, where a body is committed and a
        refusal may come; with `answer`, the reply read back on the same fid (a ctl's)."""
        fid = await self._open(path, ORDWR if answer else OWRITE | OTRUNC)
        data, offset, reply = text.encode(), 0, b""
        try:
            step = self.msize - IOHDRSZ
            for offset in range(0, len(data), step):
                try:
                    await self._rpc(m.Twrite(0, fid, offset, data[offset : offset + step]))
                except RemoteRefused as exc:
                    raise RemoteRefused(f"{path}: {exc}") from exc
            if answer:
                reply = await self._read_all(fid, path, limit=None)
        finally:
            with trio.CancelScope(shield=True):
                await self._clunk(fid, path)
        return reply.decode("utf-8", "replace")
