"""A turn's `turn_finished` line comes once the turn is over everywhere: a client that acts on it
finds `out` holding the answer and the session out of `running`, even when the turn's end
snapshot (a checkpoint, real git) takes a while."""

from __future__ import annotations

import json
from pathlib import Path

from anvild.checkpoints import Workspaces
from anvild.llm.testing import script
from anvild.store import SessionStatus
from tests.unit.session.support import new, running


async def test_turn_finished_comes_after_out_and_the_state(tmp_path: Path) -> None:
    checkpoints = Workspaces(tmp_path / "checkpoints", watch=False)
    write = script.tool_call("c1", "write_file", {"file_path": "a.txt", "content": "made\n"})
    async with running(tmp_path, [write, script.text("pong")], checkpoints=checkpoints) as manager:
        session = await new(manager)
        reader = session.events.open_reader()
        session.submit("ping")
        seen = b""
        while b'"turn_finished"' not in seen:
            seen += await reader.read(1 << 16)
        # Nothing else ran since the line arrived: what a client reads now.
        assert session.status is SessionStatus.AWAIT
        assert session.out == "pong\n"
        (history,) = checkpoints.root.glob("*/sessions/*.jsonl")
        turn = json.loads(history.read_text().splitlines()[-1])
        assert turn["outcome"] == "done"  # the end snapshot came first,
        assert turn["changes"] == "A\t+1\t-0\ta.txt\n"  # with the turn's write to keep
