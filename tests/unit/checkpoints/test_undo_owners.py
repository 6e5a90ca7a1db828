"""`Workspaces.undo_owners`: the sessions whose undo a crash cut short, read from the intents
left in their workspaces; an unreadable intent is skipped, not fatal."""

from __future__ import annotations

from pathlib import Path

from anvild.checkpoints import Workspaces
from anvild.checkpoints.revert import write_intent


def test_the_owners_of_leftover_intents(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    workspaces = Workspaces(root, watch=False)
    assert workspaces.undo_owners() == set()  # no checkpoints directory yet
    for key, owner in (("a-1", "s1"), ("b-2", "s2")):
        (root / key).mkdir(parents=True)
        write_intent(root / key / "undo.json", {"session": owner, "step": {}}, {"x": None})
    (root / "c-3").mkdir()
    write_intent(root / "c-3" / "undo.json", {"step": {}}, {"y": None})
    (root / "d-4").mkdir()
    (root / "d-4" / "undo.json").write_text("{torn")  # a kill during its first write
    (root / "e-5").mkdir()  # a workspace with no undo pending
    assert workspaces.undo_owners() == {"s1", "s2"}
    workspaces.close()
