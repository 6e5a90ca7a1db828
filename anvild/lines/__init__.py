"""Lines: what the layers publish and store one line at a time, in one place each.

- `anvild.lines.broadcast`: lines fanned out to readers, each with a bounded buffer and an
  explicit lag marker where it lost lines (the `events` and `log` stream files).
- `anvild.lines.jsonl`: typed values as compact JSON lines with a stable `type` tag first
  (agent events, session records, the daemon's session, bead, mail and tree events).

The package sits on the bottom floor, beside `anvild.data`, and imports nothing of the project:
its users stand on different floors (the tree's `fs` and the `session` above it, which may not
import `fs`; `agent` and `store`, which may not import each other).
"""
