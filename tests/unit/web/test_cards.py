"""The board's cards of sessions at rest: built from the summary (and one read of the file),
equal to what each session shows once built, and reading them builds no session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvild.llm.errors import ConfigError
from anvild.llm.registry import Pricing
from anvild.llm.testing import ScriptedProvider
from anvild.session.manager import SessionManager
from anvild.store import Record, SessionStore
from anvild.web.cards import Cards
from tests.unit.session.support import Models, file_tools, target, workspace
from tests.unit.session.support import settings as session_settings
from tests.unit.session.test_index_restore import _sessions
from tests.unit.store.support import valid_records

PRICES = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)


def _models() -> Models:
    provider = ScriptedProvider([])
    return Models(
        {
            "fake": target(provider, pricing=PRICES),
            "other": target(provider, name="other", pricing=Pricing(input=1.0, output=2.0)),
        }
    )


async def _cards_before_and_after(tmp_path: Path, data: Path) -> tuple[Any, Any, list[str]]:
    """Restore `data`: the cards before any use, the sessions built by reading them, and the
    cards once every session is built."""
    models = _models()

    def pricing_of(name: str) -> Pricing | None:
        try:
            return models(name).pricing
        except ConfigError:
            return None

    manager = SessionManager(
        SessionStore(data),
        models,
        settings=session_settings(tmp_path),
        tools=file_tools(),
        default_cwd=workspace(tmp_path),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        built = {s.id for s in manager.built_sessions()}
        cards = Cards(manager, pricing_of)
        before = [card.info for card in await cards.all()]
        again = [card.info for card in await cards.all()]  # from what the first read kept
        assert again == before
        newly = [s.id for s in manager.built_sessions() if s.id not in built]
        usage = [(card.info["id"], card.usage) for card in await cards.all()]
        manager.sessions()  # build every one
        await trio.testing.wait_all_tasks_blocked()
        after = [card.info for card in await cards.all()]
        assert usage == [(card.info["id"], card.usage) for card in await cards.all()]
        nursery.cancel_scope.cancel()
    return before, after, newly


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    histories=st.lists(valid_records(max_size=20), min_size=1, max_size=3),
    models=st.lists(st.sampled_from(["fake", "other"]), min_size=3, max_size=3),
)
def test_a_card_of_a_session_at_rest_is_what_it_shows_once_built(
    tmp_path: Path, histories: list[list[Record]], models: list[str]
) -> None:
    data = _sessions(tmp_path, histories, models)

    async def main() -> None:
        before, after, newly = await _cards_before_and_after(tmp_path, data)
        assert newly == []  # reading the board built none
        assert before == after

    trio.run(main)
