"""anvild.beads: durable work units (beads) and groups of them (convoys), kept in git.

    model.py  Bead, Convoy, TRANSITIONS, the id scheme (pure)   board.py  every change -> Change
    codec.py  one stable JSON object per file (pure)   words.py  ctl line quoting (pure)
    events.py BeadEvent, one JSON line each   git.py  the git CLI with a fixed identity
    store.py  BeadStore: the repository, the one lock, a commit per change, recovery
    remote.py a shared git remote: fetch, rebase the queue, push; the sync state
    tools.py  list_ready, claim, complete, fail for a session   errors.py  BeadError and kin

Imports nothing from daemon, fs, ninep or the tree (a test checks). The repository holds
`beads/<id>.json` and `convoys/<id>.json`; every change is one commit by `anvild` saying what
happened and who asked (`git log` is the audit trail). Reads are synchronous and see the last
commit; writes are async, serialised by one lock, and name `by`. An agent never approves its
own work, and only the bead's `approver` (or a person) may answer its gate. With a `[beads]
remote`, daemons share one board through git (a rejected push is a lost compare-and-swap). API
and approval flow: docs/decisions.md, "Module notes" (anvild.beads).
"""

from anvild.beads.board import Board, Change, GateDecision, NewBead, NewConvoy
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
    "GateDecision",
    "InvalidBeadRequest",
    "NewBead",
    "NewConvoy",
    "Progress",
]
