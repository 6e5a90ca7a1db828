"""The agent loop's workspace snapshot point: checkpoints (`anvild.checkpoints`) plug in here.

    before_change()   awaited once per turn, before its first call that is not read-only runs

The loop never imports an implementation. An implementation reports its own failures (a
snapshot that fails costs the checkpoint, never the turn) and changes nothing the model sees.
"""

from __future__ import annotations

from typing import Final, Protocol


class Snapshots(Protocol):
    async def before_change(self) -> None: ...


class NoSnapshots:
    """No checkpoints: nothing to do before a change."""

    async def before_change(self) -> None:
        return None


NO_SNAPSHOTS: Final = NoSnapshots()

__all__ = ["NO_SNAPSHOTS", "NoSnapshots", "Snapshots"]
