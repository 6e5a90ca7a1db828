"""The process's descriptor limit, raised at start so the connection cap can be reached.

Every 9P connection holds a descriptor, and records, logs, the provider's sockets and sandboxes
hold more. Under the common soft RLIMIT_NOFILE of 1024 the default cap of 1024 connections
(`[server] max_connections`) could never be reached: from about 1,000 connections on, accept()
failed with EMFILE, the next clients waited unanswered and no other client was served. So the
soft limit is raised to the cap plus `RESERVE`, at most to the hard limit, and never lowered
(what systemd does for services and Go's runtime for every program). Children (sandboxes,
llama-server) inherit the raised soft limit.
"""

from __future__ import annotations

import contextlib
import resource

import attrs

__all__ = ["RESERVE", "NofileLimit", "raise_nofile"]

RESERVE = 1024
"""Descriptors beyond the connection cap: records, logs, sockets to providers, sandboxes."""


@attrs.frozen
class NofileLimit:
    before: int  # the soft limit the process started with
    soft: int  # the soft limit now
    hard: int
    wanted: int  # the connection cap plus RESERVE

    @property
    def enough(self) -> bool:
        return self.soft >= self.wanted


def raise_nofile(max_connections: int) -> NofileLimit:
    """Raise the soft RLIMIT_NOFILE toward `max_connections + RESERVE` (never past the hard
    limit, never down); what it was and is."""
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + RESERVE
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > before:
        # On failure the limits below say what we have; the caller logs it.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return NofileLimit(before=before, soft=soft, hard=hard, wanted=wanted)
