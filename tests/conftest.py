"""Shared test configuration."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

# A background job of a non-interactive shell (`make test &` in a script) starts with SIGINT
# ignored, every child inherits that, and Python then installs no KeyboardInterrupt handler: the
# tests that type Ctrl-C at anvilctl would see it ignored. A handler set here is reset to the
# default in each child at exec, so the children get Python's usual one.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
