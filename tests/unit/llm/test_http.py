"""HTTP glue: status checks, Retry-After, and the request and idle deadlines (course 02.B).

httpx's own read timeout is not exercised by mock transports, so the idle deadline is ours; it is
tested with trio's autojump clock on a body that never ends, and once over a real local socket
with a 0.2 s real deadline.
"""

from __future__ import annotations

import email.utils
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from anvild.llm.errors import HttpError, TransportError
from anvild.llm.http import Timeouts, open_event_stream, parse_retry_after
from anvild.llm.sse import SseDecoder, SseEvent

FIXTURE = (
    Path(__file__).resolve().parents[3]
    / "fixtures/recorded/anthropic/tool_use_input_json_delta.sse"
)


def mock_client(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=handler)


async def test_streams_a_fixture_through_the_decoder() -> None:
    body = FIXTURE.read_bytes()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 100):
            yield body[i : i + 100]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())

    expected = SseDecoder().push(body)
    async with mock_client(httpx.MockTransport(handler)) as client:
        request = client.build_request("POST", "http://provider.test/v1/messages")
        async with open_event_stream(client, request) as events:
            got = [event async for event in events]
    assert got == expected
    assert got[0].event == "message_start"


async def test_non_2xx_becomes_http_error_with_body_and_retry_after() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after": "2"}, json={"error": "slow down"})

    async with mock_client(httpx.MockTransport(handler)) as client:
        request = client.build_request("POST", "http://provider.test/x")
        with pytest.raises(HttpError) as info:
            async with open_event_stream(client, request):
                pytest.fail("the block must not run for a 429")
    assert (info.value.status, info.value.retry_after) == (429, 2.0)
    assert "slow down" in info.value.body
    assert info.value.is_retryable


async def test_connect_failure_is_a_retryable_transport_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with mock_client(httpx.MockTransport(handler)) as client:
        request = client.build_request("POST", "http://provider.test/x")
        with pytest.raises(TransportError, match="refused") as info:
            async with open_event_stream(client, request):
                pass
    assert info.value.is_retryable


async def test_stalled_body_ends_at_the_idle_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def stalls() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        await trio.sleep_forever()
        yield b""  # pragma: no cover - never reached

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stalls())

    received: list[SseEvent] = []
    async with mock_client(httpx.MockTransport(handler)) as client:
        request = client.build_request("POST", "http://provider.test/x")
        start = trio.current_time()
        with pytest.raises(TransportError, match="idle deadline") as info:
            async with open_event_stream(client, request, timeouts=Timeouts(idle=30)) as events:
                async for event in events:
                    received.append(event)
    assert received == [SseEvent("message", "first")]
    assert trio.current_time() - start == pytest.approx(30)
    assert "does not prove the provider stopped" in str(info.value)


async def _serve_once(task_status: trio.TaskStatus[int], *, send_headers: bool) -> None:
    """A real HTTP/1.1 server on loopback that sends one event (or nothing) and then stalls."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listener:
        task_status.started(listener.socket.getsockname()[1])
        stream = await listener.accept()
    async with stream:
        await stream.receive_some(65536)  # the request
        if send_headers:
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            event = b"data: hello\n\n"
            await stream.send_all(b"%x\r\n%s\r\n" % (len(event), event))
        await trio.sleep_forever()


@pytest.mark.parametrize("send_headers", [True, False], ids=["stalled_body", "no_headers"])
async def test_real_socket_deadlines(send_headers: bool) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: _serve_once(task_status, send_headers=send_headers)
        )
        async with httpx.AsyncClient() as client:
            request = client.build_request("POST", f"http://127.0.0.1:{port}/v1/stream")
            received: list[SseEvent] = []
            start = trio.current_time()
            with pytest.raises(TransportError) as info:
                async with open_event_stream(
                    client, request, timeouts=Timeouts(request=0.2, idle=0.2)
                ) as events:
                    async for event in events:
                        received.append(event)
            elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert 0.15 < elapsed < 2.0
    if send_headers:
        assert received == [SseEvent("message", "hello")]
        assert "idle deadline" in str(info.value)
    else:
        assert received == []
        assert "no response from 127.0.0.1 within 0.2 s" in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("2", 2.0),
        ("0.5", 0.5),
        ("-3", 0.0),
        ("soon", None),
        ("nan", None),
        ("", None),
    ],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 5, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(5.0)
    past = email.utils.formatdate(now - 60, usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0


async def test_a_stale_keep_alive_connection_is_resent_once() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        return httpx.Response(200, content=b"data: fresh\n\n")

    async with mock_client(httpx.MockTransport(handler)) as client:
        request = client.build_request("POST", "http://provider.test/x")
        async with open_event_stream(client, request) as events:
            got = [event async for event in events]
    assert got == [SseEvent("message", "fresh")]
    assert calls == 2


@pytest.mark.parametrize(
    "message",
    ["Server disconnected without sending a response.", "peer closed connection mid-body"],
)
async def test_other_protocol_errors_and_a_second_disconnect_are_not_retried(
    message: str,
) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.RemoteProtocolError(message, request=request)

    async with mock_client(httpx.MockTransport(handler)) as client:
        request = client.build_request("POST", "http://provider.test/x")
        with pytest.raises(TransportError, match="RemoteProtocolError"):
            async with open_event_stream(client, request):
                pass
    assert calls == (2 if "without sending" in message else 1)
