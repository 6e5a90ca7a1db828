"""The tree's shared text helpers: a written file's text is UTF-8 or refused with the offset of
the bad byte; a value file reads as one line, `-` when unset; a line published after shutdown
is dropped."""

from __future__ import annotations

import pytest

from anvild.ninep.errors import InvalidInput
from anvild.tree._text import line_publisher, value_line, written_text
from anvild.tree.root import RootTree


def test_written_text_decodes_utf8_and_refuses_the_rest() -> None:
    assert written_text("role", "réviseur\n".encode()) == "réviseur\n"
    with pytest.raises(
        InvalidInput, match=r"role: the text is not valid UTF-8 \(bad byte at offset 2\)"
    ):
        written_text("role", b"ok\xffno")


@pytest.mark.parametrize(("value", "line"), [("idle", "idle\n"), (None, "-\n"), ("", "-\n")])
def test_value_line(value: str | None, line: str) -> None:
    assert value_line(value) == line


def test_line_publisher_drops_lines_after_the_stream_ended() -> None:
    root = RootTree()
    publish = line_publisher(root)
    reader = root.events.open_reader(backlog=False)
    publish('{"type":"x"}')
    assert reader.read_nowait(1 << 16) == b'{"type":"x"}\n'
    reader.close()
    root.events.close()
    publish('{"type":"late"}')  # no error: the daemon is shutting down
    assert root.events.core.closed
