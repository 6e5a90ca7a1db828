"""RequestLog: the usage record of a request carries its identity, the head's body once; a
usage with no request seen, or whose identity cannot be computed, is recorded bare."""

from __future__ import annotations

import datetime as dt

import trio

from anvild.llm.identity import identity
from anvild.llm.provider import Provider
from anvild.llm.stream import Usage
from anvild.llm.testing import ScriptedProvider, script
from anvild.llm.types import ChatRequest, Message, Role, Text
from anvild.session.requests import RequestLog
from anvild.store import UsageReported

USAGE = Usage(3, 1, 0, 0)
AT = dt.datetime(2026, 12, 2, 14, 59, 30, tzinfo=dt.UTC)


def request(text: str) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message(Role.USER, (Text(text),)),), system="s")


async def send(provider: Provider, req: ChatRequest) -> None:
    async with provider.stream(req) as events:
        async for _ in events:
            pass


def test_each_usage_record_names_its_request_and_the_head_is_written_once() -> None:
    log = RequestLog(clock=lambda: AT)
    provider = log.provider(ScriptedProvider([script.text("a"), script.text("b")]))
    assert log.usage_record(USAGE) == UsageReported(USAGE, at=AT)  # no request yet
    first, second = request("hi"), request("again")
    trio.run(send, provider, first)
    record = log.usage_record(USAGE)
    found = identity(first)
    assert record == UsageReported(USAGE, found.digest, found.head, found.head_body, at=AT)
    trio.run(send, provider, second)
    record = log.usage_record(USAGE)
    assert (record.request, record.head, record.head_body) == (
        identity(second).digest,
        found.head,
        None,  # the same head: not written again
    )
    assert log.usage_record(USAGE) == UsageReported(USAGE, at=AT)  # each request's usage once


def test_an_identity_that_cannot_be_computed_leaves_the_usage_bare() -> None:
    log = RequestLog(clock=lambda: AT)
    unjsonable: object = object()  # not JSON: the canonical form cannot be written
    log.sent(ChatRequest(model="m", max_tokens=unjsonable))  # type: ignore[arg-type]
    assert log.usage_record(USAGE) == UsageReported(USAGE, at=AT)


def test_each_usage_record_says_when_the_response_finished_in_whole_utc_seconds() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    record = RequestLog().usage_record(USAGE)
    after = dt.datetime.now(dt.UTC)
    assert record.at is not None
    assert before <= record.at <= after
    assert (record.at.microsecond, record.at.utcoffset()) == (0, dt.timedelta(0))
