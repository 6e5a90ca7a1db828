"""The fake provider outlives a client that hangs up in the middle of a stream (a cancelled
turn, a killed daemon): only that connection ends, and the next request is served."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from anvild.llm.providers.openai_chat import OpenAiChatProvider
from anvild.llm.types import ChatRequest, Message
from tests.support.conformance import complete
from tests.support.fake_provider import FakeProvider, Turn


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    server = FakeProvider()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


async def hang_up_mid_stream(fake: FakeProvider) -> None:
    """Ask for a slow stream, read its first bytes, then reset the connection."""
    stream = await trio.open_tcp_stream(fake.host, fake.port or 0)
    body = json.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    await stream.send_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: fake\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n{body}".encode()
    )
    assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 200")
    # SO_LINGER 0: close sends a reset, so the server's next send fails at once.
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def test_a_client_hanging_up_mid_stream_does_not_stop_the_server(
    fake: FakeProvider,
) -> None:
    fake.add(Turn.reply("slow " * 200, piece=1, chunk_delay=0.01), Turn.reply("still here"))
    with trio.fail_after(10):
        await hang_up_mid_stream(fake)
        assert await fake.wait_hangups(1) == 1
    request = ChatRequest(model="m", messages=[Message.user_text("again")], max_tokens=64)
    async with httpx.AsyncClient() as client:
        chat = OpenAiChatProvider(client, f"{fake.url}/v1")
        assert (await complete(chat, request)).message.text() == "still here"
