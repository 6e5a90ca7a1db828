"""anvild.beads: durable work units (beads) and groups of them (convoys), kept in git.

    model.py   Bead, Convoy, the bead status table (TRANSITIONS), the id scheme (pure)
    board.py   Board: every bead and convoy, each change a pure function -> Change (pure)
    codec.py   the file format: one stable JSON object per file (pure)
    words.py   splitting ctl lines: double and single quotes, for rc and bash (pure)
    events.py  BeadEvent: typed events, one JSON line each on agent/events
    git.py     the git CLI with a fixed identity and none of the user's config or hooks
    store.py   BeadStore: the repository, the one lock, the commit per change, recovery
    tools.py   list_ready, claim, complete, fail: agent tools bound to their session
    errors.py  BeadError and its subclasses

This package imports nothing from `anvild.daemon`, `anvild.fs` or `anvild.ninep` (a test
checks): the tree (`anvild.tree.beads`) and the conductor scripts drive it through the
API below, and the session layer meets it only through callables the daemon wires in.

The repository (DESIGN.md section 7)
------------------------------------
    <repo>/README.md                 written by the first commit
    <repo>/beads/<bead-id>.json      {"version": 1, "id": ..., "title": ..., "status": ...}
    <repo>/convoys/<convoy-id>.json

Default `<data dir>/beads`; the user config sets another with `[beads] repo = "/path"`. Every
change is one commit by `anvild <anvild@localhost>` whose subject says what happened and who
asked, e.g. `claim research-auth-001 for a1b2c3d4 (by user)`: `git log` is the audit trail.
Ids are `<first two title words>-<NNN>` (`research-auth-001`; see `anvild.beads.model`).

Bead: id, title, description, role, status (pending | in_progress | pending_approval |
completed | failed), assigned_to, result, depends_on, requires_approval, approver, approved_by,
convoy, reason (the last fail/reject reason), created_at, updated_at (RFC 3339, UTC),
submissions (the approval round).
Convoy: id, title, goal, status (planning | in_progress | completed | failed | abandoned),
coordinator, beads (member ids, in order), context, created_at, updated_at.

API (the daemon, the tree, tests)
---------------------------------
    store = BeadStore(path, on_event=callback)     # callback(BeadEvent), after each commit
    await store.open()                             # lock, init or recover, load; store.recovered
    store.close()                                  # release the repository lock

Reads are synchronous and see the last committed state:

    store.beads() / store.bead(id)                 # BeadNotFound for an unknown id
    store.ready(role=None)                         # pending beads whose deps are all completed
    store.convoys() / store.convoy(id) / store.progress(id) -> Progress(done, total).percent
    store.assigned(session_id)                     # its in_progress / pending_approval beads
    store.context_for(session_id) -> str           # convoy context for its system prompt
    store.board                                    # the whole frozen Board
    await store.wait_bead(id)                      # blocks until completed, failed or
                                                   # pending_approval; the bead then
    await store.wait_convoy(id)                    # until completed, failed or abandoned

Writes are async, one commit each, serialised by one lock; `by` names who asked (`user` for a
file write, `session <id>` for an agent tool) and goes into the commit message and the event:

    await store.create(NewBead(title, role, description, depends_on, requires_approval,
                               convoy, approver), by=...) -> Bead
    await store.add_dep(bead, dep, by=...) / store.remove_dep(bead, dep, by=...)
    await store.claim(bead, session, by=...)       # compare-and-swap: BeadConflict names
                                                   # the holder; refused while deps are open
    await store.complete(bead, result_or_None, by=..., only_session=None)
    await store.fail(bead, reason, by=..., only_session=None)
    await store.approve(bead, by=...) / store.reject(bead, reason, by=...)
    await store.release(bead, by=...)              # in_progress or failed -> pending, unassigned
    await store.set_result(bead, text, by=...) / store.set_description(bead, text, by=...)
    await store.create_convoy(NewConvoy(title, goal, coordinator, context), by=...) -> Convoy
    await store.add_bead(convoy, bead, by=...) / store.remove_bead(convoy, bead, by=...)
    await store.end_convoy(convoy, ConvoyStatus.COMPLETED | ABANDONED | FAILED, by=...,
                           reason="")
    await store.set_context(convoy, text, by=...)

`only_session` makes complete/fail refuse unless the bead is assigned to that session (the
agent tools pass their own session id). Status changes follow `model.TRANSITIONS`; `reject`
fails the bead (see `anvild.beads.model` for why), `release` makes it claimable again. A
convoy moves to in_progress when one of its beads is claimed and completes by itself when a
bead completes and all its beads are completed.

Approval (requires_approval) and the session result gate
---------------------------------------------------------
A bead that requires approval goes to pending_approval on `complete`, and each such completion
is one more approval round (`Bead.submissions`). The daemon (`anvild.coord.bead_gates`) then
has the assigned session wait on its result gate, `asked_by="bead <id>"`, `ref=<the round>`,
the bead's result as the summary; answering either side (the session's `approval`, or this
bead's `approve` / `reject REASON`) answers both, and the two durable records (the session's
journal, this repository) are reconciled at every daemon start, so a decision lands exactly
once whatever crashed when. The store's part:

    await store.approve(bead, by=..., approver=None) # approved_by = approver or by
    await store.reject(bead, reason, by=..., approver=None)
    await store.decide(bead, session=, round=, verdict=, reason=, answered_by=)
                                                   # a gate's verdict: applied only while the
                                                   # bead waits in that round for that session
                                                   # (checked under the lock), else BeadConflict

`approved_by` is `user` for a person (a file write) or the approver session's id. An agent never
approves its own work: `approve` / `reject` / `decide` whose approver is the session the bead
is assigned to are refused (`BeadConflict`). `Bead.approver` (from `NewBead.approver`, named by
the bead's creator, fixed; `user` by default and for files written before it existed) is the
only session that may answer besides a person: any other session is refused too, and the
bead's gate on its session carries it as the gate's approver (`anvild.coord.approvers`).
The verdicts follow the ideas file's gate: approve -> completed (the session goes idle),
reject REASON -> failed with the reason (the session is stopped with it; work does not go on
by itself, and `release` offers the bead again). If the session cannot wait (exited,
ephemeral, stopped, gone), the bead waits in pending_approval and its own ctl answers it as
before; a `bead_gate` event says so.

Errors (`str()` is what a person or a model reads):

    BeadError
     ├── InvalidBeadRequest   bad arguments (empty title, missing dependency, cycle, ...)
     ├── BeadNotFound         unknown bead or convoy id
     ├── BeadConflict         not possible in this state (claimed by X, not ready, ...)
     └── BeadStoreError       git or the disk refused; nothing changed

Events (`anvild.beads.events.encode_event` gives the JSON line): bead_created, bead_changed
(action, status, assigned_to, by, detail), bead_orphaned (published by the tree when a
session exits with beads in progress), bead_gate (session, state open | waiting | unavailable
| closed, detail: published by the daemon's bead gates), convoy_created, convoy_changed
(action, status, done, total, by, detail).
"""

from anvild.beads.board import Board, Change, NewBead, NewConvoy
from anvild.beads.errors import (
    BeadConflict,
    BeadError,
    BeadNotFound,
    BeadStoreError,
    InvalidBeadRequest,
)
from anvild.beads.model import TRANSITIONS, Bead, BeadStatus, Convoy, ConvoyStatus, Progress
from anvild.beads.store import BeadStore

__all__ = [
    "TRANSITIONS",
    "Bead",
    "BeadConflict",
    "BeadError",
    "BeadNotFound",
    "BeadStatus",
    "BeadStore",
    "BeadStoreError",
    "Board",
    "Change",
    "Convoy",
    "ConvoyStatus",
    "InvalidBeadRequest",
    "NewBead",
    "NewConvoy",
    "Progress",
]
