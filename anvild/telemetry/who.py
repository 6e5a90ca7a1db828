"""What a session's spans say about it: `Who`, read at each turn's start. Kept apart from
`traces` so that a session can name itself without loading the OpenTelemetry SDK."""

from __future__ import annotations

import attrs


@attrs.frozen
class Who:
    """What a session's spans say about it, read at each turn's start."""

    session: str
    role: str
    bead: str = ""
    convoy: str = ""


__all__ = ["Who"]
