"""An approved call on a path outside the workspace runs (issue 7 item 5, review finding 2).

The policy asks before a native file tool reaches outside the workspace; the approval is the
user's grant. Before, the call then failed anyway at the `FileAccess` boundary ("outside the
readable roots"), so approving achieved nothing. Now the gate hands that call a boundary that
admits exactly the granted paths; everything else stays refused.
"""

from __future__ import annotations

from pathlib import Path

import trio

from anvild.agent.permissions.policy import Mode
from anvild.llm.testing import ScriptedProvider, script
from anvild.session import Session, SessionStatus
from tests.unit.session.support import Models, new, running, target

S = SessionStatus


async def until(session: Session, *states: SessionStatus) -> None:
    with trio.fail_after(10):
        while session.status not in states:
            await session.wait_changed(session.version)


def result(provider: ScriptedProvider, request: int) -> str:
    return provider.requests[request].messages[-1].tool_results()[0].content


async def test_an_approved_outside_read_and_write_run_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("outside notes\n")
    (out / "other.txt").write_text("other\n")
    provider = ScriptedProvider(
        [
            script.tool_call("r1", "read_file", {"file_path": str(out / "notes.txt")}),
            script.tool_call(
                "w1", "write_file", {"file_path": str(out / "new.txt"), "content": "n\n"}
            ),
            script.tool_call("r2", "read_file", {"file_path": str(out / "other.txt")}),
            script.text("done"),
        ]
    )
    models = Models({"fake": target(provider)})
    async with running(tmp_path, models, mode=Mode.ACCEPT_EDITS) as manager:
        session = await new(manager)
        session.submit("work outside")
        for answer in ("approve", "approve", "reject not that one"):
            await until(session, S.AWAIT_APPROVAL)
            assert "outside the workspace" in session.approval_text()
            session.answer_approval(answer)
            await until(session, S.RUNNING, S.AWAIT)
        await until(session, S.AWAIT)
    assert result(provider, 1) == "     1\toutside notes"
    assert result(provider, 2) == f"Created {out / 'new.txt'} (1 lines, 2 bytes)."
    assert result(provider, 3) == (
        "Permission denied for read_file: the user rejected this call and said: not that one"
    )
    assert (out / "new.txt").read_text() == "n\n"
    assert (out / "other.txt").read_text() == "other\n"
