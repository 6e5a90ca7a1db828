"""A session's `config` file (read-only): each setting that applies to the session, with where
it came from (built-in, user, project, project trusted, project ignored), as
`anvild.session.project_config.ProjectConfigs.text` renders it at the open. Added to every
session directory as a `SessionExtension` (`anvild.daemon.wiring`).
"""

from __future__ import annotations

from collections.abc import Iterable

from anvild.fs import SnapshotFile
from anvild.ninep.backend import Node
from anvild.session import Session
from anvild.session.project_config import ProjectConfigs
from anvild.tree.sessions import SessionExtension

NAME = "config"


def config_file(configs: ProjectConfigs) -> SessionExtension:
    """The extension that adds `config` to every session directory."""

    def files(session: Session) -> Iterable[Node]:
        return [SnapshotFile(NAME, lambda: configs.text(session))]

    return SessionExtension(files=files)


__all__ = ["NAME", "config_file"]
