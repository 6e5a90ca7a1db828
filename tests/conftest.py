"""Shared test configuration."""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support import zygote

# A background job of a non-interactive shell (`make test &` in a script) starts with SIGINT
# ignored, every child inherits that, and Python then installs no KeyboardInterrupt handler: the
# tests that type Ctrl-C at anvilctl would see it ignored. A handler set here is reset to the
# default in each child at exec, so the children get Python's usual one.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# pytest rewrites the asserts of every test module it imports and caches the result beside the
# module (tests/**/__pycache__/*-pytest-*.pyc, git-ignored), except where PYTHONDONTWRITEBYTECODE
# is set: there each pytest process (each xdist worker) rewrote and compiled all 400 test
# modules again, 12 s of CPU per collection instead of 4. The test modules imported after this
# conftest (all of them) are cached; the processes the tests start keep the variable.
sys.dont_write_bytecode = False

# Hypothesis measures each example against a 200 ms deadline and fails a test whose data
# generation seems slow. Both are wall-clock judgments, and `make test` runs two workers beside
# daemons, sandboxes and llama-server on two cores: a slow example there is load, not a bug
# (and its re-run, fast, is reported as Flaky). Every other check stays on.
settings.register_profile("anvil", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("anvil")

# The tests start `python -m anvild` and `python -m anvilctl` hundreds of times; each would
# import anvild again (about a second of CPU for a daemon). They are forked instead from one
# process per worker that imported them once (tests/support/zygote.py; ANVIL_TEST_ZYGOTE=0 turns
# it off). Every other command is started as usual.
zygote.install()

# llama.cpp meets its threads at a barrier after every operation: beside another busy worker two
# threads crawl (generation fell from ~15 to 2 tokens/s), one keeps a core to itself. Every
# llama-server the tests start (the daemon's, the recipe's) takes this; a run may set its own.
os.environ.setdefault("ANVIL_LLAMA_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
REAL_LLAMA_LOCK = Path(tempfile.gettempdir()) / f"anvil-tests-real-llama-{os.getuid()}.lock"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def one_llama_at_a_time() -> Iterator[None]:
    """Held by every test that makes the real llama-server work, across pytest-xdist workers
    (and concurrent runs): llama.cpp runs a thread per core and meets them at a barrier after
    every operation, so two servers computing at once on two cores each took three times as
    long. One at a time, each has the cores it was started for, and a worker waiting here
    leaves them to it."""
    with REAL_LLAMA_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# -- the order of the files: longest first ------------------------------------------------------
#
# `make test` runs the files on two pytest-xdist workers (`--dist loadfile --no-loadscope-reorder`:
# a file's tests on one worker, files handed out in collection order as workers free up). By
# default xdist puts the files with the most tests first, so a long file with few tests (the
# real embedded-model session, a minute beside other tests) could start last and run alone at
# the end. Longest-first is the classic fix: each run records every file's seconds in pytest's
# cache, and the next run sorts the files by them, longest first (within a file, the tests
# marked `slow` first); files without a record (a fresh clone) are weighed by where they live,
# since chaos, integration and sandbox tests start daemons, servers and sandboxes.

_FILE_SECONDS = "anvil/file-seconds"
_UNRECORDED_SECONDS = {"tests/chaos/": 30.0, "tests/integration/": 20.0, "tests/sandbox/": 5.0}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _recorded(config: pytest.Config) -> dict[str, float]:
    cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
    value = cache.get(_FILE_SECONDS, {}) if cache is not None else {}
    return value if isinstance(value, dict) else {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    recorded = _recorded(config)
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        first_index.setdefault(_file_of(item.nodeid), index)

    def weight(path: str) -> float:
        seconds = recorded.get(path)
        if isinstance(seconds, int | float):
            return float(seconds)
        return next((s for d, s in _UNRECORDED_SECONDS.items() if path.startswith(d)), 1.0)

    def key(item: pytest.Item) -> tuple[float, int, bool]:
        path = _file_of(item.nodeid)
        return (-weight(path), first_index[path], item.get_closest_marker("slow") is None)

    items.sort(key=key)


_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = _file_of(report.nodeid)
    _seconds[path] = _seconds.get(path, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    cache = getattr(config, "cache", None)
    if cache is None or hasattr(config, "workerinput") or not _seconds:
        return  # an xdist worker: the controller saw every report and records them
    cache.set(_FILE_SECONDS, {**_recorded(config), **{p: round(s, 2) for p, s in _seconds.items()}})
