"""Part e: a thousand 9P connections held open on the Unix socket while another client is served.

Each held connection is versioned and attached (an attached connection is never timed out),
then left idle. While they are all open, another client (its session made before) must get a
prompt answered within the bound; the daemon's descriptors (/proc/PID/fd) are counted before,
with every connection open, and after they all close (back to the baseline: no descriptor
leaks). The default connection cap (1024, `[server] max_connections`) applies: `beyond` more
connections go up to it and past it, and those past it must be refused naming the limit.

`soft_nofile` runs the daemon under that soft RLIMIT_NOFILE instead of the one it inherits
(1024 is a common default): it shows whether the cap and the descriptor limit fit together.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from anvild.ninep import messages as m
from anvild.ninep.constants import NOFID, NOTAG, Dialect
from anvild.ninep.framing import FrameReader
from tests.chaos.common import (
    MSIZE,
    Closed,
    Result,
    Timeout,
    alive,
    connect,
    fake_provider,
    fd_count,
    new_session,
    start,
    user_config,
)
from tests.integration.test_daemon_cli import Anvild

HELLO = m.encode(m.Tversion(NOTAG, MSIZE, "9P2000"), Dialect.P9P2000) + m.encode(
    m.Tattach(1, 0, NOFID, "root", ""), Dialect.P9P2000
)


@contextlib.contextmanager
def soft_limit(limit: int | None) -> Iterator[None]:
    """RLIMIT_NOFILE's soft limit set to `limit` while a child is started (it inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _hold(namespace: Path, count: int, bound: float) -> tuple[list[socket.socket], int, int]:
    """`count` attached connections: those held, those refused at the cap with its error,
    and those that failed otherwise (closed or unanswered)."""
    socks: list[socket.socket] = []
    failed = refused = 0
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(bound)
        try:
            s.connect(str(namespace / "agent"))
            s.sendall(HELLO)
        except OSError:
            s.close()
            failed += 1
            continue
        socks.append(s)
    held: list[socket.socket] = []
    deadline = time.monotonic() + bound
    for s in socks:
        reader = FrameReader(1 << 20)
        replies: list[m.Message] = []
        try:
            while len(replies) < 2 and not (replies and isinstance(replies[0], m.Rerror)):
                s.settimeout(max(0.01, deadline - time.monotonic()))
                data = s.recv(65536)
                if not data:
                    raise Closed("EOF")
                reader.feed(data)
                replies += [m.decode(f, Dialect.P9P2000) for f in reader.frames()]
        except (OSError, Closed):
            s.close()
            failed += 1
            continue
        if isinstance(replies[0], m.Rversion) and isinstance(replies[1], m.Rattach):
            held.append(s)
            continue
        s.close()
        if isinstance(replies[0], m.Rerror) and "max_connections" in replies[0].ename:
            refused += 1
        else:
            failed += 1
    return held, refused, failed


def _served(result: Result, namespace: Path, sid: str, bound: float) -> float | None:
    """Seconds another client took to get a prompt answered; None if it failed."""
    began = time.monotonic()
    try:
        with connect(namespace, bound) as c:
            c.write_file(f"{sid}/in", b"ping")
            c.read_file(f"{sid}/wait")
            out = c.read_file(f"{sid}/out")
    except (Closed, Timeout, OSError, AssertionError) as exc:
        result.note(f"the other client was not served: {exc!r}")
        return None
    if out != b"pong\n":
        result.note(f"the other client's out is {out!r}")
        return None
    return time.monotonic() - began


def run(
    workdir: Path,
    count: int = 1000,
    soft_nofile: int | None = None,
    beyond: int = 0,
    bound: float = 30.0,
) -> Result:
    """`count` held connections and another client served; then `beyond` more (past the cap
    of 1024 when count + beyond > 1024)."""
    label = f"soft RLIMIT_NOFILE {soft_nofile}" if soft_nofile else "inherited RLIMIT_NOFILE"
    result = Result(f"Connections ({label})")
    started = time.monotonic()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 200:  # the harness holds the client ends
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 200), hard))
    work = workdir / "work"
    work.mkdir(parents=True)
    namespace = workdir / "ns"
    with fake_provider(workdir, [{"text": "pong", "repeat": True}]) as fake:
        with soft_limit(soft_nofile):
            daemon: Anvild = start(namespace, user_config(workdir, fake.url))
        held: list[socket.socket] = []
        try:
            limit = Path(f"/proc/{daemon.proc.pid}/limits").read_text()
            nofile = next(x for x in limit.splitlines() if x.startswith("Max open files"))
            result.note(f"daemon: {' '.join(nofile.split())}")
            # The other client's session (its records file stays open) exists before the
            # baseline is taken, so the count after is comparable.
            sid = new_session(namespace, work)
            if _served(result, namespace, sid, bound) is None:
                result.add("other client not served")
            baseline = fd_count(daemon.proc.pid)
            result.add("daemon fds before", baseline)
            held, refused, failed = _hold(namespace, count, bound)
            result.add("connections held open (attached)", len(held))
            result.add("connections refused at the cap, naming max_connections", refused)
            result.add("connections that failed otherwise (closed, unanswered)", failed)
            result.add("daemon fds with them open", fd_count(daemon.proc.pid))
            seconds = _served(result, namespace, sid, bound)
            if seconds is None:
                result.add("other client not served")
            else:
                result.add("other client served (ms, a prompt answered)", round(seconds * 1000))
            still = 0
            for s in held:  # every held connection is still open and answers
                try:
                    s.sendall(m.encode(m.Tclunk(2, 0), Dialect.P9P2000))
                    s.settimeout(bound)
                    still += bool(s.recv(64))
                except OSError:
                    pass
            result.add("held connections still answering", still)
            if beyond:
                # Up to the cap and past it: held, then refused naming the limit, never hung.
                more, refused, failed = _hold(namespace, beyond, bound)
                held += more
                result.add(f"of {beyond} more connections: held", len(more))
                result.add("connections refused at the cap, naming max_connections", refused)
                result.add("connections that failed otherwise (closed, unanswered)", failed)
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + bound
        after = fd_count(daemon.proc.pid)
        while after > baseline and time.monotonic() < deadline:
            time.sleep(0.1)
            after = fd_count(daemon.proc.pid)
        result.add("daemon fds after they closed", after)
        if after > baseline:
            result.add("descriptors leaked", after - baseline)
        if not alive(daemon):
            result.add("crashes (daemon died)")
        code, log = daemon.stop()
        if code != 0:
            result.add("crashes (daemon died)")
            result.note(f"the daemon stopped with {code}: {log[-1500:]}")
        accept_errors = [
            line for line in log.splitlines() if "EMFILE" in line or "Too many" in line
        ]
        if accept_errors:
            result.note(f"daemon stderr: {accept_errors[0][:300]}")
    for name in ("crashes (daemon died)", "other client not served", "descriptors leaked"):
        result.counts[name] = result[name]
    result.seconds = time.monotonic() - started
    return result
