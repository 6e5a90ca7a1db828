"""The exceptions of `anvild.ninep`, drawn httpx `_exceptions.py` style::

    NinepError              root of everything this package raises
    ├── ProtocolError       malformed input (framing, lengths, UTF-8, over msize): the server
    │   │                   closes the connection with a logged reason (intro(5))
    │   └── UnknownMessageError  a well-framed unknown type: answered on its tag, kept open
    └── FsError             a refusal: a message a person can act on, and an errno
        ├── InvalidInput, NotPermitted, AccessDenied, NotFound, Busy, AlreadyExists,
        │   TooLarge, TryAgain, NotSupported, StorageFailed        (what a request asks)
        └── BadFid, TooManyFids, NotADirectory, IsADirectory, CrossDirectory,
            MessageTooLarge, NotInProtocol, TagInUse, TimedOut    (the protocol's own)

`ERRNO` is the one table from kind to errno (a subclass takes its nearest listed ancestor's).
An `FsError` becomes Rerror (9P2000: the message; 9P2000.u: and the errno) or Rlerror (9P2000.L:
the errno). Random bytes given to the codec raise nothing but `ProtocolError`.
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = [
    "ERRNO",
    "AccessDenied",
    "AlreadyExists",
    "BadFid",
    "Busy",
    "CrossDirectory",
    "FsError",
    "InvalidInput",
    "IsADirectory",
    "MessageTooLarge",
    "NinepError",
    "NotADirectory",
    "NotFound",
    "NotInProtocol",
    "NotPermitted",
    "NotSupported",
    "ProtocolError",
    "StorageFailed",
    "TagInUse",
    "TimedOut",
    "TooLarge",
    "TooManyFids",
    "TryAgain",
    "UnknownMessageError",
    "errno_of",
]


class NinepError(Exception):
    """Root of the exceptions raised by `anvild.ninep`."""


class ProtocolError(NinepError):
    """Malformed 9P input. The connection that produced it cannot continue."""


class UnknownMessageError(ProtocolError):
    """A correctly framed message of a type the negotiated dialect does not define.

    Carries the tag so the server can answer it with an error and keep going.
    """

    def __init__(self, message: str, *, msg_type: int, tag: int) -> None:
        super().__init__(message)
        self.msg_type = msg_type
        self.tag = tag


class FsError(NinepError):
    """A request refused by the server or by a node: ``message`` for people, ``errno`` for machines.

    ``message`` is what 9P2000 clients print (plan9port's `9p` writes it to stderr), so it must
    say what went wrong and, where possible, what to do instead: "ctl: unknown command 'frob'
    (try: new, kill, ping)" rather than "invalid argument". ``errno`` is a Linux errno value
    (from the `errno` module); it is what 9P2000.L clients see (Rlerror carries only the number)
    and what 9P2000.u carries next to the message.
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno_of(type(self)) if errno is None else errno

    def __repr__(self) -> str:
        return f"FsError({self.message!r}, errno={self.errno})"


class InvalidInput(FsError):
    """What was written or asked for is malformed or names nothing valid."""


class NotPermitted(FsError):
    """Never allowed here (this file, this state): a verb that does not exist for it."""


class AccessDenied(FsError):
    """Allowed to others, not to this caller."""


class NotFound(FsError):
    """No such file, session, bead or recipient."""


class Busy(FsError):
    """Something running or held stands in the way (a turn, a claim, a gate)."""


class AlreadyExists(FsError):
    """The name is taken."""


class TooLarge(FsError):
    """Over a size limit; the message names it."""


class TryAgain(FsError):
    """A limit that passes with time (connections, outstanding requests)."""


class NotSupported(FsError):
    """An operation this server does not implement."""


class StorageFailed(FsError):
    """The disk or a store refused; nothing was changed."""


class BadFid(FsError):
    """An unknown or unusable fid, or one not open for this."""


class TooManyFids(FsError):
    """The connection holds as many fids as it may."""


class NotADirectory(FsError):
    """A walk or directory operation on a file."""


class IsADirectory(FsError):
    """A file operation on a directory."""


class CrossDirectory(FsError):
    """A rename out of a file's directory."""


class MessageTooLarge(FsError):
    """A reply that cannot fit the negotiated msize."""


class NotInProtocol(FsError):
    """A message out of place (before Tversion, an R-message from a client)."""


class TagInUse(FsError):
    """A tag that names a request still outstanding."""


class TimedOut(FsError):
    """Something that did not finish in time."""


ERRNO: Final[Mapping[type[FsError], int]] = MappingProxyType(
    {
        FsError: _errno.EIO,
        InvalidInput: _errno.EINVAL,
        NotPermitted: _errno.EPERM,
        AccessDenied: _errno.EACCES,
        NotFound: _errno.ENOENT,
        Busy: _errno.EBUSY,
        AlreadyExists: _errno.EEXIST,
        TooLarge: _errno.EFBIG,
        TryAgain: _errno.EAGAIN,
        NotSupported: _errno.EOPNOTSUPP,
        StorageFailed: _errno.EIO,
        BadFid: _errno.EBADF,
        TooManyFids: _errno.EMFILE,
        NotADirectory: _errno.ENOTDIR,
        IsADirectory: _errno.EISDIR,
        CrossDirectory: _errno.EXDEV,
        MessageTooLarge: _errno.EMSGSIZE,
        NotInProtocol: _errno.EPROTO,
        TagInUse: _errno.EBADMSG,
        TimedOut: _errno.ETIMEDOUT,
    }
)
"""The one table: each kind of refusal and the errno 9P2000.u and 9P2000.L clients get."""

_errno_cache: dict[type[FsError], int] = {}


def errno_of(kind: type[FsError]) -> int:
    """The errno of `kind`: its entry in `ERRNO`, else its nearest listed ancestor's."""
    code = _errno_cache.get(kind)
    if code is None:
        code = _errno_cache[kind] = next(ERRNO[b] for b in kind.__mro__ if b in ERRNO)
    return code
