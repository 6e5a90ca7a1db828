"""The model registry: from a name to a ready provider, a model id, limits and capabilities.

    registry = Registry(providers, models, default_model="tiny", client=client)
    resolved = registry.resolve("ollama:qwen3:8b")   # an alias, or provider:model
    async with resolved.provider.stream(request) as events: ...

Takes already-trusted config (`ProviderSpec`, `ModelSpec`); which file may say what is
`anvild.config`'s job. Names resolve: a configured alias; else `provider:model` split at the
first colon, with conservative default limits; else a `ConfigError` listing aliases and providers.
A key is read from `api_key_env` at resolve time and given to the adapter only when the
`base_url` origin is the provider's approved `credential_origin`: a key never follows an
endpoint to a host nobody approved. A missing key is `MissingKey`, naming anvild's environment.
The shared `client` must have `timeout=None` (deadlines are `anvild.llm.http.Timeouts`). Every
provider is wrapped in `Retry`. Without pricing, cost is unknown (`None`), never zero.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeAlias
from urllib.parse import urlsplit

import attrs
import httpx
import structlog

from anvild.llm import capabilities as caps
from anvild.llm.errors import ConfigError
from anvild.llm.http import Timeouts
from anvild.llm.kinds import KIND_TABLE
from anvild.llm.kinds import KINDS as KINDS  # re-exported: the config schema checks against it
from anvild.llm.kinds import Kind as Kind
from anvild.llm.provider import Provider
from anvild.llm.retry import Retry, RetryPolicy
from anvild.llm.stream import Usage

log = structlog.get_logger(__name__)


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of a URL, lower-cased, with the default port left out, the unit
    a credential is bound to (RFC 6454 origins)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


class MissingKey(ConfigError):
    """A provider's key variable is not set (or blank) in the environment the registry reads:
    the daemon's. `variable` and `provider` let a caller that runs the registry elsewhere (an
    in-process `anvilctl -p`) say it its own way."""

    def __init__(self, variable: str, provider: str) -> None:
        self.variable = variable
        self.provider = provider
        super().__init__(
            f"{variable} is not set in anvild's environment (needed by provider {provider!r}). "
            "anvild reads API keys from its own environment, not from anvilctl's or your "
            f"shell's: restart it with the key (`{variable}=... anvild`), or set api_key_env in "
            f"[providers.{provider}] of its config to a variable anvild's environment has"
        )


@attrs.frozen
class Limits:
    context_window: int
    max_output_tokens: int


@attrs.frozen
class Pricing:
    """USD per million tokens of each kind. A kind left out has an unknown price."""

    input: float | None = None
    output: float | None = None
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Usage) -> float | None:
        """The USD cost of `usage`, or None when a count or a price it needs is unknown.

        Input and output must have been reported: without them the cost is unknown. An
        unreported cache count (None) costs nothing: a provider that says nothing about its
        prompt cache (an openai-chat server without `cached_tokens`) has none to charge for, and
        its input count is then every input token. A reported cache count is priced like the
        others (unknown when it is above 0 and its price is not set)."""
        total = 0.0
        for count, price, required in (
            (usage.input, self.input, True),
            (usage.output, self.output, True),
            (usage.cache_read, self.cache_read, False),
            (usage.cache_write, self.cache_write, False),
        ):
            if count is None:
                if required:
                    return None
                continue
            if count == 0:
                continue
            if price is None:
                return None
            total += count * price / 1_000_000
        return total


@attrs.frozen
class ProviderSpec:
    """One provider endpoint, as the trusted configuration describes it.

    `credential_origin` is the origin the key in `api_key_env` may be sent to (None: nowhere).
    `default_limits` apply to `provider:model` names that have no alias.
    """

    name: str
    kind: Kind
    base_url: str
    api_key_env: str | None = None
    credential_origin: str | None = None
    default_limits: Limits = Limits(context_window=8192, max_output_tokens=2048)


@attrs.frozen
class ModelSpec:
    alias: str
    provider: str
    model: str
    limits: Limits
    pricing: Pricing | None = None
    # Field overrides of the provider kind's capability table, e.g. images=False.
    capabilities: Mapping[str, object] = attrs.field(factory=dict)


@attrs.frozen
class ResolvedModel:
    name: str  # what was asked for: the alias or `provider:model`
    provider_name: str
    kind: Kind
    model: str
    limits: Limits
    capabilities: caps.Capabilities
    pricing: Pricing | None
    provider: Provider  # wrapped in Retry
    # Whether a key will be sent: False for keyless providers and for moved endpoints.
    authenticated: bool


@attrs.frozen
class AdapterArgs:
    """What an adapter's constructor takes, so tests can substitute a factory."""

    client: httpx.AsyncClient
    base_url: str
    api_key: str | None
    name: str
    capabilities: caps.Capabilities
    timeouts: Timeouts


ProviderFactory: TypeAlias = Callable[[Kind, AdapterArgs], Provider]


def adapter_factory(kind: Kind, args: AdapterArgs) -> Provider:
    """Construct the adapter for `kind` (the provider kinds table, `anvild.llm.kinds`)."""
    return KIND_TABLE[kind].adapter()(
        args.client, args.base_url, args.api_key, args.name, args.capabilities, args.timeouts
    )


def apply_capability_overrides(
    base: caps.Capabilities, overrides: Mapping[str, object]
) -> caps.Capabilities:
    """`base` with the given fields replaced; enum fields take their string values."""
    changes: dict[str, object] = {}
    for key, value in overrides.items():
        if key == "schema_dialect":
            changes[key] = caps.SchemaDialect(str(value))
        elif key == "replay":
            changes[key] = caps.Replay(str(value))
        elif key in attrs.fields_dict(caps.Capabilities):
            changes[key] = value
        else:
            known = ", ".join(attrs.fields_dict(caps.Capabilities))
            raise ConfigError(f"unknown capability {key!r} (known: {known})")
    return attrs.evolve(base, **changes)  # type: ignore[arg-type]


class Registry:
    def __init__(
        self,
        providers: Mapping[str, ProviderSpec],
        models: Mapping[str, ModelSpec],
        *,
        client: httpx.AsyncClient,
        default_model: str | None = None,
        env: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        timeouts: Timeouts | None = None,
        factory: ProviderFactory = adapter_factory,
    ) -> None:
        for alias, spec in models.items():
            if spec.provider not in providers:
                raise ConfigError(
                    f"model {alias!r} uses provider {spec.provider!r}, which is not configured "
                    f"(known providers: {_listing(providers)})"
                )
        self.providers = dict(providers)
        self.models = dict(models)
        self.default_model = default_model
        self._client = client
        self._env = os.environ if env is None else env
        self._retry = retry or RetryPolicy()
        self._timeouts = timeouts or Timeouts()
        self._factory = factory

    def resolve(self, name: str | None = None) -> ResolvedModel:
        """The model for an alias or `provider:model`; None means the default model."""
        if name is None or name == "":
            if self.default_model is None:
                raise ConfigError(
                    "no model given and no default_model configured "
                    f"(known aliases: {_listing(self.models)})"
                )
            name = self.default_model
        if name in self.models:
            spec = self.models[name]
            return self._build(
                name,
                self.providers[spec.provider],
                spec.model,
                spec.limits,
                spec.pricing,
                spec.capabilities,
            )
        provider_name, colon, model = name.partition(":")
        if colon and model and provider_name in self.providers:
            provider = self.providers[provider_name]
            return self._build(name, provider, model, provider.default_limits, None, {})
        if colon and model:
            raise ConfigError(
                f"unknown provider {provider_name!r} in {name!r} "
                f"(known providers: {_listing(self.providers)})"
            )
        raise ConfigError(
            f"unknown model {name!r} (known aliases: {_listing(self.models)}; "
            f"or use provider:model with one of: {_listing(self.providers)})"
        )

    def _build(
        self,
        name: str,
        provider: ProviderSpec,
        model: str,
        limits: Limits,
        pricing: Pricing | None,
        overrides: Mapping[str, object],
    ) -> ResolvedModel:
        capabilities = apply_capability_overrides(
            caps.for_target(provider.kind, provider.base_url), overrides
        )
        api_key = self._credential(provider)
        adapter = self._factory(
            provider.kind,
            AdapterArgs(
                client=self._client,
                base_url=provider.base_url,
                api_key=api_key,
                name=provider.name,
                capabilities=capabilities,
                timeouts=self._timeouts,
            ),
        )
        return ResolvedModel(
            name=name,
            provider_name=provider.name,
            kind=provider.kind,
            model=model,
            limits=limits,
            capabilities=capabilities,
            pricing=pricing,
            provider=Retry(adapter, self._retry),
            authenticated=api_key is not None,
        )

    def _credential(self, provider: ProviderSpec) -> str | None:
        if provider.api_key_env is None:
            return None
        endpoint = origin_of(provider.base_url)
        if provider.credential_origin is None or endpoint != provider.credential_origin:
            log.warning(
                "provider.credential_withheld",
                provider=provider.name,
                endpoint=endpoint,
                approved=provider.credential_origin,
                key=provider.api_key_env,
            )
            return None
        value = self._env.get(provider.api_key_env, "")
        if not value.strip():
            raise MissingKey(provider.api_key_env, provider.name)
        return value.strip()


def _listing(names: Mapping[str, object]) -> str:
    return ", ".join(sorted(names)) if names else "none"
