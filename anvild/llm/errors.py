"""Errors of the llm layer. Every failure a provider call can end in is one of these:

    LlmError
     ├── HttpError          non-2xx status: status, body (bounded), retry_after seconds
     ├── TransportError     connect/read/write failures and deadlines (stalled bodies included)
     ├── ApiError           the provider reported an error in a 2xx body: kind, message
     ├── DecodeError        bytes or events that break the protocol (bad SSE, bad sequencing)
     ├── UnexpectedEof      the stream ended before its Finish
     └── ConfigError        the request cannot be made as configured (missing key, bad alias)

Lower-layer exceptions (httpx, json) are converted at the boundary with `raise ... from exc`.
`is_retryable` follows the course (2.1): 408, 429 and 5xx (Anthropic's 529 included), transport
timeouts and connection failures, and the overloaded/rate-limit API kinds.
"""

from __future__ import annotations

from typing import Final

RETRYABLE_API_KINDS: Final = frozenset(
    {
        "overloaded_error",
        "rate_limit_error",
        "rate_limit_exceeded",
        "server_error",
        "api_error",
        "RESOURCE_EXHAUSTED",
        "UNAVAILABLE",
    }
)


class LlmError(Exception):
    """Root of the llm layer's errors."""

    @property
    def is_retryable(self) -> bool:
        return False


class HttpError(LlmError):
    def __init__(self, status: int, body: str, retry_after: float | None = None):
        self.status = status
        self.body = body
        self.retry_after = retry_after
        detail = body.strip()
        if len(detail) > 500:
            detail = detail[:500] + "…"
        super().__init__(f"HTTP {status}: {detail}" if detail else f"HTTP {status}")

    @property
    def is_retryable(self) -> bool:
        return self.status in (408, 429) or self.status >= 500


class TransportError(LlmError):
    """The connection failed or a deadline passed. `retryable` is set by whoever converts the
    lower-layer error: timeouts and failed connects are retryable, others are not."""

    def __init__(self, message: str, *, retryable: bool = False):
        self.retryable = retryable
        super().__init__(message)

    @property
    def is_retryable(self) -> bool:
        return self.retryable


class ApiError(LlmError):
    def __init__(self, kind: str, message: str):
        self.kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}")

    @property
    def is_retryable(self) -> bool:
        return self.kind in RETRYABLE_API_KINDS


class DecodeError(LlmError):
    """Malformed input from the provider: bytes that are not a valid event stream, or events in
    an order the protocol forbids."""


class UnexpectedEof(LlmError):
    def __init__(self, message: str = "the stream ended before the provider finished its answer"):
        super().__init__(message)


class ConfigError(LlmError):
    """The request cannot be made as configured; the message says what to change."""
