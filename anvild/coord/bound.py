"""`ManagerBound`: a tools factory the daemon builds before its session manager.

The manager needs the factories to build sessions, and the factories need the manager to start
and find sessions: the daemon builds the factory first and `bind`s the manager to it once the
manager exists. A tool that runs before that is refused (`Failed`), never given a half-built
daemon.
"""

from __future__ import annotations

from typing import ClassVar

from anvild.agent.tools import Failed
from anvild.session import SessionManager


class ManagerBound:
    """The session manager, bound after construction; `label` names the tools in the refusal."""

    label: ClassVar[str]
    _manager: SessionManager | None = None

    def bind(self, manager: SessionManager) -> None:
        self._manager = manager

    @property
    def manager(self) -> SessionManager:
        if self._manager is None:
            raise Failed(
                f"{self.label}: not connected to the session manager yet (the daemon is "
                "starting); try again in a moment"
            )
        return self._manager
