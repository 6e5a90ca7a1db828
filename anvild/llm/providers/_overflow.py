"""Context-overflow shapes shared by more than one adapter, and the JSON helpers they need.

Each adapter maps its own provider's "the request is larger than the context window" to
`ContextOverflow`; the shapes here are the ones several adapters meet (the fixtures under
fixtures/handwritten/ show each):

- OpenAI and the servers that copy its errors: `code` `context_length_exceeded`, the counts
  only in the message, when at all ("maximum context length is 8192 tokens. However, your
  messages resulted in 8227 tokens."; Responses: "Your input exceeds the context window").
- vLLM: `type` `BadRequestError` with the same words ("... However, you requested 2100
  tokens", newer "your request has 8 input tokens"); older releases send the error object as
  the body (`"object": "error"`), newer ones under `error`.
- llama-server, on every endpoint: `type` `exceed_context_size_error` with `n_prompt_tokens` and
  `n_ctx`, or the counts in the message ("request (N tokens) exceeds ... (M tokens)"), or none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from anvild.llm.errors import ContextOverflow

OPENAI_CODE: Final = "context_length_exceeded"
LLAMA_TYPE: Final = "exceed_context_size_error"
VLLM_TYPE: Final = "BadRequestError"

_OPENAI_LIMIT: Final = re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE)
_OPENAI_REQUESTED: Final = re.compile(
    r"(?:resulted in|you requested|request has) (\d+)(?: input)? tokens", re.IGNORECASE
)
_LLAMA_COUNTS: Final = re.compile(r"\((\d+) tokens\).*?\((\d+) tokens\)", re.DOTALL)


def count(value: Any) -> int | None:
    """A token count from JSON: a non-negative int (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def error_object(body: str) -> Mapping[str, Any] | None:
    """The error object of a JSON error body: `{"error": {...}}` (Anthropic adds a top-level
    `type`), or a list holding one such body (Gemini's streaming endpoint). None otherwise."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]
    if not isinstance(parsed, Mapping):
        return None
    if parsed.get("object") == "error":  # older vLLM: the error object is the body
        return parsed
    error = parsed.get("error")
    return error if isinstance(error, Mapping) else None


def message_of(error: Mapping[str, Any]) -> str:
    message = error.get("message")
    return message if isinstance(message, str) else ""


def openai(error: Mapping[str, Any]) -> ContextOverflow | None:
    """OpenAI's shape (code `context_length_exceeded`), with counts parsed from the message."""
    if error.get("code") != OPENAI_CODE:
        return None
    return _worded(message_of(error) or OPENAI_CODE)


def vllm(error: Mapping[str, Any]) -> ContextOverflow | None:
    """vLLM's shape (type `BadRequestError` saying "maximum context length is N tokens"), with
    the counts parsed from the message."""
    if error.get("type") != VLLM_TYPE:
        return None
    overflow = _worded(message_of(error))
    return overflow if overflow.limit is not None else None  # another bad request


def _worded(message: str) -> ContextOverflow:
    """An overflow in OpenAI's words: the counts are what the message says of them."""
    limit = _OPENAI_LIMIT.search(message)
    requested = _OPENAI_REQUESTED.search(message)
    return ContextOverflow(
        message,
        requested=int(requested.group(1)) if requested else None,
        limit=int(limit.group(1)) if limit else None,
    )


def llama_server(error: Mapping[str, Any]) -> ContextOverflow | None:
    """llama-server's shape (type `exceed_context_size_error`): counts from `n_prompt_tokens`
    and `n_ctx`, else from the message."""
    if error.get("type") != LLAMA_TYPE:
        return None
    message = message_of(error) or LLAMA_TYPE
    requested, limit = count(error.get("n_prompt_tokens")), count(error.get("n_ctx"))
    if (requested is None or limit is None) and (found := _LLAMA_COUNTS.search(message)):
        requested = int(found.group(1)) if requested is None else requested
        limit = int(found.group(2)) if limit is None else limit
    return ContextOverflow(message, requested=requested, limit=limit)
