"""LeanTransport: the sans-IO response parser (table-driven, every split of the bytes), and the
transport over real loopback sockets: chunked and Content-Length bodies, keep-alive and its
races, TLS, the errors of a broken server mapped to the same typed errors as httpx's own
transport, the idle deadline with and without the idle watch, and the provider adapters
against the fake provider server."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from anvild.llm.capabilities import for_target
from anvild.llm.errors import HttpError, TransportError
from anvild.llm.http import Timeouts, open_event_stream
from anvild.llm.providers.anthropic import AnthropicProvider
from anvild.llm.providers.gemini import GeminiProvider
from anvild.llm.providers.openai_chat import OpenAiChatProvider
from anvild.llm.providers.openai_responses import OpenAIResponsesProvider
from anvild.llm.sse import SseDecoder, SseEvent
from anvild.llm.transport import (
    MAX_HEAD_BYTES,
    ChunkedDecoder,
    CloseDecoder,
    IdleWatch,
    LeanTransport,
    LengthDecoder,
    ProtocolError,
    ResponseHead,
    ResponseParser,
    _Connection,
    body_decoder,
    lean_body,
    proxy_configured,
    request_head,
)
from anvild.llm.types import ChatRequest, Message, ToolCall
from tests.support.conformance import complete
from tests.support.fake_provider import Call, FakeProvider, Turn

FIXTURE = (
    Path(__file__).resolve().parents[3]
    / "fixtures/recorded/anthropic/tool_use_input_json_delta.sse"
)

# --- sans-IO: chunked bodies -------------------------------------------------------------------

CHUNKED = (
    b"5\r\nhello\r\n"
    b"1;name=value\r\n \r\n"  # a chunk extension is ignored
    b"00000006\r\nworld!\r\n"  # leading zeros
    b"A\r\n0123456789\r\n"  # upper-case hex
    b"0\r\nx-trailer: yes\r\n\r\n"  # trailers are read and dropped
)
CHUNKED_PAYLOAD = b"hello world!0123456789"


def feed_all(decoder: ChunkedDecoder | LengthDecoder, parts: list[bytes]) -> bytes:
    return b"".join(decoder.feed(part) for part in parts)


def test_chunked_whole() -> None:
    decoder = ChunkedDecoder()
    assert decoder.feed(CHUNKED + b"NEXT") == CHUNKED_PAYLOAD
    assert decoder.done
    assert decoder.leftover == b"NEXT"


@pytest.mark.parametrize("cut", range(1, len(CHUNKED)))
def test_chunked_split_at_every_byte_boundary(cut: int) -> None:
    decoder = ChunkedDecoder()
    assert feed_all(decoder, [CHUNKED[:cut], CHUNKED[cut:]]) == CHUNKED_PAYLOAD
    assert decoder.done
    assert decoder.leftover == b""


def test_chunked_byte_by_byte_and_two_cuts() -> None:
    decoder = ChunkedDecoder()
    assert feed_all(decoder, [CHUNKED[i : i + 1] for i in range(len(CHUNKED))]) == CHUNKED_PAYLOAD
    assert decoder.done
    for a in range(1, len(CHUNKED), 3):
        for b in range(a, len(CHUNKED), 5):
            decoder = ChunkedDecoder()
            parts = [CHUNKED[:a], CHUNKED[a:b], CHUNKED[b:]]
            assert feed_all(decoder, parts) == CHUNKED_PAYLOAD, (a, b)
            assert decoder.done


def test_chunked_sse_stream_in_small_pieces_decodes_like_the_whole() -> None:
    body = FIXTURE.read_bytes()
    wire = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 97]), body[i : i + 97]) for i in range(0, len(body), 97)
    )
    wire += b"0\r\n\r\n"
    for size in (1, 7, 64, 4096):
        decoder = ChunkedDecoder()
        payload = feed_all(decoder, [wire[i : i + size] for i in range(0, len(wire), size)])
        assert payload == body
        assert decoder.done


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"zz\r\nhello\r\n", "bad chunk size"),
        (b"-5\r\nhello\r\n", "bad chunk size"),
        (b"0x5\r\nhello\r\n", "bad chunk size"),
        (b"\r\nhello\r\n", "bad chunk size"),
        (b"1" * 16 + b"\r\n", "bad chunk size"),
        (b"5\r\nhelloXY", "not followed by CRLF"),
        (b"3\r\nhello\r\n", "not followed by CRLF"),  # the size is wrong
        (b"5\r\nhelloX", "not followed by CRLF"),
        (b"5" * 5000, "chunk-size line exceeds"),
    ],
)
def test_bad_chunked_bodies(wire: bytes, message: str) -> None:
    decoder = ChunkedDecoder()
    payload = b""
    with pytest.raises(ProtocolError, match=message):
        payload += decoder.feed(wire)  # the payload before the error comes first
        decoder.feed(b"")  # then the error
    assert b"hello".startswith(payload)
    assert (decoder.error is not None) == bool(payload)
    decoder = ChunkedDecoder()  # the same error when the bytes come one at a time
    with pytest.raises(ProtocolError, match=message):
        for i in range(len(wire)):
            decoder.feed(wire[i : i + 1])


def test_length_decoder() -> None:
    decoder = LengthDecoder(10)
    assert decoder.feed(b"0123") == b"0123"
    assert not decoder.done
    assert decoder.feed(b"456789NEXT") == b"456789"
    assert decoder.done
    assert decoder.leftover == b"NEXT"
    assert LengthDecoder(0).done
    assert CloseDecoder().feed(b"abc") == b"abc"


# --- sans-IO: the head -------------------------------------------------------------------------

HEAD = (
    b"HTTP/1.1 100 Continue\r\n\r\n"
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"X-Folded: one\r\n\ttwo\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize("cut", range(len(HEAD) + 1))
def test_head_split_at_every_byte_boundary(cut: int) -> None:
    parser = ResponseParser()
    first = parser.feed(HEAD[:cut])
    got = first if first is not None else parser.feed(HEAD[cut:] + b"5\r\n")
    assert got is not None
    head, rest = got
    if first is None:
        assert rest == b"5\r\n"
    assert head == ResponseHead(
        b"HTTP/1.1",
        200,
        b"OK",
        [
            (b"Content-Type", b"text/event-stream"),
            (b"X-Folded", b"one two"),
            (b"Transfer-Encoding", b"chunked"),
        ],
    )


def test_head_with_bare_lf_line_ends() -> None:
    got = ResponseParser().feed(b"HTTP/1.1 204 No Content\nServer: x\n\n")
    assert got is not None
    assert got[0].status == 204
    assert got[0].headers == [(b"Server", b"x")]


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.1 status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "not an HTTP/1.1 status line"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.1 status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\n : empty name\r\n\r\n", "continuation line before any header"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", "exceed"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * MAX_HEAD_BYTES, "exceed"),  # never ends
    ],
)
def test_bad_heads(wire: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        ResponseParser().feed(wire)  # type: ignore[arg-type]


def head(
    status: int = 200, *headers: tuple[bytes, bytes], version: bytes = b"HTTP/1.1"
) -> ResponseHead:
    return ResponseHead(version, status, b"", list(headers))


@pytest.mark.parametrize(
    ("response", "method", "kind", "reusable"),
    [
        (head(200, (b"Transfer-Encoding", b"chunked")), b"POST", ChunkedDecoder, True),
        (head(200, (b"Content-Length", b"12")), b"POST", LengthDecoder, True),
        (head(200), b"POST", CloseDecoder, False),
        (head(200, (b"Content-Length", b"12")), b"HEAD", LengthDecoder, True),
        (head(204), b"POST", LengthDecoder, True),
        (head(304, (b"Content-Length", b"12")), b"GET", LengthDecoder, True),
        (head(200, (b"Transfer-Encoding", b"gzip, chunked")), b"POST", ChunkedDecoder, True),
        (head(200, (b"Transfer-Encoding", b"gzip")), b"POST", CloseDecoder, False),
        (  # both: Transfer-Encoding wins, and the connection is not reused (RFC 9112 6.3)
            head(200, (b"Transfer-Encoding", b"chunked"), (b"Content-Length", b"5")),
            b"POST",
            ChunkedDecoder,
            False,
        ),
        (
            head(200, (b"Content-Length", b"5"), (b"Connection", b"close")),
            b"GET",
            LengthDecoder,
            False,
        ),
        (head(200, (b"Content-Length", b"5"), version=b"HTTP/1.0"), b"GET", LengthDecoder, False),
        (head(200, (b"Content-Length", b"5, 5")), b"GET", LengthDecoder, True),
    ],
)
def test_body_framing(
    response: ResponseHead, method: bytes, kind: type[object], reusable: bool
) -> None:
    decoder, keep = body_decoder(response, method=method)
    assert isinstance(decoder, kind)
    assert keep == reusable
    if method == b"HEAD" or response.status in (204, 304):
        assert decoder.done


@pytest.mark.parametrize(
    ("value", "message"),
    [(b"5, 6", "conflicting Content-Length"), (b"-1", "bad Content-Length"), (b"x", "bad")],
)
def test_bad_content_length(value: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        body_decoder(head(200, (b"Content-Length", value)), method=b"GET")


def test_request_head_sends_the_body_whole_with_its_length() -> None:
    request = httpx.Request(
        "POST",
        "http://example.test:8080/v1/x?alt=sse",
        headers={"Transfer-Encoding": "chunked", "X-Key": "k"},
        content=b"{}",
    )
    wire = request_head(request, b"{}")
    assert wire.startswith(b"POST /v1/x?alt=sse HTTP/1.1\r\n")
    assert b"Host: example.test:8080\r\n" in wire
    assert b"X-Key: k\r\n" in wire
    assert b"Content-Length: 2\r\n" in wire
    assert b"chunked" not in wire
    assert wire.endswith(b"\r\n\r\n")


def test_proxy_variables() -> None:
    assert not proxy_configured({})
    assert not proxy_configured({"HTTPS_PROXY": ""})
    assert proxy_configured({"https_proxy": "http://proxy:3128"})
    assert proxy_configured({"ALL_PROXY": "socks5://proxy"})


# --- a scripted server on a real loopback socket -----------------------------------------------

Handler = Callable[[trio.SocketStream, int], Awaitable[None]]


class Server:
    """Accepts connections on 127.0.0.1 and runs `handler(stream, connection_number)` for
    each; counts connections and requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0
        self._buffers: dict[int, bytes] = {}

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listener.socket.getsockname()[1]
        async with listener, trio.open_nursery() as nursery:
            task_status.started()
            while True:
                stream = await listener.accept()
                self.connections += 1
                nursery.start_soon(self._run, stream, self.connections)

    async def _run(self, stream: trio.SocketStream, number: int) -> None:
        async with stream:
            with contextlib.suppress(trio.BrokenResourceError):
                await self.handler(stream, number)

    async def read_request(self, stream: trio.SocketStream) -> bytes | None:
        """One request (head and Content-Length body) from `stream`; None at EOF."""
        key = id(stream)
        buffer = self._buffers.pop(key, b"")
        while b"\r\n\r\n" not in buffer:
            data = await stream.receive_some(65536)
            if not data:
                return None
            buffer += data
        head, _, rest = buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += await stream.receive_some(65536)
        self._buffers[key] = rest[length:]
        request = head + b"\r\n\r\n" + rest[:length]
        self.requests.append(request)
        return request

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery
        nursery.cancel_scope.cancel()


async def start(nursery: trio.Nursery, handler: Handler) -> Server:
    server = Server(handler)
    await nursery.start(server.serve)
    return server


def sse_chunks(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


TIMEOUTS = Timeouts(request=10, idle=10)


async def read_events(
    client: httpx.AsyncClient, url: str, timeouts: Timeouts = TIMEOUTS
) -> list[SseEvent]:
    request = client.build_request("POST", url, content=b'{"stream": true}')
    async with open_event_stream(client, request, timeouts=timeouts) as events:
        return [event async for event in events]


def lean_client(transport: LeanTransport | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport or LeanTransport(), timeout=None)


# --- the transport over real sockets -----------------------------------------------------------


async def test_chunked_sse_sent_a_byte_at_a_time(nursery: trio.Nursery) -> None:
    body = FIXTURE.read_bytes()
    events = [body[i : i + 50] for i in range(0, len(body), 50)]
    wire = SSE_HEAD + sse_chunks(events)

    async def handler(stream: trio.SocketStream, number: int) -> None:
        while await server.read_request(stream) is not None:
            for i in range(0, len(wire), 1 if number == 1 else 4096):
                await stream.send_all(wire[i : i + (1 if number == 1 else 4096)])
                await trio.lowlevel.checkpoint()

    server = await start(nursery, handler)
    async with lean_client() as client:
        got = await read_events(client, server.url + "/v1/messages")
    assert got == SseDecoder().push(body)
    assert b"POST /v1/messages HTTP/1.1\r\n" in server.requests[0]
    assert server.requests[0].endswith(b'\r\n\r\n{"stream": true}')


async def test_keep_alive_reuses_one_connection(nursery: trio.Nursery) -> None:
    async def handler(stream: trio.SocketStream, number: int) -> None:
        while await server.read_request(stream) is not None:
            n = len(server.requests)
            if n % 2:
                await stream.send_all(SSE_HEAD + sse_chunks([b"data: %d\n\n" % n]))
            else:
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ndata: %d\n\n" % n
                )

    server = await start(nursery, handler)
    async with lean_client() as client:
        for n in (1, 2, 3, 4):
            assert await read_events(client, server.url) == [SseEvent("message", str(n))]
        response = await client.get(server.url)
        assert response.status_code == 200
    assert server.connections == 1
    assert len(server.requests) == 5


async def test_connection_close_and_unread_bodies_are_not_reused(nursery: trio.Nursery) -> None:
    async def handler(stream: trio.SocketStream, number: int) -> None:
        while await server.read_request(stream) is not None:
            if len(server.requests) == 1:
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
                )
                return
            await stream.send_all(SSE_HEAD + b"6\r\ndata: ")  # never finishes

    server = await start(nursery, handler)
    async with lean_client() as client:
        assert (await client.get(server.url)).content == b"ok"
        async with client.stream("GET", server.url) as response:
            assert response.status_code == 200  # abandoned mid-body
        async with client.stream("GET", server.url) as response:
            assert response.status_code == 200
    assert server.connections == 3


async def test_a_kept_connection_the_server_closed_is_replaced(nursery: trio.Nursery) -> None:
    # The server closes a connection after its first answer: visible while it is idle (the
    # poll at take-out) or, with a close that races the next request, as EOF before any byte of
    # a response: either way the request is sent once more on a new connection.
    async def handler(stream: trio.SocketStream, number: int) -> None:
        if await server.read_request(stream) is None:
            return
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        if number == 2:
            # wait for the second request, then close without answering it
            await server.read_request(stream)

    server = await start(nursery, handler)
    async with lean_client() as client:
        assert (await client.get(server.url)).content == b"ok"  # connection 1, then closed
        assert (await client.get(server.url)).content == b"ok"  # dropped at take-out: 2
        assert (await client.get(server.url)).content == b"ok"  # 2 never answers: 3
    assert server.connections == 3
    assert len(server.requests) == 4


async def test_connect_refused_is_a_retryable_transport_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    async with lean_client() as client:
        with pytest.raises(TransportError, match="ConnectError") as info:
            await read_events(client, f"http://127.0.0.1:{port}/x")
    assert info.value.is_retryable


def rst(stream: trio.SocketStream) -> None:
    """Make the close of `stream` a TCP reset (SO_LINGER 0)."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.parametrize(
    ("behaviour", "message", "retryable"),
    [
        ("reset_mid_stream", "ReadError", True),
        ("eof_mid_chunk", "incomplete chunked read", False),
        ("eof_mid_length", "Content-Length bytes missing", False),
        ("bad_chunk_size", "bad chunk size", False),
        ("wrong_chunk_size", "not followed by CRLF", False),
        ("eof_in_headers", "in the middle of the response headers", False),
        ("oversized_headers", "exceed 65536 bytes", False),
        ("not_http", "not an HTTP/1.1 status line", False),
        ("no_response", "without sending a response", False),
        ("reset_before_response", "ReadError", True),
    ],
)
async def test_broken_servers_map_to_typed_errors(
    nursery: trio.Nursery, behaviour: str, message: str, retryable: bool
) -> None:
    async def handler(stream: trio.SocketStream, number: int) -> None:
        await server.read_request(stream)
        first = SSE_HEAD + b"d\r\ndata: first\n\n\r\n"
        if behaviour == "reset_mid_stream":
            await stream.send_all(first)
            await server.read_request(stream)  # wait for the client's close... or the reset
        elif behaviour == "eof_mid_chunk":
            await stream.send_all(first + b"20\r\ndata: cut")
        elif behaviour == "eof_mid_length":
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ndata: a\n\n")
        elif behaviour == "bad_chunk_size":
            await stream.send_all(first + b"zz\r\n")
        elif behaviour == "wrong_chunk_size":
            await stream.send_all(first + b"3\r\ndata: x\n\n\r\n")
        elif behaviour == "eof_in_headers":
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-")
        elif behaviour == "oversized_headers":
            await stream.send_all(b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 70000)
        elif behaviour == "not_http":
            await stream.send_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        elif behaviour == "reset_before_response":
            rst(stream)

    async def reset_after_first_event(stream: trio.SocketStream, number: int) -> None:
        await server.read_request(stream)
        await stream.send_all(SSE_HEAD + b"d\r\ndata: first\n\n\r\n")
        await trio.sleep(0.05)  # let the client read the first event before the reset
        rst(stream)

    server = await start(
        nursery, reset_after_first_event if behaviour == "reset_mid_stream" else handler
    )
    received: list[SseEvent] = []
    async with lean_client() as client:
        request = client.build_request("POST", server.url, content=b"{}")
        with pytest.raises(TransportError, match=message) as info:
            async with open_event_stream(
                client, request, timeouts=Timeouts(request=10, idle=10)
            ) as events:
                async for event in events:
                    received.append(event)
    assert info.value.is_retryable == retryable
    if behaviour in ("reset_mid_stream", "eof_mid_chunk", "bad_chunk_size", "wrong_chunk_size"):
        assert received == [SseEvent("message", "first")]


async def test_http_error_status_with_body_and_retry_after(nursery: trio.Nursery) -> None:
    async def handler(stream: trio.SocketStream, number: int) -> None:
        while await server.read_request(stream) is not None:
            body = b'{"error": "slow down"}'
            await stream.send_all(
                b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )

    server = await start(nursery, handler)
    async with lean_client() as client:
        for _ in range(2):  # the error body is read to its end: the connection is reused
            with pytest.raises(HttpError) as info:
                await read_events(client, server.url)
            assert (info.value.status, info.value.retry_after) == (429, 2.0)
            assert "slow down" in info.value.body
    assert server.connections == 1


async def test_gzip_bodies_are_decoded_by_httpx(nursery: trio.Nursery) -> None:
    import gzip

    data = gzip.compress(b"data: zipped\n\n")

    async def handler(stream: trio.SocketStream, number: int) -> None:
        await server.read_request(stream)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n%s"
            % (len(data), data)
        )

    server = await start(nursery, handler)
    async with lean_client() as client:
        assert await read_events(client, server.url) == [SseEvent("message", "zipped")]
        response = await client.get(server.url + "/again")
        assert lean_body(response) is None  # a coding: httpx decodes it, not the fast path


def stalled_after_one_event(server_box: list[Server]) -> Handler:
    async def handler(stream: trio.SocketStream, number: int) -> None:
        await server_box[0].read_request(stream)
        await stream.send_all(SSE_HEAD + b"d\r\ndata: first\n\n\r\n")
        await trio.sleep_forever()

    return handler


@pytest.mark.parametrize("watched", [False, True], ids=["scope", "idle_watch"])
async def test_idle_deadline(nursery: trio.Nursery, watched: bool) -> None:
    box: list[Server] = []
    server = await start(nursery, stalled_after_one_event(box))
    box.append(server)
    transport = LeanTransport(watch=IdleWatch(tick=0.05, min_idle=0.1))
    if watched:
        await nursery.start(transport.watch.run)
    received: list[SseEvent] = []
    async with lean_client(transport) as client:
        request = client.build_request("POST", server.url, content=b"{}")
        start_time = trio.current_time()
        with pytest.raises(TransportError, match="idle deadline") as info:
            async with open_event_stream(
                client, request, timeouts=Timeouts(request=5, idle=0.3)
            ) as events:
                async for event in events:
                    received.append(event)
        elapsed = trio.current_time() - start_time
    assert received == [SseEvent("message", "first")]
    assert info.value.is_retryable
    assert 0.25 < elapsed < 3.0
    assert transport.watch.waiting == {}


@pytest.mark.parametrize("phase", [0.0, 0.01, 0.49])
def test_the_idle_watch_never_fires_early_and_at_most_two_ticks_late(phase: float) -> None:
    """The watch counts ticks instead of reading the clock per wait: a wait that starts at any
    point of a tick still gets its whole idle time, and at most two ticks more."""

    async def main() -> float:
        watch = IdleWatch(tick=0.5, min_idle=1.0)
        left, right = trio.socket.socketpair()
        with left, right:
            connection = _Connection(trio.SocketStream(left), watch)
            async with trio.open_nursery() as nursery:
                await nursery.start(watch.run)
                await trio.sleep(1.0 + phase)  # two ticks counted, then `phase` into the third
                start = trio.current_time()
                with pytest.raises(httpx.ReadTimeout, match="nothing received for 3 s"):
                    await connection.receive(3.0)
                nursery.cancel_scope.cancel()
            assert watch.waiting == {}
            return trio.current_time() - start

    elapsed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert 3.0 <= elapsed <= 3.0 + 2 * 0.5


def test_a_wait_with_no_idle_deadline_under_the_idle_watch_waits_for_its_bytes() -> None:
    async def main() -> bytes:
        watch = IdleWatch(tick=0.5, min_idle=1.0)
        left, right = trio.socket.socketpair()
        with left, right:
            connection = _Connection(trio.SocketStream(left), watch)
            async with trio.open_nursery() as nursery:
                await nursery.start(watch.run)

                async def send_late() -> None:
                    await trio.sleep(3600)
                    await right.send(b"late")

                nursery.start_soon(send_late)
                data = await connection.receive(math.inf)
                nursery.cancel_scope.cancel()
            assert watch.waiting == {}
            return data

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == b"late"


async def test_no_response_headers_hits_the_request_deadline(nursery: trio.Nursery) -> None:
    async def handler(stream: trio.SocketStream, number: int) -> None:
        await server.read_request(stream)
        await trio.sleep_forever()

    server = await start(nursery, handler)
    async with lean_client() as client:
        with pytest.raises(TransportError, match=r"no response from 127.0.0.1 within 0.2 s"):
            await read_events(client, server.url, Timeouts(request=0.2, idle=10))


# --- TLS -----------------------------------------------------------------------------------------


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def test_https_with_keep_alive_and_an_untrusted_certificate(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    cert_file, key_file = self_signed(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_file, key_file)

    async def handler(stream: trio.SocketStream, number: int) -> None:
        tls = trio.SSLStream(stream, server_context, server_side=True)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError:
            return  # the client refused the certificate
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer or not buffer.endswith(b"}"):
                data = await tls.receive_some(65536)
                if not data:
                    return
                buffer += data
            buffer = b""
            await tls.send_all(SSE_HEAD + sse_chunks([b"data: secure\n\n"]))

    server = await start(nursery, handler)
    url = f"https://localhost:{server.port}/v1/x"
    trusted = ssl.create_default_context(cafile=str(cert_file))
    async with lean_client(LeanTransport(ssl_context=trusted)) as client:
        assert await read_events(client, url) == [SseEvent("message", "secure")]
        assert await read_events(client, url) == [SseEvent("message", "secure")]
    assert server.connections == 1
    async with lean_client() as client:  # the default context does not trust it
        with pytest.raises(TransportError, match="TLS handshake") as info:
            await read_events(client, url)
    assert "CERTIFICATE_VERIFY_FAILED" in str(info.value)


# --- the adapters against the fake provider ------------------------------------------------------


def ask(model: str, text: str) -> ChatRequest:
    return ChatRequest(model=model, messages=[Message.user_text(text)], max_tokens=64)


@pytest.mark.parametrize("kind", ["anthropic", "openai-chat", "openai-responses", "gemini"])
async def test_adapters_over_the_lean_transport_match_httpx(kind: str) -> None:
    fake = FakeProvider()
    turns = [
        Turn.reply("the answer is 42, " * 20, repeat=True, model="text"),
        Turn.calls(Call("get_weather", {"city": "Oslo"}), repeat=True, model="tools"),
    ]
    fake.add(*turns)
    async with trio.open_nursery() as nursery:
        await nursery.start(fake.serve)
        results = []
        for client in (httpx.AsyncClient(timeout=None), lean_client()):
            async with client:
                if kind == "anthropic":
                    provider: object = AnthropicProvider(client, f"{fake.url}/v1")
                elif kind == "openai-chat":
                    provider = OpenAiChatProvider(client, f"{fake.url}/v1")
                elif kind == "openai-responses":
                    provider = OpenAIResponsesProvider(
                        client, f"{fake.url}/v1", None, "r", for_target("openai-responses")
                    )
                else:
                    provider = GeminiProvider(
                        client, f"{fake.url}/v1beta", None, "g", for_target("gemini")
                    )
                for model in ("text", "tools", "text"):
                    results.append(await complete(provider, ask(model, "go")))  # type: ignore[arg-type]
        nursery.cancel_scope.cancel()
    httpx_results, lean_results = results[:3], results[3:]

    def calls(message: Message) -> list[tuple[str, object]]:  # ids are generated per call
        return [(c.name, c.arguments) for c in message.content if isinstance(c, ToolCall)]

    assert [r.message.text() for r in lean_results] == [r.message.text() for r in httpx_results]
    assert [calls(r.message) for r in lean_results] == [calls(r.message) for r in httpx_results]
    assert calls(lean_results[1].message) == [("get_weather", {"city": "Oslo"})]
    assert [r.finish for r in lean_results] == [r.finish for r in httpx_results]
    assert lean_results[0].message.text() == "the answer is 42, " * 20


async def test_a_body_finished_after_the_transport_closed_closes_its_connection(
    nursery: trio.Nursery,
) -> None:
    closed = trio.Event()

    async def handler(stream: trio.SocketStream, number: int) -> None:
        await server.read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        if await server.read_request(stream) is None:
            closed.set()  # the client closed the connection instead of keeping it

    server = await start(nursery, handler)
    transport = LeanTransport()
    client = lean_client(transport)
    response = await client.send(client.build_request("GET", server.url), stream=True)
    await client.aclose()  # closes the transport while the response is still open
    assert await response.aread() == b"ok"
    await response.aclose()
    with trio.fail_after(5):
        await closed.wait()
