"""A session's `mcp` file (read-only): its MCP servers, one line each, and the events that
report a server a session could not get.

    9p read agent/ID/mcp      github	http	ready	12	-
                              files	stdio	failed	0	exited with status 1: ... (stderr: ...)
                              docs	stdio	lazy	0	-

Tab-separated: the server's config name, its transport (stdio, http), its state (lazy: the
session has not had a turn yet; starting, ready, restarting, failed, stopped), how many of its
tools the session is given, and its last error (`-`: none). Empty when no server applies to the
session's cwd and role. A server that is not ready when a turn starts is reported once per
session and failure: `mcp_server_failed` on `agent/events` and a NOTE in the session's `log`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable

from anvild.fs import SnapshotFile
from anvild.mcp import McpPool
from anvild.ninep.backend import Node
from anvild.session import Session
from anvild.tree._text import line_publisher
from anvild.tree.root import RootTree
from anvild.tree.sessions import SessionExtension

NAME = "mcp"
FAILED = "mcp_server_failed"


def mcp_file(pool: McpPool) -> SessionExtension:
    """The extension that adds `mcp` to every session directory."""

    def text(session: Session) -> str:
        handle = pool.handle(session.id)
        if handle is None and not session.agent_built:
            session.agent  # noqa: B018  # its servers are the agent's: built on first use
            handle = pool.handle(session.id)
        return "" if handle is None else handle.status()

    def files(session: Session) -> Iterable[Node]:
        return [SnapshotFile(NAME, lambda: text(session))]

    return SessionExtension(files=files)


def failure_line(
    session_id: str, server: str, error: str, *, now: dt.datetime | None = None
) -> str:
    """The `agent/events` line of a server a session could not get."""
    stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="milliseconds")
    line = {
        "type": FAILED,
        "ts": stamp.replace("+00:00", "Z"),
        "id": session_id,
        "server": server,
        "error": error,
    }
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def mcp_reporter(
    root: RootTree, lookup: Callable[[str], Session | None]
) -> Callable[[str, str, str], None]:
    """`McpPool.report`: the event on `agent/events` and a NOTE in the session's `log`."""

    publish = line_publisher(root)

    def report(session_id: str, server: str, error: str) -> None:
        publish(failure_line(session_id, server, error))
        session = lookup(session_id)
        if session is not None:
            session.log.publish(
                f"NOTE: MCP server {server} is unavailable, its tools are absent: {error}"
            )

    return report


__all__ = ["FAILED", "NAME", "failure_line", "mcp_file", "mcp_reporter"]
