"""Mail errors. Every message is what the writer (a person, a script, a model) reads.

MailError
 ├── InvalidMessage   what was written is not a valid message (names the problem)
 ├── UnknownMailbox   a mailbox name that is not a session id or `user`
 └── MailStoreError   the disk refused (the message was not sent; nothing half-written)
"""

from __future__ import annotations


class MailError(Exception):
    """Root of the mail errors."""


class InvalidMessage(MailError):
    """A draft (or a stored file) that is not a valid message."""


class UnknownMailbox(MailError):
    """No such mailbox."""


class MailStoreError(MailError):
    """A mail file could not be written or read."""


__all__ = ["InvalidMessage", "MailError", "MailStoreError", "UnknownMailbox"]
