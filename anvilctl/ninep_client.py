"""A small blocking 9P2000 client that behaves on the wire like plan9port's `9p`.

What it owns: finding a service (plan9port's namespace rules), dialing (`unix!path`,
`tcp!host!port`), and the request sequences of plan9port's lib9pclient as recorded in
`fixtures/9p/plan9port-9p-client-traces.txt`: Tversion "9P2000" msize 8192 on NOTAG, Tauth with
afid 0 (its error is ignored), Tattach fid 0 with afid NOFID, then one request at a time on tag
0; files are walked to fid 1 from the root fid. The codec is `anvild.ninep.messages` (shared with
the server); this module adds only blocking socket I/O, which is all a one-shot CLI needs.

Errors: `ClientError` (the root), with `ServerError` for an Rerror/Rlerror (its message is the
server's, so the CLI prints it unchanged) and `ConnectError` when the service cannot be reached.
"""

from __future__ import annotations

import errno as _errno
import getpass
import os
import socket
from collections.abc import Iterator

from anvild.ninep import messages as m
from anvild.ninep.constants import IOHDRSZ, MAXWELEM, NOFID, NOTAG, Dialect
from anvild.ninep.errors import ProtocolError
from anvild.ninep.framing import FrameReader

__all__ = [
    "CFid",
    "Client",
    "ClientError",
    "ConnectError",
    "ServerError",
    "dial",
    "namespace_dir",
]

DEFAULT_MSIZE = 8192
DEFAULT_TCP_PORT = 564


class ClientError(Exception):
    """Root of the errors of the anvilctl 9P client."""


class ConnectError(ClientError):
    """The service could not be reached."""


class ServerError(ClientError):
    """The server answered with an error; ``str(exc)`` is its message."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno


def namespace_dir() -> str:
    """plan9port `getns()`: ``$NAMESPACE``, else ``/tmp/ns.$USER.$DISPLAY``.

    DISPLAY defaults to ``:0`` and a trailing ``.0`` screen is dropped (``:0.0`` is ``:0``), as
    plan9port does, so a daemon and a client started from different X terminals agree.
    """
    ns = os.environ.get("NAMESPACE")
    if ns:
        return ns
    user = os.environ.get("USER") or getpass.getuser()
    display = os.environ.get("DISPLAY") or ":0"
    colon = display.rfind(":")
    if colon >= 0 and display.endswith(".0") and "." in display[colon:]:
        display = display[:-2]
    return f"/tmp/ns.{user}.{display}"


def dial(address: str) -> socket.socket:
    """Connect to a plan9port dial string: ``unix!/path``, ``tcp!host!port`` or ``/path``."""
    parts = address.split("!")
    try:
        if parts[0] == "unix" and len(parts) == 2:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(parts[1])
            except BaseException:
                sock.close()
                raise
            return sock
        if len(parts) == 1 and address.startswith("/"):
            return dial(f"unix!{address}")
        if parts[0] in ("tcp", "net") and len(parts) in (2, 3):
            port = int(parts[2]) if len(parts) == 3 else DEFAULT_TCP_PORT
            sock = socket.create_connection((parts[1], port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
    except (OSError, ValueError) as exc:
        raise ConnectError(f"dial {address}: {exc}") from exc
    raise ConnectError(
        f"dial {address}: not a dial string; use unix!/path/to/socket or tcp!host!port"
    )


def service_address(service: str) -> str:
    """The Unix socket of a service posted in the namespace directory (plan9port `nsamount`)."""
    return f"unix!{os.path.join(namespace_dir(), service)}"


class Client:
    """One 9P2000 connection; one request at a time on tag 0, like plan9port's lib9pclient."""

    def __init__(self, sock: socket.socket, *, msize: int = DEFAULT_MSIZE) -> None:
        self.sock = sock
        self.msize = msize
        self.dialect = Dialect.P9P2000
        self._reader = FrameReader(1 << 24)
        self._next_fid = 0
        self._free_fids: list[int] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------------

    def _send(self, msg: m.Message) -> None:
        try:
            self.sock.sendall(m.encode(msg, self.dialect))
        except OSError as exc:
            raise ConnectError(f"connection lost: {exc}") from exc

    def _receive(self) -> m.Message:
        while True:
            try:
                frame = self._reader.next_frame()
            except ProtocolError as exc:
                raise ClientError(f"bad reply from the server: {exc}") from exc
            if frame is not None:
                try:
                    return m.decode(frame, self.dialect)
                except ProtocolError as exc:
                    raise ClientError(f"bad reply from the server: {exc}") from exc
            try:
                data = self.sock.recv(65536)
            except OSError as exc:
                raise ConnectError(f"connection lost: {exc}") from exc
            if not data:
                raise ConnectError("the server closed the connection")
            self._reader.feed(data)

    def rpc(self, msg: m.Message) -> m.Message:
        """Send one request and return its reply; an error reply raises `ServerError`."""
        self._send(msg)
        reply = self._receive()
        if isinstance(reply, m.Rerror):
            raise ServerError(reply.ename, reply.errno)
        if isinstance(reply, m.Rlerror):
            raise ServerError(os.strerror(reply.ecode), reply.ecode)
        if reply.tag != msg.tag:
            raise ClientError(f"reply tag {reply.tag} does not match request tag {msg.tag}")
        if type(reply).TYPE != type(msg).TYPE + 1:
            raise ClientError(f"unexpected {type(reply).__name__} for {type(msg).__name__}")
        return reply

    # --- session ------------------------------------------------------------------------------

    def version(self) -> None:
        reply = self.rpc(m.Tversion(NOTAG, self.msize, Dialect.P9P2000.value))
        assert isinstance(reply, m.Rversion)
        if reply.version != Dialect.P9P2000.value:
            raise ClientError(f"server speaks {reply.version!r}, not 9P2000")
        if reply.msize < 256 or reply.msize > self.msize:
            raise ClientError(f"server offered a bad msize {reply.msize}")
        self.msize = reply.msize

    def _alloc_fid(self) -> int:
        # lib9pclient reuses freed fid numbers (most recently freed first): `9p ls` walks fid 1,
        # clunks it, and walks fid 1 again.
        if self._free_fids:
            return self._free_fids.pop()
        fid = self._next_fid
        self._next_fid += 1
        return fid

    def _release_fid(self, fid: int) -> None:
        self._free_fids.append(fid)

    def mount(self, *, aname: str = "", uname: str | None = None, auth: bool = True) -> CFid:
        """Tversion, Tauth (error ignored, as plan9port does), Tattach: the root fid."""
        user = uname if uname is not None else (os.environ.get("USER") or getpass.getuser())
        self.version()
        if auth:
            afid = self._alloc_fid()
            try:
                self.rpc(m.Tauth(0, afid, user, aname))
                raise ClientError("the server requires authentication, which anvilctl lacks")
            except ServerError:
                pass  # "authentication not required": the expected answer
            self._release_fid(afid)  # the auth fid was never created; reuse its number
        fid = self._alloc_fid()
        reply = self.rpc(m.Tattach(0, fid, NOFID, user, aname))
        assert isinstance(reply, m.Rattach)
        return CFid(self, fid, reply.qid)

    def walk(self, root: CFid, path: str) -> CFid:
        """Walk ``path`` (slash-separated, empty elements ignored) from ``root`` to a new fid."""
        names = [p for p in path.split("/") if p]
        newfid = self._alloc_fid()
        qid = root.qid
        first = True
        # walk(5): at most MAXWELEM names per Twalk; later steps continue from newfid.
        chunks = [names[i : i + MAXWELEM] for i in range(0, len(names), MAXWELEM)] or [[]]
        for chunk in chunks:
            source = root.fid if first else newfid
            try:
                reply = self.rpc(m.Twalk(0, source, newfid, tuple(chunk)))
            except ServerError:
                self._abandon_walk(newfid, created=not first)
                raise
            assert isinstance(reply, m.Rwalk)
            if len(reply.qids) != len(chunk):
                self._abandon_walk(newfid, created=not first)
                missing = chunk[len(reply.qids)]
                raise ServerError(f"file '{missing}' not found", _errno.ENOENT)
            if reply.qids:
                qid = reply.qids[-1]
            first = False
        return CFid(self, newfid, qid)

    def _abandon_walk(self, newfid: int, *, created: bool) -> None:
        if created:
            self.rpc(m.Tclunk(0, newfid))
        self._release_fid(newfid)

    def open(self, root: CFid, path: str, mode: int) -> CFid:
        fid = self.walk(root, path)
        try:
            fid.open(mode)
        except ClientError:
            fid.clunk()
            raise
        return fid


class CFid:
    """A client fid with plan9port's per-fid offset (shared by reads and writes)."""

    def __init__(self, client: Client, fid: int, qid: m.Qid) -> None:
        self.client = client
        self.fid = fid
        self.qid = qid
        self.offset = 0
        self.iounit = 0

    def _max_io(self) -> int:
        limit = self.client.msize - IOHDRSZ
        return min(self.iounit, limit) if self.iounit else limit

    def open(self, mode: int) -> None:
        reply = self.client.rpc(m.Topen(0, self.fid, mode))
        assert isinstance(reply, m.Ropen)
        self.qid = reply.qid
        self.iounit = reply.iounit

    def pread(self, count: int, offset: int) -> bytes:
        reply = self.client.rpc(m.Tread(0, self.fid, offset, min(count, self._max_io())))
        assert isinstance(reply, m.Rread)
        return reply.data

    def read(self, count: int) -> bytes:
        data = self.pread(count, self.offset)
        self.offset += len(data)
        return data

    def write(self, data: bytes) -> int:
        """Write all of ``data`` at the fid offset, resending the rest after a short write.

        An empty ``data`` sends one zero-length Twrite (plan9port does this for empty stdin).
        Unlike plan9port, a server answering a non-empty write with 0 is an error, not a loop.
        """
        done = 0
        while True:
            chunk = data[done : done + self._max_io()]
            reply = self.client.rpc(m.Twrite(0, self.fid, self.offset, chunk))
            assert isinstance(reply, m.Rwrite)
            if reply.count > len(chunk):
                raise ClientError(f"server claims {reply.count} bytes written of {len(chunk)}")
            self.offset += reply.count
            done += reply.count
            if done >= len(data):
                return done
            if reply.count == 0:
                raise ServerError("the server accepted none of the data written", _errno.EIO)

    def stat(self) -> m.Stat:
        reply = self.client.rpc(m.Tstat(0, self.fid))
        assert isinstance(reply, m.Rstat)
        return reply.stat

    def read_dir(self) -> Iterator[m.Stat]:
        """Read a whole directory with count msize-IOHDRSZ until a zero-length Rread."""
        while data := self.read(self.client.msize - IOHDRSZ):
            yield from m.decode_stats(data, self.client.dialect)

    def clunk(self) -> None:
        try:
            self.client.rpc(m.Tclunk(0, self.fid))
        finally:
            self.client._release_fid(self.fid)  # clunk(5): the fid is gone even on error
