"""The bead store's errors: one root, `BeadError`.

    BeadError                every refusal of the store; the message says what to do
     ├── InvalidBeadRequest  bad arguments: an empty title, a bad role name, a dependency on a
     │                       missing bead or one that would make a cycle, an unknown option
     ├── BeadNotFound        no bead (or convoy) with this id
     ├── BeadConflict        not possible in the current state: a bead claimed by someone else
     │                       (the message names the holder), not ready, already completed, ...
     └── BeadStoreError      the git repository refused the change (disk full, git missing):
                             nothing changed, neither on disk nor in memory

The tree turns each into a 9P error string and the agent tools into a tool error: `str(error)`
is written for a person (or a model).
"""

from __future__ import annotations

__all__ = [
    "BeadConflict",
    "BeadError",
    "BeadNotFound",
    "BeadStoreError",
    "InvalidBeadRequest",
]


class BeadError(Exception):
    """Root of every error of `anvild.beads`."""


class InvalidBeadRequest(BeadError):
    """Bad arguments to a bead or convoy command."""


class BeadNotFound(BeadError):
    """No bead or convoy has this id."""


class BeadConflict(BeadError):
    """The bead or convoy cannot do this in its current state."""


class BeadStoreError(BeadError):
    """The repository could not record the change; nothing changed."""
