"""A small blocking 9P2000 client that behaves on the wire like plan9port's `9p`.

Owns finding a service (plan9port's namespace rules), dialing (`unix!path`, `tcp!host!port`)
and lib9pclient's request sequences (fixtures/9p/plan9port-9p-client-traces.txt): Tversion
"9P2000" msize 8192, Tauth afid 0 (error ignored), Tattach fid 0, one request at a time on tag 0,
files walked to fid 1. Requests go through `anvilctl.wire`; anything unexpected through the
reference codec `anvild.ninep.messages`, imported only then (`anvilctl read` starts without
attrs). Errors: `ClientError`, with `ServerError` (the server's message, printed unchanged) and
`ConnectError`; when anvild's service does not answer, the message says how to start it.
"""

from __future__ import annotations

import _socket
import errno as _errno
import os

from anvilctl import wire

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import NoReturn, TypeVar

    from anvild.ninep import messages as m
    from anvild.ninep.constants import Dialect

    T = TypeVar("T")

__all__ = [
    "CFid",
    "Client",
    "ClientError",
    "ConnectError",
    "ServerError",
    "agent_address",
    "dial",
    "mount_agent",
    "namespace_dir",
]

AGENT_SERVICE = "agent"
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
    user = os.environ.get("USER") or _login_name()
    display = os.environ.get("DISPLAY") or ":0"
    colon = display.rfind(":")
    if colon >= 0 and display.endswith(".0") and "." in display[colon:]:
        display = display[:-2]
    return f"/tmp/ns.{user}.{display}"


def _login_name() -> str:
    """`getpass.getuser()` (Python 3.11), without importing getpass, which costs start-up time."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if user := os.environ.get(name):
            return user
    import pwd

    return pwd.getpwuid(os.getuid())[0]


def dial(address: str) -> _socket.socket:
    """Connect to a plan9port dial string: ``unix!/path``, ``tcp!host!port`` or ``/path``.

    The socket is the C type `_socket.socket` (the base of `socket.socket`, with the same
    methods but no context manager or `makefile`): importing the `socket` module, which builds
    an enum of each family of constants, costs about as much as the rest of a 9P command's
    start-up. It is imported for TCP only (`socket.create_connection`).
    """
    parts = address.split("!")
    try:
        if parts[0] == "unix" and len(parts) == 2:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                sock.connect(parts[1])
            except BaseException:
                sock.close()
                raise
            return sock
        if len(parts) == 1 and address.startswith("/"):
            return dial(f"unix!{address}")
        if parts[0] in ("tcp", "net") and len(parts) in (2, 3):
            import socket

            port = int(parts[2]) if len(parts) == 3 else DEFAULT_TCP_PORT
            sock = socket.create_connection((parts[1], port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
    except OSError as exc:
        raise ConnectError(_not_running(parts, exc) or f"dial {address}: {exc}") from exc
    except ValueError as exc:
        raise ConnectError(f"dial {address}: {exc}") from exc
    raise ConnectError(
        f"dial {address}: not a dial string; use unix!/path/to/socket or tcp!host!port"
    )


def _not_running(parts: list[str], exc: OSError) -> str | None:
    """What to say when anvild does not answer: its socket (`agent`, the service it posts) is
    missing, or refuses connections (a stale socket: the daemon that made it is gone), or
    nothing listens on a TCP address. None for anything else (another service, another error),
    which keeps the plain `dial ADDRESS: ERROR`."""
    if exc.errno not in (_errno.ENOENT, _errno.ECONNREFUSED):
        return None
    if parts[0] == "unix" and os.path.basename(parts[1]) == "agent":
        path = parts[1]
        where = os.path.dirname(path)
        start = "anvild" if where == namespace_dir() else f"anvild --namespace {where}"
        why = (
            f"no socket at {path}"
            if exc.errno == _errno.ENOENT
            else f"the socket {path} refuses connections: left by a daemon that has exited"
        )
        return f"anvild is not running ({why}): start it with `{start}`"
    if parts[0] in ("tcp", "net") and exc.errno == _errno.ECONNREFUSED:
        address = "!".join(parts)
        return (
            f"anvild is not listening on {address} (connection refused): start it with "
            f"`anvild --listen {address}`"
        )
    return None


def service_address(service: str) -> str:
    """The Unix socket of a service posted in the namespace directory (plan9port `nsamount`)."""
    return f"unix!{os.path.join(namespace_dir(), service)}"


def agent_address(address: str | None) -> str:
    """The daemon's `agent` service: `address` (`-a`) when given, else its namespace socket."""
    return address or service_address(AGENT_SERVICE)


def mount_agent(address: str | None, *, aname: str, auth: bool) -> tuple[Client, CFid]:
    """A fresh connection to the `agent` service (at `address` when given) and its root fid;
    the connection is closed when the mount fails."""
    client = Client(dial(agent_address(address)))
    try:
        return client, client.mount(aname=aname, auth=auth)
    except BaseException:
        client.close()
        raise


class Client:
    """One 9P2000 connection; one request at a time on tag 0, like plan9port's lib9pclient."""

    def __init__(self, sock: _socket.socket, *, msize: int = DEFAULT_MSIZE) -> None:
        self.sock = sock
        self.msize = msize
        self._buf = bytearray()
        self._next_fid = 0
        self._free_fids: list[int] = []

    @property
    def dialect(self) -> Dialect:
        """Always 9P2000 (for callers that encode with `anvild.ninep.messages`)."""
        from anvild.ninep.constants import Dialect

        return Dialect.P9P2000

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------------

    def _send_frame(self, frame: bytes) -> None:
        try:
            self.sock.sendall(frame)
        except OSError as exc:
            raise ConnectError(f"connection lost: {exc}") from exc

    def _frame(self) -> bytes:
        """The next whole frame from the server (intro(5) framing: size[4] first)."""
        buf = self._buf
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "little")
                if not wire.HEADER_SIZE <= size <= MAX_REPLY:
                    _bad_framing(buf)
                if len(buf) >= size:
                    frame = bytes(buf[:size])
                    del buf[:size]
                    return frame
            try:
                data = self.sock.recv(65536)
            except OSError as exc:
                raise ConnectError(f"connection lost: {exc}") from exc
            if not data:
                raise ConnectError("the server closed the connection")
            buf += data

    def _call(self, request: str, decode: Callable[[bytes], T], tag: int, *fields: object) -> T:
        """Send one of `anvilctl.wire`'s requests; return its reply's fields.

        A well-formed reply of the expected type and tag, or an Rerror, is decoded here; any
        other reply goes to `_refuse`, which has the reference codec say what is wrong with it.
        """
        values = (tag, *fields)
        try:
            frame: bytes | None = wire.ENCODERS[request](*values)
        except wire.Unhandled:
            frame = None
        if frame is None:  # outside the handler: a traceback shows only the reference's error
            frame = _reference_encode(request, values)
        self._send_frame(frame)
        reply = self._frame()
        type_ = reply[4]
        try:
            if type_ == wire.RERROR:
                raise ServerError(wire.rerror(reply))
            expected = wire.REQUEST_TYPES[request] + 1
            if type_ == expected and int.from_bytes(reply[5:7], "little") == tag:
                return decode(reply)
        except wire.Unhandled:
            pass
        self._refuse(reply, request, values)

    def _refuse(self, frame: bytes, request: str, fields: tuple[object, ...]) -> NoReturn:
        self._check(_reference_decode(frame), _reference_message(request, fields))
        raise AssertionError(f"anvilctl.wire refused a reply the reference accepts: {frame!r}")

    @staticmethod
    def _check(reply: m.Message, msg: m.Message) -> None:
        from anvild.ninep import messages as m

        if isinstance(reply, m.Rerror):
            raise ServerError(reply.ename, reply.errno)
        if isinstance(reply, m.Rlerror):
            raise ServerError(os.strerror(reply.ecode), reply.ecode)
        if reply.tag != msg.tag:
            raise ClientError(f"reply tag {reply.tag} does not match request tag {msg.tag}")
        if type(reply).TYPE != type(msg).TYPE + 1:
            raise ClientError(f"unexpected {type(reply).__name__} for {type(msg).__name__}")

    def rpc(self, msg: m.Message) -> m.Message:
        """Send any message with the reference codec and return its reply; an error reply raises
        `ServerError`."""
        from anvild.ninep import messages as m

        self._send_frame(m.encode(msg, self.dialect))
        reply = _reference_decode(self._frame())
        self._check(reply, msg)
        return reply

    # --- session ------------------------------------------------------------------------------

    def version(self) -> None:
        msize, version = self._call("Tversion", wire.rversion, wire.NOTAG, self.msize, wire.VERSION)
        if version != wire.VERSION:
            raise ClientError(f"server speaks {version!r}, not 9P2000")
        if msize < 256 or msize > self.msize:
            raise ClientError(f"server offered a bad msize {msize}")
        self.msize = msize

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
        user = uname if uname is not None else (os.environ.get("USER") or _login_name())
        self.version()
        if auth:
            afid = self._alloc_fid()
            try:
                self._call("Tauth", wire.rqid, 0, afid, user, aname)
                raise ClientError("the server requires authentication, which anvilctl lacks")
            except ServerError:
                pass  # "authentication not required": the expected answer
            self._release_fid(afid)  # the auth fid was never created; reuse its number
        fid = self._alloc_fid()
        qid = self._call("Tattach", wire.rqid, 0, fid, wire.NOFID, user, aname)
        return CFid(self, fid, qid)

    def walk(self, root: CFid, path: str) -> CFid:
        """Walk ``path`` (slash-separated, empty elements ignored) from ``root`` to a new fid."""
        names = [p for p in path.split("/") if p]
        newfid = self._alloc_fid()
        qid = root.qid
        first = True
        # walk(5): at most MAXWELEM names per Twalk; later steps continue from newfid.
        step = wire.MAXWELEM
        chunks = [names[i : i + step] for i in range(0, len(names), step)] or [[]]
        for chunk in chunks:
            source = root.fid if first else newfid
            try:
                qids = self._call("Twalk", wire.rwalk, 0, source, newfid, tuple(chunk))
            except ServerError:
                self._abandon_walk(newfid, created=not first)
                raise
            if len(qids) != len(chunk):
                self._abandon_walk(newfid, created=not first)
                missing = chunk[len(qids)]
                raise ServerError(f"file '{missing}' not found", _errno.ENOENT)
            if qids:
                qid = qids[-1]
            first = False
        return CFid(self, newfid, qid)

    def _abandon_walk(self, newfid: int, *, created: bool) -> None:
        if created:
            self._call("Tclunk", wire.rempty, 0, newfid)
        self._release_fid(newfid)

    def open(self, root: CFid, path: str, mode: int) -> CFid:
        fid = self.walk(root, path)
        try:
            fid.open(mode)
        except ClientError:
            fid.clunk()
            raise
        return fid


# A reply larger than this is a framing error (the client never offers an msize above 8192).
MAX_REPLY = 1 << 24


def _bad_framing(buf: bytearray) -> NoReturn:
    from anvild.ninep.errors import ProtocolError
    from anvild.ninep.framing import FrameReader

    reader = FrameReader(MAX_REPLY)
    reader.feed(buf)
    try:
        reader.next_frame()
    except ProtocolError as exc:
        raise ClientError(f"bad reply from the server: {exc}") from exc
    raise AssertionError(f"FrameReader accepted a frame size anvilctl refused: {bytes(buf[:4])!r}")


def _reference_message(request: str, fields: tuple[object, ...]) -> m.Message:
    from anvild.ninep import messages as m

    cls: type[m.Message] = getattr(m, request)
    return cls(*fields)


def _reference_encode(request: str, fields: tuple[object, ...]) -> bytes:
    from anvild.ninep import messages as m
    from anvild.ninep.constants import Dialect

    return m.encode(_reference_message(request, fields), Dialect.P9P2000)


def _reference_decode(frame: bytes) -> m.Message:
    from anvild.ninep import messages as m
    from anvild.ninep.constants import Dialect
    from anvild.ninep.errors import ProtocolError

    try:
        return m.decode(frame, Dialect.P9P2000)
    except ProtocolError as exc:
        raise ClientError(f"bad reply from the server: {exc}") from exc


class CFid:
    """A client fid with plan9port's per-fid offset (shared by reads and writes)."""

    def __init__(self, client: Client, fid: int, qid: wire.Qid) -> None:
        self.client = client
        self.fid = fid
        self.qid = qid
        self.offset = 0
        self.iounit = 0

    def _max_io(self) -> int:
        limit = self.client.msize - wire.IOHDRSZ
        return min(self.iounit, limit) if self.iounit else limit

    def open(self, mode: int) -> None:
        self.qid, self.iounit = self.client._call("Topen", wire.ropen, 0, self.fid, mode)

    def pread(self, count: int, offset: int) -> bytes:
        count = min(count, self._max_io())
        return self.client._call("Tread", wire.rread, 0, self.fid, offset, count)

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
            count = self.client._call("Twrite", wire.rwrite, 0, self.fid, self.offset, chunk)
            if count > len(chunk):
                raise ClientError(f"server claims {count} bytes written of {len(chunk)}")
            self.offset += count
            done += count
            if done >= len(data):
                return done
            if count == 0:
                raise ServerError("the server accepted none of the data written", _errno.EIO)

    def stat(self) -> wire.Stat:
        return self.client._call("Tstat", wire.rstat, 0, self.fid)

    def read_dir(self) -> Iterator[wire.Stat]:
        """Read a whole directory with count msize-IOHDRSZ until a zero-length Rread."""
        while data := self.read(self.client.msize - wire.IOHDRSZ):
            try:
                entries: list[wire.Stat] | None = wire.stats(data)
            except wire.Unhandled:
                entries = None
            if entries is None:
                from anvild.ninep import messages as m
                from anvild.ninep.constants import Dialect

                m.decode_stats(data, Dialect.P9P2000)  # raises what it always raised
                raise AssertionError("anvilctl.wire refused a directory the reference reads")
            yield from entries

    def clunk(self) -> None:
        try:
            self.client._call("Tclunk", wire.rempty, 0, self.fid)
        finally:
            self.client._release_fid(self.fid)  # clunk(5): the fid is gone even on error
