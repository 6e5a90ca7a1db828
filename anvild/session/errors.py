"""The session supervisor's errors: one root, `SessionError`, whose `str()` says what to do.

    SessionError
     ├── IllegalTransition       a state change the lifecycle table does not allow (a bug)
     ├── SessionRefused          not possible now (stopped, turn running, nothing pending, ...)
     ├── SessionNotFound         no session with this id or alias
     ├── InvalidSessionRequest   bad `new` or write arguments (unknown model, missing cwd, ...)
     │    └── NameTaken          an alias that is another session's alias or id
     └── RecordWriteFailed       the record could not be written: the session is in `error`

The tree turns each into a 9P error string.
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
