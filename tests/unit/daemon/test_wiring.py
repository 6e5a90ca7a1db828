"""`anvild.daemon.wiring`: the `local` provider waits for the embedded server, or fails with
what to do; the registry puts it behind the alias `local` only. What the beads ask of the
sessions builds none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from anvild.config import load
from anvild.daemon.llama import LlamaPaths, LlamaServer, State, with_local_model
from anvild.daemon.wiring import (
    LOCAL_HOST_URL,
    LocalModelProvider,
    _liveness,
    _resolver,
    local_factory,
)
from anvild.llm.capabilities import for_target
from anvild.llm.errors import TransportError
from anvild.llm.http import Timeouts
from anvild.llm.provider import Provider
from anvild.llm.registry import AdapterArgs, Kind
from anvild.llm.stream import StreamEvent
from anvild.llm.types import ChatRequest
from anvild.session import NewSession
from tests.unit.session.support import loads_on_loop, running, unloaded


class Recorded:
    """A provider that yields no events and remembers the base URL it was built for."""

    def __init__(self, base_url: str, seen: list[str]) -> None:
        self.base_url = base_url
        self._seen = seen

    @property
    def name(self) -> str:
        return "recorded"

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        self._seen.append(self.base_url)

        async def events() -> AsyncIterator[StreamEvent]:
            nothing: tuple[StreamEvent, ...] = ()
            for event in nothing:
                yield event

        yield events()


def _server(tmp_path: Path) -> LlamaServer:
    paths = LlamaPaths(tmp_path / "server", tmp_path / "model", tmp_path / "template")
    return LlamaServer(paths, log_file=tmp_path / "llama-server.log")


def _provider(
    tmp_path: Path, server: LlamaServer, seen: list[str], client: httpx.AsyncClient
) -> Provider:
    """The provider the registry resolves the default model to (behind its Retry); the
    recording factory never uses `client`."""

    def factory(kind: Kind, args: AdapterArgs) -> Recorded:
        return Recorded(args.base_url, seen)

    config = with_local_model(
        load(user_file=tmp_path / "none.toml", data_dir=tmp_path, project=False), LOCAL_HOST_URL
    )
    registry = config.registry(client, env={}, factory=local_factory(server, factory))
    resolved = registry.resolve()
    assert resolved.name == "local"
    assert resolved.provider_name == "local"
    assert resolved.limits.max_output_tokens == 256
    assert isinstance(local_factory(server)("openai-chat", _args(client)), LocalModelProvider)
    return resolved.provider


def _args(client: httpx.AsyncClient) -> AdapterArgs:
    caps = for_target("openai-chat", LOCAL_HOST_URL)
    return AdapterArgs(client, LOCAL_HOST_URL, None, "local", caps, Timeouts())


async def test_a_request_before_the_server_is_ready_waits_for_it(tmp_path: Path) -> None:
    server = _server(tmp_path)
    seen: list[str] = []
    async with httpx.AsyncClient() as client:
        provider = _provider(tmp_path, server, seen, client)

    async def become_ready() -> None:
        await trio.sleep(0.2)
        server._set(State.READY, base_url="http://127.0.0.1:4321")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(become_ready)
        with trio.fail_after(5):
            async with provider.stream(ChatRequest(model="smollm2-135m")) as events:
                assert [e async for e in events] == []
    assert seen == ["http://127.0.0.1:4321/v1"]


async def test_a_failed_server_fails_the_request_saying_what_to_do(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server._set(State.FAILED, "llama-server was not healthy after 60 s")
    async with httpx.AsyncClient() as client:
        provider = _provider(tmp_path, server, [], client)
    with pytest.raises(TransportError) as caught:
        async with provider.stream(ChatRequest(model="smollm2-135m")):
            pass
    message = str(caught.value)
    assert "the local llama-server is failed: llama-server was not healthy after 60 s" in message
    assert str(tmp_path / "llama-server.log") in message
    assert "make llama-server" in message
    assert "configure a hosted provider" in message
    assert not caught.value.is_retryable


async def test_the_beads_resolve_and_check_sessions_at_rest_without_building_them(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, []) as manager:
        dev = await manager.create(NewSession(alias="dev"))
        ended = await manager.create(NewSession())
        await manager.kill(ended.id)
        loads = loads_on_loop(manager)
        await unloaded(manager, dev)
        resolve, live = _resolver(manager), _liveness(manager)
        assert [resolve(key) for key in ("dev", dev.id, ended.id, "ghost")] == [
            dev.id,
            dev.id,
            None,
            None,
        ]
        assert (live(dev.id), live("dev"), live(ended.id)) == (True, False, False)
        assert manager.built_sessions() == ()
        assert loads == []
