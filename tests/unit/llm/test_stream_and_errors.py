"""Usage accounting (unknown is not zero) and the retryability of errors (course 2.1)."""

from __future__ import annotations

import pytest

from anvild.llm.errors import (
    ApiError,
    ConfigError,
    ContextOverflow,
    DecodeError,
    HttpError,
    LlmError,
    TransportError,
    UnexpectedEof,
)
from anvild.llm.stream import FinishReason, Usage


def test_absorb_keeps_earlier_input_when_later_reports_only_output() -> None:
    start = Usage(input=100, cache_read=20, cache_write=0)
    assert start.absorb(Usage(output=7)) == Usage(input=100, output=7, cache_read=20, cache_write=0)


def test_absorb_overwrites_with_a_reported_zero() -> None:
    assert Usage(input=100).absorb(Usage(input=0)).input == 0


def test_unknown_is_not_printed_or_summed_as_zero() -> None:
    partial = Usage(input=10, output=5)
    assert str(partial) == "input=10 output=5"
    assert "0" not in str(Usage(input=None, output=None))
    assert str(Usage()) == "usage unknown"
    assert partial.total is None
    assert Usage(1, 2, 3, 4).total == 10
    summed = partial.plus(Usage(input=1, output=1, cache_read=1, cache_write=1))
    assert summed == Usage(input=11, output=6, cache_read=None, cache_write=None)


def test_finish_reason_cleanliness() -> None:
    assert {r for r in FinishReason if r.is_clean} == {
        FinishReason.END_TURN,
        FinishReason.TOOL_USE,
        FinishReason.STOP_SEQUENCE,
    }


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (HttpError(401, "bad key"), False),
        (HttpError(400, "bad request"), False),
        (HttpError(404, ""), False),
        (HttpError(408, ""), True),
        (HttpError(429, "slow down", retry_after=2.0), True),
        (HttpError(500, ""), True),
        (HttpError(503, ""), True),
        (HttpError(529, "overloaded"), True),
        (TransportError("connect failed", retryable=True), True),
        (TransportError("tls failure"), False),
        (ApiError("overloaded_error", "Overloaded"), True),
        (ApiError("rate_limit_error", "slow"), True),
        (ApiError("invalid_request_error", "nope"), False),
        (DecodeError("bad"), False),
        (UnexpectedEof(), False),
        (ConfigError("ANTHROPIC_API_KEY is not set"), False),
        (ContextOverflow("prompt is too long", requested=9, limit=8), False),
    ],
)
def test_is_retryable(error: LlmError, retryable: bool) -> None:
    assert isinstance(error, LlmError)
    assert error.is_retryable is retryable


def test_http_error_message_and_fields() -> None:
    error = HttpError(429, '{"error": "rate"}', retry_after=1.5)
    assert (error.status, error.retry_after) == (429, 1.5)
    assert str(error) == 'HTTP 429: {"error": "rate"}'
    assert len(str(HttpError(500, "x" * 5000))) < 600


def test_context_overflow_says_it_did_not_fit_with_the_counts_it_knows() -> None:
    error = ContextOverflow(
        "prompt is too long: 208310 tokens > 200000 maximum", requested=208310, limit=200000
    )
    assert (error.message, error.requested, error.limit) == (
        "prompt is too long: 208310 tokens > 200000 maximum",
        208310,
        200000,
    )
    assert str(error) == (
        "the request did not fit the model's context window (208310 tokens requested, "
        "200000 allowed): prompt is too long: 208310 tokens > 200000 maximum"
    )
    assert str(ContextOverflow("too big", limit=4096)) == (
        "the request did not fit the model's context window (4096 allowed): too big"
    )
    assert str(ContextOverflow("too big", requested=5000)) == (
        "the request did not fit the model's context window (5000 tokens requested): too big"
    )
    unknown = ContextOverflow("Your input exceeds the context window of this model.")
    assert (unknown.requested, unknown.limit) == (None, None)
    assert str(unknown) == (
        "the request did not fit the model's context window: "
        "Your input exceeds the context window of this model."
    )
