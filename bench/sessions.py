"""Benchmark: many sessions in one real `anvild` process, over its Unix socket.

    .venv/bin/python bench/sessions.py [--runs 3] [--sessions 1000] [--list-reads 200] [--restart N]
                                       [--idle-unload S]
                                       [--streaming 100] [--deltas 300] [--delay 0.02] [--board]

Every run starts a fresh daemon (`python -m anvild` on a temporary namespace, data directory
and XDG directories) whose user config points at the fake provider server
(`python -m tests.support.fake_provider`, a subprocess on 127.0.0.1), and drives it with
anvilctl's client library (`anvilctl.ninep_client`, 9P2000, msize 8192 as plan9port's `9p`).

Idle sessions (`--sessions`). The daemon's VmRSS (/proc/PID/status) is read once it serves, then
the sessions are created one after another through `agent/ctl` (`new cwd=DIR`, the id read back
on the same fid) over one connection, then VmRSS again: the difference divided by the count is
the cost of one idle session; each `new` is timed on its own (p50, p99), beside what an fsync of
a new file and its directory costs on the same file system at that moment. Then `agent/list` is
read `--list-reads` times over that same connection (walk, open, read to EOF, clunk: what
`9p read agent/list` does, minus the connect), each read timed on its own. Targets: RSS under
250 MB with 1000 sessions, `list` under 20 ms.

Streaming sessions (`--streaming`), on another fresh daemon. The sessions are created, then one
reader per session's `events` file and one of `agent/events` each open their own connection (as
101 `9p read` processes would) and keep one Tread outstanding; one thread waits on all of those
sockets with `selectors` and takes the time of each reply as it arrives. Then a prompt is
written to every session's `in`; the fake provider answers each with `--deltas` text deltas,
`--delay` seconds apart. Latency is measured end to end, the same way for every line:

- session `events`: the fake provider's script gives each delta the text `@T@;NNNN ` and
  the server replaces `@T@` by its `time.monotonic_ns()` just before it sends that SSE event
  (its `stamp` option). A reader finds `SEND;NNNN` in each `text_delta` line it gets; the
  latency of that delta is the reader's `time.monotonic_ns()` when the reply arrived minus SEND
  (CLOCK_MONOTONIC is one clock for all processes of the machine). A line that coalesced
  several deltas (the stream merges adjacent deltas a reader has not read yet) counts each of
  them, with its own send time. This includes the daemon's HTTP client, the SSE decoder, the
  provider adapter, the agent loop, the session's records and broadcast, 9P and the socket.
- `agent/events`: the daemon's lines carry `ts`, the wall-clock time the daemon made the event
  (milliseconds, truncated); the latency of each `session_state` line of these sessions is
  the reader's `time.time_ns()` at arrival minus `ts` (so up to 1 ms too high). It starts
  when the daemon handled the event, so, unlike the deltas' figure, it leaves out the time
  a provider's bytes waited in the daemon's socket buffers.

Loss: every delta carries its number, so a reader knows exactly which deltas it got. Reported:
deltas expected and received, `lagged` markers (the explicit loss report of a stream) and the
lines they say were dropped, and silent loss: deltas missing from a reader that got no marker.
For `agent/events`: the state lines expected (running and await per session and turn) and got.

The daemon applies a per-provider concurrency cap (4 requests in flight by default, DESIGN:
sessions queue politely behind a provider's limit), so to have every session stream at once
the config defines one provider per 4 sessions, all pointing at the same fake server.

CPU: the daemon's own CPU time (utime + stime from /proc/PID/stat) is reported per `new`, per
`list` read and for the streaming phase, with the fake provider's and this client's, so the
daemon's cost can be told from the machine's: on a shared machine the latencies include the
time the daemon waited for a core. The load average is printed before and after.
`--profile FILE` runs the daemon under cProfile (stats written to FILE when it exits); with
`--sample`, under bench/cpu_sampler.py instead (CPU-time samples: FILE and FILE.txt).

`--restart N`: N idle sessions are created (as above) and the daemon killed with SIGKILL, then
restarted on the same data directory: the time from spawning it to its `serving` line, and to
the first `agent/list` read with all N lines, against a daemon started the same way on an
empty data directory in the same run (its `serving`, and its first `list` read); the VmRSS of
both after that read gives the memory of a session kept at rest (its summary).

`--idle-unload S`: the idle daemon runs with `[sessions] idle_unload = S`; its RSS is read again
1.5 S + 5 seconds after the sessions were created (each unloaded, then the garbage collected),
and reported per session beside the figure with every session built.

`--board`: each streaming run is made twice, on fresh daemons started with `--web 127.0.0.1:0`:
without a board, then with one board open in Debian's chromium (headless, through Playwright,
as the browser tests drive it: the page follows the daemon's feed and reloads its snapshot when
sessions change, at most every 500 ms) from before the sessions are created until the turns
end; the two p99s and their ratio are printed, with the page's slowest event handling and
redraw (`anvilStats`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from anvilctl.ninep_client import CFid, Client, dial  # noqa: E402
from anvild.ninep import messages as m  # noqa: E402
from anvild.ninep.constants import IOHDRSZ, ORDWR, OREAD, OTRUNC, OWRITE, Dialect  # noqa: E402
from anvild.ninep.framing import FrameReader  # noqa: E402

STARTUP_TIMEOUT = 30.0
SESSIONS_PER_PROVIDER = 4  # SessionSettings.default_concurrency
MARK = "@T@"
STAMP_RE = re.compile(rb"(\d+);(\d{4}) ")
LAGGED_RE = re.compile(rb'"type":"lagged","dropped":(\d+)')
PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY")
SAMPLE = False  # --sample: `--profile`'s file gets bench/cpu_sampler.py's samples


class BenchError(Exception):
    pass


# --- the processes ---------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class FakeProvider:
    def __init__(self, work: Path, turns: list[dict[str, object]]) -> None:
        script = work / "turns.json"
        script.write_text(json.dumps({"turns": turns}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fake_provider", "--script", str(script)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.pid = self.proc.pid
        if not self.url.startswith("http://127.0.0.1:"):
            self.stop()
            raise BenchError(f"the fake provider did not start: {self.url!r}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def write_config(
    path: Path, url: str, providers: int, idle_unload: float | None = None
) -> list[str]:
    """One openai-chat provider per `SESSIONS_PER_PROVIDER` sessions; the model aliases."""
    lines = ['default_model = "m0"', ""]
    if idle_unload is not None:
        lines += ["[sessions]", f"idle_unload = {idle_unload}", ""]
    for i in range(providers):
        lines += [
            f"[providers.fake{i}]",
            'kind = "openai-chat"',
            f'base_url = "{url}/v1"',
            "",
            f"[models.m{i}]",
            f'provider = "fake{i}"',
            'model = "fake-model"',
            "context_window = 200000",
            "max_output_tokens = 4096",
            "",
        ]
    path.write_text("\n".join(lines))
    return [f"m{i}" for i in range(providers)]


class Daemon:
    def __init__(
        self, work: Path, config: Path, profile: Path | None = None, web: bool = False
    ) -> None:
        self.namespace = work / "ns"
        profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
        if profile and SAMPLE:  # CPU-time samples instead of cProfile's per-call tracing
            profiler = [str(REPO / "bench" / "cpu_sampler.py"), str(profile)]
        self.board_url = ""
        env = {k: v for k, v in os.environ.items() if k != "ANVIL_LOG" and k not in PROVIDER_KEYS}
        env["XDG_CONFIG_HOME"] = str(work / "xdg-config")
        env["XDG_DATA_HOME"] = str(work / "xdg-data")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, *profiler, "-m", "anvild", "--namespace", str(self.namespace)),
                *("--data-dir", str(work / "data"), "--config", str(config)),
                *(("--web", "127.0.0.1:0") if web else ()),
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.proc.stderr is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "serving " in line:
                break
        else:
            line = ""
        if "serving " not in line:
            self.stop()
            raise BenchError(f"anvild did not start: {''.join(seen)}")
        if web:  # the next line says where the board is
            found = re.search(r"web board (http://\S+/)\?token=", self.proc.stderr.readline())
            if found is None:
                self.stop()
                raise BenchError("anvild --web did not say where its board is")
            self.board_url = found.group(1)
        self.pid = self.proc.pid
        self.fake_pid = 0
        self.address = f"unix!{self.namespace / 'agent'}"

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise BenchError("no VmRSS in /proc/PID/status")

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def connect(self) -> tuple[Client, CFid]:
        client = Client(dial(self.address))
        return client, client.mount()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@contextmanager
def running(
    turns: list[dict[str, object]],
    providers: int,
    profile: Path | None = None,
    web: bool = False,
    idle_unload: float | None = None,
) -> Iterator[tuple[Daemon, Path]]:
    work = Path(tempfile.mkdtemp(prefix="anvil-bench-"))
    cwd = work / "work"
    cwd.mkdir()
    fake = FakeProvider(work, turns)
    try:
        config = work / "config.toml"
        write_config(config, fake.url, providers, idle_unload)
        daemon = Daemon(work, config, profile, web)
        daemon.fake_pid = fake.pid
        try:
            yield daemon, cwd
        finally:
            daemon.stop()
    finally:
        fake.stop()
        shutil.rmtree(work, ignore_errors=True)


# --- 9P helpers ------------------------------------------------------------------------------


def read_all(client: Client, root: CFid, path: str) -> bytes:
    fid = client.open(root, path, OREAD)
    try:
        out = bytearray()
        while chunk := fid.read(client.msize - IOHDRSZ):
            out += chunk
        return bytes(out)
    finally:
        fid.clunk()


def new_session(client: Client, root: CFid, words: str) -> str:
    fid = client.open(root, "ctl", ORDWR)
    try:
        fid.write(f"new {words}\n".encode())
        session_id = fid.pread(256, 0).decode().strip()
    finally:
        fid.clunk()
    if not session_id:
        raise BenchError("new gave no id")
    return session_id


def write_file(client: Client, root: CFid, path: str, data: bytes) -> None:
    fid = client.open(root, path, OWRITE | OTRUNC)
    try:
        fid.write(data)
    finally:
        fid.clunk()  # `in` commits the prompt at clunk


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


# --- idle sessions ---------------------------------------------------------------------------


@attrs.frozen
class IdleResult:
    sessions: int
    rss_before_mib: float
    rss_after_mib: float
    create_s: float
    list_p50_ms: float
    list_p99_ms: float
    list_bytes: int
    create_cpu_ms: float  # the daemon's CPU per `new`
    new_p50_ms: float  # one `new` (write, read the id back), as the client sees it
    new_p99_ms: float
    fsync_ms: float  # a new file's fsync and its directory's, on the same file system (p50)
    list_cpu_ms: float  # the daemon's CPU per `list` read
    rss_unloaded_mib: float | None = None  # with --idle-unload: once every session was unloaded

    @property
    def per_session_kib(self) -> float:
        return (self.rss_after_mib - self.rss_before_mib) * 1024 / self.sessions

    @property
    def unloaded_kib(self) -> float | None:
        if self.rss_unloaded_mib is None:
            return None
        return (self.rss_unloaded_mib - self.rss_before_mib) * 1024 / self.sessions


def idle(
    sessions: int, reads: int, profile: Path | None = None, idle_unload: float | None = None
) -> IdleResult:
    turns: list[dict[str, object]] = [{"text": "unused", "repeat": True}]
    with running(turns, 1, profile, idle_unload=idle_unload) as (daemon, cwd):
        client, root = daemon.connect()
        with client:
            read_all(client, root, "list")  # warm up the connection and the tree
            rss_before = daemon.rss_kib()
            fsync_ms = fsync_cost(Path(cwd))
            start, cpu0 = time.perf_counter(), daemon.cpu_seconds()
            news = []
            for _ in range(sessions):
                t0 = time.perf_counter()
                new_session(client, root, f"cwd={cwd}")
                news.append((time.perf_counter() - t0) * 1000)
            create_s = time.perf_counter() - start
            create_cpu = daemon.cpu_seconds() - cpu0
            rss_after = daemon.rss_kib()
            listing = read_all(client, root, "list")
            lines = listing.count(b"\n")
            if lines != sessions:
                raise BenchError(f"list has {lines} lines, not {sessions}")
            times = []
            cpu0 = daemon.cpu_seconds()
            for _ in range(reads):
                t0 = time.perf_counter()
                read_all(client, root, "list")
                times.append((time.perf_counter() - t0) * 1000)
            list_cpu = daemon.cpu_seconds() - cpu0
            rss_unloaded = None
            if idle_unload is not None:  # unloaded after idle_unload, then collected (gc)
                time.sleep(idle_unload * 1.5 + 5)
                rss_unloaded = daemon.rss_kib() / 1024
    return IdleResult(
        sessions,
        rss_before / 1024,
        rss_after / 1024,
        create_s,
        statistics.median(times),
        percentile(times, 99),
        len(listing),
        create_cpu / sessions * 1000,
        statistics.median(news),
        percentile(news, 99),
        fsync_ms,
        list_cpu / reads * 1000,
        rss_unloaded,
    )


def fsync_cost(directory: Path, samples: int = 20) -> float:
    """Milliseconds (median) to create a small file and fsync it and its directory: what a
    durable `new` would pay at least, on this file system, now."""
    times = []
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        for i in range(samples):
            t0 = time.perf_counter()
            fd = os.open(f"{scratch}/{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, b"x" * 400)
            os.fsync(fd)
            os.close(fd)
            dfd = os.open(scratch, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


# --- streaming sessions ----------------------------------------------------------------------


class StreamReader:
    """One open stream file on its own connection, read with one Tread always outstanding."""

    def __init__(self, daemon: Daemon, path: str) -> None:
        self.client, root = daemon.connect()
        self.fid = self.client.open(root, path, OREAD)
        self.sock = self.client.sock
        self.frames = FrameReader(1 << 24)
        self.offset = 0
        self.partial = b""

    def send_read(self) -> None:
        count = self.client.msize - IOHDRSZ
        self.sock.sendall(m.encode(m.Tread(1, self.fid.fid, self.offset, count), Dialect.P9P2000))

    def receive(self) -> list[bytes] | None:
        """Complete lines of the replies that arrived; None at end of file."""
        data = self.sock.recv(1 << 16)
        if not data:
            raise BenchError("the daemon closed a reader's connection")
        self.frames.feed(data)
        lines: list[bytes] = []
        while (frame := self.frames.next_frame()) is not None:
            reply = m.decode(frame, Dialect.P9P2000)
            if not isinstance(reply, m.Rread):
                raise BenchError(f"a stream read failed: {reply!r}")
            if not reply.data:
                return None
            self.offset += len(reply.data)
            *complete, self.partial = (self.partial + reply.data).split(b"\n")
            lines += complete
            self.send_read()
        return lines

    def close(self) -> None:
        self.client.close()


@attrs.define
class Tally:
    """What the readers saw."""

    delta_ms: list[float] = attrs.Factory(list)
    state_ms: list[float] = attrs.Factory(list)
    got: dict[str, set[int]] = attrs.Factory(dict)  # session -> delta numbers received
    lagged: dict[str, int] = attrs.Factory(dict)  # session (or "agent/events") -> markers
    dropped: dict[str, int] = attrs.Factory(dict)  # the lines those markers report
    finished: dict[str, int] = attrs.Factory(dict)  # session -> turn_finished lines
    states: int = 0


@attrs.frozen
class StreamResult:
    sessions: int
    deltas_expected: int
    deltas_received: int
    delta_p50_ms: float
    delta_p99_ms: float
    delta_max_ms: float
    lag_markers: int
    lag_dropped: int
    silent_loss: int
    states_expected: int
    states_received: int
    state_p50_ms: float
    state_p99_ms: float
    seconds: float
    daemon_cpu_s: float
    fake_cpu_s: float
    client_cpu_s: float
    rss_mib: float
    board_rows: int = 0  # sessions the open board showed at the end (--board)
    board_event_max_ms: float = 0.0  # its slowest event handling (anvilStats.maxMs)
    board_render_max_ms: float = 0.0  # its slowest redraw


CHROMIUM = Path("/usr/bin/chromium")


@contextmanager
def board_open(daemon: Daemon) -> Iterator[object]:
    """The daemon's board in a headless Debian chromium (Playwright, no downloaded browser),
    live on the feed; yields the page."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise BenchError("--board needs Debian's chromium (/usr/bin/chromium): make setup")
    token = (daemon.namespace / "agent.token").read_text().strip()
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
        )
        try:
            page = browser.new_page()
            page.goto(f"{daemon.board_url}?token={token}")
            page.locator("#live.up").wait_for(timeout=30_000)
            yield page
        finally:
            browser.close()


def _ts_ns(ts: str) -> int:
    when = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return int(when.timestamp() * 1000) * 1_000_000


def streaming(
    count: int,
    deltas: int,
    delay: float,
    turns: int,
    profile: Path | None = None,
    board: bool | None = None,
) -> StreamResult:
    """`board`: None, no `--web`; False, `--web` and no board open; True, one board open."""
    text = "".join(f"{MARK};{i:04d} " for i in range(deltas))
    script = [{"text": text, "piece": len(f"{MARK};0000 "), "stamp": MARK, "chunk_delay": delay}]
    providers = -(-count // SESSIONS_PER_PROVIDER)
    with (
        running([{**script[0], "repeat": True}], providers, profile, board is not None) as (
            daemon,
            cwd,
        ),
        contextlib.ExitStack() as stack,
    ):
        page: Any = stack.enter_context(board_open(daemon)) if board else None
        client, root = daemon.connect()
        with client:
            ids = [
                new_session(client, root, f"cwd={cwd} model=m{i % providers}") for i in range(count)
            ]
            readers: dict[StreamReader, str] = {}
            try:
                for sid in ids:
                    readers[StreamReader(daemon, f"{sid}/events")] = sid
                readers[StreamReader(daemon, "events")] = "agent/events"
                tally = Tally(got={sid: set() for sid in ids})
                wanted = set(ids)
                done = threading.Event()
                failure: list[BaseException] = []

                def on_line(owner: str, line: bytes, mono: int, wall: int) -> None:
                    if b'"type":"lagged"' in line:
                        match = LAGGED_RE.search(line)
                        tally.lagged[owner] = tally.lagged.get(owner, 0) + 1
                        dropped = int(match.group(1)) if match else 0
                        tally.dropped[owner] = tally.dropped.get(owner, 0) + dropped
                    elif owner == "agent/events":
                        if b'"type":"session_state"' in line:
                            event = json.loads(line)
                            if event["id"] in wanted and event["state"] in ("running", "await"):
                                tally.states += 1
                                tally.state_ms.append((wall - _ts_ns(event["ts"])) / 1e6)
                    elif line.startswith(b'{"type":"text_delta"'):
                        got = tally.got[owner]
                        for sent, number in STAMP_RE.findall(line):
                            tally.delta_ms.append((mono - int(sent)) / 1e6)
                            got.add(int(number))
                    elif line.startswith(b'{"type":"turn_finished"'):
                        tally.finished[owner] = tally.finished.get(owner, 0) + 1
                    if (
                        sum(tally.finished.values()) == count * turns
                        and tally.states >= 2 * count * turns
                    ):
                        done.set()

                def pump() -> None:
                    try:
                        with selectors.DefaultSelector() as sel:
                            for reader in readers:
                                sel.register(reader.sock, selectors.EVENT_READ, reader)
                                reader.send_read()
                            while not done.is_set():
                                for key, _ in sel.select(0.5):
                                    reader = key.data
                                    lines = reader.receive()
                                    mono, wall = time.monotonic_ns(), time.time_ns()
                                    if lines is None:
                                        sel.unregister(reader.sock)
                                        continue
                                    for line in lines:
                                        on_line(readers[reader], line, mono, wall)
                    except BaseException as exc:
                        failure.append(exc)
                        done.set()

                thread = threading.Thread(target=pump, daemon=True)
                if profile and SAMPLE:
                    os.kill(daemon.pid, signal.SIGUSR1)  # the samples start here
                cpu0, t0 = daemon.cpu_seconds(), time.perf_counter()
                fake0, own0 = cpu_seconds(daemon.fake_pid), time.process_time()
                thread.start()
                for turn in range(turns):
                    for sid in ids:
                        write_file(client, root, f"{sid}/in", f"go {turn}".encode())
                    if turn + 1 < turns:
                        for sid in ids:  # the next prompt once every session is idle again
                            read_all(client, root, f"{sid}/wait")
                            read_all(client, root, f"{sid}/out")
                limit = 60 + turns * deltas * delay * 4
                if not done.wait(limit):
                    raise BenchError(
                        f"not every turn finished in {limit:.0f} s "
                        f"({sum(tally.finished.values())} of {count * turns})"
                    )
                thread.join(5)
                if failure:
                    raise BenchError(f"the reader thread failed: {failure[0]!r}") from failure[0]
                seconds = time.perf_counter() - t0
                cpu = daemon.cpu_seconds() - cpu0
                fake_cpu = cpu_seconds(daemon.fake_pid) - fake0
                own_cpu = time.process_time() - own0
                rss = daemon.rss_kib() / 1024
                shown = {}
                if page is not None:  # every session on the board, then what its page measured
                    page.wait_for_function(
                        f"document.querySelectorAll('#sessions tbody tr').length >= {count}",
                        timeout=30_000,
                    )
                    shown = page.evaluate("window.anvilStats")
                    shown["rows"] = page.locator("#sessions tbody tr").count()
            finally:
                for reader in readers:
                    reader.close()
    expected = count * turns * deltas
    received = sum(len(got) for got in tally.got.values())
    silent = sum(
        deltas * turns - len(got)
        for sid, got in tally.got.items()
        if len(got) < deltas * turns and not tally.lagged.get(sid)
    )
    return StreamResult(
        sessions=count,
        deltas_expected=expected,
        deltas_received=received,
        delta_p50_ms=statistics.median(tally.delta_ms) if tally.delta_ms else float("nan"),
        delta_p99_ms=percentile(tally.delta_ms, 99),
        delta_max_ms=max(tally.delta_ms, default=float("nan")),
        lag_markers=sum(tally.lagged.values()),
        lag_dropped=sum(tally.dropped.values()),
        silent_loss=silent,
        states_expected=2 * count * turns,
        states_received=tally.states,
        state_p50_ms=statistics.median(tally.state_ms) if tally.state_ms else float("nan"),
        state_p99_ms=percentile(tally.state_ms, 99),
        seconds=seconds,
        daemon_cpu_s=cpu,
        fake_cpu_s=fake_cpu,
        client_cpu_s=own_cpu,
        rss_mib=rss,
        board_rows=shown.get("rows", 0),
        board_event_max_ms=shown.get("maxMs", 0.0),
        board_render_max_ms=shown.get("renderMaxMs", 0.0),
    )


# --- restart after kill -9 -------------------------------------------------------------------


@attrs.frozen
class RestartResult:
    sessions: int
    empty_serving_s: float  # an empty data directory: spawn to `serving`
    empty_list_s: float  # ... to its first `agent/list` read
    serving_s: float  # N sessions' records after a kill -9: spawn to `serving`
    list_s: float  # ... to the first `agent/list` read with all N lines
    create_s: float
    empty_rss_mib: float = 0.0  # VmRSS after that first `list`: empty, then with N at rest
    rss_mib: float = 0.0

    @property
    def rest_kib(self) -> float:
        """Memory per session restored at rest (its summary), beside the empty start."""
        return (self.rss_mib - self.empty_rss_mib) * 1024 / self.sessions


def _timed_start(work: Path, config: Path, sessions: int) -> tuple[Daemon, float, float]:
    """A daemon started on `work`: it, the seconds to `serving` and to a full `agent/list`
    (its VmRSS then is `daemon.rss_kib()`)."""
    t0 = time.perf_counter()
    daemon = Daemon(work, config)
    serving = time.perf_counter() - t0
    client, root = daemon.connect()
    with client:
        while read_all(client, root, "list").count(b"\n") < sessions:
            time.sleep(0.001)
        listed = time.perf_counter() - t0
    return daemon, serving, listed


def restart(sessions: int) -> RestartResult:
    work = Path(tempfile.mkdtemp(prefix="anvil-bench-"))
    fake = FakeProvider(work, [{"text": "unused", "repeat": True}])
    try:
        config = work / "config.toml"
        write_config(config, fake.url, 1)
        empty = work / "empty"
        empty.mkdir()
        daemon, empty_serving, empty_list = _timed_start(empty, config, 0)
        empty_rss = daemon.rss_kib() / 1024
        daemon.stop()
        full = work / "full"
        cwd = full / "work"
        cwd.mkdir(parents=True)
        daemon = Daemon(full, config)
        try:
            client, root = daemon.connect()
            t0 = time.perf_counter()
            with client:
                for _ in range(sessions):
                    new_session(client, root, f"cwd={cwd}")
            create_s = time.perf_counter() - t0
        finally:
            daemon.proc.kill()  # SIGKILL: nothing closed, synced or indexed on the way out
            daemon.stop()
        daemon, serving, listed = _timed_start(full, config, sessions)
        rss = daemon.rss_kib() / 1024
        daemon.stop()
    finally:
        fake.stop()
        shutil.rmtree(work, ignore_errors=True)
    return RestartResult(
        sessions, empty_serving, empty_list, serving, listed, create_s, empty_rss, rss
    )


# --- main ------------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh daemons per measurement")
    parser.add_argument("--sessions", type=int, default=1000, help="idle sessions")
    parser.add_argument("--list-reads", type=int, default=200)
    parser.add_argument("--streaming", type=int, default=100, help="sessions streaming at once")
    parser.add_argument("--deltas", type=int, default=300, help="text deltas per turn")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between deltas")
    parser.add_argument("--turns", type=int, default=1, help="turns per streaming session")
    parser.add_argument("--only", choices=("idle", "streaming", "restart"), default=None)
    parser.add_argument(
        "--restart",
        type=int,
        default=1000,
        help="sessions restored after a kill -9 (timed against the empty start)",
    )
    parser.add_argument(
        "--idle-unload",
        type=float,
        default=None,
        help="idle: the daemon's [sessions] idle_unload; RSS is read again once it passed",
    )
    parser.add_argument(
        "--board",
        action="store_true",
        help="streaming with --web twice per run: without and with one board open in chromium",
    )
    parser.add_argument(
        "--profile", type=Path, help="run the daemon under cProfile, stats to this file (per run)"
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help="with --profile: sample the daemon's CPU (bench/cpu_sampler.py) instead of cProfile",
    )
    args = parser.parse_args()
    global SAMPLE
    SAMPLE = args.sample

    print(f"load average before: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if args.only in (None, "idle"):
        idles = []
        for run in range(args.runs):
            r = idle(args.sessions, args.list_reads, args.profile, args.idle_unload)
            idles.append(r)
            if r.unloaded_kib is not None:
                print(
                    f"idle run {run + 1}: after idle_unload {args.idle_unload} s, RSS "
                    f"{r.rss_unloaded_mib:.1f} MiB ({r.unloaded_kib:.0f} KiB/session)",
                    flush=True,
                )
            print(
                f"idle run {run + 1}: {r.sessions} sessions created in {r.create_s:.1f} s "
                f"(each p50 {r.new_p50_ms:.2f} ms, p99 {r.new_p99_ms:.2f} ms, daemon CPU "
                f"{r.create_cpu_ms:.2f} ms; a file's and its directory's fsync here "
                f"{r.fsync_ms:.2f} ms); "
                f"RSS {r.rss_before_mib:.1f} -> {r.rss_after_mib:.1f} MiB "
                f"({r.per_session_kib:.0f} KiB/session); list ({r.list_bytes} bytes) "
                f"p50 {r.list_p50_ms:.2f} ms p99 {r.list_p99_ms:.2f} ms (daemon CPU "
                f"{r.list_cpu_ms:.2f} ms each)",
                flush=True,
            )
        rss = statistics.median(r.rss_after_mib for r in idles)
        per = statistics.median(r.per_session_kib for r in idles)
        p50 = statistics.median(r.list_p50_ms for r in idles)
        p99 = statistics.median(r.list_p99_ms for r in idles)
        print(f"idle, median of {args.runs} runs:")
        print(f"  RSS with {args.sessions} sessions: {rss:.1f} MiB ({per:.0f} KiB per session)")
        new50 = statistics.median(r.new_p50_ms for r in idles)
        new99 = statistics.median(r.new_p99_ms for r in idles)
        new_cpu = statistics.median(r.create_cpu_ms for r in idles)
        print(f"  new p50 {new50:.2f} ms, p99 {new99:.2f} ms (daemon CPU {new_cpu:.2f} ms per new)")
        cpu = statistics.median(r.list_cpu_ms for r in idles)
        print(f"  list p50 {p50:.2f} ms, p99 {p99:.2f} ms (daemon CPU {cpu:.2f} ms per read)")
        print(
            f"  targets: RSS < 250 MB: {met(rss * 1.048576 < 250)}; list < 20 ms: {met(p99 < 20)}"
        )
    if args.only in (None, "streaming"):
        modes: tuple[bool | None, ...] = (False, True) if args.board else (None,)
        labels = {None: "", False: " (--web, no board open)", True: " (one board open)"}
        runs: dict[bool | None, list[StreamResult]] = {mode: [] for mode in modes}
        for run in range(args.runs):
            for mode in modes:
                s = streaming(
                    args.streaming, args.deltas, args.delay, args.turns, args.profile, mode
                )
                runs[mode].append(s)
                board = (
                    f"; the board showed {s.board_rows} sessions, slowest event "
                    f"{s.board_event_max_ms:.1f} ms, slowest redraw {s.board_render_max_ms:.1f} ms"
                    if mode
                    else ""
                )
                print(
                    f"streaming run {run + 1}{labels[mode]}: {s.sessions} sessions, "
                    f"{s.deltas_received}/{s.deltas_expected} deltas in {s.seconds:.1f} s "
                    f"(daemon CPU {s.daemon_cpu_s:.1f} s, fake provider {s.fake_cpu_s:.1f} s, "
                    f"this client {s.client_cpu_s:.1f} s; RSS {s.rss_mib:.0f} MiB); events p50 "
                    f"{s.delta_p50_ms:.1f} ms p99 {s.delta_p99_ms:.1f} ms max "
                    f"{s.delta_max_ms:.0f} ms; lagged markers {s.lag_markers} ({s.lag_dropped} "
                    f"lines), silent loss {s.silent_loss}; agent/events {s.states_received}/"
                    f"{s.states_expected} p50 {s.state_p50_ms:.1f} ms p99 {s.state_p99_ms:.1f} ms"
                    f"{board}",
                    flush=True,
                )
        p99s: dict[bool | None, tuple[float, float]] = {}
        for mode, streams in runs.items():
            d50 = statistics.median(s.delta_p50_ms for s in streams)
            d99 = statistics.median(s.delta_p99_ms for s in streams)
            s50 = statistics.median(s.state_p50_ms for s in streams)
            s99 = statistics.median(s.state_p99_ms for s in streams)
            p99s[mode] = (d99, s99)
            silent = sum(s.silent_loss for s in streams)
            print(f"streaming{labels[mode]}, median of {args.runs} runs:")
            print(f"  session events: p50 {d50:.1f} ms, p99 {d99:.1f} ms")
            print(f"  agent/events:   p50 {s50:.1f} ms, p99 {s99:.1f} ms")
            print(
                f"  targets: p99 < 50 ms: {met(max(d99, s99) < 50)}; "
                f"no silent loss: {met(silent == 0)}"
            )
        if args.board:
            (d0, s0), (d1, s1) = p99s[False], p99s[True]
            print(
                f"one board open / none, p99: session events {d1 / d0:.2f}x "
                f"({d0:.1f} -> {d1:.1f} ms), agent/events {s1 / s0:.2f}x ({s0:.1f} -> {s1:.1f} ms)"
            )
    if args.only in (None, "restart"):
        restarts = []
        for run in range(args.runs):
            x = restart(args.restart)
            restarts.append(x)
            print(
                f"restart run {run + 1}: {x.sessions} sessions (created in {x.create_s:.1f} s), "
                f"kill -9, restart: serving {x.serving_s:.2f} s, full list {x.list_s:.2f} s; "
                f"empty start: serving {x.empty_serving_s:.2f} s, list {x.empty_list_s:.2f} s; "
                f"ratios {x.serving_s / x.empty_serving_s:.2f}x serving, "
                f"{x.list_s / x.empty_list_s:.2f}x full list; RSS {x.empty_rss_mib:.1f} -> "
                f"{x.rss_mib:.1f} MiB ({x.rest_kib:.1f} KiB per session at rest)",
                flush=True,
            )
        serve_ratio = statistics.median(x.serving_s / x.empty_serving_s for x in restarts)
        list_ratio = statistics.median(x.list_s / x.empty_list_s for x in restarts)
        print(f"restart with {args.restart} sessions, median of {args.runs} runs:")
        print(f"  serving {serve_ratio:.2f}x the empty start, full list {list_ratio:.2f}x")
    print(f"load average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
