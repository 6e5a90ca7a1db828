"""Conformance (course 6.3) of every adapter, through the registry and real HTTP.

(a) Against the fake provider server (tests/support/fake_provider.py): one server, one protocol
family per parametrised case, a configured provider of that kind pointing at it. The script
answers by request content, so the scenarios can run in any order.

(b) `live`: against every hosted provider whose key is set in the environment (anthropic,
openai, gemini through the built-in defaults, plus any provider of the user's own config that
has a key). Each is skipped with a reason when its key is not set. Run them with
`pytest -m live tests/integration/test_conformance.py`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from anvild.config import Config, load
from anvild.llm.registry import KINDS
from tests.support.conformance import (
    ONE_CITY_PROMPT,
    PONG_PROMPT,
    SCENARIOS,
    TWO_CITIES_PROMPT,
    Expect,
)
from tests.support.fake_provider import Call, FakeProvider, Turn

SCRIPT = [
    # First match wins: the most specific conditions come first.
    Turn.reply("It is -3 °C with snow in Oslo.", contains="snow", repeat=True),
    Turn.calls(
        Call("get_weather", {"city": "Oslo"}),
        Call("get_weather", {"city": "Lima"}),
        contains=TWO_CITIES_PROMPT,
        repeat=True,
    ),
    Turn.calls(Call("get_weather", {"city": "Oslo"}), contains=ONE_CITY_PROMPT, repeat=True),
    Turn.reply("pong", contains=PONG_PROMPT, repeat=True),
]

Scenario = Callable[..., Coroutine[Any, Any, Any]]


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    server = FakeProvider(SCRIPT)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


def write_config(tmp_path: Path, url: str) -> Path:
    lines = []
    for kind in KINDS:
        name = kind.replace("-", "_")
        version = "v1beta" if kind == "gemini" else "v1"
        lines += [
            f"[providers.fake_{name}]",
            f'kind = "{kind}"',
            f'base_url = "{url}/{version}"',
            "",
            f"[models.{name}]",
            f'provider = "fake_{name}"',
            f'model = "fake-{kind}"',
            "context_window = 8192",
            "max_output_tokens = 512",
            "",
        ]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("kind", KINDS)
async def test_fake_provider_conformance(
    kind: str, scenario: str, fake: FakeProvider, tmp_path: Path
) -> None:
    config = load(tmp_path, user_file=write_config(tmp_path, fake.url), data_dir=tmp_path / "data")
    async with httpx.AsyncClient() as client:
        resolved = config.registry(client, env={}).resolve(kind.replace("-", "_"))
        assert resolved.kind == kind
        await SCENARIOS[scenario](resolved.provider, resolved.model, Expect())
    assert fake.requests, "the scenario made no request"
    for request in fake.requests:
        assert request.protocol == kind
        assert request.model == f"fake-{kind}"
        # No key configured: no credential header of any provider's kind.
        assert not {"authorization", "x-api-key", "x-goog-api-key"} & set(request.headers)
    if scenario == "round_trip":
        assert "-3" in fake.requests[-1].last_user_text


# -- live: hosted providers the user configured ------------------------------------------------

LIVE_MODELS = {
    "anthropic": "anthropic:claude-haiku-4-5",
    "openai": "openai:gpt-4.1-mini",
    "gemini": "gemini:gemini-2.5-flash",
}


def live_targets() -> list[tuple[str, str]]:
    """(provider, name to resolve): the built-in hosted providers, overridable per provider with
    ANVIL_LIVE_<PROVIDER>_MODEL, plus ANVIL_LIVE_MODELS (comma-separated aliases of the user's
    config)."""
    targets = [
        (provider, os.environ.get(f"ANVIL_LIVE_{provider.upper()}_MODEL", default))
        for provider, default in LIVE_MODELS.items()
    ]
    extra = os.environ.get("ANVIL_LIVE_MODELS", "")
    targets += [(name, name) for name in extra.split(",") if name.strip()]
    return targets


@pytest.fixture
def live_config(request: pytest.FixtureRequest, name: str) -> Config:
    """The user's real config, after the checks that can skip (sync, so the reason shows)."""
    if "live" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("hosted providers cost money: run these with `pytest -m live`")
    config = load(Path.cwd())
    spec = config.models.get(name)
    provider_name = spec.provider if spec is not None else name.partition(":")[0]
    provider = config.providers.get(provider_name)
    if provider is None:
        pytest.skip(f"{name}: no provider {provider_name!r} is configured")
    if provider.api_key_env is not None and not os.environ.get(provider.api_key_env):
        pytest.skip(f"{provider.api_key_env} is not set (needed by provider {provider_name!r})")
    return config


@pytest.mark.live
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize(("label", "name"), live_targets())
async def test_live_conformance(label: str, name: str, scenario: str, live_config: Config) -> None:
    async with httpx.AsyncClient(timeout=None) as client:  # deadlines are anvil's Timeouts
        resolved = live_config.registry(client).resolve(name)
        await SCENARIOS[scenario](resolved.provider, resolved.model, Expect(max_tokens=1024))
