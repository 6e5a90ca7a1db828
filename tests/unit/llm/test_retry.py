"""Retry: backoff, Retry-After, the total deadline, and never replaying a consumed stream.

Time runs on trio's autojump clock: waits take no real time, and `trio.current_time()` shows how
long each one would have been.
"""

from __future__ import annotations

import email.utils
import time

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from anvild.llm.builder import collect
from anvild.llm.errors import ApiError, DecodeError, HttpError, LlmError, TransportError
from anvild.llm.http import parse_retry_after
from anvild.llm.provider import Provider
from anvild.llm.retry import Retry, RetryNotice, RetryPolicy, retry_listener
from anvild.llm.stream import FinishReason, TextDelta
from anvild.llm.testing import Script, ScriptedProvider, script
from anvild.llm.types import ChatRequest, Message

REQUEST = ChatRequest(model="m", messages=[Message.user_text("hi")])


def retrying(scripts: list[Script], policy: RetryPolicy | None = None) -> Retry:
    # jitter 0: the backoff is exactly half its exponential step, so waits are predictable.
    return Retry(ScriptedProvider(scripts, name="p"), policy, jitter=lambda: 0.0)


async def run(provider: Retry) -> str:
    async with provider.stream(REQUEST) as events:
        return (await collect(events)).message.text()


def test_retry_is_a_provider_named_after_its_inner_one() -> None:
    provider = retrying([])
    assert isinstance(provider, Provider)
    assert provider.name == "p"


async def test_529_twice_then_a_stream_passes_quickly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = retrying(
        [HttpError(529, "overloaded"), HttpError(529, "overloaded"), script.text("ok")],
        RetryPolicy(base=0.01),
    )
    start = trio.current_time()
    with capture_logs() as logs:
        assert await run(provider) == "ok"
    assert trio.current_time() - start == pytest.approx(0.005 + 0.01)
    retries = [entry for entry in logs if entry["event"] == "provider.retry"]
    assert [(e["status"], e["attempt"], e["delay"]) for e in retries] == [
        (529, 1, 0.005),
        (529, 2, 0.01),
    ]
    assert all(entry["log_level"] == "warning" for entry in retries)
    assert isinstance(provider.inner, ScriptedProvider)
    assert provider.inner.remaining == 0


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_attempted_once(
    status: int, autojump_clock: trio.testing.MockClock
) -> None:
    provider = retrying([HttpError(status, "no"), script.text("never")])
    with capture_logs() as logs, pytest.raises(HttpError) as info:
        await run(provider)
    assert info.value.status == status
    assert isinstance(provider.inner, ScriptedProvider)
    assert provider.inner.remaining == 1
    assert logs == []


@pytest.mark.parametrize(
    "error",
    [
        HttpError(408, ""),
        HttpError(429, ""),
        HttpError(500, ""),
        HttpError(503, ""),
        HttpError(529, ""),
        ApiError("overloaded_error", "Overloaded"),
        ApiError("rate_limit_error", "slow down"),
        TransportError("connect failed", retryable=True),
    ],
    ids=str,
)
async def test_retryable_failures_are_retried(
    error: LlmError, autojump_clock: trio.testing.MockClock
) -> None:
    assert await run(retrying([error, script.text("ok")])) == "ok"


async def test_retry_after_seconds_is_waited(autojump_clock: trio.testing.MockClock) -> None:
    provider = retrying([HttpError(429, "slow", retry_after=2.0), script.text("ok")])
    start = trio.current_time()
    with capture_logs() as logs:
        assert await run(provider) == "ok"
    assert trio.current_time() - start == pytest.approx(2.0)
    assert logs[0]["delay"] == 2.0


async def test_retry_after_http_date_is_waited(autojump_clock: trio.testing.MockClock) -> None:
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    delay = parse_retry_after(date)
    assert delay is not None
    provider = retrying([HttpError(503, "later", retry_after=delay), script.text("ok")])
    start = trio.current_time()
    assert await run(provider) == "ok"
    assert 28 < trio.current_time() - start <= 30


async def test_a_delay_beyond_the_deadline_stops_instead_of_sleeping(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = retrying(
        [HttpError(429, "slow", retry_after=600.0), script.text("never")],
        RetryPolicy(deadline=60),
    )
    start = trio.current_time()
    with capture_logs() as logs, pytest.raises(HttpError) as info:
        await run(provider)
    assert trio.current_time() == start  # it did not sleep at all
    assert info.value.status == 429
    assert info.value.__notes__ == [
        "p: gave up after 1 attempt: the server's Retry-After of 600 s would pass the 60 s "
        "retry deadline (60 s left)"
    ]
    assert [entry["event"] for entry in logs] == ["provider.retry_stopped"]


async def test_backoff_stops_at_the_deadline_with_the_last_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Steps (halved by jitter 0): 5, 10, 20 s; the third would end at 35 s, past 30 s.
    provider = retrying(
        [HttpError(500, "a"), HttpError(502, "b"), HttpError(503, "c"), script.text("x")],
        RetryPolicy(base=10, cap=100, deadline=30, max_attempts=10),
    )
    start = trio.current_time()
    with pytest.raises(HttpError) as info:
        await run(provider)
    assert info.value.status == 503
    assert trio.current_time() - start == pytest.approx(15)
    assert "would pass the 30 s retry deadline" in info.value.__notes__[0]


async def test_attempts_run_out(autojump_clock: trio.testing.MockClock) -> None:
    provider = retrying(
        [HttpError(529, "1"), HttpError(529, "2"), HttpError(529, "3")],
        RetryPolicy(max_attempts=3, base=0.1),
    )
    with pytest.raises(HttpError, match="3") as info:
        await run(provider)
    assert info.value.__notes__ == ["p: gave up after 3 attempts (the most allowed)"]


def test_backoff_is_exponential_capped_and_jittered() -> None:
    policy = RetryPolicy(base=1, cap=8)
    assert [policy.backoff(n, 0.0) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    assert policy.backoff(3, 0.999) == pytest.approx(4 * 0.9995)
    with pytest.raises(ValueError, match="deadline must be positive"):
        RetryPolicy(deadline=0)


async def test_jitter_spreads_waits(autojump_clock: trio.testing.MockClock) -> None:
    provider = Retry(
        ScriptedProvider([HttpError(500, ""), script.text("ok")]),
        RetryPolicy(base=4),
        jitter=lambda: 0.5,
    )
    start = trio.current_time()
    await run(provider)
    assert trio.current_time() - start == pytest.approx(3.0)


async def test_an_error_before_the_first_event_is_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Anthropic sends `event: error` overloaded_error as the very first event of a 200 response.
    provider = retrying([[ApiError("overloaded_error", "Overloaded")], script.text("ok")])
    assert await run(provider) == "ok"


async def test_an_error_after_the_first_event_is_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = retrying(
        [[TextDelta(0, "half"), ApiError("overloaded_error", "Overloaded")], script.text("x")]
    )
    seen: list[object] = []
    with pytest.raises(ApiError, match="Overloaded"):
        async with provider.stream(REQUEST) as events:
            async for event in events:
                seen.append(event)
    assert seen == [TextDelta(0, "half")]
    assert isinstance(provider.inner, ScriptedProvider)
    assert provider.inner.remaining == 1


async def test_non_retryable_stream_errors_pass_through() -> None:
    provider = retrying([[DecodeError("bad json")], script.text("x")])
    with pytest.raises(DecodeError):
        await run(provider)


async def test_an_empty_stream_is_handed_on() -> None:
    provider = retrying([[]])
    async with provider.stream(REQUEST) as events:
        assert [event async for event in events] == []


async def test_whole_stream_after_retry_is_intact(autojump_clock: trio.testing.MockClock) -> None:
    provider = retrying(
        [HttpError(503, ""), script.tool_call("c1", "get_weather", {"city": "Oslo"}, text="hm")]
    )
    async with provider.stream(REQUEST) as events:
        completion = await collect(events)
    assert completion.finish is FinishReason.TOOL_USE
    assert completion.message.text() == "hm"
    assert completion.tool_calls[0].arguments == {"city": "Oslo"}


async def test_cancelled_while_waiting(autojump_clock: trio.testing.MockClock) -> None:
    provider = retrying([HttpError(429, "", retry_after=50.0), script.text("x")])
    with trio.move_on_after(10) as scope:
        await run(provider)
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(10)


async def test_each_retry_is_told_to_the_listener_when_its_wait_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = retrying(
        [HttpError(529, "overloaded"), HttpError(503, "down", retry_after=2.0), script.text("ok")],
        RetryPolicy(base=0.01, max_attempts=4),
    )
    told: list[tuple[RetryNotice, float]] = []
    with retry_listener(lambda notice: told.append((notice, trio.current_time()))):
        start = trio.current_time()
        assert await run(provider) == "ok"
    assert [(n.provider, n.attempt, n.max_attempts, n.delay) for n, _ in told] == [
        ("p", 2, 4, 0.005),
        ("p", 3, 4, 2.0),
    ]
    assert told[0][0].reason == "HTTP 529: overloaded"
    assert told[1][0].reason == "HTTP 503: down"
    # Told before each wait, not after it.
    assert [at - start for _, at in told] == pytest.approx([0.0, 0.005])


async def test_no_listener_outside_the_block_and_a_failing_listener_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    told: list[RetryNotice] = []
    with retry_listener(told.append):
        pass
    assert await run(retrying([HttpError(529, ""), script.text("ok")])) == "ok"
    assert told == []

    body = '{"error": {"message": "Overloaded", "type": "overloaded_error"}}'
    with retry_listener(told.append):
        assert await run(retrying([HttpError(529, body), script.text("ok")])) == "ok"
    assert [n.reason for n in told] == ["HTTP 529: Overloaded"]  # the message, not the body

    def broken(notice: RetryNotice) -> None:
        raise RuntimeError("listener bug")

    with retry_listener(broken), capture_logs() as logs:
        assert await run(retrying([HttpError(529, ""), script.text("ok")])) == "ok"
    assert "provider.retry_listener_failed" in [entry["event"] for entry in logs]
