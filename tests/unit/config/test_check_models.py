"""`check_models`: the model names of the daemon's config checked at its start (a typo refused
with the key and the known aliases), and the keys of the providers its models use (a warning)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from anvild.config import Config, ConfigFileError, check_models, load

MODELS = """
[providers.local]
kind = "openai-chat"
base_url = "http://127.0.0.1:8088/v1"

[models.tiny]
provider = "local"
model = "smollm2"

[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-5"
"""


def _config(tmp_path: Path, text: str) -> tuple[Path, Config]:
    user = tmp_path / "config.toml"
    user.write_text(text)
    return user, load(user_file=user, data_dir=tmp_path / "data", project=False)


KEY = {"ANTHROPIC_API_KEY": "sk-ant-x"}


def test_a_default_model_typo_names_the_key_the_aliases_and_the_nearest(tmp_path: Path) -> None:
    user, config = _config(tmp_path, 'default_model = "sonet"\n' + MODELS)
    with pytest.raises(ConfigFileError) as info:
        check_models(config, KEY)
    assert str(info.value) == (
        f"{user}: default_model: unknown model 'sonet'; did you mean 'sonnet'? (known aliases: "
        "sonnet, tiny; or provider:model with a provider of: anthropic, gemini, llamacpp, "
        "local, ollama, openai, openai-chat)"
    )
    assert info.value.key == ("default_model",)


def test_an_unknown_provider_in_a_provider_model_name_is_an_error(tmp_path: Path) -> None:
    _, config = _config(tmp_path, 'default_model = "olama:qwen3:8b"\n' + MODELS)
    with pytest.raises(ConfigFileError, match=r"default_model: unknown provider 'olama' in"):
        check_models(config, KEY)


def test_the_compaction_model_is_checked_too(tmp_path: Path) -> None:
    user, config = _config(tmp_path, '[context]\ncompaction_model = "tinny"\n' + MODELS)
    with pytest.raises(ConfigFileError) as info:
        check_models(config, KEY)
    assert str(info.value).startswith(
        f"{user}: context.compaction_model: unknown model 'tinny'; did you mean 'tiny'?"
    )


@pytest.mark.parametrize(
    "default", ["tiny", "sonnet", "ollama:qwen3:8b", "local:anything", "anthropic:claude-haiku"]
)
def test_aliases_and_provider_model_names_pass(tmp_path: Path, default: str) -> None:
    _, config = _config(tmp_path, f'default_model = "{default}"\n' + MODELS)
    assert check_models(config, KEY) == []


def test_a_name_that_exists_without_config_passes(tmp_path: Path) -> None:
    _, config = _config(tmp_path, '[context]\ncompaction_model = "local"\n')
    with pytest.raises(ConfigFileError):
        check_models(config, {})
    assert check_models(config, {}, known=("local",)) == []


def test_a_missing_key_is_only_a_warning_naming_what_needs_it(tmp_path: Path) -> None:
    """Keys come with a restart, and the other models work meanwhile: a warning, not an error.
    Only the providers a model uses are named (not every built-in one)."""
    _, config = _config(tmp_path, 'default_model = "sonnet"\n' + MODELS)
    assert check_models(config, {"ANTHROPIC_API_KEY": "  "}) == [
        "ANTHROPIC_API_KEY is not set in anvild's environment: the default model 'sonnet' "
        "(provider 'anthropic') will fail until anvild is restarted with it "
        "(`ANTHROPIC_API_KEY=... anvild`)"
    ]
    _, plain = _config(tmp_path, MODELS)
    assert check_models(plain, {}) == [
        "ANTHROPIC_API_KEY is not set in anvild's environment: model 'sonnet' (provider "
        "'anthropic') will fail until anvild is restarted with it (`ANTHROPIC_API_KEY=... anvild`)"
    ]
    _, unused = _config(tmp_path, MODELS.split("[models.sonnet]")[0])
    assert check_models(unused, {}) == []


def test_no_warning_where_no_key_would_be_sent(tmp_path: Path) -> None:
    """A provider whose endpoint is not the origin its key was approved for gets no key (the
    registry withholds it): nothing to warn about."""
    _, config = _config(tmp_path, MODELS)
    assert len(check_models(config, {})) == 1
    anthropic = attrs.evolve(config.providers["anthropic"], credential_origin="https://other")
    moved = attrs.evolve(config, providers={**config.providers, "anthropic": anthropic})
    assert check_models(moved, {}) == []
