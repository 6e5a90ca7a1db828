"""The exceptions of `anvild.ninep`.

Hierarchy (httpx `_exceptions.py` style)::

    NinepError                  root of everything this package raises
    ├── ProtocolError           malformed input from the peer: bad framing, bad lengths,
    │   │                       invalid UTF-8, trailing bytes, a frame larger than msize.
    │   │                       The server closes the connection with a logged reason
    │   │                       (intro(5): a peer that breaks framing cannot be resynchronised).
    │   └── UnknownMessageError a well-framed message whose type the dialect does not define;
    │                           the frame boundary is intact, so the server answers it with an
    │                           error reply on the same tag and keeps the connection.
    └── FsError                 a refusal by the server or by a node/handle: a human-readable
                                message plus a Linux errno. It becomes Rerror (9P2000: the
                                message; 9P2000.u: message and errno) or Rlerror (9P2000.L: errno).

Random bytes given to the codec never raise anything but `ProtocolError` (and its subclass).
"""

from __future__ import annotations

import errno as _errno

__all__ = ["FsError", "NinepError", "ProtocolError", "UnknownMessageError"]


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

    def __init__(self, message: str, errno: int = _errno.EIO) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno

    def __repr__(self) -> str:
        return f"FsError({self.message!r}, errno={self.errno})"
