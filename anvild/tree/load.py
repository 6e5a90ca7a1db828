"""`agent/load`: how busy this daemon and its host are, for placing work across daemons.

    running 2
    sessions 5
    state.idle 3
    state.running 2
    cores 2
    loadavg 0.52 0.61 0.70
    mem_available 8123456512
    mem_total 16663441408

One `key value` line each, made at open. `running` counts turns under way (running, starting,
await_approval); `cores` the CPUs this process may use; memory in bytes from /proc/meminfo
(`-` where the host has none). A conductor with several daemons reads it on each to pick the
least loaded (docs/multi-host.md).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from anvild.fs import SnapshotFile
from anvild.store.records import SessionStatus

NAME = "load"
MEMINFO = Path("/proc/meminfo")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _memory(meminfo: Path) -> tuple[str, str]:
    """(available, total) in bytes, `-` for what the host does not say."""
    found = {"MemAvailable": "-", "MemTotal": "-"}
    try:
        text = meminfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return "-", "-"
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if key in found and words and words[0].isdigit():
            scale = 1024 if words[1:] == ["kB"] else 1
            found[key] = str(int(words[0]) * scale)
    return found["MemAvailable"], found["MemTotal"]


def load_text(statuses: Iterable[SessionStatus], *, meminfo: Path = MEMINFO) -> str:
    """The content of `agent/load` for sessions in these states."""
    counts = Counter(status.value for status in statuses)
    running = sum(n for state, n in counts.items() if SessionStatus(state).active)
    try:
        loadavg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        loadavg = "-"
    available, total = _memory(meminfo)
    lines = [f"running {running}", f"sessions {sum(counts.values())}"]
    lines += [f"state.{state} {counts[state]}" for state in sorted(counts)]
    lines += [
        f"cores {_cores()}",
        f"loadavg {loadavg}",
        f"mem_available {available}",
        f"mem_total {total}",
    ]
    return "".join(line + "\n" for line in lines)


def load_file(statuses: Callable[[], Iterable[SessionStatus]]) -> SnapshotFile:
    """`agent/load`, counting the states `statuses()` gives at each open."""
    return SnapshotFile(NAME, lambda: load_text(statuses()).encode())


__all__ = ["NAME", "load_file", "load_text"]
