"""anvild.ninep: a sans-IO 9P2000 / 9P2000.u / 9P2000.L codec and a trio 9P server.

Modules:

* `constants` — protocol numbers (intro(5), open(5), stat(5), 9P2000.L).
* `errors` — the exception hierarchy (`ProtocolError` for malformed input, `FsError` for refusals).
* `messages` — one frozen attrs class per message and the pure frame codec (`encode`/`decode`).
* `framing` — a sans-IO frame reader: feed bytes, get complete frames, bounded by a maximum size.
* `backend` — the interface a synthetic tree implements: `Node`, `Handle`, `NodeStat`.
* `server` — the trio server: one table of message handlers and one fast-path decision.
* `transport` — stream and socket transports, and the poller that answers parked connections.
* `client` — a small trio client (one request at a time) for a daemon driving another's files.

This package imports nothing else from the project (DESIGN.md §2; enforced by a test).
"""

from anvild.ninep.backend import AttachRequest, Handle, Node, NodeStat, OpenMode, StatChange
from anvild.ninep.constants import DMDIR, Dialect
from anvild.ninep.errors import FsError, NinepError, ProtocolError, UnknownMessageError
from anvild.ninep.messages import Qid, Stat

__all__ = [
    "DMDIR",
    "AttachRequest",
    "Dialect",
    "FsError",
    "Handle",
    "NinepError",
    "Node",
    "NodeStat",
    "OpenMode",
    "ProtocolError",
    "Qid",
    "Stat",
    "StatChange",
    "UnknownMessageError",
]
