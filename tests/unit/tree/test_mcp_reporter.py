"""An MCP server's failure goes on `agent/events` (dropped after shutdown, no error)."""

from __future__ import annotations

import json

from anvild.tree.mcp import mcp_reporter
from anvild.tree.root import RootTree


def test_a_failure_is_an_event_and_none_after_shutdown() -> None:
    root = RootTree()
    report = mcp_reporter(root, lambda session_id: None)
    reader = root.events.open_reader(backlog=False)
    report("s1", "files", "exited with status 1")
    event = json.loads(reader.read_nowait(1 << 16) or b"")
    assert (event["id"], event["server"], event["error"]) == ("s1", "files", "exited with status 1")
    reader.close()
    root.events.close()
    report("s1", "files", "again")  # the daemon is shutting down: dropped
    assert root.events.core.closed
