"""Where the board listens: `[web]` of the user config and `--web HOST:PORT`, checked (a host
that is not loopback needs `allow_remote`). Light on purpose: the daemon reads it at every
start, and starlette and hypercorn load only when the board is on."""

from __future__ import annotations

import attrs

from anvild.config import Config
from anvild.config.hosts import is_loopback_host


class WebAddressError(Exception):
    """A board address that cannot or must not be used; the message says why."""


@attrs.frozen
class WebAddress:
    host: str
    port: int

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def bind(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_web_address(text: str, *, allow_remote: bool = False) -> WebAddress:
    """`HOST:PORT` (`[::1]:PORT` for IPv6); a host that is not loopback needs `allow_remote`."""
    host, colon, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise WebAddressError(
            f"bad web board address {text!r}: write HOST:PORT, e.g. 127.0.0.1:8080"
        )
    address = WebAddress(host, int(port_text))
    if not address.is_loopback and not allow_remote:
        raise WebAddressError(
            f"the web board address {text!r} is not a loopback address: other machines could "
            "reach it; use 127.0.0.1:PORT, or add --allow-remote (or [web] allow_remote = true) "
            "if you mean it"
        )
    return address


@attrs.frozen
class WebSettings:
    """`[web]` of the user config: `listen` (HOST:PORT, None: off) and `allow_remote`."""

    listen: str | None = None
    allow_remote: bool = False


def web_settings(config: Config) -> WebSettings:
    """`[web]` as the config's layers set it (the daemon loads no project file: user only)."""
    values: dict[str, object] = {}
    for layer, _source in config.layers:
        for key, value in layer.items():
            if key[:1] == ("web",) and len(key) == 2:
                values[key[1]] = value
    listen = values.get("listen")
    return WebSettings(
        listen=listen if isinstance(listen, str) else None,
        allow_remote=values.get("allow_remote") is True,
    )


__all__ = ["WebAddress", "WebAddressError", "WebSettings", "parse_web_address", "web_settings"]
