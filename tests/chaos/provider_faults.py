"""Part d: provider faults from the fake provider, through a real daemon.

Each case is one session whose prompt meets a scripted fault (tests/support/fake_provider.py,
"Faults"): a reset in the middle of the stream, a stream that ends early (cleanly, or in the
middle of an event), 5xx answers (once, then a good answer: the retry must answer; always: the
turn must end with the status), and a server that stalls (after the first events, or before
its headers). The turn must end with a clear error in `out` (or, after a retry, the answer),
within the bound; a stalled stream is ended by `cancel` within seconds (short mode) or by the
daemon's own deadlines (full mode: 120 s without a byte, 60 s without headers). Meanwhile and
after each case, another session must be answered (the daemon keeps serving).
"""

from __future__ import annotations

import time
from pathlib import Path

import attrs

from tests.chaos.common import (
    Closed,
    Result,
    Timeout,
    alive,
    connect,
    new_session,
    start,
    user_config,
)
from tests.chaos.common import fake_provider as fake_server
from tests.chaos.common import wait_state as poll_state


@attrs.frozen
class Case:
    name: str
    turns: tuple[dict[str, object], ...]
    expect: tuple[str, ...]  # any of these in `out` is a clear outcome
    stall: bool = False  # only ends by cancel (short) or the daemon's deadline (full)


def cases(full: bool) -> list[Case]:
    text = "the quick brown fox jumps over the lazy dog " * 4
    return [
        Case(
            "reset mid-stream",
            ({"text": text, "fault": "reset", "fault_after": 4},),
            ("[turn ended: error:",),
        ),
        Case(
            "stream ends early (clean EOF)",
            ({"text": text, "fault": "eof", "fault_after": 4},),
            ("[turn ended: error:",),
        ),
        Case(
            "stream cut inside an event",
            ({"text": text, "fault": "truncate", "fault_after": 4},),
            ("[turn ended: error:",),
        ),
        Case(
            "500 once, then an answer (retried)",
            ({"status": 500, "retry_after": 0.1}, {"text": "recovered"}),
            ("recovered",),
        ),
        Case(
            "503 every time",
            ({"status": 503, "message": "overloaded", "retry_after": 0.1, "repeat": True},),
            ("[turn ended: error: HttpError: HTTP 503",),
        ),
        Case(
            "stall after the first events",
            ({"text": text, "fault": "stall", "fault_after": 3},),
            ("[turn ended: error:" if full else "[turn ended: cancelled",),
            stall=True,
        ),
        *(
            [
                Case(
                    "stall before the headers",
                    # Every attempt stalls: the retries too (a timeout is retried).
                    ({"text": "never", "delay": 100_000.0, "repeat": True},),
                    ("[turn ended: error:",),
                    stall=True,
                )
            ]
            if full
            else []
        ),
    ]


def run(workdir: Path, full: bool = False, bound: float = 60.0) -> Result:
    """Every case once; in `full` mode the stalls end by the daemon's own deadlines."""
    result = Result("Provider faults")
    started = time.monotonic()
    all_cases = cases(full)
    turns: list[dict[str, object]] = [{"contains": "ping", "text": "pong", "repeat": True}]
    for number, case in enumerate(all_cases):
        turns += [{**t, "contains": f"case-{number}"} for t in case.turns]
    namespace = workdir / "ns"
    work = workdir / "work"
    work.mkdir(parents=True)
    with fake_server(workdir, turns) as fake:
        daemon = start(namespace, user_config(workdir, fake.url))
        try:
            other = new_session(namespace, work)
            for number, case in enumerate(all_cases):
                _case(result, namespace, work, other, number, case, full, bound)
                if not alive(daemon):
                    result.add("crashes (daemon died)")
                    result.note(f"{case.name}: the daemon died")
                    break
        finally:
            if alive(daemon):
                code, log = daemon.stop()
                if code != 0:
                    result.add("crashes (daemon died)")
                    result.note(f"the daemon stopped with {code}: {log[-1500:]}")
        result.add("provider requests", len(fake.requests()))
    for name in (
        "crashes (daemon died)",
        "turns that hung",
        "turns without a clear outcome",
        "other session not served during a fault",
    ):
        result.counts[name] = result[name]
    result.seconds = time.monotonic() - started
    return result


def _served(namespace: Path, sid: str, bound: float) -> bool:
    try:
        with connect(namespace, bound) as c:
            c.write_file(f"{sid}/in", b"ping")
            c.read_file(f"{sid}/wait")
            return c.read_file(f"{sid}/out") == b"pong\n"
    except (Closed, Timeout, OSError, AssertionError):
        return False


def _case(
    result: Result,
    namespace: Path,
    work: Path,
    other: str,
    number: int,
    case: Case,
    full: bool,
    bound: float,
) -> None:
    result.add("cases")
    sid = new_session(namespace, work)
    began = time.monotonic()
    with connect(namespace) as c:
        c.write_file(f"{sid}/in", f"case-{number}".encode())
    if case.stall:
        # The turn is stuck on the provider: the daemon serves another session meanwhile.
        assert poll_state(namespace, sid, ("running",), 10).startswith("running")
        time.sleep(2)
        if not _served(namespace, other, bound):
            result.add("other session not served during a fault")
            result.note(f"{case.name}: the other session was not answered during the stall")
        if full:
            limit = 240.0  # the daemon's deadlines: 120 s idle, 60 s before headers (+ retries)
        else:
            with connect(namespace) as c:
                c.write_file(f"{sid}/ctl", b"cancel\n")
            limit = 10.0
    else:
        limit = bound
    state = poll_state(namespace, sid, ("idle", "await", "error"), limit)
    seconds = time.monotonic() - began
    with connect(namespace) as c:
        out = c.read_file(f"{sid}/out").decode(errors="replace")
    summary = f"{case.name}: {state} after {seconds:.1f} s; out: {out.strip()[-200:]!r}"
    result.note(summary)
    if state.startswith("timeout"):
        result.add("turns that hung")
    elif not any(word in out for word in case.expect):
        result.add("turns without a clear outcome")
    else:
        result.add("turns ended with a clear outcome")
    if not _served(namespace, other, bound):
        result.add("other session not served during a fault")
        result.note(f"{case.name}: the other session was not answered afterwards")
