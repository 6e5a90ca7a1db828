"""`EventHub`: numbered lines from the daemon's and each session's broadcasts, resumed without
gaps, a `Gap` when a reader asks for lines no longer kept; and the board's address checks."""

from __future__ import annotations

import json
from contextlib import aclosing

import pytest
import trio
import trio.testing

from anvild.lines.broadcast import Broadcast
from anvild.web import WebAddressError, parse_web_address
from anvild.web import hub as hub_module
from anvild.web.auth import Guard
from anvild.web.hub import EventHub, FeedItem, Gap


def created(session_id: str) -> str:
    return json.dumps({"type": "session_created", "id": session_id})


async def started(hub: EventHub, nursery: trio.Nursery) -> None:
    await nursery.start(hub.run)


async def test_lines_are_numbered_and_a_new_session_is_followed_from_its_backlog() -> None:
    root = Broadcast()
    sessions = {"s1": Broadcast()}
    hub = EventHub(root, sessions.get, list)
    async with trio.open_nursery() as nursery:
        await started(hub, nursery)
        sessions["s1"].publish('{"type":"text_delta","step":1,"text":"early"}')
        root.publish(created("s1"))  # announced after it spoke: its backlog is taken
        sessions["s1"].publish('{"type":"text_delta","step":1,"text":"later"}')
        hub.pump()
        items = hub.since(0, "s1")
        assert items is not None
        assert [(i.seq, i.session) for i in items] == [(1, ""), (2, "s1"), (3, "s1")]
        assert b"early" in items[1].line
        assert b"later" in items[2].line
        assert hub.since(0, None) == items[:1]  # another session's page sees only the daemon's
        assert json.loads(items[1].data()) == {
            "session": "s1",
            "event": {"type": "text_delta", "step": 1, "text": "early"},
        }
        nursery.cancel_scope.cancel()


async def test_a_feed_resumes_after_its_last_id_and_waits_for_more() -> None:
    root = Broadcast()
    hub = EventHub(root, lambda _: None, list)
    got: list[FeedItem | None] = []
    async with trio.open_nursery() as nursery:
        await started(hub, nursery)
        for n in range(3):
            root.publish(json.dumps({"type": "ping", "n": n}))
        hub.pump()

        async def read() -> None:
            async with aclosing(hub.feed(1)) as feed:
                async for item in feed:
                    got.append(item)
                    if len(got) == 3:
                        return

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        assert [i.seq for i in got if i is not None] == [2, 3]
        root.publish(json.dumps({"type": "ping", "n": 3}))
        await trio.testing.wait_all_tasks_blocked()
        assert [i.seq for i in got if i is not None] == [2, 3, 4]
        nursery.cancel_scope.cancel()


async def test_asking_for_lines_no_longer_kept_is_a_gap_never_silence() -> None:
    root = Broadcast()
    hub = EventHub(root, lambda _: None, list, keep=2)
    async with trio.open_nursery() as nursery:
        await started(hub, nursery)
        for n in range(6):
            root.publish(json.dumps({"type": "ping", "n": n}))
        hub.pump()
        assert hub.since(0) is None
        kept = hub.since(hub.seq - 1)
        assert kept is not None
        assert [i.seq for i in kept] == [6]
        with pytest.raises(Gap):
            async with aclosing(hub.feed(0)) as feed:
                async for _ in feed:
                    pass
        nursery.cancel_scope.cancel()


def test_the_board_listens_on_loopback_unless_allowed() -> None:
    assert parse_web_address("127.0.0.1:8080").port == 8080
    assert parse_web_address("[::1]:0").bind == "[::1]:0"
    with pytest.raises(WebAddressError, match="not a loopback address"):
        parse_web_address("0.0.0.0:8080")
    assert parse_web_address("0.0.0.0:8080", allow_remote=True).host == "0.0.0.0"
    with pytest.raises(WebAddressError, match="write HOST:PORT"):
        parse_web_address("8080")


def test_a_cookie_is_signed_by_the_token_and_the_csrf_token_bound_to_it() -> None:
    guard = Guard("t" * 64)
    cookie = guard.new_cookie()
    nonce = guard.nonce_of(cookie)
    assert nonce is not None
    assert guard.nonce_of(cookie + "0") is None
    assert Guard("u" * 64).nonce_of(cookie) is None  # a rotated token logs every browser out
    assert guard.csrf_for(nonce) != guard.csrf_for(nonce + "x")


async def test_a_position_of_another_run_or_beyond_the_feed_is_no_resume_point() -> None:
    root = Broadcast()
    hub = EventHub(root, lambda _: None, list)
    async with trio.open_nursery() as nursery:
        await started(hub, nursery)
        root.publish(json.dumps({"type": "ping"}))
        position = hub.position()
        assert position == f"{hub.epoch}-1"
        assert hub.resume_point(position) == 1
        assert hub.resume_point(f"{hub.epoch}-0") == 0
        assert hub.resume_point(f"{hub.epoch}-2") is None  # not yet given
        assert hub.resume_point("0000-1") is None  # another daemon run's
        assert hub.resume_point("1") is None
        nursery.cancel_scope.cancel()


class _Changing:
    """A session as the hub watches it: a version bumped by `change`, an empty queue."""

    def __init__(self) -> None:
        self.version = 0
        self._changed = trio.Event()

    async def wait_changed(self, seen: int) -> int:
        while self.version == seen:
            await self._changed.wait()
        return self.version

    def change(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = trio.Event()

    def queue_text(self) -> str:
        return ""


def _texts(hub: EventHub, session_id: str) -> list[str]:
    hub.pump()
    return [json.loads(i.line).get("text", "") for i in hub.since(0, session_id) or []
            if i.session == session_id]  # fmt: skip


async def test_a_parked_session_is_no_reader_and_resumes_on_a_change_or_a_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hub_module, "REBUILT_EVERY", 0.02)
    root = Broadcast()
    streams: dict[str, Broadcast] = {"s1": Broadcast()}
    session = _Changing()
    hub = EventHub(
        root,
        streams.get,
        lambda: list(streams),
        queued=lambda sid: session,
        at_rest=lambda sid: True,
    )

    def say(text: str) -> None:
        streams["s1"].publish(json.dumps({"type": "text_delta", "text": text}))

    async with trio.open_nursery() as nursery:
        await started(hub, nursery)
        say("one")
        root.publish(created("s1"))
        await trio.testing.wait_all_tasks_blocked()
        assert _texts(hub, "s1") == ["one"]
        assert streams["s1"].statistics().readers == 0  # parked: it may unload

        say("two")  # no daemon line: the change of the session resumes it
        session.change()
        await trio.testing.wait_all_tasks_blocked()
        assert _texts(hub, "s1") == ["one", "two"]
        assert streams["s1"].statistics().readers == 0

        hub.unloaded("s1")  # then rebuilt: its stream starts with what was kept
        streams["s1"] = rebuilt = Broadcast()
        for line in (json.dumps({"type": "text_delta", "text": t}) for t in ("one", "two")):
            rebuilt.publish(line)
        say("three")
        await trio.sleep(0.1)  # several looks for a rebuild
        assert _texts(hub, "s1") == ["one", "two", "three"]  # once each, in order
        await trio.testing.wait_all_tasks_blocked()
        assert rebuilt.statistics().readers == 0
        nursery.cancel_scope.cancel()
