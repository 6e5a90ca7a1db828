"""File verbs on a session's directory through the real daemon, with a third-party client.

PyPI `python-9p` (`py9p`, plan9port's C codec) speaks 9P2000 over the daemon's Unix socket and
sends what 9pfuse sends for `rmdir` (walk, Tremove of the directory) and `mv` (walk, Twstat whose
every field but the name says "don't touch"); `anvilctl` reads `list` and the alias back.
Neither 9pfuse nor the kernel's v9fs is available where the tests run, so this is a mount's
protocol without the mount.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from py9p import client as p9client

from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_sessions_e2e import anvilctl, new_session_by_ctl, ok, read


def nulldir(name: str) -> bytes:
    """9pfuse's rename: stat(5)'s "don't touch" in every field but the name (encoded by our codec:
    py9p's `Dir` cannot hold the ~0 length)."""
    return m.encode_stat(attrs.evolve(m.Stat.dont_touch(), name=name), Dialect.P9P2000)


def ids(namespace: Path) -> list[str]:
    return [line.split("\t")[0] for line in read(namespace, "agent/list").splitlines()]


def test_rmdir_kills_and_mv_sets_the_alias_over_the_socket(
    daemon: Anvild, namespace: Path, workdir: Path
) -> None:
    sid = new_session_by_ctl(namespace, workdir)
    other = new_session_by_ctl(namespace, workdir, " alias=taken")
    with p9client.Client.connect_unix(str(namespace / "agent")) as c:
        c.negotiate()
        c.attach(0, uname="tester")

        # mv agent/ID agent/dev: the alias walks, the listing keeps the id.
        c.walk(0, 1, sid)
        c.wstat(1, nulldir("dev"))
        assert read(namespace, "agent/dev/alias") == "dev\n"
        assert read(namespace, "agent/list").split("\n")[0].split("\t")[:2] == [sid, "dev"]
        with pytest.raises(p9client.RemoteError, match=f"alias=taken is taken by session {other}"):
            c.wstat(1, nulldir("taken"))
        assert read(namespace, "agent/dev/alias") == "dev\n"

        # rm -r's unlinks of the files are refused and kill nothing.
        c.walk(0, 2, ("dev", "ctl"))
        with pytest.raises(p9client.RemoteError, match="ctl: cannot be removed"):
            c.remove(2)
        assert ids(namespace) == [sid, other]

        # rmdir agent/dev: killed, gone from list; the alias no longer walks.
        c.walk(0, 3, "dev")
        c.remove(3)
        assert ids(namespace) == [other]
        gone = anvilctl(namespace, "read", "agent/dev/alias")
        assert gone.returncode != 0

        # A session waiting for the approval of its result is not removed.
        ok(anvilctl(namespace, "write", "agent/taken/ctl", stdin="request_approval check it\n"))
        c.walk(0, 4, "taken")
        with pytest.raises(p9client.RemoteError, match="waits for approval of its result"):
            c.remove(4)
        assert ids(namespace) == [other]
