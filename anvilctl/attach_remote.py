"""`anvilctl attach`'s connections to the daemon: the event stream, the commands, the records.

The *event connection* belongs to a reader thread (`EventReader`) that hands each line of
`ID/events` to `put`, which blocks while attach is behind (so the daemon's per-reader bound and
`lagged` marker apply). The *command connection* (`Remote`) does the small reads and writes; an
RPC that failed half-way drops it and the next command dials afresh. To tell a new open's
backlog from what follows, the reader Tflushes a read pending for a moment: an Rflush alone
means everything published so far was delivered, and it puts `SYNCED` (`read_backlog` does the
same on `log`). Full tool results come from the session's records (`RecordsFile`) when they
are on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from anvilctl.ninep_client import CFid, Client, ClientError, ConnectError, ServerError, mount_agent
from anvilctl.signals import BackgroundThread
from anvild.ninep import messages as m
from anvild.ninep.constants import IOHDRSZ, OREAD, OTRUNC, OWRITE
from anvild.ninep.errors import ProtocolError
from anvild.ninep.framing import FrameReader

SYNC_QUIET: Final = 0.2  # seconds a read must stay pending before the reader flushes it
RECORDS_TAIL: Final = 4 << 20  # bytes of a records file read for the last tool results


class Synced:
    """Item: the reader caught up with the stream (see the module docstring)."""


class Ended:
    """Item: the stream ended (EOF: the session exited) or failed (`error`)."""

    def __init__(self, error: str = "") -> None:
        self.error = error


SYNCED: Final = Synced()
Item = str | Synced | Ended

_READ_TAG: Final = 1
_FLUSH_TAG: Final = 2


class EventReader(BackgroundThread):
    """Reads one stream file on its own connection and hands every line to `put`; with
    `until_synced` it stops once it caught up (after putting `SYNCED`)."""

    def __init__(
        self,
        client: Client,
        fid: CFid,
        put: Callable[[Item], None],
        *,
        until_synced: bool = False,
    ) -> None:
        super().__init__("anvilctl-attach-events")
        self._sock = client.sock
        self._dialect = client.dialect
        self._count = client.msize - IOHDRSZ
        self._fid = fid.fid
        self._put = put
        self._until_synced = until_synced
        self._frames = FrameReader(1 << 24)
        self._partial = b""
        self.closed = False

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv
        self._sock.close()

    def work(self) -> None:
        try:
            self._loop()
        except (OSError, ClientError, ProtocolError) as exc:
            if not self.closed:
                self._put(Ended(str(exc) or type(exc).__name__))

    def _send(self, msg: m.Message) -> None:
        self._sock.sendall(m.encode(msg, self._dialect))

    def _next(self, timeout: float | None) -> m.Message | None:
        """The next reply, or None when `timeout` passes without one."""
        while True:
            frame = self._frames.next_frame()
            if frame is not None:
                return m.decode(frame, self._dialect)
            if timeout is not None:
                ready, _, _ = select.select([self._sock], [], [], timeout)
                if not ready:
                    return None
            data = self._sock.recv(65536)
            if not data:
                raise ConnectError("the daemon closed the connection")
            self._frames.feed(data)

    def _lines(self, data: bytes) -> None:
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            if line.strip():
                self._put(line.decode("utf-8", "replace"))

    def _loop(self) -> None:
        read = m.Tread(_READ_TAG, self._fid, 0, self._count)
        self._send(read)
        synced = flushing = got_data = False
        while True:
            reply = self._next(None if synced or flushing else SYNC_QUIET)
            if reply is None:  # the read is pending: flush it to learn that we caught up
                self._send(m.Tflush(_FLUSH_TAG, _READ_TAG))
                flushing, got_data = True, False
                continue
            match reply:
                case m.Rread(data=b""):
                    self._lines(b"\n")
                    if not synced:
                        self._put(SYNCED)  # everything there is was delivered
                    self._put(Ended())
                    return
                case m.Rread(data=data):
                    self._lines(data)
                    got_data = True
                    if not flushing:
                        self._send(read)
                case m.Rflush():
                    flushing = False
                    if not got_data:
                        synced = True
                        self._put(SYNCED)
                        if self._until_synced:
                            return
                    self._send(read)
                case m.Rerror(ename=message):
                    raise ServerError(message)
                case m.Rlerror(ecode=code):
                    raise ServerError(os.strerror(code), code)
                case _:
                    raise ClientError(f"unexpected {type(reply).__name__} on the events file")


class Remote:
    """The command connection: small reads and writes, redialled after a failed RPC."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._address = args.address
        self._aname = args.aname
        self._auth = not args.noauth
        self._client: Client | None = None
        self._root: CFid | None = None

    def connect(self) -> tuple[Client, CFid]:
        return mount_agent(self._address, aname=self._aname, auth=self._auth)

    def open_stream(self, path: str) -> tuple[Client, CFid]:
        """A connection of its own with `path` open for reading (for an `EventReader`)."""
        client, root = self.connect()
        try:
            return client, client.open(root, path, OREAD)
        except BaseException:
            client.close()
            raise

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._root = None

    def _call(self, action: Callable[[Client, CFid], bytes]) -> bytes:
        if self._client is None or self._root is None:
            self._client, self._root = self.connect()
        try:
            return action(self._client, self._root)
        except ServerError:
            raise  # answered: the connection is in step
        except BaseException:
            self.close()  # a reply may be unread: never reuse this connection
            raise

    def read(self, path: str) -> str:
        def action(client: Client, root: CFid) -> bytes:
            fid = client.open(root, path, OREAD)
            try:
                parts = []
                while data := fid.read(8192):
                    parts.append(data)
            finally:
                fid.clunk()
            return b"".join(parts)

        return self._call(action).decode("utf-8", "replace")

    def write(self, path: str, data: bytes) -> None:
        """One open, one write, clunk (where a body file like `in` takes or refuses it)."""

        def action(client: Client, root: CFid) -> bytes:
            fid = client.open(root, path, OWRITE | OTRUNC)
            try:
                fid.write(data)
            finally:
                fid.clunk()
            return b""

        self._call(action)


def read_backlog(remote: Remote, path: str) -> list[str]:
    """The backlog of the stream file `path` (its lines until the reader caught up)."""
    client, fid = remote.open_stream(path)
    lines: list[str] = []
    ended: list[Ended] = []

    def put(item: Item) -> None:
        if isinstance(item, str):
            lines.append(item)
        elif isinstance(item, Ended):
            ended.append(item)

    reader = EventReader(client, fid, put, until_synced=True)
    try:
        reader.work()  # on this thread: it returns once synced
    finally:
        reader.close()
    if ended and ended[0].error:
        raise ConnectError(ended[0].error)
    return lines


class RecordsFile:
    """The session's records on this machine, read for the full results of tool calls."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _records(self) -> Iterator[dict[str, Any]]:
        """The records of the file's last RECORDS_TAIL bytes, last first."""
        with self.path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - RECORDS_TAIL))
            data = file.read()
        lines = data.split(b"\n")
        if size > RECORDS_TAIL:
            lines = lines[1:]  # the first may be cut
        for line in reversed(lines):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record

    def results(self, call_ids: list[str]) -> dict[str, tuple[str, bool]]:
        """The full result (content, is_error) of each call in `call_ids` the file has; with
        no ids, of the calls of the last step that ran tools."""
        found: dict[str, tuple[str, bool]] = {}
        wanted = set(call_ids)
        for record in self._records():
            body = record.get("record", record)
            if not isinstance(body, dict):
                continue
            kind = body.get("type")
            if not wanted and kind == "message_appended" and found:
                break  # before the last batch of results
            if kind != "tool_finished":
                continue
            result = body.get("result")
            if not isinstance(result, dict):
                continue
            call_id = str(result.get("call_id", ""))
            if (not wanted or call_id in wanted) and call_id not in found:
                found[call_id] = (str(result.get("content", "")), bool(result.get("is_error")))
            if wanted and wanted <= set(found):
                break
        return dict(reversed(list(found.items())))
