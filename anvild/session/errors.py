"""The session supervisor's errors: one root, `SessionError`.

    SessionError                 every refusal of the supervisor; the message says what to do
     ├── IllegalTransition       a state change the lifecycle table does not allow (a bug)
     ├── SessionRefused          a verb or a write that is not possible now (the session is
     │                           stopped, a turn is running, role written after the first
     │                           prompt, no approval pending, ...)
     ├── SessionNotFound         no session with this id or alias
     ├── InvalidSessionRequest   a `new` or a write with bad arguments: unknown model (lists
     │                           the aliases), missing cwd, unknown role, alias reserved,
     │                           bad sandbox name
     │    └── NameTaken          an alias that is another session's alias or id
     └── RecordWriteFailed       the session's record could not be written (disk full, I/O
                                 error): the session moved to `error`; the daemon carries on

The tree turns each into a 9P error string: `str(error)` is written for a person.
"""

from __future__ import annotations


class SessionError(Exception):
    """Root of every error of `anvild.session`."""


class IllegalTransition(SessionError):
    """The lifecycle table does not allow this change of state."""


class SessionRefused(SessionError):
    """The session cannot do this now; the message says why and what would work."""


class SessionNotFound(SessionError):
    """No live session has this id or alias."""


class InvalidSessionRequest(SessionError):
    """Bad arguments to `new` or to a writable file."""


class NameTaken(InvalidSessionRequest):
    """An alias already in use: another session's alias, or a session's id."""


class RecordWriteFailed(SessionError):
    """A record could not be written; the session is in `error`."""


__all__ = [
    "IllegalTransition",
    "InvalidSessionRequest",
    "NameTaken",
    "RecordWriteFailed",
    "SessionError",
    "SessionNotFound",
    "SessionRefused",
]
