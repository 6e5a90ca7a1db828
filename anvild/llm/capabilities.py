"""What each provider target can take: the capability table.

Adapters consult a `Capabilities` value instead of hard-coding provider names: whether images
may be sent, which tool-schema dialect the target accepts, whether signed reasoning can be
replayed, which field caps the output, whether temperature is accepted, and whether the target
takes OpenAI's `prompt_cache_key` (OpenAI's own endpoints only: other compatible servers may
refuse a field they do not know). The registry picks the entry for a configured model
(`for_target`), and a user's config may override fields.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from anvild.llm.errors import ConfigError


class SchemaDialect(enum.StrEnum):
    # Full JSON Schema for tool parameters (Anthropic input_schema, OpenAI parameters,
    # Gemini parametersJsonSchema).
    JSON_SCHEMA = "json-schema"
    # Gemini's legacy `parameters` (an OpenAPI 3.0 subset), compiled by anvild.llm.schema.
    GEMINI_LEGACY = "gemini-legacy"


class Replay(enum.StrEnum):
    """How a target's own opaque reasoning state is replayed in later requests."""

    NONE = "none"  # reasoning cannot be sent back (Chat Completions)
    SIGNED_BLOCKS = "signed-blocks"  # Anthropic thinking blocks with their signature
    THOUGHT_SIGNATURES = "thought-signatures"  # Gemini thoughtSignature on the same part
    REASONING_ITEMS = "reasoning-items"  # OpenAI Responses reasoning items, verbatim


@attrs.frozen
class Capabilities:
    images: bool = True
    schema_dialect: SchemaDialect = SchemaDialect.JSON_SCHEMA
    signed_reasoning: bool = False
    max_tokens_field: str = "max_tokens"
    temperature: bool = True
    replay: Replay = Replay.NONE
    prompt_cache_key: bool = False

    def require_images(self) -> None:
        """Raise `ConfigError` when the target takes no images (one is about to be sent)."""
        if not self.images:
            raise ConfigError(
                "this model does not accept images (its capabilities say images = false); "
                "remove the image or choose a model that reads images"
            )


ANTHROPIC: Final = Capabilities(
    signed_reasoning=True, max_tokens_field="max_tokens", replay=Replay.SIGNED_BLOCKS
)
OPENAI_CHAT: Final = Capabilities(max_tokens_field="max_completion_tokens", prompt_cache_key=True)
# Ollama, llama.cpp, vLLM and most compatible servers still only read the legacy field.
OPENAI_CHAT_COMPAT: Final = Capabilities(max_tokens_field="max_tokens")
OPENAI_RESPONSES: Final = Capabilities(
    signed_reasoning=True, max_tokens_field="max_output_tokens", replay=Replay.REASONING_ITEMS
)
GEMINI: Final = Capabilities(
    signed_reasoning=True,
    max_tokens_field="maxOutputTokens",
    replay=Replay.THOUGHT_SIGNATURES,
)
GEMINI_LEGACY_SCHEMA: Final = attrs.evolve(GEMINI, schema_dialect=SchemaDialect.GEMINI_LEGACY)

DEFAULTS: Final = {
    "anthropic": ANTHROPIC,
    "openai-chat": OPENAI_CHAT_COMPAT,
    "openai-responses": OPENAI_RESPONSES,
    "gemini": GEMINI,
}


def for_target(kind: str, base_url: str | None = None) -> Capabilities:
    """The default capabilities for a provider kind. OpenAI's own Chat endpoint takes
    `max_completion_tokens` (required by its reasoning models); compatible servers get
    `max_tokens`. OpenAI's own endpoints (both kinds) take `prompt_cache_key`."""
    openai = base_url is not None and "api.openai.com" in base_url
    if kind == "openai-chat" and openai:
        return OPENAI_CHAT
    if kind == "openai-responses" and openai:
        return attrs.evolve(OPENAI_RESPONSES, prompt_cache_key=True)
    try:
        return DEFAULTS[kind]
    except KeyError:
        known = ", ".join(sorted(DEFAULTS))
        raise ValueError(f"unknown provider kind {kind!r} (known: {known})") from None
