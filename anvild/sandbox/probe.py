"""The startup probe: can this machine run the sandbox at all?

`probe` runs at startup (in a worker thread: it runs a process); every sandboxed command calls
`ensure_available`, which uses the cached result. It checks bwrap and setpriv on PATH,
libseccomp compiling the filter, then starts a real sandbox exactly as a command gets it and
checks the process inside has no capabilities and no_new_privs set. A failure names what to
install or enable. Cached per settings for the process's life (`clear_cache` forgets it). A failed
probe means sandboxed commands are refused, never run unsandboxed.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Final

import attrs

from anvild.sandbox import ReadOnly, SandboxError, SandboxUnavailable
from anvild.sandbox.bwrap import (
    LiveFacts,
    SandboxSettings,
    SandboxSpec,
    bwrap_argv,
    failure_message,
    parse_status,
    plan,
    which,
)
from anvild.sandbox.roles import Role

PROBE_TIMEOUT: Final = 15.0
_CHECK: Final = (
    # No capabilities inside, no_new_privs set; after a drop the bounding set is empty too.
    "set -e; s=$(cat /proc/self/status); "
    'echo "$s" | grep -Eq "^CapEff:[[:space:]]+0+$"; '
    'echo "$s" | grep -Eq "^CapPrm:[[:space:]]+0+$"; '
    'echo "$s" | grep -Eq "^NoNewPrivs:[[:space:]]+1$"; '
    'echo "$s" | grep -Eq "^Seccomp:[[:space:]]+2$"; '
    'if [ "$1" = drop ]; then echo "$s" | grep -Eq "^CapBnd:[[:space:]]+0+$"; fi'
)
BWRAP_HINT: Final = (
    "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora: `dnf install "
    "bubblewrap`; Arch: `pacman -S bubblewrap`) and make sure `bwrap` is on the daemon's PATH"
)
SETPRIV_HINT: Final = (
    "install setpriv (Debian/Ubuntu/Fedora package `util-linux`): it ends the sandbox when the "
    "daemon dies and, for a daemon running as root, drops to an unprivileged uid first (bwrap "
    "started by root is not a sandbox)"
)


@attrs.frozen
class ProbeResult:
    ok: bool
    message: str


_cache: dict[SandboxSettings, ProbeResult] = {}
_lock = threading.Lock()


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def _run_probe(settings: SandboxSettings) -> ProbeResult:
    from anvild.sandbox import seccomp

    bwrap = which(settings.bwrap)
    if bwrap is None:
        return ProbeResult(False, f"bwrap ({settings.bwrap}) was not found: {BWRAP_HINT}.")
    drop = settings.drop()
    setpriv = which(settings.setpriv)
    if setpriv is None:
        return ProbeResult(False, f"setpriv was not found: {SETPRIV_HINT}.")
    try:
        seccomp_fd = seccomp.filter_fd()
    except SandboxError as exc:
        return ProbeResult(False, str(exc))
    status_read, status_write = os.pipe()
    try:
        # The same layout code as a command, for a read-only view of /usr.
        spec = SandboxSpec(
            policy=ReadOnly(),
            role=Role(name="probe").resolve(cwd=Path("/usr"), home=Path("/")),
            cwd=Path("/usr"),
            home=Path("/nonexistent-home"),
        )
        the_plan = plan(spec, LiveFacts())
        argv = bwrap_argv(
            the_plan,
            ("/bin/sh", "-c", _CHECK, "probe", "drop" if drop else "nodrop"),
            bwrap=bwrap,
            seccomp_fd=seccomp_fd,
            status_fd=status_write,
            drop=drop,
            setpriv=setpriv,
        )
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                pass_fds=(seccomp_fd, status_write),
                env={"PATH": "/usr/bin:/bin"},
                timeout=PROBE_TIMEOUT,
                check=False,
                cwd="/",
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return ProbeResult(False, f"The sandbox probe could not run bwrap: {exc}.")
        os.close(status_write)
        status_write = -1
        os.set_blocking(status_read, False)
        try:
            status = os.read(status_read, 65536)
        except BlockingIOError:
            status = b""
    finally:
        os.close(seccomp_fd)
        os.close(status_read)
        if status_write != -1:
            os.close(status_write)
    stderr = done.stderr.decode("utf-8", "replace")
    code = parse_status(status)
    if code is None:
        return ProbeResult(False, failure_message(stderr).replace("The command was", "Probe"))
    if code != 0:
        return ProbeResult(
            False,
            "The sandbox started but its process kept privileges (capabilities, no "
            "no_new_privs or no seccomp filter), so it is not a sandbox: refusing sandboxed "
            f"commands. Check that setpriv and bwrap are the distribution's. {stderr.strip()}",
        )
    who = f"as uid {drop.uid}" if drop else f"as uid {os.geteuid()}"
    return ProbeResult(True, f"sandbox ready: {bwrap}, {who}, seccomp filter loaded")


def probe(settings: SandboxSettings | None = None) -> ProbeResult:
    """Run the probe once per settings and remember the result."""
    settings = settings or SandboxSettings()
    with _lock:
        cached = _cache.get(settings)
    if cached is not None:
        return cached
    result = _run_probe(settings)
    with _lock:
        _cache[settings] = result
    return result


def ensure_available(settings: SandboxSettings | None = None) -> None:
    """Raise `SandboxUnavailable` (with what to install or enable) unless the probe passed."""
    result = probe(settings)
    if not result.ok:
        raise SandboxUnavailable(
            f"Sandboxed commands are unavailable on this machine: {result.message} Commands "
            "are refused rather than run without the sandbox; only the user can grant full "
            "access instead."
        )


__all__ = ["ProbeResult", "clear_cache", "ensure_available", "probe"]
