"""A lean HTTP/1.1 transport for httpx on trio sockets, built for long streamed responses.

    client = httpx.AsyncClient(transport=LeanTransport(), timeout=None)
    body = lean_body(await client.send(request, stream=True))   # LeanBody, or None
    while data := await body.receive_some(idle=120.0): ...       # de-chunked payload bytes

Keeps httpx's API and replaces only the wire, because httpx's stack cost about half the busy
daemon's CPU (docs/decisions.md, 2026-12-01). `ResponseParser` is sans-IO (RFC 9112 framing;
violations raise `ProtocolError`). `receive_some` decodes all a `recv` brought in one pass and
waits (under `IdleWatch` or a scope) only when the socket is empty. Connections are reused per
origin only after a cleanly ended response; a reused one failing before any response byte is
retried once. Deadlines are the caller's (httpx `timeout` is not applied); no proxy support
(the daemon uses httpx's transport when a proxy is set). Errors are httpx's (`ConnectError`,
`ReadError`, `WriteError`, `RemoteProtocolError`, `ReadTimeout`).
"""

from __future__ import annotations

import math
import os
import select
import ssl
import sys
import time
from collections.abc import AsyncIterator, Mapping
from typing import Final, NamedTuple

import httpx
import trio

BODY_EXTENSION: Final = "anvild.lean_body"
MAX_HEAD_BYTES: Final = 64 * 1024
MAX_CHUNK_LINE_BYTES: Final = 4096  # a chunk-size line with its extensions, or a trailer line
MAX_CHUNK_SIZE_DIGITS: Final = 15  # hex digits: 2**60 bytes is past any real body
RECEIVE_BYTES: Final = 65536
KEEPALIVE_EXPIRY: Final = 5.0  # seconds an idle connection is kept (httpx's default)
MAX_IDLE_PER_ORIGIN: Final = 32
PROXY_VARIABLES: Final = ("http_proxy", "https_proxy", "all_proxy")

_NO_BODY_STATUS: Final = frozenset({204, 304})


class ProtocolError(Exception):
    """The server's bytes are not a valid HTTP/1.1 response; the message says what was wrong."""


def proxy_configured(env: Mapping[str, str]) -> bool:
    """Whether `env` names a proxy httpx would honour (then `LeanTransport` is not used)."""
    return any(env.get(name) or env.get(name.upper()) for name in PROXY_VARIABLES)


# --- sans-IO parsing ---------------------------------------------------------------------------


class ResponseHead(NamedTuple):
    http_version: bytes  # b"HTTP/1.1"
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]  # names as sent; values stripped


class ChunkedDecoder:
    """`Transfer-Encoding: chunked` (RFC 9112 section 7.1), fed any split of the bytes."""

    def __init__(self) -> None:
        self.done = False
        self.leftover = b""
        self._remaining = 0  # payload bytes of the current chunk still to come
        self._after_data = False  # the CRLF after a chunk's data is next
        self._trailers = False  # the last chunk was seen; trailer lines until a blank one
        self._line = b""  # an incomplete size, CRLF or trailer line
        self.error: ProtocolError | None = None  # found after payload that was returned

    def feed(self, data: bytes) -> bytes:
        """The payload in `data`. Payload decoded before a violation is returned first; the
        `ProtocolError` is then kept in `error` and raised by the next `feed`."""
        if self.error is not None:
            raise self.error
        out: list[bytes] = []
        try:
            self._feed(data, out)
        except ProtocolError as exc:
            if not out:
                raise
            self.error = exc
        return b"".join(out) if len(out) != 1 else out[0]

    def _feed(self, data: bytes, out: list[bytes]) -> None:
        if self.done:
            self.leftover += data
            return
        if self._line:
            data = self._line + data
            self._line = b""
        pos, end = 0, len(data)
        while pos < end:
            if self._remaining:
                take = min(self._remaining, end - pos)
                out.append(data if take == end else data[pos : pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._after_data = True
                continue
            if self._after_data:
                if end - pos < 2:
                    if data[pos] != 0x0D:
                        raise ProtocolError("a chunk's data is not followed by CRLF")
                    self._line = data[pos:]
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise ProtocolError(
                        "a chunk's data is not followed by CRLF (the chunk size is wrong)"
                    )
                pos += 2
                self._after_data = False
                continue
            eol = data.find(b"\n", pos)
            if eol < 0:
                if end - pos > MAX_CHUNK_LINE_BYTES:
                    raise ProtocolError(f"a chunk-size line exceeds {MAX_CHUNK_LINE_BYTES} bytes")
                self._line = data[pos:]
                break
            line = data[pos:eol]
            pos = eol + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > MAX_CHUNK_LINE_BYTES:
                raise ProtocolError(f"a chunk-size line exceeds {MAX_CHUNK_LINE_BYTES} bytes")
            if self._trailers:
                if not line:
                    self.done = True
                    self.leftover = data[pos:]
                    break
                continue  # trailer fields are not used
            self._remaining = _chunk_size(line)
            if not self._remaining:
                self._trailers = True


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].strip(b" \t")
    if not size or len(size) > MAX_CHUNK_SIZE_DIGITS or size.strip(b"0123456789abcdefABCDEF"):
        shown = line[:40].decode("ascii", "replace")
        raise ProtocolError(f"bad chunk size line {shown!r} (expected hexadecimal digits)")
    return int(size, 16)


class LengthDecoder:
    """A body of `Content-Length` bytes."""

    error = None

    def __init__(self, length: int) -> None:
        self.remaining = length
        self.done = length == 0
        self.leftover = b""

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.leftover += data
            return b""
        if len(data) <= self.remaining:
            self.remaining -= len(data)
            self.done = not self.remaining
            return data
        body, self.leftover = data[: self.remaining], data[self.remaining :]
        self.remaining = 0
        self.done = True
        return body


class CloseDecoder:
    """A body that ends when the server closes the connection (no framing header)."""

    done = False
    leftover = b""
    error = None

    def feed(self, data: bytes) -> bytes:
        return data


BodyDecoder = ChunkedDecoder | LengthDecoder | CloseDecoder


class ResponseParser:
    """Reads one response head; `body_decoder` then says how its body is framed."""

    def __init__(self, *, max_head_bytes: int = MAX_HEAD_BYTES) -> None:
        self.max_head_bytes = max_head_bytes
        self._buffer = b""

    def feed(self, data: bytes) -> tuple[ResponseHead, bytes] | None:
        """Feed bytes; once a final (non-1xx) head is complete return it with the bytes after
        it, else None."""
        buffer = self._buffer + data
        while True:
            end = buffer.find(b"\r\n\r\n")
            cut = end + 4
            if end < 0:
                end = buffer.find(b"\n\n")
                cut = end + 2
            if end < 0:
                if len(buffer) > self.max_head_bytes:
                    raise ProtocolError(
                        f"the response headers exceed {self.max_head_bytes} bytes without ending"
                    )
                self._buffer = buffer
                return None
            if end > self.max_head_bytes:
                raise ProtocolError(f"the response headers exceed {self.max_head_bytes} bytes")
            head = _parse_head(buffer[:end])
            buffer = buffer[cut:]
            if 100 <= head.status < 200:
                continue  # an interim response (100 Continue, 103 Early Hints): skip it
            self._buffer = b""
            return head, buffer


def _parse_head(raw: bytes) -> ResponseHead:
    lines = raw.replace(b"\r\n", b"\n").split(b"\n")
    status_line = lines[0]
    parts = status_line.split(b" ", 2)
    if (
        len(parts) < 2
        or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
        or len(parts[1]) != 3
        or not parts[1].isdigit()
    ):
        shown = status_line[:80].decode("ascii", "replace")
        raise ProtocolError(f"not an HTTP/1.1 status line: {shown!r}")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            if not headers:
                raise ProtocolError("a header continuation line before any header")
            name, value = headers[-1]
            headers[-1] = (name, value + b" " + line.strip(b" \t"))
            continue
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip(b" \t"):
            shown = line[:80].decode("ascii", "replace")
            raise ProtocolError(f"malformed header line {shown!r}")
        headers.append((name, value.strip(b" \t")))
    return ResponseHead(parts[0], int(parts[1]), parts[2] if len(parts) > 2 else b"", headers)


def body_decoder(head: ResponseHead, *, method: bytes) -> tuple[BodyDecoder, bool]:
    """The framing of `head`'s body (RFC 9112 section 6.3), and whether the connection may be
    reused after it."""
    keep = head.http_version == b"HTTP/1.1"
    encodings: list[bytes] = []
    lengths: set[bytes] = set()
    for name, value in head.headers:
        lower = name.lower()
        if lower == b"connection":
            if b"close" in [token.strip().lower() for token in value.split(b",")]:
                keep = False
        elif lower == b"transfer-encoding":
            encodings += [token.strip().lower() for token in value.split(b",") if token.strip()]
        elif lower == b"content-length":
            lengths.update(token.strip() for token in value.split(b","))
    if method == b"HEAD" or head.status in _NO_BODY_STATUS:
        return LengthDecoder(0), keep
    if encodings:
        if encodings[-1] == b"chunked":
            # With both headers, Transfer-Encoding wins and the connection is not reused.
            return ChunkedDecoder(), keep and not lengths
        return CloseDecoder(), False
    if lengths:
        if len(lengths) > 1:
            raise ProtocolError(f"conflicting Content-Length values {sorted(lengths)!r}")
        (length,) = lengths
        if not length.isdigit() or len(length) > 18:
            raise ProtocolError(f"bad Content-Length {length[:40]!r}")
        return LengthDecoder(int(length)), keep
    return CloseDecoder(), False


def request_head(request: httpx.Request, body: bytes) -> bytes:
    """The request line and headers of `request` for a body sent as `body` (whole)."""
    target = request.url.raw_path or b"/"
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        lower = name.lower()
        if lower == b"transfer-encoding":
            continue  # the body is sent whole, with its length
        if lower == b"content-length":
            continue
        lines.append(name + b": " + value)
    if body or request.method not in ("GET", "HEAD", "OPTIONS", "DELETE"):
        lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
    return b"\r\n".join(lines) + b"\r\n\r\n"


# --- connections -------------------------------------------------------------------------------


Origin = tuple[str, str, int]


class IdleWatch:
    """Idle deadlines for many waiting sockets without a cancel scope per wait.

    A connection about to wait registers its deadline here (`deadline`); `run` (a task of the
    transport's owner) looks every `tick` seconds and wakes a socket whose deadline passed with
    `trio.lowlevel.notify_closing`, so its `wait_readable` raises and the read reports the idle
    deadline (the socket is closed with the body). Deadlines are counted in ticks, not read from
    the clock at each wait (a wait per streamed delta): a sleep never ends early, so a deadline
    never fires early, and fires up to two ticks late. Deadlines shorter than `min_idle`, TLS
    connections, and any wait while `run` is not running use a `move_on_after` instead."""

    def __init__(self, *, tick: float = 0.5, min_idle: float = 2.0) -> None:
        self.tick = tick
        self.min_idle = min_idle
        self.running = False
        self.ticks = 0  # ticks `run` has counted
        self.waiting: dict[_Connection, int] = {}  # connection -> the tick its deadline passes

    def deadline(self, idle: float) -> int:
        """The tick by which `idle` seconds have surely passed for a wait starting now: the
        current tick may be nearly over, so one more than `idle` needs. No deadline (`idle`
        infinite): a tick never reached."""
        if idle == math.inf:
            return sys.maxsize
        return self.ticks + 1 + math.ceil(idle / self.tick)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled."""
        self.running = True
        try:
            task_status.started()
            while True:
                await trio.sleep(self.tick)
                self.ticks += 1
                now = self.ticks
                late = [c for c, deadline in self.waiting.items() if deadline <= now]
                for connection in late:
                    del self.waiting[connection]
                    connection.timed_out = True
                    trio.lowlevel.notify_closing(connection.socket)
        finally:
            self.running = False


class _Connection:
    """One socket: a plain trio socket stream (read with `os.read` on its descriptor) or an
    SSL stream over one."""

    def __init__(
        self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream], watch: IdleWatch
    ) -> None:
        self.stream = stream
        if isinstance(stream, trio.SocketStream):
            self.socket = stream.socket
            self.plain = True
        else:
            self.socket = stream.transport_stream.socket
            self.plain = False
        self.fd = self.socket.fileno()
        self.idle_since = 0.0
        self.closed = False
        self.timed_out = False
        self._watch = watch

    def readable_while_idle(self) -> bool:
        """Whether the server closed (or wrote to) this connection while it sat in the pool."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))

    async def send_all(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, OSError) as exc:
            raise httpx.WriteError(f"sending the request failed: {_cause(exc)}") from exc

    async def receive(self, idle: float) -> bytes:
        """The next bytes from the socket; b"" at EOF. Waits at most `idle` seconds for them
        (`httpx.ReadTimeout`).

        A plain socket is read with a non-blocking `os.read` first: bytes that are queued
        already (the daemon is behind) are taken with the checks a trio operation makes (a
        cancellation check, a scheduling point) but no deadline. Only when it finds nothing
        does the task wait for the socket, under the idle watch or a `move_on_after`."""
        if not self.plain:
            return await self._receive_tls(idle)
        await trio.lowlevel.checkpoint_if_cancelled()
        data = self._read_queued()
        if data is not None:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        watch = self._watch
        while True:
            if watch.running and idle >= watch.min_idle:
                watch.waiting[self] = watch.deadline(idle)
                try:
                    await trio.lowlevel.wait_readable(self.socket)
                except trio.ClosedResourceError as exc:
                    if self.timed_out:
                        raise httpx.ReadTimeout(f"nothing received for {idle:g} s") from None
                    raise httpx.ReadError("the connection was closed while reading") from exc
                finally:
                    watch.waiting.pop(self, None)
            else:
                with trio.move_on_after(idle) as scope:
                    await trio.lowlevel.wait_readable(self.socket)
                if scope.cancelled_caught:
                    raise httpx.ReadTimeout(f"nothing received for {idle:g} s")
            data = self._read_queued()
            if data is not None:
                return data

    def _read_queued(self) -> bytes | None:
        """What the socket holds now (b"" at its end), or None when nothing is queued yet."""
        try:
            return os.read(self.fd, RECEIVE_BYTES)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise httpx.ReadError(f"reading the response failed: {_cause(exc)}") from exc

    async def _receive_tls(self, idle: float) -> bytes:
        with trio.move_on_after(idle):
            try:
                return bytes(await self.stream.receive_some(RECEIVE_BYTES))
            except (trio.BrokenResourceError, OSError, ssl.SSLError) as exc:
                raise httpx.ReadError(f"reading the response failed: {_cause(exc)}") from exc
        raise httpx.ReadTimeout(f"nothing received for {idle:g} s")

    def close_now(self) -> None:
        """Close without a TLS goodbye (for connections dropped from the pool)."""
        self.closed = True
        self.socket.close()

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)


def _cause(exc: BaseException) -> str:
    while isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class LeanBody(httpx.AsyncByteStream):
    """The body of one response. `receive_some` is the fast path; iterating it serves httpx."""

    def __init__(
        self,
        connection: _Connection,
        decoder: BodyDecoder,
        *,
        reusable: bool,
        release: Release,
        pending: bytes = b"",
    ) -> None:
        self._connection = connection
        self._decoder = decoder
        self._reusable = reusable
        self._release = release
        self._pending = pending  # bytes that came with the head
        self._eof = decoder.done and not pending
        self._closed = False
        self._failed = False  # a read failed (reset, idle deadline): the body is unusable

    async def receive_some(self, idle: float = math.inf) -> bytes:
        """The payload bytes the next read brings (all the chunks it completed), or b"" at the
        end of the body. Waits at most `idle` seconds for the socket (`httpx.ReadTimeout`)."""
        if self._closed:
            raise httpx.StreamClosed()
        if self._failed:
            raise httpx.ReadError("an earlier read of this response failed")
        decoder = self._decoder
        while not self._eof:
            if decoder.error is not None:
                self._failed = True
                raise httpx.RemoteProtocolError(str(decoder.error)) from decoder.error
            if self._pending:
                data, self._pending = self._pending, b""
            else:
                try:
                    data = await self._connection.receive(idle)
                except httpx.TransportError:
                    self._failed = True
                    raise
                if not data:
                    self._eof = True
                    if isinstance(decoder, CloseDecoder):
                        return b""
                    self._failed = True
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body"
                        + (
                            f": {decoder.remaining} of the Content-Length bytes missing"
                            if isinstance(decoder, LengthDecoder)
                            else ": incomplete chunked read"
                        )
                    )
            try:
                payload = decoder.feed(data)
            except ProtocolError as exc:
                self._failed = True
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if decoder.done:
                self._eof = True
            if payload:
                return payload
        return b""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self  # a plain iterator, not a generator: nothing left for the GC to finalise

    async def __anext__(self) -> bytes:
        data = await self.receive_some()
        if not data:
            raise StopAsyncIteration
        return data

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        connection = self._connection
        decoder = self._decoder
        if self._reusable and not self._failed and decoder.done and not decoder.leftover:
            self._release(connection)
        else:
            await connection.aclose()


class _Pool:
    """The idle connections per origin; closed with the transport."""

    def __init__(self) -> None:
        self.idle: dict[Origin, list[_Connection]] = {}
        self.closed = False


class Release:
    """Puts a connection back in its origin's idle list (a bound callable, so `LeanBody`
    holds no reference to the transport). After the transport closed, it closes it."""

    def __init__(self, pool: _Pool, origin: Origin) -> None:
        self._pool = pool
        self._origin = origin

    def __call__(self, connection: _Connection) -> None:
        idle = self._pool.idle.setdefault(self._origin, [])
        if self._pool.closed or len(idle) >= MAX_IDLE_PER_ORIGIN:
            connection.close_now()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)


# --- the transport -----------------------------------------------------------------------------


class LeanTransport(httpx.AsyncBaseTransport):
    """httpx transport: HTTP/1.1 over trio sockets, keep-alive per origin, no proxies."""

    def __init__(
        self, *, ssl_context: ssl.SSLContext | None = None, watch: IdleWatch | None = None
    ) -> None:
        self._ssl_context = ssl_context
        self._pool = _Pool()
        self.watch = watch or IdleWatch()  # its owner runs `watch.run` in a nursery (optional)

    def _context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            context = httpx.create_ssl_context()
            context.set_alpn_protocols(["http/1.1"])
            self._ssl_context = context
        return self._ssl_context

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"the URL scheme {scheme!r} is not http or https")
        host = url.host
        port = url.port or (443 if scheme == "https" else 80)
        origin = (scheme, host, port)
        body = await request.aread()
        data = request_head(request, body) + body
        connection = self._take_idle(origin)
        if connection is not None:
            try:
                return await self._exchange(connection, request, data, origin)
            except _NoResponse:
                pass  # the server had closed the kept connection: once more on a new one
        connection = await self._connect(scheme, host, port)
        try:
            return await self._exchange(connection, request, data, origin)
        except _NoResponse as exc:
            if exc.error is not None:
                raise exc.error from exc.error.__cause__
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response."
            ) from None

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._pool.idle.get(origin)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since < KEEPALIVE_EXPIRY and (
                not connection.readable_while_idle()
            ):
                return connection
            connection.close_now()
        return None

    async def _connect(self, scheme: str, host: str, port: int) -> _Connection:
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {host}:{port} failed: {exc}") from exc
        if scheme == "http":
            return _Connection(stream, self.watch)
        tls = trio.SSLStream(stream, self._context(), server_hostname=host, https_compatible=True)
        try:
            await tls.do_handshake()
        except (trio.BrokenResourceError, OSError, ssl.SSLError) as exc:
            await trio.aclose_forcefully(tls)
            raise httpx.ConnectError(
                f"the TLS handshake with {host}:{port} failed: {_cause(exc)}"
            ) from exc
        return _Connection(tls, self.watch)

    async def _exchange(
        self, connection: _Connection, request: httpx.Request, data: bytes, origin: Origin
    ) -> httpx.Response:
        """Send `data` and read the response head; `_NoResponse` when the connection ended
        before any byte of a response (the caller may send again)."""
        try:
            try:
                await connection.send_all(data)
            except httpx.WriteError as exc:
                raise _NoResponse(exc) from exc
            parser = ResponseParser()
            received = False
            while True:
                try:
                    chunk = await connection.receive(math.inf)
                except httpx.ReadError as exc:
                    if received:
                        raise
                    raise _NoResponse(exc) from exc
                if not chunk:
                    if received:
                        raise httpx.RemoteProtocolError(
                            "peer closed connection in the middle of the response headers"
                        )
                    raise _NoResponse(None)
                received = True
                try:
                    parsed = parser.feed(chunk)
                except ProtocolError as exc:
                    raise httpx.RemoteProtocolError(str(exc)) from exc
                if parsed is not None:
                    break
            head, rest = parsed
            try:
                decoder, reusable = body_decoder(head, method=request.method.encode("ascii"))
            except ProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
        except BaseException:
            await connection.aclose()
            raise
        body = LeanBody(
            connection,
            decoder,
            reusable=reusable,
            release=Release(self._pool, origin),
            pending=rest,
        )
        return httpx.Response(
            head.status,
            headers=head.headers,
            stream=body,
            extensions={
                "http_version": head.http_version,
                "reason_phrase": head.reason,
                BODY_EXTENSION: body,
            },
        )

    async def aclose(self) -> None:
        self._pool.closed = True
        for idle in self._pool.idle.values():
            for connection in idle:
                await connection.aclose()
        self._pool.idle.clear()


class _NoResponse(Exception):
    """The connection ended before any byte of a response: `error` is the read or write
    failure, None for a clean EOF."""

    def __init__(self, error: httpx.ReadError | httpx.WriteError | None) -> None:
        super().__init__(str(error) if error else "the connection was closed")
        self.error = error


def lean_body(response: httpx.Response) -> LeanBody | None:
    """The `LeanBody` to read `response`'s payload from directly, or None: another transport
    made it, or it has a content coding that httpx must decode."""
    body = response.extensions.get(BODY_EXTENSION)
    if not isinstance(body, LeanBody):
        return None
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    return body if coding in ("", "identity") else None
