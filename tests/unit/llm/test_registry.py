"""Registry: alias and provider:model resolution, limits, capabilities, Retry wrapping, and the
credential rules (a key only for its approved origin; a missing key is an actionable error)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from structlog.testing import capture_logs

from anvild.llm import capabilities as caps
from anvild.llm.errors import ConfigError
from anvild.llm.provider import Provider
from anvild.llm.providers.anthropic import AnthropicProvider
from anvild.llm.registry import (
    AdapterArgs,
    Kind,
    Limits,
    MissingKey,
    ModelSpec,
    Pricing,
    ProviderSpec,
    Registry,
    adapter_factory,
    origin_of,
)
from anvild.llm.retry import Retry, RetryPolicy
from anvild.llm.stream import Usage
from anvild.llm.testing import ScriptedProvider

ANTHROPIC = ProviderSpec(
    name="anthropic",
    kind="anthropic",
    base_url="https://api.anthropic.com/v1",
    api_key_env="ANTHROPIC_API_KEY",
    credential_origin="https://api.anthropic.com",
    default_limits=Limits(200_000, 4096),
)
OLLAMA = ProviderSpec(
    name="ollama",
    kind="openai-chat",
    base_url="http://127.0.0.1:11434/v1",
    default_limits=Limits(4096, 1024),
)
TINY = ModelSpec("tiny", "ollama", "smollm2-135m", Limits(8192, 1024))
SONNET = ModelSpec(
    "sonnet",
    "anthropic",
    "claude-sonnet-4-5",
    Limits(200_000, 8192),
    pricing=Pricing(input=3, output=15, cache_read=0.3, cache_write=3.75),
)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


class Recorder:
    """A factory that records what each adapter would have been given."""

    def __init__(self) -> None:
        self.calls: list[tuple[Kind, AdapterArgs]] = []

    def __call__(self, kind: Kind, args: AdapterArgs) -> Provider:
        self.calls.append((kind, args))
        return ScriptedProvider([], name=args.name)


def registry(
    client: httpx.AsyncClient, env: dict[str, str], factory: Recorder | None = None
) -> Registry:
    return Registry(
        {"anthropic": ANTHROPIC, "ollama": OLLAMA},
        {"tiny": TINY, "sonnet": SONNET},
        client=client,
        default_model="tiny",
        env=env,
        retry=RetryPolicy(max_attempts=2),
        factory=factory or Recorder(),
    )


async def test_alias_resolves_to_a_retrying_provider_with_limits(
    client: httpx.AsyncClient,
) -> None:
    factory = Recorder()
    resolved = registry(client, {}, factory).resolve("tiny")
    assert (resolved.name, resolved.provider_name, resolved.kind, resolved.model) == (
        "tiny",
        "ollama",
        "openai-chat",
        "smollm2-135m",
    )
    assert resolved.limits == Limits(8192, 1024)
    assert resolved.capabilities == caps.OPENAI_CHAT_COMPAT
    assert resolved.pricing is None
    assert isinstance(resolved.provider, Retry)
    assert resolved.provider.policy.max_attempts == 2
    assert resolved.provider.name == "ollama"
    assert not resolved.authenticated
    [(kind, args)] = factory.calls
    assert kind == "openai-chat"
    assert (args.base_url, args.api_key, args.client) == (OLLAMA.base_url, None, client)


async def test_default_model_and_provider_model_without_alias(client: httpx.AsyncClient) -> None:
    reg = registry(client, {})
    assert reg.resolve().name == "tiny"
    assert reg.resolve("").name == "tiny"
    resolved = reg.resolve("ollama:qwen3:8b")
    assert (resolved.provider_name, resolved.model) == ("ollama", "qwen3:8b")
    assert resolved.limits == Limits(4096, 1024)  # the provider's conservative defaults


async def test_missing_key_is_an_actionable_error(client: httpx.AsyncClient) -> None:
    reg = registry(client, {"ANTHROPIC_API_KEY": "  "})
    with pytest.raises(ConfigError) as info:
        reg.resolve("sonnet")
    # It says whose environment lacks the key (the daemon's: a key exported only where anvilctl
    # runs does not count) and how to restart anvild with it, or where to name another variable.
    assert str(info.value) == (
        "ANTHROPIC_API_KEY is not set in anvild's environment (needed by provider 'anthropic'). "
        "anvild reads API keys from its own environment, not from anvilctl's or your shell's: "
        "restart it with the key (`ANTHROPIC_API_KEY=... anvild`), or set api_key_env in "
        "[providers.anthropic] of its config to a variable anvild's environment has"
    )
    assert isinstance(info.value, MissingKey)
    assert (info.value.variable, info.value.provider) == ("ANTHROPIC_API_KEY", "anthropic")
    with pytest.raises(MissingKey, match="ANTHROPIC_API_KEY is not set in anvild's environment"):
        reg.resolve("anthropic:claude-haiku-4-5")


async def test_key_is_passed_for_its_approved_origin(client: httpx.AsyncClient) -> None:
    factory = Recorder()
    resolved = registry(client, {"ANTHROPIC_API_KEY": "sk-ant-1"}, factory).resolve("sonnet")
    assert resolved.authenticated
    assert factory.calls[0][1].api_key == "sk-ant-1"
    assert resolved.pricing == SONNET.pricing
    assert resolved.capabilities == caps.ANTHROPIC


@pytest.mark.parametrize(
    "base_url",
    [
        "https://evil.example/v1",
        "http://api.anthropic.com/v1",  # another scheme is another origin
        "https://api.anthropic.com:8443/v1",
        "https://api.anthropic.com.evil.example/v1",
    ],
)
async def test_key_is_withheld_from_any_other_origin(
    client: httpx.AsyncClient, base_url: str
) -> None:
    moved = ProviderSpec(
        name="anthropic",
        kind="anthropic",
        base_url=base_url,
        api_key_env="ANTHROPIC_API_KEY",
        credential_origin="https://api.anthropic.com",
    )
    factory = Recorder()
    reg = Registry(
        {"anthropic": moved},
        {},
        client=client,
        env={"ANTHROPIC_API_KEY": "sk-ant-1"},
        factory=factory,
    )
    with capture_logs() as logs:
        resolved = reg.resolve("anthropic:claude")
    assert not resolved.authenticated
    assert factory.calls[0][1].api_key is None
    assert logs[0]["event"] == "provider.credential_withheld"
    assert logs[0]["approved"] == "https://api.anthropic.com"


async def test_unknown_names_list_what_is_known(client: httpx.AsyncClient) -> None:
    reg = registry(client, {})
    with pytest.raises(ConfigError) as info:
        reg.resolve("opus")
    assert str(info.value) == (
        "unknown model 'opus' (known aliases: sonnet, tiny; or use provider:model with one of: "
        "anthropic, ollama)"
    )
    with pytest.raises(ConfigError, match=r"unknown provider 'nope' in 'nope:m' \(known"):
        reg.resolve("nope:m")


async def test_no_default_model(client: httpx.AsyncClient) -> None:
    reg = Registry({}, {}, client=client, env={}, factory=Recorder())
    with pytest.raises(ConfigError, match="no model given and no default_model configured"):
        reg.resolve()


async def test_a_model_of_an_unknown_provider_is_refused(client: httpx.AsyncClient) -> None:
    with pytest.raises(ConfigError, match="model 'x' uses provider 'gone'"):
        Registry({}, {"x": ModelSpec("x", "gone", "m", Limits(1, 1))}, client=client)


async def test_capability_overrides(client: httpx.AsyncClient) -> None:
    spec = ModelSpec(
        "tiny",
        "ollama",
        "m",
        Limits(8, 8),
        capabilities={"images": False, "schema_dialect": "gemini-legacy"},
    )
    reg = Registry({"ollama": OLLAMA}, {"tiny": spec}, client=client, factory=Recorder())
    resolved = reg.resolve("tiny")
    assert not resolved.capabilities.images
    assert resolved.capabilities.schema_dialect is caps.SchemaDialect.GEMINI_LEGACY
    bad = ModelSpec("bad", "ollama", "m", Limits(8, 8), capabilities={"vision": True})
    reg = Registry({"ollama": OLLAMA}, {"bad": bad}, client=client, factory=Recorder())
    with pytest.raises(ConfigError, match="unknown capability 'vision'"):
        reg.resolve("bad")


async def test_the_real_factory_builds_each_adapter(client: httpx.AsyncClient) -> None:
    for kind in ("anthropic", "openai-chat", "openai-responses", "gemini"):
        spec = ProviderSpec(name=f"p-{kind}", kind=kind, base_url="http://127.0.0.1:1/v1")
        reg = Registry({spec.name: spec}, {}, client=client, factory=adapter_factory)
        resolved = reg.resolve(f"{spec.name}:m")
        assert isinstance(resolved.provider, Retry)
        assert isinstance(resolved.provider.inner, Provider)
        assert resolved.provider.name == spec.name
    anthropic = ProviderSpec(name="a", kind="anthropic", base_url="http://127.0.0.1:1/v1")
    reg = Registry({"a": anthropic}, {}, client=client)
    inner = reg.resolve("a:m").provider
    assert isinstance(inner, Retry)
    assert isinstance(inner.inner, AnthropicProvider)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://API.anthropic.com/v1", "https://api.anthropic.com"),
        ("https://api.anthropic.com:443/v1", "https://api.anthropic.com"),
        ("http://127.0.0.1:8088/v1", "http://127.0.0.1:8088"),
        ("http://localhost:80", "http://localhost"),
        ("http://[::1]:9000/x", "http://[::1]:9000"),
    ],
)
def test_origin_of(url: str, origin: str) -> None:
    assert origin_of(url) == origin


def test_pricing_cost_is_unknown_unless_every_part_is_known() -> None:
    pricing = Pricing(input=3, output=15, cache_read=0.3)
    assert pricing.cost(Usage(1_000_000, 100_000, 0, 0)) == pytest.approx(4.5)
    assert pricing.cost(Usage(1_000_000, 100_000, 2_000_000, 0)) == pytest.approx(5.1)
    assert pricing.cost(Usage(1, 1, 0, 10)) is None  # cache writes have no price
    assert pricing.cost(Usage(1, None, 0, 0)) is None  # output count unknown
    assert Pricing().cost(Usage(0, 0, 0, 0)) == 0.0


def test_unreported_cache_counts_cost_nothing_but_unreported_input_or_output_is_unknown() -> None:
    """A provider that does not report its cache (an openai-chat server without cached_tokens:
    cache_read None) has none: the cost is input and output only. Input or output unreported
    stays unknown, and so does a reported cache count whose price is not set."""
    pricing = Pricing(input=3, output=15)  # no cache prices at all
    assert pricing.cost(Usage(1_000_000, 100_000, None, None)) == pytest.approx(4.5)
    assert pricing.cost(Usage(1_000_000, 100_000, None, 0)) == pytest.approx(4.5)
    assert pricing.cost(Usage(None, 100_000, None, None)) is None
    assert pricing.cost(Usage(1_000_000, None, None, None)) is None
    assert pricing.cost(Usage(1_000_000, 100_000, 5, None)) is None  # cache reads, no price
    assert pricing.cost(Usage()) is None
