"""Permissions: what a call may do before it runs.

- `rules`: `tool(pattern)` rule strings (Claude Code syntax) parsed into `Rule`s, and matching
  them against a call's subjects (a command's segments, canonical paths, text).
- `shell`: splitting a shell command into the simple commands it runs (tree-sitter-bash), the
  constructs that cannot be checked, hard denies and mutating git.
- `policy`: `Policy.decide`, a pure function from a resolved `PermissionRequest` to a `Decision`
  (Allow / Ask / Deny); modes, role ceilings, grants, session rules.
- `approval`: the `Approver` protocol (approve once / always / reject with feedback), the headless
  approver and the broker the session's `approval` file serves.
- `gate`: the loop's per-call `decide` hook: resolve the call, decide, ask, remember "always".

This package imports nothing of it eagerly: `anvild.config` imports `rules` to validate rule
strings while loading, without pulling in the loop or the tools.
"""
