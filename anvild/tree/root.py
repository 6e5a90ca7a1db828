"""The root of the served tree (`agent/`), as far as this issue goes.

    agent/
      ctl      write commands; `ping` answers `pong` on the same fid
      list     one line per session (none yet: sessions arrive with their own issue)
      version  the daemon's version
      events   blocking JSON lines (`anvild.tree.events`)

The tree is built to be extended rather than replaced: `anvild.tree.sessions.SessionTree.mount`
adds verbs to `RootTree.commands` (`new`, `kill`), gives `RootTree.root` its dynamic children (one
directory per session, also reachable by alias) with `Directory.set_dynamic`, adds static entries
(`models`, `roles/`; later `beads/`, `convoys/`, `user/`), and sets `RootTree.list_sessions`.
"""

from __future__ import annotations

from collections.abc import Callable

from anvild import __version__
from anvild.fs import (
    Command,
    CommandSpec,
    CommandTable,
    CtlFile,
    Directory,
    LineStream,
    SnapshotFile,
    StreamFile,
    StreamLimits,
)
from anvild.tree.events import DaemonEvent, Pinged, encode_event

__all__ = ["RootTree"]


class RootTree:
    """`agent/`: the root directory, its ctl verbs and the daemon's event stream."""

    def __init__(
        self,
        *,
        version: str = __version__,
        list_sessions: Callable[[], str] | None = None,
        stream_limits: StreamLimits | None = None,
    ) -> None:
        self.version = version
        self.events = LineStream(stream_limits)
        self.commands = CommandTable([CommandSpec("ping", self._ping, usage="ping")])
        self.list_sessions: Callable[[], str] = list_sessions or (lambda: "")
        """What `list` shows; replaceable when the sessions are mounted after construction."""
        self.root = Directory(
            "/",
            [
                CtlFile("ctl", self.commands),
                SnapshotFile("list", self._list),
                SnapshotFile("version", f"anvild {version}\n".encode),
                StreamFile("events", self.events),
            ],
        )

    def publish(self, event: DaemonEvent) -> None:
        """Put `event` on `agent/events` (no-op once the stream has ended at shutdown)."""
        if not self.events.core.closed:
            self.events.publish(encode_event(event))

    def _list(self) -> str:
        return self.list_sessions()

    async def _ping(self, command: Command) -> str:
        self.publish(Pinged())
        return "pong"
