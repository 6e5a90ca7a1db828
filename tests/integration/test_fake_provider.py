"""The fake provider server itself: scripting by condition, failures, recording, and the
subprocess mode that end-to-end tests use."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from anvild.llm import stream
from anvild.llm.capabilities import for_target
from anvild.llm.errors import ApiError, HttpError
from anvild.llm.providers.anthropic import AnthropicProvider
from anvild.llm.providers.gemini import GeminiProvider
from anvild.llm.providers.openai_chat import OpenAiChatProvider
from anvild.llm.providers.openai_responses import OpenAIResponsesProvider
from anvild.llm.retry import Retry, RetryPolicy
from anvild.llm.stream import FinishReason
from anvild.llm.types import ChatRequest, Message
from tests.support.conformance import complete
from tests.support.fake_provider import Call, FakeProvider, StreamFailure, Turn, load_turns

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    server = FakeProvider()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


def ask(model: str, text: str) -> ChatRequest:
    return ChatRequest(model=model, messages=[Message.user_text(text)], max_tokens=64)


async def test_turns_are_taken_by_model_and_content(fake: FakeProvider) -> None:
    fake.add(
        Turn.reply("reviewer says ok", model="reviewer"),
        Turn.reply("dev answer 2", model="dev", contains="second"),
        Turn.reply("dev answer 1", model="dev"),
    )
    async with httpx.AsyncClient() as client:
        chat = OpenAiChatProvider(client, f"{fake.url}/v1")
        assert (await complete(chat, ask("dev", "first"))).message.text() == "dev answer 1"
        assert (await complete(chat, ask("dev", "second"))).message.text() == "dev answer 2"
        assert (await complete(chat, ask("reviewer", "x"))).message.text() == "reviewer says ok"
        # Nothing left: a loud, non-retryable 400 that names the request.
        with pytest.raises(HttpError) as info:
            await complete(chat, ask("dev", "third"))
    assert info.value.status == 400
    assert "no scripted turn matches request 4 (model 'dev'" in info.value.body
    assert [r.model for r in fake.requests] == ["dev", "dev", "reviewer", "dev"]
    assert fake.requests[0].headers["content-type"] == "application/json"
    assert fake.requests[1].last_user_text == "second"
    assert fake.pending == 0


async def test_http_failures_with_retry_after_then_success(
    fake: FakeProvider,
) -> None:
    fake.add(Turn.failure(529, "Overloaded", retry_after=0), Turn.reply("pong"))
    async with httpx.AsyncClient() as client:
        provider = Retry(AnthropicProvider(client, f"{fake.url}/v1"), RetryPolicy(base=0.01))
        done = await complete(provider, ask("claude", "ping"))
    assert done.message.text() == "pong"
    assert done.finish is FinishReason.END_TURN
    assert len(fake.requests) == 2


async def test_a_stream_error_after_content(fake: FakeProvider) -> None:
    fake.add(Turn.reply("half", stream_error=StreamFailure("overloaded_error", "Overloaded")))
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client, f"{fake.url}/v1")
        with pytest.raises(ApiError) as info:
            await complete(provider, ask("claude", "ping"))
    assert info.value.kind == "overloaded_error"


async def test_pause_turn_and_refusal_end_each_protocol_abnormally(fake: FakeProvider) -> None:
    async with httpx.AsyncClient() as client:
        providers = [
            AnthropicProvider(client, f"{fake.url}/v1"),
            OpenAiChatProvider(client, f"{fake.url}/v1"),
            OpenAIResponsesProvider(
                client, f"{fake.url}/v1", None, "r", for_target("openai-responses")
            ),
            GeminiProvider(client, f"{fake.url}/v1beta", None, "g", for_target("gemini")),
        ]
        for provider in providers:
            fake.add(Turn(text="wait", finish="pause_turn"), Turn(text="no", finish="refusal"))
            paused = await complete(provider, ask("m", "x"))
            refused = await complete(provider, ask("m", "y"))
            assert (paused.finish, refused.finish) == (
                FinishReason.UNSUPPORTED,
                FinishReason.REFUSAL,
            ), provider.name
            assert not paused.executable
    with pytest.raises(ValueError, match="finish must be one of"):
        load_turns({"turns": [{"finish": "pause"}]})


async def test_max_tokens_and_reasoning(fake: FakeProvider) -> None:
    fake.add(
        Turn(text="cut sho", finish="max_tokens"),
        Turn.calls(Call("f", {"a": 1}, id="call_x"), reasoning="thinking about f"),
    )
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client, f"{fake.url}/v1")
        truncated = await complete(provider, ask("m", "x"))
        called = await complete(provider, ask("m", "y"))
    assert truncated.finish is FinishReason.MAX_TOKENS
    assert not truncated.executable
    assert called.finish is FinishReason.TOOL_USE
    assert [c.id for c in called.tool_calls] == ["call_x"]
    reasoning = called.message.content[0]
    assert getattr(reasoning, "text", None) == "thinking about f"


async def test_pieces_of_a_given_size_stamped_with_the_send_time(fake: FakeProvider) -> None:
    text = "".join(f"@T@;{i:02d} " for i in range(5))
    fake.add(Turn.reply(text, piece=7, stamp="@T@", chunk_delay=0.01))
    before = time.monotonic_ns()
    async with httpx.AsyncClient() as client:
        chat = OpenAiChatProvider(client, f"{fake.url}/v1")
        async with chat.stream(ask("m", "x")) as events:
            deltas = [e.text async for e in events if isinstance(e, stream.TextDelta)]
    after = time.monotonic_ns()
    assert len(deltas) == 5  # piece=7: one "@T@;NN " per delta
    stamps = []
    for i, delta in enumerate(deltas):
        sent, _, rest = delta.partition(";")
        assert rest == f"{i:02d} "
        stamps.append(int(sent))
    assert before <= stamps[0] <= stamps[-1] <= after
    assert stamps[-1] - stamps[0] >= 4 * 10_000_000  # each stamped as it was sent
    with pytest.raises(ValueError, match="piece must be a positive integer"):
        load_turns({"turns": [{"text": "x", "piece": 0}]})


async def test_wait_blocks_until_enough_requests_arrived(fake: FakeProvider) -> None:
    fake.add(Turn.reply("one"), Turn.reply("two"))
    async with httpx.AsyncClient() as client:
        waited: list[httpx.Response] = []

        async def wait_for_two() -> None:
            waited.append(await client.get(f"{fake.url}/_fake/wait?requests=2&timeout=100"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_two)
            chat = OpenAiChatProvider(client, f"{fake.url}/v1")
            await complete(chat, ask("m", "a"))
            await trio.testing.wait_all_tasks_blocked()
            assert waited == []  # one request is not enough
            await complete(chat, ask("m", "b"))
        assert waited[0].json() == {"requests": 2}
        late = await client.get(f"{fake.url}/_fake/wait?requests=3&timeout=0.1")
        assert late.status_code == 408
        assert "fewer than 3 requests in 0.1 s" in late.json()["error"]
        bad = await client.get(f"{fake.url}/_fake/wait?requests=x")
        assert bad.status_code == 400


async def test_a_held_stream_waits_for_one_release_each(fake: FakeProvider) -> None:
    """`hold`: the first events go out, the rest wait; each release frees one stream, and a
    release that comes before the stream reaches its hold is kept for it."""
    fake.add(Turn.reply("held answer", hold=2, repeat=True))
    async with httpx.AsyncClient() as client:
        seen: list[str] = []

        async def read_held(done: trio.Event) -> None:
            request = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
            url = f"{fake.url}/v1/chat/completions"
            async with client.stream("POST", url, json=request) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        delta = json.loads(line[6:])["choices"][0]["delta"]
                        seen.append(delta.get("content") or "")
            done.set()

        async with trio.open_nursery() as nursery:
            first = trio.Event()
            nursery.start_soon(read_held, first)
            await fake.wait_requests(1)
            await trio.testing.wait_all_tasks_blocked()
            assert seen == ["", "held ans"]  # the role delta and the first piece, then held
            assert not first.is_set()
            answer = await client.post(f"{fake.url}/_fake/release")
            assert answer.json() == {"released": True}
            await first.wait()
            assert "".join(seen) == "held answer"

            fake.release()  # before the next stream: kept for it
            second = trio.Event()
            nursery.start_soon(read_held, second)
            await second.wait()
    with pytest.raises(ValueError, match="hold must be a count of events"):
        load_turns({"turns": [{"hold": -1}]})


def test_script_json_round_trips_and_rejects_unknown_keys() -> None:
    turns = load_turns(
        {
            "turns": [
                {"model": "dev", "text": "pong", "usage": {"input": 3, "output": 1}},
                {"tool_calls": [{"name": "f", "arguments": {"a": 1}}], "repeat": True},
                {"status": 529, "message": "busy", "retry_after": 1},
                {"text": "x", "stream_error": {"kind": "api_error", "message": "boom"}},
            ]
        }
    )
    assert turns[1].tool_calls == (Call("f", {"a": 1}),)
    assert turns[1].finish_reason == "tool_use"
    assert turns[2].status == 529
    with pytest.raises(ValueError, match="unknown turn keys: \\['txt'\\]"):
        load_turns({"turns": [{"txt": "typo"}]})
    with pytest.raises(ValueError, match="finish must be one of"):
        load_turns({"turns": [{"finish": "stop"}]})


async def test_subprocess_mode_with_control_endpoints(tmp_path: Path) -> None:
    script = tmp_path / "turns.json"
    script.write_text(json.dumps({"turns": [{"text": "from the script"}]}))
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.support.fake_provider", "--port", "0", "--script", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "the fake provider exited before it listened"
                line += chunk
        url = line.decode().strip()
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            chat = OpenAiChatProvider(client, f"{url}/v1")
            done = await complete(chat, ask("any", "hello"))
            assert done.message.text() == "from the script"
            added = await client.post(f"{url}/_fake/turns", json={"turns": [{"text": "more"}]})
            assert added.json() == {"pending": 1}
            assert (await complete(chat, ask("any", "again"))).message.text() == "more"
            recorded = (await client.get(f"{url}/_fake/requests")).json()
            assert [r["last_user_text"] for r in recorded] == ["hello", "again"]
            assert recorded[0]["protocol"] == "openai-chat"
            assert recorded[0]["body"]["stream"] is True
            assert (await client.get(f"{url}/_fake/pending")).json() == {"pending": 0}
            bad = await client.post(f"{url}/_fake/turns", json={"turns": [{"nope": 1}]})
            assert bad.status_code == 400
    finally:
        process.terminate()
        await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()
