"""Fixtures shared by the end-to-end tests: a namespace directory, a working directory, the fake
provider server as a subprocess, and a daemon that uses it.

Every fixture is per test (function scope), so each test gets its own temporary directories,
its own fake server on a free loopback port and its own daemon: nothing is shared between tests,
nor between pytest-xdist workers. A module that needs other answers defines its own `fake` (its
scripted turns); `config` and `daemon` then use that one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_project_config_e2e import Events
from tests.integration.test_sessions_e2e import FakeServer, start_daemon, user_config


@pytest.fixture
def namespace(tmp_path: Path) -> Path:
    return tmp_path / "ns"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    """A fake provider that answers every request with "pong"."""
    server = FakeServer(tmp_path, [{"text": "pong", "repeat": True}])
    yield server
    server.stop()


@pytest.fixture
def config(tmp_path: Path, fake: FakeServer) -> Path:
    """A user config whose default model `fake` is served by `fake`."""
    return user_config(tmp_path, fake.url)


@pytest.fixture
def daemon(namespace: Path, config: Path) -> Iterator[Anvild]:
    """`anvild` on `namespace` with `config`; it must stop cleanly (status 0)."""
    d = start_daemon(namespace, config)
    yield d
    code, log = d.stop()
    assert code == 0, log


@pytest.fixture
def open_events() -> Iterator[Callable[[Path], Events]]:
    """Open `agent/events` readers (`Events`); each is ended with the test, even a failed one
    (whose leftover process would otherwise be reported in a later test)."""
    opened: list[Events] = []

    def open_(namespace: Path) -> Events:
        opened.append(Events(namespace))
        return opened[-1]

    yield open_
    for events in opened:
        events.close()
