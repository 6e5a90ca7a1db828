"""Conformance against the real local model: llama.cpp's llama-server serving SmolLM2-135M.

One server per test session, started on a free loopback port with the shipped recipe's `start
--port P` (`anvild/data/llama-server`, which builds nothing: `make test` runs its `build` and
`model` first), waited on at /health, and stopped at the end. The same five scenarios as against the
fake provider run through the three protocol families llama-server speaks: Chat Completions,
Anthropic Messages and Responses, each through its real adapter, the registry and Retry.

This model is tiny: its words cannot be relied on, so the scenarios check structure only
(`Expect(wording=False)`). Tool scenarios force the call with `tool_choice: required`
(Anthropic: `{"type": "any"}`), which the build's patch makes strict (docs/decisions.md,
anvild/data/llama-server.d/tool-choice-required.patch). The canonical request has no tool-choice
field, so a transport in this test adds it to the first request of a tool scenario; follow-ups
that carry tool results are left unforced, as a real loop would send them.

Without a built server these tests skip with the command to run; with ANVIL_REQUIRE_LLAMA=1
(set it in `make test`) they fail instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from anvild import data
from anvild.config import load
from tests.support.conformance import SCENARIOS, TOOL_SCENARIOS, Expect

SCRIPT = data.path(data.LLAMA_SERVER)
MODEL = "smollm2-135m"
FAMILIES = ("openai-chat", "anthropic", "openai-responses")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_llama_at_a_time")]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def unavailable(reason: str) -> None:
    if os.environ.get("ANVIL_REQUIRE_LLAMA") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    """The base URL of a running llama-server (`http://127.0.0.1:P`)."""
    built = subprocess.run(
        [str(SCRIPT), "path"], capture_output=True, text=True, timeout=30, check=False
    )
    if built.returncode != 0:
        unavailable(f"llama-server is not built: run `make llama-server` ({built.stderr.strip()})")
    model = subprocess.run(
        [str(SCRIPT), "model"], capture_output=True, text=True, timeout=300, check=False
    )
    if model.returncode != 0:
        unavailable(f"the model could not be fetched: {model.stderr.strip()}")
    port = free_port()
    started = subprocess.run(
        [str(SCRIPT), "start", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        if started.returncode != 0:
            pytest.fail(f"anvild/data/llama-server start failed:\n{started.stderr}")
        deadline = time.monotonic() + 60
        with httpx.Client() as client:
            while True:
                try:
                    if client.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"llama-server on {url} never became healthy")
                time.sleep(0.2)
        yield url
    finally:
        subprocess.run(
            [str(SCRIPT), "stop", "--port", str(port)],
            capture_output=True,
            timeout=60,
            check=False,
        )


def _has_tool_results(body: dict[str, Any]) -> bool:
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        ):
            return True
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(item, dict) and item.get("type") == "function_call_output" for item in items
    )


class ForceToolChoice(httpx.AsyncBaseTransport):
    """Adds `tool_choice: required` to requests that offer tools and carry no tool results."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.forced = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(await request.aread())
        if body.get("tools") and not _has_tool_results(body):
            anthropic = request.url.path.endswith("/messages")
            body["tool_choice"] = {"type": "any"} if anthropic else "required"
            self.forced += 1
            request = httpx.Request(
                request.method,
                request.url,
                headers=[(k, v) for k, v in request.headers.items() if k != "content-length"],
                content=json.dumps(body).encode(),
            )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("family", FAMILIES)
async def test_llama_server_conformance(
    family: str, scenario: str, llama_server: str, tmp_path: Path
) -> None:
    user = tmp_path / "config.toml"
    user.write_text(
        f'default_model = "tiny"\n\n[providers.local]\nkind = "{family}"\n'
        f'base_url = "{llama_server}/v1"\n\n[models.tiny]\nprovider = "local"\n'
        f'model = "{MODEL}"\ncontext_window = 8192\nmax_output_tokens = 256\n'
    )
    config = load(tmp_path, user_file=user, data_dir=tmp_path / "data")
    transport = ForceToolChoice()
    # Deadlines are anvil's (Timeouts: request and idle), not httpx's 5 s default, which a
    # loaded 2-core machine exceeds between two tokens.
    async with httpx.AsyncClient(transport=transport, timeout=None) as client:
        resolved = config.registry(client, env={}).resolve()
        assert resolved.kind == family
        expect = Expect(wording=False, max_tokens=256, forced_tools=scenario in TOOL_SCENARIOS)
        await SCENARIOS[scenario](resolved.provider, resolved.model, expect)
    assert (transport.forced > 0) == (scenario in TOOL_SCENARIOS)
