"""A board open keeps no session from idle unload: its feed lets go of a session at rest, and
takes what the session (or its rebuild) says next, once and in order; its cards build none; a
session's own page builds it with its records replayed in a worker thread."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import trio

from anvild.llm import stream
from anvild.llm.testing import script
from anvild.session import Session, SessionManager, SessionStatus
from anvild.session.manager import NewSession
from anvild.web import parse_web_address
from anvild.web.app import board_app
from anvild.web.auth import Guard
from anvild.web.cards import Cards
from anvild.web.hub import EventHub
from anvild.web.server import WebBoard
from tests.unit.session.support import loads_on_loop, running, unloaded

USAGE = stream.Usage(100, 20, 0, 0)


class Unloads:
    """The ids the manager unloaded, in order; `wait(n)` until there are `n`."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._changed = trio.Event()

    def __call__(self, session_id: str) -> None:
        self.ids.append(session_id)
        self._changed.set()

    async def wait(self, count: int) -> list[str]:
        with trio.fail_after(10):
            while len(self.ids) < count:
                self._changed = trio.Event()
                await self._changed.wait()
        return self.ids


def _lines(hub: EventHub, session_id: str) -> list[str]:
    hub.pump()
    items = hub.since(0, session_id) or []
    return [i.line.decode() for i in items if i.session == session_id]


async def _turn(manager: SessionManager, session_id: str, text: str) -> Session:
    session = await manager.load(session_id)
    handled = session.submit(text)
    with trio.fail_after(10):
        await session.wait_handled(handled)
    return session


async def test_an_open_board_lets_sessions_unload_and_misses_nothing(tmp_path: Path) -> None:
    turns = [script.text("Hello there.", usage=USAGE), script.text("Again.", usage=USAGE)]
    async with running(tmp_path, turns, idle_unload=0.2) as manager:
        board = WebBoard(parse_web_address("127.0.0.1:0"), manager, manager.events, lambda: "t")
        hub = board.hub()
        manager.unload_listeners.append(hub.unloaded)
        unloads = Unloads()
        manager.unload_listeners.append(unloads)
        cards = Cards(manager, lambda model: None)
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            session = await manager.create(NewSession.parse([]))
            sid = session.id
            await _turn(manager, sid, "hi")
            assert session.status is SessionStatus.AWAIT
            built = [card.info for card in await cards.all()]

            assert await unloads.wait(1) == [sid]
            assert manager.built_sessions() == ()
            assert [card.info for card in await cards.all()] == built  # as it showed, unbuilt
            assert manager.built_sessions() == ()  # the cards built none
            first = _lines(hub, sid)
            assert sum('"turn_finished"' in line for line in first) == 1

            rebuilt = await _turn(manager, sid, "again")
            assert rebuilt is not session
            assert await unloads.wait(2) == [sid, sid]
            lines = _lines(hub, sid)
            assert lines[: len(first)] == first
            assert sum('"turn_finished"' in line for line in lines) == 2
            shown = [json.loads(line) for line in lines if not line.startswith('{"type":"queue"')]
            kept = [json.loads(line) for line in rebuilt.events.backlog()]
            assert shown == kept  # every line once, in order, none lost
            nursery.cancel_scope.cancel()


async def test_a_sessions_page_builds_it_at_rest_in_a_worker_thread(tmp_path: Path) -> None:
    async with running(tmp_path, [script.text("Hello there.", usage=USAGE)]) as manager:
        board = WebBoard(parse_web_address("127.0.0.1:0"), manager, manager.events, lambda: "t")
        app = board_app(manager, board.hub(), Guard("t"))
        session = await manager.create(NewSession.parse([]))
        sid = session.id
        await _turn(manager, sid, "hi")
        loads = loads_on_loop(manager)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://board") as client:
            await unloaded(manager, manager.get(sid))
            one = await client.get(f"/api/sessions/{sid}")
            assert (one.status_code, one.json()["out"]) == (200, "Hello there.\n")
            await unloaded(manager, manager.get(sid))
            turns = await client.get(f"/api/sessions/{sid}/turns")
            assert (turns.status_code, turns.json()) == (200, {"turns": []})
        assert loads == [False, False]
