"""Background threads of anvilctl leave the terminal's signals to the main thread.

The kernel delivers a process-directed signal (a Ctrl-C is SIGINT to the foreground process
group) to any thread of the process that does not block it. CPython runs signal handlers on
the main thread only, and the main thread notices a signal taken by another thread only when
one of its own blocking calls returns: `input()` under readline waits in `select()` with no
timeout, so a Ctrl-C that landed on a reader thread did nothing until the next key was pressed.
A thread that blocks these signals leaves every one of them to the main thread.
"""

from __future__ import annotations

import signal
import threading
from typing import Final

MAIN_THREAD_SIGNALS: Final = frozenset(
    {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH}
)


class BackgroundThread(threading.Thread):
    """A daemon thread whose `work` runs with `MAIN_THREAD_SIGNALS` blocked."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)

    def run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
        self.work()

    def work(self) -> None:
        raise NotImplementedError
