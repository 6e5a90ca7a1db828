"""From the daemon's refusals to 9P errors, and the checks a body write gets at each Twrite.

`KINDS` maps each refusal of the supervisor, the bead store and the post office to the
`anvild.ninep.errors` kind whose errno fits (that module's `ERRNO` is the one errno table);
`fs_error(name, exc)` applies it, prefixing the file's name. The `admit_*` functions answer, at
each Twrite of a body that is committed at clunk, whether the session or bead accepts that kind
of write now, with the refusal its commit would give (so `9p write`, which ignores the Rclunk,
sees it); the commit still decides, and a state that changes between the Twrite and the clunk is
refused at clunk (docs/decisions.md lists what only a clunk can know).
"""

from __future__ import annotations

from collections.abc import Callable

from anvild.beads import BeadConflict, BeadError, BeadNotFound, BeadStoreError, InvalidBeadRequest
from anvild.beads.board import Board, Change
from anvild.mail import InvalidMessage, MailStoreError
from anvild.mail.errors import MailError, UnknownMailbox
from anvild.ninep.errors import (
    AlreadyExists,
    Busy,
    FsError,
    InvalidInput,
    NotFound,
    StorageFailed,
)
from anvild.session import (
    InvalidSessionRequest,
    NameTaken,
    RecordWriteFailed,
    Session,
    SessionError,
    SessionNotFound,
    SessionRefused,
    SessionStatus,
)
from anvild.session.state import ACCEPTS_PROMPTS

__all__ = ["KINDS", "admit_bead_change", "admit_context", "admit_prompt", "fs_error"]

KINDS: dict[type[Exception], type[FsError]] = {
    SessionNotFound: NotFound,
    SessionRefused: Busy,  # not possible now: a turn runs, a gate is open, the state forbids it
    RecordWriteFailed: StorageFailed,
    NameTaken: AlreadyExists,  # an alias in use: `new alias=`, a rename (`mv`) of a session
    InvalidSessionRequest: InvalidInput,
    SessionError: InvalidInput,
    BeadNotFound: NotFound,
    BeadConflict: Busy,
    BeadStoreError: StorageFailed,
    InvalidBeadRequest: InvalidInput,
    BeadError: InvalidInput,
    UnknownMailbox: NotFound,
    InvalidMessage: InvalidInput,
    MailStoreError: StorageFailed,
    MailError: InvalidInput,
}
"""Each domain refusal and the 9P error kind (so the errno) it becomes; the nearest listed
ancestor of an unlisted class counts."""


def kind_of(exc: Exception) -> type[FsError]:
    return next((KINDS[c] for c in type(exc).__mro__ if c in KINDS), FsError)


def fs_error(name: str, exc: Exception) -> FsError:
    """`exc` as the 9P error of a write to `name` (`name: message`)."""
    return kind_of(exc)(f"{name}: {exc}")


def admit_prompt(session: Session) -> Callable[[], None]:
    """`in`: what `Session.submit` refuses before looking at the text."""

    def admit() -> None:
        status = session.status
        if status not in ACCEPTS_PROMPTS:
            what = {
                SessionStatus.STOPPED: "write `start` to its ctl to resume it",
                SessionStatus.ERROR: f"{session.status_detail}; write `start` or `restart` to "
                "its ctl",
                SessionStatus.EXITED: "it has ended; create a new session",
            }.get(status, "")
            raise fs_error("in", SessionRefused(f"session {session.id} is {status.value}: {what}"))
        if session.ephemeral and session.accepted_seq() >= 1:
            raise fs_error(
                "in",
                SessionRefused(
                    f"session {session.id} is ephemeral: it runs one prompt; create another session"
                ),
            )

    return admit


def admit_context(session: Session) -> Callable[[], None]:
    """`context`: what `Session.set_context` refuses before looking at the text."""

    def admit() -> None:
        if session.status is SessionStatus.EXITED:
            raise fs_error("context", SessionRefused(f"session {session.id} has exited"))

    return admit


def admit_bead_change(
    name: str, board: Callable[[], Board], change: Callable[[Board], Change]
) -> Callable[[], None]:
    """A bead's or convoy's text: the store's own decision on the current board (a frozen value:
    deciding changes nothing), made with an empty text."""

    def admit() -> None:
        try:
            change(board())
        except BeadError as exc:
            raise fs_error(name, exc) from exc

    return admit
