"""Which hosts a listen address may name without `allow_remote`: the loopback ones. The 9P TCP
listeners (`anvild.daemon.listeners`) and the web board (`anvild.web.address`) refuse any other
unless remote listening is allowed, so both ask here."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback IP address. "" (every interface) and any other host name are
    not provably loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["is_loopback_host"]
