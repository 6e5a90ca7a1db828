"""The small text helpers the tree's modules share (sessions, beads, mail, mcp).

A written file's text is UTF-8 or the write is refused with `InvalidInput`; a value's file reads
as one line, `-` when unset; a line goes on `agent/events` only while the stream is open (it
ends at shutdown, when late events are dropped rather than refused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from anvild.ninep.errors import InvalidInput
from anvild.tree.root import RootTree

__all__ = ["event_forwarder", "line_publisher", "value_line", "written_text"]

E = TypeVar("E")


def written_text(name: str, data: bytes) -> str:
    """`data` written to the file `name`, decoded; refused unless it is UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:  # checked at each Twrite already; kept as the last word
        raise InvalidInput(
            f"{name}: the text is not valid UTF-8 (bad byte at offset {exc.start}); write text"
        ) from exc


def value_line(value: str | None) -> str:
    """A value file's content: the value and a newline, `-` for an unset or empty value."""
    return f"{value or '-'}\n"


def line_publisher(root: RootTree) -> Callable[[str], None]:
    """Puts a line on `root`'s `agent/events`; a no-op once the stream has ended."""

    def publish(line: str) -> None:
        if not root.events.core.closed:
            root.events.publish(line)

    return publish


def event_forwarder(root: RootTree, encode: Callable[[E], str]) -> Callable[[E], None]:
    """An `on_event` that puts each event, as `encode` writes it, on `root`'s `agent/events`."""
    publish = line_publisher(root)

    def forward(event: E) -> None:
        publish(encode(event))

    return forward
