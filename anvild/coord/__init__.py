"""Coordination between sessions: approver sessions, bead gates and the conductor's tools.

- `approvers`        the daemon's side of the `answer_approval` tool;
- `bead_gates`       bead approvals through the session result gate (a reconciler);
- `conductor_tools`  the tools with which a conductor session starts and drives workers.

These are tools and reconcilers over `session`, `beads` and `mail`; they publish no files
(that is `anvild.tree`) and own no process lifetime (that is `anvild.daemon`).
"""
