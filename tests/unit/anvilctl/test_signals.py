"""anvilctl's main thread notices a Ctrl-C at once (`anvilctl.signals`).

The race these guard against (a signal handled just before a blocking wait begins) cannot be
forced from Python; test_attach's pty test types Ctrl-C the moment the prompt appears, which
hit it about one run in ten on a loaded machine before `readline_ticks`."""

from __future__ import annotations

import select
import signal

from anvilctl.attach import EventReader
from anvilctl.headless import _EventPump
from anvilctl.signals import (
    MAIN_THREAD_SIGNALS,
    TICK,
    BackgroundThread,
    drain_wakeup,
    readline_ticks,
    signal_wakeup,
)


class _Probe(BackgroundThread):
    def __init__(self) -> None:
        super().__init__("probe")
        self.mask: set[signal.Signals] = set()

    def work(self) -> None:
        self.mask = set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_a_background_thread_blocks_the_terminal_signals_and_the_main_thread_does_not() -> None:
    before = set(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    probe = _Probe()
    probe.start()
    probe.join(timeout=10)
    assert not probe.is_alive()
    assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM} <= MAIN_THREAD_SIGNALS
    assert probe.mask >= MAIN_THREAD_SIGNALS
    assert set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) == before
    assert not MAIN_THREAD_SIGNALS & before


def test_attach_and_headless_read_events_on_background_threads() -> None:
    # attach's reader is also checked in a real process (test_attach reads /proc's SigBlk).
    assert issubclass(EventReader, BackgroundThread)
    assert issubclass(_EventPump, BackgroundThread)


def test_readline_ticks_interrupts_every_tick_and_restores_the_handler_and_timer() -> None:
    previous = signal.getsignal(signal.SIGALRM)
    ticks: list[int] = []
    with readline_ticks():
        assert signal.getitimer(signal.ITIMER_REAL)[1] == TICK
        handler = signal.getsignal(signal.SIGALRM)
        assert callable(handler)
        signal.signal(signal.SIGALRM, lambda signum, frame: ticks.append(signum))
        # A wait with nothing to wake it: each tick interrupts it (Python resumes it).
        select.select([], [], [], 3.5 * TICK)
        signal.signal(signal.SIGALRM, handler)
    assert len(ticks) >= 2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) == previous


def test_signal_wakeup_makes_a_poll_return_when_a_signal_arrives() -> None:
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    try:
        with signal_wakeup() as fd:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            assert poller.poll(0) == []
            signal.raise_signal(signal.SIGUSR1)
            assert poller.poll(0) == [(fd, select.POLLIN)]
            drain_wakeup(fd)
            assert poller.poll(0) == []
        assert signal.set_wakeup_fd(-1) == -1  # the previous one (none) is back
    finally:
        signal.signal(signal.SIGUSR1, previous)
