"""Provider kinds: the one table from a kind's config name to what it decides.

    kind = KIND_TABLE["gemini"]
    kind.adapter()          # the SseProvider subclass (its module is imported on first use)
    kind.new_state()        # a fresh sans-IO StreamState of its wire protocol
    kind.base_url, kind.api_key_env   # the hosted service the built-in provider points at

Every place that branches on a kind reads this table: the registry's adapter factory, the
config's schema (`KINDS`) and built-in providers, `anvilctl replay-stream`. A kind's default
capabilities stay in `anvild.llm.capabilities` (the capability table a config overrides). A
new protocol is one adapter module and one row here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import attrs

if TYPE_CHECKING:
    from anvild.llm.providers._events import SseProvider, WireState

Kind: TypeAlias = Literal["anthropic", "openai-chat", "openai-responses", "gemini"]


@attrs.frozen
class ProviderKind:
    name: Kind
    module: str  # the adapter module under anvild.llm.providers
    adapter_class: str  # its SseProvider subclass
    base_url: str  # the hosted service's API root, version included
    api_key_env: str  # the variable its key is read from

    def adapter(self) -> type[SseProvider]:
        """The adapter class. Imported here, so a process that uses one kind imports only that
        kind's wire helpers."""
        module = importlib.import_module(f"anvild.llm.providers.{self.module}")
        cls: type[SseProvider] = getattr(module, self.adapter_class)
        return cls

    def new_state(self) -> WireState:
        """A fresh stream state machine of this kind's wire protocol."""
        return self.adapter().wire_state()


KIND_TABLE: Final[Mapping[Kind, ProviderKind]] = {
    kind.name: kind
    for kind in (
        ProviderKind(
            "anthropic",
            "anthropic",
            "AnthropicProvider",
            "https://api.anthropic.com/v1",
            "ANTHROPIC_API_KEY",
        ),
        ProviderKind(
            "openai-chat",
            "openai_chat",
            "OpenAiChatProvider",
            "https://api.openai.com/v1",
            "OPENAI_API_KEY",
        ),
        ProviderKind(
            "openai-responses",
            "openai_responses",
            "OpenAIResponsesProvider",
            "https://api.openai.com/v1",
            "OPENAI_API_KEY",
        ),
        ProviderKind(
            "gemini",
            "gemini",
            "GeminiProvider",
            "https://generativelanguage.googleapis.com/v1beta",
            "GEMINI_API_KEY",
        ),
    )
}
KINDS: Final[tuple[Kind, ...]] = tuple(KIND_TABLE)
