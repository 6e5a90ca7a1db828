"""The provider kinds table: every row names an adapter of that kind, and every other table keyed
by kind (the capability defaults, the config's built-in providers) agrees with it."""

from __future__ import annotations

import pytest

from anvild.config.load import BUILTIN
from anvild.llm import capabilities
from anvild.llm.kinds import KIND_TABLE, KINDS
from anvild.llm.providers._events import SseProvider


@pytest.mark.parametrize("kind", KINDS)
def test_each_row_loads_an_adapter_of_its_kind(kind: str) -> None:
    row = KIND_TABLE[kind]  # type: ignore[index]
    adapter = row.adapter()
    assert issubclass(adapter, SseProvider)
    assert adapter.kind == kind
    assert adapter.default_capabilities == capabilities.for_target(kind)
    assert type(row.new_state()) is adapter.wire_state


def test_the_capability_table_has_a_row_for_each_kind_and_no_other() -> None:
    assert set(capabilities.DEFAULTS) == set(KINDS)


def test_the_hosted_builtin_providers_read_the_table() -> None:
    providers = BUILTIN["providers"]
    for name in ("anthropic", "openai", "openai-chat", "gemini"):
        row = KIND_TABLE[providers[name]["kind"]]
        assert providers[name]["base_url"] == row.base_url
        assert providers[name]["api_key_env"] == row.api_key_env
