"""anvild.checkpoints: every turn's workspace changes, reviewable and reversible.

    shadow.py   a workspace's shadow git repository (the daemon's, never the user's .git)
    watch.py    an inotify change watcher: a snapshot of an unchanged workspace skips git's scans
    revert.py   three-way reverts, applied all or nothing across a crash
    history.py  `Workspaces` (daemon-wide) and `SessionCheckpoints` (a session's steps)

Below the session layer: the session drives it (turn start and end, undo, rewind), the agent
calls `before_change` through `anvild.agent.snapshots`, the tree shows `agent/ID/turns/`.
"""

from anvild.checkpoints.history import (
    DEFAULT_MAX_FILE_BYTES,
    SessionCheckpoints,
    Step,
    UndoRefused,
    Workspaces,
)
from anvild.checkpoints.shadow import GitFailed, Shadow, Snapshot

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "GitFailed",
    "SessionCheckpoints",
    "Shadow",
    "Snapshot",
    "Step",
    "UndoRefused",
    "Workspaces",
]
