"""What the daemon publishes as files: the `agent/` tree, built on `anvild.fs` nodes.

- `root`           the root directory and its ctl verbs;
- `sessions`       the session directories and the session ctl verbs;
- `beads`, `mail`  the bead/convoy board and the mailboxes;
- `roles`          roles, sandbox roles and workflow scripts as files;
- `events`         `agent/events`, the daemon's own event lines;
- `compaction`, `config`, `introspection`, `outcome`  per-session extensions (`SessionExtension`);
- `refusals`       refusals of the layers below, mapped to 9P errors; `new_args` parses `new`.

Every node answers from the layers below (`session`, `beads`, `mail`); nothing here owns state
that outlives a restart. Documented file by file in docs/TREE.md.
"""
