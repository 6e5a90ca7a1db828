"""`Directory(keep_children=True)` and `keep_on_remove`: removing anything inside succeeds and
removes nothing, at any depth, dynamic children found later included; the directory's own
removal and everything outside keep their own rules."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from anvild.fs import Directory, DynamicChildren, SnapshotFile
from anvild.fs.nodes import keep_on_remove
from anvild.ninep.backend import Node
from anvild.ninep.errors import NotPermitted
from anvild.ninep.testing import MemFile


class _Found(DynamicChildren):
    def __init__(self) -> None:
        self.nodes = [SnapshotFile("a.json", lambda: b"{}"), SnapshotFile("b.json", lambda: b"{}")]

    async def entries(self) -> Sequence[Node]:
        return self.nodes


async def test_everything_inside_is_kept_and_the_rest_keeps_its_refusal() -> None:
    found = _Found()
    archive = Directory("sent", dynamic=found)
    sub = Directory("mail", [archive])
    ctl = SnapshotFile("ctl", lambda: b"")
    view = Directory("s1", [ctl, sub], keep_children=True)
    outside = SnapshotFile("version", lambda: b"1\n")
    root = Directory("/", [outside, view])

    await ctl.remove()
    await sub.remove()
    await archive.remove()
    assert await view.walk("ctl") is ctl  # removed nothing
    assert await archive.walk("b.json") is found.nodes[1]
    await found.nodes[1].remove()
    assert [n.stat().name for n in await archive.list()] == ["a.json", "b.json"]
    await found.nodes[0].remove()  # marked by the listing
    late = view.add(SnapshotFile("late", lambda: b""))
    await late.remove()
    for refused in (view, outside, root):  # the view's own removal is its own
        with pytest.raises(NotPermitted, match="cannot be removed"):
            await refused.remove()


def test_only_a_tree_node_can_be_kept() -> None:
    with pytest.raises(TypeError, match="only an FsNode"):
        keep_on_remove(MemFile("x", b""))
