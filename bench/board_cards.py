"""What the web board's snapshot of sessions at rest costs: `Cards.all()` over N sessions
restored unbuilt, against building them all (`SessionManager.sessions()`, what it did before).

Each session file has a start and a few turns of records; the first `Cards.all()` reads every
file once (one thread), later ones only the summaries. No daemon, no 9P, no browser.

    .venv/bin/python bench/board_cards.py [--sessions 1000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import trio

from anvild.llm.testing import ScriptedProvider
from anvild.llm.types import Message
from anvild.session.manager import SessionManager
from anvild.store import (
    MessageAppended,
    Record,
    SessionStarted,
    SessionStatus,
    SessionStore,
    StateChanged,
)
from anvild.web.cards import Cards
from tests.unit.session.support import Models, file_tools, settings, target, workspace
from tests.unit.session.test_lazy_restore import _write


def _sessions(data: Path, cwd: str, count: int) -> None:
    now = dt.datetime.now(dt.UTC)
    for n in range(count):
        started = SessionStarted(
            id=f"s{n:05d}", alias=None, role="developer", model="fake", cwd=cwd,
            sandbox="workspace-write", created_at=now + dt.timedelta(seconds=n),
        )  # fmt: skip
        records: list[Record] = [started, StateChanged(SessionStatus.IDLE, "")]
        for turn in range(3):
            prompt = f"prompt {turn} of session {n}: look at the tests and fix what fails"
            records += [
                MessageAppended(Message.user_text(prompt)),
                MessageAppended(Message.assistant_text("Done: " + "words of an answer " * 20)),
            ]
        _write(data, records)


async def run(count: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        data = tmp / "data"
        _sessions(data, str(workspace(tmp)), count)
        manager = SessionManager(
            SessionStore(data),
            Models({"fake": target(ScriptedProvider([]))}),
            settings=settings(tmp),
            tools=file_tools(),
            default_cwd=workspace(tmp),
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            cards = Cards(manager, lambda model: None)
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            for label in ("first (reads every file)", "second", "third"):
                wall, cpu = time.perf_counter(), time.process_time()
                found = await cards.all()
                print(
                    f"Cards.all() {label}: {len(found)} cards in "
                    f"{1000 * (time.perf_counter() - wall):.0f} ms wall, "
                    f"{1000 * (time.process_time() - cpu):.0f} ms CPU; "
                    f"built {len(manager.built_sessions())}"
                )
            wall = time.perf_counter()
            manager.sessions()
            print(
                f"SessionManager.sessions() (building them all): "
                f"{1000 * (time.perf_counter() - wall):.0f} ms, "
                f"built {len(manager.built_sessions())}"
            )
            nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    trio.run(run, parser.parse_args().sessions)


if __name__ == "__main__":
    main()
