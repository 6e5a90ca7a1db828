"""Ctrl-C reaches anvilctl's main thread, and its blocking waits notice it at once.

CPython runs a signal's Python handler on the main thread, and a blocking call lets it run only
by failing with EINTR. So: `BackgroundThread` blocks `MAIN_THREAD_SIGNALS`, so no other thread
takes a Ctrl-C; a `poll` loop also waits on the signal wakeup fd (`signal_wakeup`), so a signal
landing just before the wait is not lost; readline cannot take another fd, so `readline_ticks`
interrupts it with SIGALRM every `TICK` seconds. (docs/decisions.md, "Ctrl-C in anvilctl's
blocking waits".)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Final

MAIN_THREAD_SIGNALS: Final = frozenset(
    {
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGWINCH,
        signal.SIGALRM,  # readline_ticks: it must interrupt the main thread's wait
    }
)

TICK: Final = 0.1
"""Seconds between readline_ticks' interruptions: how late a Ctrl-C at the prompt may be."""


class BackgroundThread(threading.Thread):
    """A daemon thread whose `work` runs with `MAIN_THREAD_SIGNALS` blocked."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)

    def run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        self.work()

    def work(self) -> None:
        raise NotImplementedError


def _tick(signum: int, frame: FrameType | None) -> None:
    """SIGALRM's handler under readline_ticks: its only job is to have interrupted the wait."""


@contextlib.contextmanager
def readline_ticks() -> Iterator[None]:
    """Around `input()` on the main thread: a SIGALRM every TICK seconds interrupts readline's
    wait, which then runs any handler that is due (KeyboardInterrupt for a Ctrl-C that came
    just before the wait began). The previous handler and timer come back afterwards."""
    previous = signal.signal(signal.SIGALRM, _tick)
    signal.setitimer(signal.ITIMER_REAL, TICK, TICK)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def signal_wakeup() -> Iterator[int]:
    """A pipe's read end that becomes readable when a signal arrives (`signal.set_wakeup_fd`),
    for the main thread's `poll` loop: register it, and drain it with `drain_wakeup` when it
    is ready. The previous wakeup fd comes back afterwards."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    try:
        yield read_end
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)


def drain_wakeup(fd: int) -> None:
    """Empty `signal_wakeup`'s pipe (the handlers themselves run as bytecode runs)."""
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass
