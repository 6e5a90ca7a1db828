"""9P server benchmark: our server against Debian's diod and a minimal aio9p server.

    .venv/bin/python bench/ninep.py [--seconds 3] [--rounds 1] [--only ours,anvild,diod,aio9p]
    .venv/bin/python bench/ninep.py --only ours,baseline,aio9p --baseline DIR --rounds 5
    .venv/bin/python bench/ninep.py --python-only 20000 [--baseline DIR --rounds 4]

What it measures, for every server, with the same client in the same run:

- small-operation rate: Twalk(version) + Topen/Tlopen + Tread + Tclunk, back to back, on one
  connection and on eight (eight client threads, one socket each), with the server process's own
  CPU time (utime + stime from /proc/PID/stat) divided by the operations done;
- bulk read: 10 MB read from one file with msize 65536, reads of msize - 24 bytes.

The servers, each a subprocess listening on 127.0.0.1 only:

- `ours`: `anvild.ninep.server.Server` over `anvild.fs` nodes (a `version` snapshot file and a
  10 MB file), spoken to in 9P2000.L like diod (and in 9P2000 for the aio9p comparison);
- `anvild`: the real daemon (`python -m anvild --listen tcp!127.0.0.1!0`, attach with the token),
  small operations on its `version` file;
- `diod`: Debian's diod (C, threaded) exporting a directory with the same two files
  (`diod -f -n -e DIR -l 127.0.0.1:PORT`), 9P2000.L only;
- `baseline` (only with ``--baseline DIR``): the `ours` server of another checkout of this
  repository (e.g. ``git worktree add /tmp/old COMMIT``), for old-against-new comparisons in
  the same run; rows "baseline 9P2000(.L)", and the ratios of ours to it;
- `aio9p`: PyPI aio9p 0.3.3 (asyncio, 9P2000) serving the same two files from memory. aio9p is
  AGPL: it is installed only into a throwaway venv under the user cache directory, run as a
  separate process, and never imported by the project.

The client is deliberately lean (frames prebuilt with the project's codec, blocking sockets,
TCP_NODELAY), so that on a small machine the servers, not the client, are what is measured. The
machine's other load shows up in the numbers: run it on an idle machine, and compare ratios
within one run rather than absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import attrs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from anvild.ninep import messages as m  # noqa: E402
from anvild.ninep.constants import NOFID, NOTAG, OREAD, Dialect  # noqa: E402

BULK_BYTES = 10 << 20
BULK_MSIZE = 65536
SMALL_MSIZE = 8192
VERSION_TEXT = b"benchmark 1\n"
AIO9P = "aio9p==0.3.3"


# --- the client ------------------------------------------------------------------------------


class BenchError(Exception):
    pass


class Conn:
    """One 9P connection with prebuilt request frames."""

    def __init__(
        self, port: int, dialect: Dialect, msize: int, aname: str, n_uname: int = 0
    ) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.dialect = dialect
        reply = self.rpc(m.encode(m.Tversion(NOTAG, msize, dialect.value), dialect))
        version = m.decode(reply, dialect)
        assert isinstance(version, m.Rversion), version
        self.msize = version.msize
        self.expect(m.Tattach(1, 0, NOFID, "bench", aname, n_uname), m.Rattach)

    def close(self) -> None:
        self.sock.close()

    def recv_frame(self) -> bytes:
        buf = self.buf
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "little")
                if len(buf) >= size:
                    frame = bytes(buf[:size])
                    del buf[:size]
                    return frame
            chunk = self.sock.recv(1 << 17)
            if not chunk:
                raise BenchError("server closed the connection")
            buf += chunk

    def rpc(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        return self.recv_frame()

    def expect(self, msg: m.Message, reply_type: type[m.Message]) -> m.Message:
        reply = m.decode(self.rpc(m.encode(msg, self.dialect)), self.dialect)
        if not isinstance(reply, reply_type):
            raise BenchError(f"{type(msg).__name__} got {reply!r}")
        return reply

    def small_op_frames(self, name: str) -> list[tuple[bytes, int]]:
        d = self.dialect
        opener: m.Message = m.Tlopen(1, 1, 0) if d is Dialect.P9P2000_L else m.Topen(1, 1, OREAD)
        msgs = [m.Twalk(1, 0, 1, (name,)), opener, m.Tread(1, 1, 0, 4096), m.Tclunk(1, 1)]
        frames = [m.encode(msg, d) for msg in msgs]
        return [(f, f[4] + 1) for f in frames]  # R type = T type + 1

    def run_small_ops(self, frames: list[tuple[bytes, int]], deadline: float) -> int:
        ops = 0
        rpc = self.rpc
        while time.perf_counter() < deadline:
            for frame, rtype in frames:
                reply = rpc(frame)
                if reply[4] != rtype:
                    raise BenchError(f"unexpected reply {m.decode(reply, self.dialect)!r}")
            ops += 1
        return ops

    def read_file(self, name: str) -> int:
        d = self.dialect
        self.expect(m.Twalk(1, 0, 2, (name,)), m.Rwalk)
        if d is Dialect.P9P2000_L:
            self.expect(m.Tlopen(1, 2, 0), m.Rlopen)
        else:
            self.expect(m.Topen(1, 2, OREAD), m.Ropen)
        count = self.msize - 24
        total = 0
        while True:
            frame = self.rpc(m.encode(m.Tread(1, 2, total, count), d))
            if frame[4] != 117:  # Rread
                raise BenchError(f"read failed: {m.decode(frame, d)!r}")
            n = int.from_bytes(frame[7:11], "little")
            if n == 0:
                break
            total += n
        self.expect(m.Tclunk(1, 2), m.Rclunk)
        return total


# --- measuring ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@attrs.frozen
class Server:
    label: str
    port: int
    pid: int
    dialect: Dialect
    aname: str
    n_uname: int = 0


@attrs.frozen
class SmallResult:
    ops_per_s: float
    cpu_us_per_op: float


def small_ops(server: Server, connections: int, seconds: float) -> SmallResult:
    conns = [
        Conn(server.port, server.dialect, SMALL_MSIZE, server.aname, server.n_uname)
        for _ in range(connections)
    ]
    frames = [c.small_op_frames("version") for c in conns]
    for c, f in zip(conns, frames, strict=True):  # warm up
        c.run_small_ops(f, time.perf_counter() + 0.2)
    counts = [0] * connections
    start_barrier = threading.Barrier(connections + 1)

    def worker(i: int) -> None:
        start_barrier.wait()
        counts[i] = conns[i].run_small_ops(frames[i], deadline)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    cpu0 = cpu_seconds(server.pid)
    t0 = time.perf_counter()
    deadline = t0 + seconds
    start_barrier.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = cpu_seconds(server.pid) - cpu0
    for c in conns:
        c.close()
    ops = sum(counts)
    return SmallResult(ops / elapsed, cpu / ops * 1e6)


def bulk_read(server: Server) -> float:
    conn = Conn(server.port, server.dialect, BULK_MSIZE, server.aname, server.n_uname)
    try:
        conn.read_file("big")  # warm up (diod: page cache; ours: snapshot generation)
        t0 = time.perf_counter()
        total = conn.read_file("big")
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    if total != BULK_BYTES:
        raise BenchError(f"{server.label}: read {total} bytes of {BULK_BYTES}")
    return total / elapsed / 1e6


# --- the servers -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with status {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{what} did not listen on port {port}")


def wait_for_token(path: Path) -> str:
    """The daemon's TCP token; it may be written just after the listener answers."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            token = ""
        if token:
            return token
        time.sleep(0.05)
    raise BenchError(f"the daemon wrote no token to {path}")


@contextmanager
def process(argv: list[str], port: int, what: str, **kw: object) -> Iterator[int]:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    try:
        wait_for_port(port, proc, what)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_ours(port: int) -> None:
    """The `ours` server process: our 9P server and fs nodes, no daemon around them."""
    import trio

    from anvild.fs import Directory, SnapshotFile
    from anvild.ninep.server import Server as NinepServer

    big = b"x" * BULK_BYTES
    root = Directory(
        "/", [SnapshotFile("version", lambda: VERSION_TEXT), SnapshotFile("big", lambda: big)]
    )
    server = NinepServer(lambda request: root, max_msize=BULK_MSIZE)

    async def handler(stream: trio.SocketStream) -> None:
        stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await server.serve(stream, peer="bench")

    async def main() -> None:
        await trio.serve_tcp(handler, port, host="127.0.0.1")

    trio.run(main)


def python_only(operations: int, dialect: Dialect) -> float:
    """The server's own Python work per small operation: no sockets, no waits.

    `Server.serve` runs over an in-memory stream that hands it one request frame per receive
    (as a client with one request outstanding does) and swallows the replies; returns CPU µs
    per operation (process time).
    """
    import trio

    from anvild.fs import Directory, SnapshotFile
    from anvild.ninep.server import Server as NinepServer

    root = Directory("/", [SnapshotFile("version", lambda: VERSION_TEXT)])
    server = NinepServer(lambda request: root, max_msize=BULK_MSIZE)
    opener: m.Message = m.Tlopen(1, 1, 0) if dialect is Dialect.P9P2000_L else m.Topen(1, 1, OREAD)
    setup = [m.Tversion(NOTAG, SMALL_MSIZE, dialect.value), m.Tattach(1, 0, NOFID, "b", "", 0)]
    op = [m.Twalk(1, 0, 1, ("version",)), opener, m.Tread(1, 1, 0, 4096), m.Tclunk(1, 1)]
    frames = [m.encode(msg, dialect) for msg in setup] + [m.encode(msg, dialect) for msg in op]

    class Frames(trio.abc.Stream):
        def __init__(self) -> None:
            self.left = iter(frames[:2] + frames[2:] * operations)

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            return next(self.left, b"")

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            pass

        async def wait_send_all_might_not_block(self) -> None:
            pass

        async def aclose(self) -> None:
            pass

    async def run() -> float:
        t0 = time.process_time()
        await server.serve(Frames())
        return (time.process_time() - t0) / operations * 1e6

    return trio.run(run)


AIO9P_SERVER = textwrap.dedent(
    '''
    """A minimal aio9p 0.3.3 server for bench/ninep.py: two files in memory, 9P2000."""
    import asyncio, logging, sys
    from aio9p.constant import DMFILE
    from aio9p.example.simple import Simple9P2000
    from aio9p.helper import mkqid
    from aio9p.protocol import Py9PServer
    from aio9p.stat import Py9P2000Stat

    FILES = {b"version": %r, b"big": b"x" * %d}

    class Bench(Simple9P2000):
        async def attach(self, fid, *args):
            base = await super().attach(fid, *args)
            for number, (name, content) in enumerate(FILES.items(), 1):
                qid = mkqid(0, number)
                self._direntry[base][name] = qid
                self._content[qid] = content
                self._stat[qid] = Py9P2000Stat(
                    p9type=0, p9dev=0, p9qid=qid, p9mode=DMFILE | 0o444, p9atime=0,
                    p9mtime=0, p9length=len(content), p9name=name, p9uid=b"root",
                    p9gid=b"root", p9muid=b"root")
            return base

    async def main(port):
        logger = logging.getLogger("aio9p")
        logger.setLevel(logging.WARNING)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Py9PServer(Bench(%d, logger=logger), logger=logger), "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main(int(sys.argv[1])))
    '''
) % (VERSION_TEXT, BULK_BYTES, BULK_MSIZE)


def aio9p_python() -> Path:
    """The throwaway venv's python with aio9p installed (created on first use)."""
    import platformdirs

    venv = Path(platformdirs.user_cache_dir("anvild")) / "bench" / "aio9p-venv"
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import aio9p.example.simple"]
    if not python.exists() or subprocess.run(check, capture_output=True).returncode != 0:
        print(f"installing {AIO9P} into {venv} (benchmark only; AGPL, never imported)")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", AIO9P], check=True)
    (venv / "aio9p_bench_server.py").write_text(AIO9P_SERVER)
    return python


@contextmanager
def start(label: str, workdir: Path, baseline: Path | None = None) -> Iterator[list[Server]]:
    port = free_port()
    if label == "baseline":
        if baseline is None:
            raise BenchError("the baseline server needs --baseline DIR (another checkout)")
        script = baseline / "bench" / "ninep.py"
        if not script.is_file():
            raise BenchError(f"{script} does not exist: --baseline names a checkout of anvild")
        with process([sys.executable, str(script), "--serve-ours", str(port)], port, label) as pid:
            yield [
                Server("baseline 9P2000.L", port, pid, Dialect.P9P2000_L, ""),
                Server("baseline 9P2000", port, pid, Dialect.P9P2000, ""),
            ]
    elif label == "ours":
        argv = [sys.executable, __file__, "--serve-ours", str(port)]
        with process(argv, port, label) as pid:
            yield [
                Server("ours 9P2000.L", port, pid, Dialect.P9P2000_L, ""),
                Server("ours 9P2000", port, pid, Dialect.P9P2000, ""),
            ]
    elif label == "anvild":
        ns = workdir / "ns"
        argv = [
            sys.executable,
            "-m",
            "anvild",
            "--namespace",
            str(ns),
            "--listen",
            f"tcp!127.0.0.1!{port}",
        ]
        with process(argv, port, label, stderr=subprocess.DEVNULL) as pid:
            token = wait_for_token(ns / "agent.token")
            yield [Server("anvild 9P2000.L", port, pid, Dialect.P9P2000_L, token, os.getuid())]
    elif label == "diod":
        diod = shutil.which("diod") or shutil.which("diod", path="/usr/sbin:/sbin")
        if diod is None:
            raise BenchError("diod not found: install Debian's diod package")
        export = workdir / "export"
        export.mkdir()
        (export / "version").write_bytes(VERSION_TEXT)
        (export / "big").write_bytes(b"x" * BULK_BYTES)
        argv = [diod, "-f", "-n", "-e", str(export), "-l", f"127.0.0.1:{port}", "-L", "stderr"]
        with process(argv, port, label, stderr=subprocess.DEVNULL) as pid:
            yield [Server("diod 9P2000.L", port, pid, Dialect.P9P2000_L, str(export), os.getuid())]
    elif label == "aio9p":
        python = aio9p_python()
        argv = [str(python), str(python.parent.parent / "aio9p_bench_server.py"), str(port)]
        with process(argv, port, label) as pid:
            yield [Server("aio9p 9P2000", port, pid, Dialect.P9P2000, "")]
    else:
        raise BenchError(f"unknown server {label!r}")


# --- main --------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each rate measurement")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure every server this many times, interleaved (servers start once); "
        "prints each round and the medians",
    )
    p.add_argument("--only", default="ours,anvild,diod,aio9p", help="comma-separated servers")
    p.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another checkout of this repository whose server is the `baseline` row "
        "(add baseline to --only)",
    )
    p.add_argument(
        "--python-only",
        type=int,
        metavar="N",
        help="instead: N small operations through our server with no I/O (its own Python "
        "work per operation, both dialects)",
    )
    p.add_argument("--serve-ours", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_ours is not None:
        serve_ours(args.serve_ours)
        return 0
    if args.python_only is not None:
        if args.baseline is None:
            for dialect in (Dialect.P9P2000_L, Dialect.P9P2000):
                us = python_only(args.python_only, dialect)
                print(f"ours {dialect.value}: {us:.1f} µs of CPU per small operation, no I/O")
            return 0
        # With a baseline: each side in a fresh process, alternating, --rounds times.
        sides = [("ours", Path(__file__)), ("baseline", args.baseline / "bench" / "ninep.py")]
        for number in range(1, args.rounds + 1):
            for label, script in sides if number % 2 else sides[::-1]:
                argv = [sys.executable, str(script), "--python-only", str(args.python_only)]
                out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
                for line in out.splitlines():
                    print(f"round {number} {label}{line.removeprefix('ours')}", flush=True)
        return 0
    print(
        f"# 9P benchmark  {time.strftime('%Y-%m-%d %H:%M')}  cores={os.cpu_count()}  "
        f"load={os.getloadavg()[0]:.2f}  python={sys.version.split()[0]}"
    )
    rounds: list[dict[str, Row]] = []
    with tempfile.TemporaryDirectory(prefix="anvild-bench-") as tmp, ExitStack() as stack:
        servers: list[tuple[str, Server]] = []
        for label in args.only.split(","):
            workdir = Path(tmp) / label
            workdir.mkdir()
            started = stack.enter_context(start(label, workdir, args.baseline))
            servers += [(label, s) for s in started]
        for number in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"\nround {number}  load={os.getloadavg()[0]:.2f}")
            print_header()
            measured: dict[str, Row] = {}
            # The order alternates from round to round: the server measured first has an edge
            # (an A/A run of two copies of one server showed up to 20% on CPU per operation).
            for label, server in servers if number % 2 else servers[::-1]:
                one = small_ops(server, 1, args.seconds)
                eight = small_ops(server, 8, args.seconds)
                bulk = None if label == "anvild" else bulk_read(server)
                measured[server.label] = (one, eight, bulk)
            rows = {server.label: measured[server.label] for _, server in servers}
            for label, row in rows.items():
                print_row(label, row)
            rounds.append(rows)
            print_ratios(rows)
    if len(rounds) > 1:
        print_medians(rounds)
    return 0


def print_header() -> None:
    print("| server | 1 conn ops/s | CPU µs/op | 8 conn ops/s | CPU µs/op | 10 MB read MB/s |")
    print("|" + "---|" * 6)


def print_row(label: str, row: Row) -> None:
    one, eight, bulk = row
    bulk_text = f"{bulk:,.0f}" if bulk is not None else "-"
    print(
        f"| {label} | {one.ops_per_s:,.0f} | {one.cpu_us_per_op:,.0f} | "
        f"{eight.ops_per_s:,.0f} | {eight.cpu_us_per_op:,.0f} | {bulk_text} |",
        flush=True,
    )


def print_medians(rounds: list[dict[str, Row]]) -> None:
    print(f"\nmedians of {len(rounds)} rounds")
    print_header()
    for label in rounds[0]:
        rows = [r[label] for r in rounds]
        bulks = [b for _, _, b in rows if b is not None]
        median_row: Row = (
            SmallResult(
                statistics.median(o.ops_per_s for o, _, _ in rows),
                statistics.median(o.cpu_us_per_op for o, _, _ in rows),
            ),
            SmallResult(
                statistics.median(e.ops_per_s for _, e, _ in rows),
                statistics.median(e.cpu_us_per_op for _, e, _ in rows),
            ),
            statistics.median(bulks) if bulks else None,
        )
        print_row(label, median_row)
    print("\nratios per round, and their median:")
    for text, a, b, pick in RATIOS:
        if b.startswith("baseline") and b not in rounds[0]:
            continue
        values = [ratio_of(r, a, b, pick) for r in rounds]
        known = [v for v in values if v is not None]
        shown = " ".join("n/a" if v is None else f"{v:.2f}" for v in values)
        median = f"{statistics.median(known):.2f}x" if known else "n/a"
        print(f"  {text + ':':40} {shown}  median {median}")


Row = tuple[SmallResult, SmallResult, float | None]
Pick = Callable[[Row], float | None]

RATIOS: list[tuple[str, str, str, Pick]] = [
    ("ours .L / diod, 1 conn ops/s", "ours 9P2000.L", "diod 9P2000.L", lambda r: r[0].ops_per_s),
    (
        "ours 9P2000 / aio9p, 8 conn ops/s",
        "ours 9P2000",
        "aio9p 9P2000",
        lambda r: r[1].ops_per_s,
    ),
    (
        "ours 9P2000 / aio9p, 8 conn CPU/op",
        "ours 9P2000",
        "aio9p 9P2000",
        lambda r: r[1].cpu_us_per_op,
    ),
    ("ours .L / diod, bulk MB/s", "ours 9P2000.L", "diod 9P2000.L", lambda r: r[2]),
    (
        "ours 9P2000 / baseline, 8 conn CPU/op",
        "ours 9P2000",
        "baseline 9P2000",
        lambda r: r[1].cpu_us_per_op,
    ),
    (
        "ours .L / baseline, 1 conn CPU/op",
        "ours 9P2000.L",
        "baseline 9P2000.L",
        lambda r: r[0].cpu_us_per_op,
    ),
]


def ratio_of(rows: dict[str, Row], a: str, b: str, pick: Pick) -> float | None:
    if a not in rows or b not in rows:
        return None
    x, y = pick(rows[a]), pick(rows[b])
    return x / y if x is not None and y else None


def print_ratios(rows: dict[str, Row]) -> None:
    print()
    print("ratios (targets: 8 conns >= 1.0x aio9p with less CPU/op; 1 conn >= 0.8x diod;")
    print("        bulk >= 300 MB/s):")
    for text, a, b, pick in RATIOS:
        if b.startswith("baseline") and b not in rows:
            continue
        value = ratio_of(rows, a, b, pick)
        print(f"  {text + ':':40} {'n/a' if value is None else f'{value:.2f}x'}")


if __name__ == "__main__":
    sys.exit(main())
