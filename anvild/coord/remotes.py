"""Other daemons a conductor session may start sessions on: `[remotes.NAME]` of the user config.

    [remotes.build-2]
    address = "tcp!build-2!5640"
    token_file = "~/.config/anvil/tokens/build-2"     # that daemon's agent.token

A remote's token is a credential: it comes from the user config only (the daemon loads no
project file; `anvild.config.trust` also marks `remotes.*` a credential), is read from its file
at each connection (a restarted remote has a new one) and never logged. `RemoteSession` is what
a conductor holds for a session it started there: the remote's name, the session's id, alias.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs
import trio

from anvild.config import Config
from anvild.ninep.client import Connection, RemoteUnreachable

__all__ = ["REQUEST_LIMIT", "RemoteDaemon", "RemoteSession", "remotes_of"]

REQUEST_LIMIT: Final = 30.0
"""Seconds a dial or a non-blocking request to a remote daemon may take."""


@attrs.frozen
class RemoteDaemon:
    name: str
    address: str
    token_file: Path | None = None

    async def token(self) -> str:
        if self.token_file is None:
            return ""
        try:
            text = await trio.Path(self.token_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise RemoteUnreachable(
                f"remote {self.name}: cannot read its token file {self.token_file}: "
                f"{exc.strerror or exc}; copy that daemon's NAMESPACE/agent.token there"
            ) from exc
        return text.strip()

    async def connect(self) -> Connection:
        return await Connection.dial(self.address, aname=await self.token(), limit=REQUEST_LIMIT)


@attrs.frozen
class RemoteSession:
    host: str  # the RemoteDaemon's name
    id: str
    alias: str
    role: str = "-"

    @property
    def where(self) -> str:
        return f"{self.id} ({self.alias}) on {self.host}"


def remotes_of(config: Config) -> dict[str, RemoteDaemon]:
    """`[remotes.NAME]` as the config's layers set it (checked by `anvild.config.schema`)."""
    found: dict[str, RemoteDaemon] = {}
    for layer, _source in config.layers:
        for key, value in layer.items():
            if key[:1] == ("remotes",) and len(key) == 2 and isinstance(value, Mapping):
                token = value.get("token_file")
                path = None if not isinstance(token, str) else Path(token).expanduser()
                found[key[1]] = RemoteDaemon(key[1], str(value["address"]), path)
    return found
