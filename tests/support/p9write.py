"""`9p write` as plan9port does it, for tests: its exit status comes from the writes only.

plan9port's `9p write PATH` (src/cmd/9p.c, xwrite) opens PATH OWRITE|OTRUNC, reads stdin into a
4096-byte buffer and `fswrite`s each read (one empty write for empty stdin), `sysfatal`s on the
first failed write ("write error: ...", exit 1, the fid never clunked), then `fsclose`s the fid,
which sends Tclunk and drops the Rclunk, and exits 0. The kernel's clients (v9fs, FUSE) are the
same on release: nothing looks at a clunk's reply. This client speaks through python-9p
(plan9port's C codec), over a Unix socket, in 9P2000:

    python -m tests.support.p9write SOCKET PATH < data     # exit status and stderr as `9p`

`p9write(socket, path, data)` does the same in-process and returns (status, stderr text).
"""

from __future__ import annotations

import contextlib
import sys

from py9p import client as p9client
from py9p.constants import OTRUNC, OWRITE

BUFFER = 4096  # plan9port's xwrite buffer: one Twrite per read of stdin
ROOT, FILE = 0, 1


def p9write(socket: str, path: str, data: bytes) -> tuple[int, str]:
    """Write `data` to `path` like `9p write`; (exit status, what it printed on stderr)."""
    with p9client.Client.connect_unix(socket) as c:
        c.negotiate()
        c.attach(ROOT, uname="tester")
        try:
            c.walk(ROOT, FILE, [p for p in path.split("/") if p])
            c.open(FILE, int(OWRITE | OTRUNC))
        except p9client.RemoteError as exc:
            return 1, f"9p: open: {exc}\n"
        chunks = [data[i : i + BUFFER] for i in range(0, len(data), BUFFER)] or [b""]
        offset = 0
        for chunk in chunks:
            try:
                written = c.write(FILE, chunk, offset)
            except p9client.RemoteError as exc:
                return 1, f"9p: write error: {exc}\n"  # sysfatal: no clunk
            if written != len(chunk):
                return 1, "9p: write error: short write\n"
            offset += written
        with contextlib.suppress(p9client.RemoteError):  # fsclose: the Rclunk is never read
            c.clunk(FILE)
    return 0, ""


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.support.p9write SOCKET PATH < data", file=sys.stderr)
        return 2
    status, err = p9write(argv[0], argv[1], sys.stdin.buffer.read())
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
