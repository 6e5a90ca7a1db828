"""Part a: hostile 9P frames against every file of a real daemon's tree, in all three dialects.

Frames come from two sources, chosen per frame by hypothesis: the client frames of the recorded
plan9port traces (fixtures/9p), retargeted at the file under test (fid 1, the walk names of its
path) and then mutated (bit flips, boundary values over u16/u32 fields, cut or grown bodies, a
random type byte, a wrong size field), and T-messages generated field by field from the codec's
layouts (fids mostly the live ones, write data mostly plausible ctl text).

One episode = one connection: version, attach, walk fid 1 to the file (half the time open it),
then a few hostile frames. After each frame a Tflush of its tag must be answered (or the
connection closed) within the bound: no answer is a hang. A frame with a wrong size field is
followed by a half-close, and the daemon must then answer or close. After each episode a fresh
connection must read `version`, and the daemon process must be alive (else: a crash, recorded
with the frame, and the daemon restarted so the count goes on). "internal error" is counted
from the replies (9P2000, .u) and from the daemon log (every dialect: `.L` carries only EIO).
"""

from __future__ import annotations

import random
import socket
import struct
import time
from pathlib import Path

import attrs
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from anvild.ninep import messages as m
from anvild.ninep.constants import DMDIR, MAXWELEM, NOFID, NOTAG, Dialect
from anvild.ninep.errors import ProtocolError
from tests.chaos.common import (
    INTERNAL,
    MSIZE,
    Client,
    Closed,
    Result,
    Timeout,
    alive,
    connect,
    fake_provider,
    log_events,
    new_session,
    start,
    user_config,
    wait_state,
)
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_plan9port_traces import SECTIONS

DIALECTS = (Dialect.P9P2000, Dialect.P9P2000_U, Dialect.P9P2000_L)
PROBE_TAG = 0xFFFE
TRACE_FRAMES = [
    m.decode(frame, Dialect.P9P2000)
    for steps in SECTIONS.values()
    for frame, _, _ in steps
    if frame[4] != m.Tversion.TYPE
]
INTERESTING_U32 = (0, 1, 2, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, MSIZE, MSIZE + 1, NOFID)
INTERESTING_U16 = (0, 1, 0xFF, 0x7FFF, 0xFFFF, MAXWELEM + 1)
CTL_TEXT = (
    b"new cwd=/tmp\n",
    b"new model=nope\n",
    b"cancel\n",
    b"stop\n",
    b"start\n",
    b"restart\n",
    b"clear\n",
    b"kill\n",
    b"model fake\n",
    b"approve\n",
    b"reject no\n",
    b"always\n",
    b"ping\n",
    b'{"to": "user", "subject": "s", "body": "b"}\n',
    b"new title=x\n",
    b"hello\n",
    b"",
    b"\x00\xff\n",
    b"x" * 9000,
)


def tree(namespace: Path) -> list[tuple[str, bool]]:
    """Every (path, is_dir) of the daemon's tree, root first, read over 9P2000."""
    out: list[tuple[str, bool]] = [("", True)]
    with connect(namespace) as c:
        todo = [""]
        while todo:
            path = todo.pop(0)
            c.walk(0, 50, path)
            c.open(50, 0)
            stats = m.decode_stats(c.read_all(50), c.dialect)
            c.clunk(50)
            for stat in stats:
                child = f"{path}/{stat.name}".lstrip("/")
                is_dir = bool(stat.mode & DMDIR)
                out.append((child, is_dir))
                if is_dir:
                    todo.append(child)
    return out


# --- frame sources -----------------------------------------------------------------------------


def _fix_size(frame: bytes) -> bytes:
    return struct.pack("<I", len(frame)) + frame[4:]


def mutate(frame: bytes, rng: random.Random) -> tuple[bytes, bool]:
    """A mutated copy of `frame` and whether its size field was left wrong on purpose."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        body = len(data) - 7
        if op == 0 and len(data) > 4:  # bit flips after the size field
            i = rng.randrange(4, len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and body >= 2:  # a u16 boundary value somewhere in the body
            i = rng.randrange(7, len(data) - 1)
            data[i : i + 2] = struct.pack("<H", rng.choice(INTERESTING_U16))
        elif op == 2 and body >= 4:  # a u32 boundary value (fids, counts, lengths, modes)
            i = rng.randrange(7, len(data) - 3)
            data[i : i + 4] = struct.pack("<I", rng.choice(INTERESTING_U32))
        elif op == 3 and body > 0:  # cut the body
            del data[rng.randrange(7, len(data)) :]
        elif op == 4:  # grow it
            data += rng.randbytes(rng.choice((1, 2, 4, 64, 700)))
        elif op == 5:  # any type byte, replies and unknown types included
            data[4] = rng.randrange(256)
        elif op == 6:  # NOTAG, or a tag that is likely in use
            data[5:7] = struct.pack("<H", rng.choice((NOTAG, 0, 1)))
        elif op == 7 and len(data) > 4:  # a random byte
            data[rng.randrange(4, len(data))] = rng.randrange(256)
    if rng.random() < 0.1:
        wrong = rng.choice((0, 3, 6, 7, len(data) - 1, len(data) + 1, MSIZE + 1, 0xFFFFFFFF))
        data[0:4] = struct.pack("<I", wrong & 0xFFFFFFFF)
        return bytes(data), True
    return _fix_size(bytes(data)), False


def retarget(msg: m.Message, path: str) -> m.Message:
    """A trace message aimed at the file under test: fid 1 (walked there), walk names its path."""
    changes: dict[str, object] = {}
    names = tuple(p for p in path.split("/") if p)
    for field in attrs.fields(type(msg)):
        if field.name in ("fid", "newfid") and getattr(msg, field.name) not in (0, NOFID):
            changes[field.name] = 1 if field.name == "fid" else 2
        if field.name == "wnames":
            changes["wnames"] = names
    return attrs.evolve(msg, **changes)


u16 = st.integers(0, 0xFFFF)
u32 = st.one_of(st.sampled_from(INTERESTING_U32), st.integers(0, 0xFFFFFFFF))
fids = st.one_of(st.sampled_from((0, 1, 1, 1, 2, 3, NOFID)), st.integers(0, 0xFFFFFFFF))
u64 = st.one_of(st.sampled_from((0, 1, 1 << 31, 1 << 63, (1 << 64) - 1)), st.integers(0, 1 << 64))
names = st.one_of(
    st.sampled_from(("", ".", "..", "ctl", "in", "out", "x" * 300, "a/b", "\x00", "é")),
    st.text(max_size=20),
)
data = st.one_of(st.sampled_from(CTL_TEXT), st.binary(max_size=300))


def _field(kind: str, name: str, dialect: Dialect) -> st.SearchStrategy[object]:
    if kind == "u32" and "fid" in name:
        return fids
    qid = st.builds(m.Qid, st.integers(0, 0xFF), st.integers(0, 0xFFFFFFFF), u64)
    stat = st.builds(
        m.Stat, u16, u32, qid, u32, u32, u32, u64, names, names, names, names,
        *((names, u32, u32, u32) if dialect is Dialect.P9P2000_U else ()),
    )  # fmt: skip
    return {
        "u8": st.integers(0, 0xFF),
        "u16": u16,
        "u32": u32,
        "u32opt": u32,
        "u64": u64,
        "s": names,
        "qid": qid,
        "data": data,
        "wnames": st.lists(names, max_size=MAXWELEM).map(tuple),
        "qids": st.lists(qid, max_size=MAXWELEM).map(tuple),
        "stat": stat,
    }[kind]


def generated(dialect: Dialect) -> st.SearchStrategy[m.Message]:
    requests = [c for c in m.MESSAGE_TYPES[dialect].values() if c.__name__.startswith("T")]

    def build(cls: type[m.Message]) -> st.SearchStrategy[m.Message]:
        fields = {n: _field(k, n, dialect) for n, k in cls.layout(dialect)}
        return st.builds(cls, tag=st.integers(1, 0xFFFD), **fields)

    return st.sampled_from(requests).flatmap(build)


# --- the run -----------------------------------------------------------------------------------


class _Fuzz:
    def __init__(self, workdir: Path, result: Result, bound: float, frames: int) -> None:
        self.workdir = workdir
        self.frames_per_episode = frames
        self.result = result
        self.bound = bound
        self.namespace = workdir / "ns"
        self.daemon: Anvild | None = None
        self.paths: list[tuple[str, bool]] = []
        self.covered: set[tuple[Dialect, str]] = set()
        self.episode = 0
        self.turn = dict.fromkeys(DIALECTS, 0)

    def start(self, config: Path) -> None:
        self.config = config
        self.daemon = start(self.namespace, config)
        sid = new_session(self.namespace, self.workdir)
        with connect(self.namespace) as c:
            c.write_file(f"{sid}/in", b"hello")
        assert wait_state(self.namespace, sid, ("await", "idle"), 30).startswith(("await", "idle"))
        # Ctl files and directories last: a fuzzed `kill` or Tremove may take a session away,
        # and every other file of it is fuzzed first.
        self.paths = sorted(tree(self.namespace), key=lambda p: (p[0].endswith("ctl"), p[1]))

    def check_daemon(self, last: bytes) -> None:
        assert self.daemon is not None
        if not alive(self.daemon):
            self.result.add("crashes (daemon died)")
            _, log = self.daemon.exit()
            self.result.note(f"daemon died after frame {last.hex()}: {log[-2000:]}")
            self.daemon = start(self.namespace, self.config)
            return
        try:
            with connect(self.namespace, self.bound) as c:
                assert c.read_file("version")
        except (Timeout, Closed, OSError, AssertionError) as exc:
            self.result.add("daemon stuck (fresh connection not served)")
            self.result.note(f"fresh connection failed after frame {last.hex()}: {exc!r}")

    def drain_until_probe(self, c: Client, frame: bytes, probe: int) -> None:
        """Read replies until the probe's (its Rflush, or an error when a hostile Tversion left
        the connection unversioned); `Closed` when the daemon ends the connection."""
        while True:
            reply = c.receive(self.bound)
            if isinstance(reply, m.Rerror) and INTERNAL in reply.ename:
                self.result.add("internal error replies")
                self.result.note(f"internal error for {frame.hex()}: {reply.ename}")
            if reply.tag == probe:
                return

    def setup(self, dialect: Dialect, path: str, is_dir: bool, plan: Plan) -> Client:
        c = Client(self.namespace / "agent", dialect, self.bound)
        try:
            c.handshake()
            c.walk(0, 1, path)
            if plan.open_mode is not None:
                try:
                    c.open(1, 0 if is_dir else plan.open_mode)
                except OSError:
                    self.result.add("opens refused")
        except BaseException:
            c.close()
            raise
        return c

    def one(self, dialect: Dialect, path: str, is_dir: bool, plan: Plan) -> None:
        """One episode: the plan's frames on connections set up to the file; a connection the
        daemon closes (a protocol error) is replaced by a new one for the next frame."""
        self.episode += 1
        self.covered.add((dialect, path))
        r = self.result
        last = b""
        c: Client | None = None
        try:
            for source in plan.frames:
                if c is None:
                    c = self.setup(dialect, path, is_dir, plan)
                if source[0] == "trace":
                    assert isinstance(source[1], m.Message)
                    assert isinstance(source[2], int)
                    msg = retarget(source[1], path)
                    try:
                        base = m.encode(msg, dialect)
                    except ProtocolError:
                        base = m.encode(msg, Dialect.P9P2000)
                    last, wrong_size = mutate(base, random.Random(source[2]))
                    r.add("frames mutated from traces")
                else:
                    assert isinstance(source[1], m.Message)
                    try:
                        last, wrong_size = m.encode(source[1], dialect), False
                    except ProtocolError:
                        continue  # a field out of its range: not a frame
                    r.add("frames generated")
                try:
                    c.send_raw(last)
                    if wrong_size:
                        # The daemon may wait for the rest of a frame that claims more: the
                        # peer's half-close must then end it.
                        c.sock.shutdown(socket.SHUT_WR)
                        while True:
                            self.drain_until_probe(c, last, PROBE_TAG)
                    oldtag = struct.unpack_from("<H", last, 5)[0] if len(last) >= 7 else 0
                    # A hostile Tflush naming the probe's tag would flush the probe (flush(5):
                    # never answered), so the probe then takes another tag.
                    named = struct.unpack_from("<H", last, 7)[0] if len(last) >= 9 else None
                    flush = len(last) > 4 and last[4] == m.Tflush.TYPE
                    probe = PROBE_TAG - 1 if flush and named == PROBE_TAG else PROBE_TAG
                    c.send(m.Tflush(probe, oldtag))
                    self.drain_until_probe(c, last, probe)
                    r.add("frames answered, connection kept")
                except Closed:
                    r.add("frames that made the daemon close the connection")
                    c.close()
                    c = None
        except Timeout:
            r.add("hangs (no reply within the bound)")
            r.note(f"{dialect.value} {path!r}: no reply within {self.bound} s after {last.hex()}")
        except ProtocolError as exc:
            r.add("replies no dialect decodes")
            r.note(
                f"{dialect.value} {path!r}: a reply no dialect decodes after {last.hex()}: {exc}"
            )
        except (OSError, AssertionError, Closed) as exc:
            # The setup of a connection (handshake, walk) refused: the file went away (a fuzzed
            # remove or kill) or the daemon is in trouble; the check below tells which.
            r.add("episodes whose setup was refused")
            r.note(f"{dialect.value} {path!r}: setup refused: {exc!r}")
        finally:
            if c is not None:
                c.close()
        self.check_daemon(last)


@attrs.frozen
class Plan:
    """One episode's hostile input, drawn before any I/O (so hypothesis sees the same draws
    whatever the daemon answers)."""

    open_mode: int | None
    frames: tuple[tuple[object, ...], ...]


def plans(dialect: Dialect, frames: int) -> st.SearchStrategy[Plan]:
    source = st.one_of(
        st.tuples(st.just("trace"), st.sampled_from(TRACE_FRAMES), st.integers(0, 1 << 32)),
        st.tuples(st.just("generated"), generated(dialect)),
    )
    return st.builds(
        Plan,
        st.one_of(st.none(), st.sampled_from((0, 1, 2))),
        st.lists(source, min_size=frames, max_size=frames).map(tuple),
    )


def run(
    workdir: Path, episodes: int | None, frames_per_episode: int = 4, bound: float = 10.0
) -> Result:
    """`episodes` connections of `frames_per_episode` hostile frames each (None: one for each
    file of the tree in each dialect, whatever the tree's size); the figures."""
    result = Result("9P fuzzing")
    started = time.monotonic()
    fuzz = _Fuzz(workdir, result, bound, frames_per_episode)
    with fake_provider(workdir, [{"text": "pong", "repeat": True}]) as fake:
        fuzz.start(user_config(workdir, fake.url))
        result.add("files and directories in the tree", len(fuzz.paths))

        def dialect_run(dialect: Dialect, count: int) -> None:
            # The draws happen before any I/O and depend on the dialect only, so hypothesis
            # sees the same draws whatever the daemon answers; the file is the next in turn,
            # so `count` >= the tree's size covers every file.
            @seed(2026)
            @settings(
                max_examples=count,
                database=None,
                deadline=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(plans(dialect, frames_per_episode))
            def one(plan: Plan) -> None:
                path, is_dir = fuzz.paths[fuzz.turn[dialect] % len(fuzz.paths)]
                fuzz.turn[dialect] += 1
                fuzz.one(dialect, path, is_dir, plan)

            one()

        try:
            total = len(DIALECTS) * len(fuzz.paths) if episodes is None else episodes
            for dialect in DIALECTS:
                dialect_run(dialect, max(1, total // len(DIALECTS)))
        finally:
            daemon = fuzz.daemon
            result.add("episodes (connections)", fuzz.episode)
            result.add("(dialect, file) pairs covered", len(fuzz.covered))
            internal = log_events(daemon, "internal error") if daemon else []
            result.add("internal errors in the daemon log", len(internal))
            for event in internal[:5]:
                result.note(f"log: {event[:300]}")
            if daemon is not None and alive(daemon):
                code, log = daemon.stop()
                if code != 0:
                    result.add("crashes (daemon died)")
                    result.note(f"the daemon stopped with {code}: {log[-2000:]}")
    result.counts["crashes (daemon died)"] = result["crashes (daemon died)"]
    result.counts["hangs (no reply within the bound)"] = result["hangs (no reply within the bound)"]
    result.counts["internal error replies"] = result["internal error replies"]
    result.seconds = time.monotonic() - started
    return result
