"""What an idle unload keeps besides a session's summary: the packed `Kept` bytes per session.

For N turns of ~250-character answers of random words, a session is asked N prompts, unloaded,
and the bytes its `_Unbuilt` holds packed (or whether it was spilled) are printed. No daemon,
no 9P: the manager of tests/unit/session/support.py with a scripted provider.

    .venv/bin/python bench/unload_kept.py
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import trio

from anvild.llm.testing import script
from tests.unit.session.support import ask, new, running


async def main() -> None:
    rng = random.Random(1)
    letters = "etaoinshrdlucmfwyp"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    for turns in (1, 10, 50, 200):
        answers = [
            script.text(" ".join(rng.choice(words) for _ in range(35))) for _ in range(turns)
        ]
        with tempfile.TemporaryDirectory() as directory:
            async with running(Path(directory), answers) as manager:
                session = await new(manager)
                for i in range(turns):
                    await ask(session, f"prompt number {i} asking for something")
                backlog = sum(len(line) + 1 for line in session.log.backlog())
                backlog += sum(len(line) + 1 for line in session.events.backlog())
                unloaded = await manager.unload(session)
                shelved = getattr(manager._sessions[session.id], "shelved", None)
                held = len(shelved.data) if shelved is not None and shelved.data else 0
                spilled = shelved is not None and shelved.path is not None
                print(
                    f"turns={turns} unloaded={unloaded} backlogs={backlog} B "
                    f"packed_in_memory={held} B spilled={spilled}"
                )


if __name__ == "__main__":
    trio.run(main)
