"""anvilctl's background threads leave the terminal's signals to the main thread."""

from __future__ import annotations

import signal

from anvilctl.attach import EventReader
from anvilctl.headless import _EventPump
from anvilctl.threads import MAIN_THREAD_SIGNALS, BackgroundThread


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
    assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= MAIN_THREAD_SIGNALS
    assert probe.mask >= MAIN_THREAD_SIGNALS
    assert set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) == before
    assert not MAIN_THREAD_SIGNALS & before


def test_attach_and_headless_read_events_on_background_threads() -> None:
    # attach's reader is also checked in a real process (test_attach reads /proc's SigBlk).
    assert issubclass(EventReader, BackgroundThread)
    assert issubclass(_EventPump, BackgroundThread)
