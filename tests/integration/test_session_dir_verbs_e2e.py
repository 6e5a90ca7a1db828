"""File verbs on a session's directory through the real daemon, with a third-party client.

PyPI `python-9p` (`py9p`, plan9port's C codec) speaks 9P2000 over the daemon's Unix socket and
sends what 9pfuse sends for `rmdir` (walk, Tremove of the directory) and `mv` (walk, Twstat whose
every field but the name says "don't touch"); `anvilctl` reads `list` and the alias back.
Neither 9pfuse nor the kernel's v9fs is available where the tests run, so this is a mount's
protocol without the mount: `Raw` sends, over the same socket, exactly what GNU `rm -r` makes
v9fs send in 9P2000.L (walk, Tlopen and Treaddir of the directory, Tunlinkat of each entry, a
subdirectory emptied the same way first, then Tunlinkat with AT_REMOVEDIR of the directory), and
what 9pfuse sends for it in 9P2000.u (Tremove of each entry, then of the directory).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from pathlib import Path

import attrs
import pytest
from py9p import client as p9client

from anvild.ninep import messages as m
from anvild.ninep.constants import (
    AT_REMOVEDIR,
    DMDIR,
    GETATTR_BASIC,
    L_O_DIRECTORY,
    L_O_RDONLY,
    NOFID,
    OREAD,
    QTDIR,
    Dialect,
)
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

        # rm -r's removal of a file inside succeeds, removes nothing and kills nothing.
        c.walk(0, 2, ("dev", "ctl"))
        c.remove(2)
        assert ids(namespace) == [sid, other]
        assert read(namespace, "agent/dev/alias") == "dev\n"
        assert "ctl" in ok(anvilctl(namespace, "ls", "agent/dev")).split()

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


class Raw:
    """A blocking raw 9P client on the daemon's socket, in one dialect."""

    MSIZE = 8192

    def __init__(self, namespace: Path, dialect: Dialect) -> None:
        self.dialect = dialect
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(namespace / "agent"))
        self.buf = b""
        self.fids = itertools.count(1)
        self.sent: list[str] = []  # what was sent, one line per message, for the assertions
        reply = self.rpc(m.Tversion(0xFFFF, self.MSIZE, dialect.value))
        assert isinstance(reply, m.Rversion), reply
        self.ok(m.Tattach(0, 0, NOFID, "tester", "", os.getuid()))

    def close(self) -> None:
        self.sock.close()

    def rpc(self, msg: m.Message) -> m.Message:
        self.sent.append(type(msg).__name__)
        self.sock.sendall(m.encode(msg, self.dialect))
        while len(self.buf) < 4 or len(self.buf) < int.from_bytes(self.buf[:4], "little"):
            chunk = self.sock.recv(1 << 16)
            assert chunk, "the server hung up"
            self.buf += chunk
        size = int.from_bytes(self.buf[:4], "little")
        frame, self.buf = self.buf[:size], self.buf[size:]
        return m.decode(frame, self.dialect)

    def ok(self, msg: m.Message) -> m.Message:
        return self.check(self.rpc(msg))

    @staticmethod
    def check(reply: m.Message) -> m.Message:
        assert not isinstance(reply, m.Rerror | m.Rlerror), reply
        return reply

    def walk(self, fid: int, *names: str) -> int:
        new = next(self.fids)
        self.ok(m.Twalk(0, fid, new, names))
        return new

    def entries(self, fid: int) -> list[tuple[str, bool]]:
        """Open the directory `fid` walked to, read it whole: (name, is a directory) each."""
        found: list[tuple[str, bool]] = []
        offset = 0
        if self.dialect is Dialect.P9P2000_L:  # opendir + getdents64
            self.ok(m.Tlopen(0, fid, L_O_RDONLY | L_O_DIRECTORY))
            while True:
                data = self.ok(m.Treaddir(0, fid, offset, self.MSIZE - 24))
                assert isinstance(data, m.Rreaddir)
                dirents = m.decode_dirents(data.data)
                if not dirents:
                    return [(n, d) for n, d in found if n not in (".", "..")]
                found += [(d.name, bool(d.qid.type & QTDIR)) for d in dirents]
                offset = dirents[-1].offset
        self.ok(m.Topen(0, fid, OREAD))
        while True:
            data = self.ok(m.Tread(0, fid, offset, self.MSIZE - 24))
            assert isinstance(data, m.Rread)
            if not data.data:
                return found
            found += [
                (st.name, bool(st.mode & DMDIR)) for st in m.decode_stats(data.data, self.dialect)
            ]
            offset += len(data.data)

    def rm_r_dot_l(self, parent: int, name: str) -> m.Message:
        """GNU rm -r over v9fs: empty `name` (subdirectories first, recursively), then
        unlinkat(parent, name, AT_REMOVEDIR); the reply to that last one."""
        directory = self.walk(parent, name)
        listing = self.walk(directory)  # the fd that fts reads the entries on
        for entry, is_dir in self.entries(listing):
            looked_up = self.walk(directory, entry)  # the kernel's lookup before the unlink
            self.ok(m.Tgetattr(0, looked_up, GETATTR_BASIC))
            if is_dir:
                self.check(self.rm_r_dot_l(directory, entry))
            else:
                self.ok(m.Tunlinkat(0, directory, entry, 0))
            self.ok(m.Tclunk(0, looked_up))
        self.ok(m.Tclunk(0, listing))
        self.ok(m.Tclunk(0, directory))
        return self.rpc(m.Tunlinkat(0, parent, name, AT_REMOVEDIR))

    def rm_r_dot_u(self, parent: int, name: str) -> m.Message:
        """rm -r through a 9P2000.u client (9pfuse): Tremove of each entry (subdirectories
        emptied first), then Tremove of the directory; the reply to that last one."""
        listing = self.walk(parent, name)
        for entry, is_dir in self.entries(listing):
            if is_dir:
                self.check(self.rm_r_dot_u(self.walk(parent, name), entry))
            else:
                self.ok(m.Tremove(0, self.walk(parent, name, entry)))
        self.ok(m.Tclunk(0, listing))
        return self.rpc(m.Tremove(0, self.walk(parent, name)))


def mail(namespace: Path, sender: str, to: str) -> None:
    """A message from `sender` to `to`: a file in `sender`'s mail/sent/ (a dynamic child of a
    subdirectory)."""
    message = {"to": to, "type": "QUESTION", "body": "b"}
    ok(anvilctl(namespace, "write", f"agent/{sender}/outbox", stdin=json.dumps(message)))
    assert ok(anvilctl(namespace, "ls", f"agent/{sender}/mail/sent")).strip()


@pytest.mark.parametrize("dialect", [Dialect.P9P2000_L, Dialect.P9P2000_U])
def test_rm_r_of_a_session_directory_kills_it(
    daemon: Anvild, namespace: Path, workdir: Path, dialect: Dialect
) -> None:
    sid = new_session_by_ctl(namespace, workdir, " alias=doomed")
    other = new_session_by_ctl(namespace, workdir)
    mail(namespace, sid, other)
    files = ok(anvilctl(namespace, "ls", f"agent/{sid}")).split()
    client = Raw(namespace, dialect)
    try:
        rm_r = client.rm_r_dot_l if dialect is Dialect.P9P2000_L else client.rm_r_dot_u
        # Every entry is removed first (each succeeds, nothing is killed), then the directory.
        ok(anvilctl(namespace, "write", f"agent/{other}/ctl", stdin="request_approval x\n"))
        refused = rm_r(0, other)
        assert isinstance(refused, m.Rerror | m.Rlerror), refused
        assert ids(namespace) == [sid, other]  # a gated session stays, and so do its files
        assert ok(anvilctl(namespace, "ls", f"agent/{other}")).split() == files
        client.sent.clear()
        assert rm_r(0, "doomed") == (
            m.Runlinkat(0) if dialect is Dialect.P9P2000_L else m.Rremove(0)
        )
        removals = [t for t in client.sent if t in ("Tunlinkat", "Tremove")]
        assert len(removals) == len(files) + 4  # received/, sent/, a message, the directory
    finally:
        client.close()
    assert ids(namespace) == [other]
    assert anvilctl(namespace, "read", "agent/doomed/alias").returncode != 0
