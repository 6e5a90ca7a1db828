"""The configured models, checked when the daemon starts, not when a session first uses one.

    warnings = check_models(config, env)   # raises ConfigFileError; anvild exits 2

Error (the daemon refuses to start): `default_model` or `[context] compaction_model` naming
neither an alias nor `provider:model` with a configured provider; the message names the file,
the key, the known aliases and providers and the nearest alias. (Bad aliases are the loader's.)
Warning (printed and logged, the daemon starts): a key that a used provider needs is not set in
anvild's environment; only providers a model uses, and only when the key would be sent.
`known` adds names that exist without configuration (`local`, the embedded llama-server).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping

from anvild.config.load import Config, Source
from anvild.config.schema import ConfigFileError, Key
from anvild.llm.registry import origin_of

__all__ = ["check_models"]


def check_models(
    config: Config, env: Mapping[str, str], *, known: Collection[str] = ()
) -> list[str]:
    """Raise `ConfigFileError` for a model name that resolves to nothing; return a warning for
    each provider key a configured model needs that `env` lacks."""
    names: dict[Key, str] = {}
    if config.default_model is not None:
        names[("default_model",)] = config.default_model
    if config.context.compaction_model:
        names[("context", "compaction_model")] = config.context.compaction_model
    for key, name in names.items():
        _check_name(config, key, name, known)
    return _missing_keys(config, env, names)


def _check_name(config: Config, key: Key, name: str, known: Collection[str]) -> None:
    if name in config.models or name in known:
        return
    provider, colon, model = name.partition(":")
    if colon and model and provider in config.providers:
        return
    aliases = sorted({*config.models, *known})
    providers = sorted(config.providers)
    if colon and model:
        problem = f"unknown provider {provider!r} in {name!r} (known providers: {_list(providers)})"
    else:
        guess = difflib.get_close_matches(name, aliases, n=1, cutoff=0.6)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        problem = (
            f"unknown model {name!r}{hint} (known aliases: {_list(aliases)}; or "
            f"provider:model with a provider of: {_list(providers)})"
        )
    raise ConfigFileError(_file_of(config.sources.get(key)), key, problem)


def _missing_keys(config: Config, env: Mapping[str, str], names: Mapping[Key, str]) -> list[str]:
    users: dict[str, list[str]] = {}  # provider -> what uses it
    labels = {
        ("default_model",): "the default model",
        ("context", "compaction_model"): "the compaction model",
    }
    for key, name in names.items():
        used = config.models[name].provider if name in config.models else name.split(":")[0]
        if used in config.providers:  # (not the embedded `local`: it needs no key)
            users.setdefault(used, []).append(f"{labels[key]} {name!r}")
    for alias, spec in sorted(config.models.items()):
        if alias not in names.values():
            users.setdefault(spec.provider, []).append(f"model {alias!r}")
    warnings = []
    for provider_name, used_by in users.items():
        provider = config.providers[provider_name]
        variable = provider.api_key_env
        if variable is None or env.get(variable, "").strip():
            continue
        if provider.credential_origin != origin_of(provider.base_url):
            continue  # no key would be sent there anyway
        warnings.append(
            f"{variable} is not set in anvild's environment: {', '.join(used_by)} (provider "
            f"{provider_name!r}) will fail until anvild is restarted with it "
            f"(`{variable}=... anvild`)"
        )
    return warnings


def _file_of(source: Source | None) -> str:
    return "built-in defaults" if source is None or source.file is None else str(source.file)


def _list(names: list[str]) -> str:
    return ", ".join(names) if names else "none"
