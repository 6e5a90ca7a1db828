"""The bead store: a git repository owned by the daemon, one file per bead and convoy.

Memory holds a `Board` equal to HEAD. Every change runs under one `trio.Lock`: the pure board
returns a `Change` (or raises: nothing touched); each file is written atomically (temp, fsync,
rename, dir fsync); one `git commit -- <paths>` by `anvild` with no user config or hooks; only
then is the new board adopted and its events published. Writing and committing are shielded
from cancellation. A failed write or commit restores the paths from HEAD (`BeadStoreError`).
The lock makes a claim a compare-and-swap.
One daemon per repository (`flock` on `.git/anvild.lock`). `open` recovers from a kill -9:
removes a stale `index.lock`, restores dirty paths under `beads/` and `convoys/` from HEAD
(never any other path), aborts a rebase, logs `beads.recovered`. An undecodable file is
logged (`beads.unreadable`), left out and its id reserved.
With a remote (`anvild.beads.remote`) each change is pushed under the lock; a rejected push
fetches, rebases the queue, reloads and re-runs the change's decision on the shared board (its
precondition re-checked), with back-off. `sync` pulls (the daemon runs `run_sync`; `refresh`
pulls on demand when the last try is older than `pull_bound`); unreachable: changes queue.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import math
import os
import random
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, TypeVar

import attrs
import structlog
import trio

from anvild.beads.board import Board, Change, GateDecision, NewBead, NewConvoy
from anvild.beads.codec import CodecError, decode_bead, decode_convoy, encode
from anvild.beads.errors import BeadError, BeadStoreError
from anvild.beads.events import BeadEvent
from anvild.beads.git import Git
from anvild.beads.model import Bead, BeadStatus, Convoy, ConvoyStatus, Progress
from anvild.beads.remote import Push, RemoteLink, SyncState, pulled_events
from anvild.store.durable import replace_durably

__all__ = ["BEADS_DIR", "CONVOYS_DIR", "SETTLED", "BeadStore"]

log = structlog.get_logger("anvild.beads")

_Record = TypeVar("_Record", Bead, Convoy)

BEADS_DIR: Final = "beads"
CONVOYS_DIR: Final = "convoys"
TMP_SUFFIX: Final = ".tmp"
LOCK_FILE: Final = "anvild.lock"
PULL_INTERVAL: Final = 5.0
"""Seconds between two pulls of the background sync (`run_sync`)."""
PULL_BOUND: Final = 1.0
"""A read of `ready` or `list` pulls first when the last pull was tried longer ago than this."""
NETWORK_LIMIT: Final = 30.0
"""Seconds one fetch or push may take before the remote counts as unreachable."""
PUSH_TRIES: Final = 20
MAX_DROPPED: Final = 20
SETTLED: Final = frozenset({BeadStatus.COMPLETED, BeadStatus.FAILED, BeadStatus.PENDING_APPROVAL})
"""Bead statuses in which nobody is working on the bead (what `wait_bead` waits for)."""

README: Final = """\
# anvild bead store

This repository is written by anvild: one JSON file per bead (`beads/`) and per convoy
(`convoys/`), one commit per change. Read it with `git log` (the audit trail: what happened and
who asked) and change it through the daemon's files (`agent/beads/`, `agent/convoys/`), never
by hand while the daemon runs.
"""


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class BeadStore:
    """Beads and convoys in one git repository; `await open()` before anything else."""

    def __init__(
        self,
        root: Path,
        *,
        on_event: Callable[[BeadEvent], None] | None = None,
        clock: Callable[[], str] = _now,
        git: str = "git",
        remote: str | None = None,
        host: str | None = None,
        pull_interval: float = PULL_INTERVAL,
        pull_bound: float = PULL_BOUND,
        network_limit: float = NETWORK_LIMIT,
    ) -> None:
        """`remote` is a git URL shared with other daemons (None: this repository alone);
        `host` names this daemon on the shared board (default: the host name)."""
        self.root = root
        self.git = Git(root, program=git)
        self.host = host if host is not None else (socket.gethostname() if remote else None)
        self.pull_interval = pull_interval
        self.pull_bound = pull_bound
        self._link = None if remote is None else RemoteLink(self.git, remote, limit=network_limit)
        self.sync_state = SyncState(remote=remote, host=self.host)
        """Where the shared board stands (`agent/beads/sync`)."""
        self._last_try = -math.inf
        self.on_event = on_event
        self._clock = clock
        self._lock = trio.Lock()
        self._board = Board()
        self._opened = False
        self._lock_fd: int | None = None
        self._changed = trio.Event()
        self.unavailable: str | None = None
        """Why `open` failed (the daemon serves on without beads and says this)."""
        self.recovered: list[str] = []
        """What `open` found and put back (one line each), for tests and the log."""

    # -- opening -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the repository if needed, undo any half-done change, load every file."""
        async with self._lock:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                existed = (self.root / ".git").exists()
                if not existed:
                    await self._init()
                self._take_lock()
                if existed:
                    await self._recover()
                if self._link is not None:
                    await self._join(fresh=not existed)
                self._board = await trio.to_thread.run_sync(self._load)
            except OSError as exc:
                self.unavailable = f"cannot use {self.root}: {exc.strerror or exc}"
                raise BeadStoreError(self.unavailable) from exc
            except BeadStoreError as exc:
                self.unavailable = str(exc)
                raise
            self._opened = True
            self.unavailable = None
        log.info(
            "beads.opened",
            repo=str(self.root),
            beads=len(self._board.beads),
            convoys=len(self._board.convoys),
        )

    def _take_lock(self) -> None:
        """One daemon per repository: an exclusive `flock` on `.git/anvild.lock`, held until
        `close` (or the process ends). A configured repository shared by two daemons with
        different data dirs would otherwise see one's recovery undo the other's change."""
        if self._lock_fd is not None:
            return
        fd = os.open(self.root / ".git" / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "pid unknown"
            os.close(fd)
            raise BeadStoreError(
                f"another anvild uses the bead repository {self.root} ({holder}); give each "
                "daemon its own ([beads] repo in the user config)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def close(self) -> None:
        """Release the repository lock (the store is unusable afterwards)."""
        self._opened = False
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def _init(self) -> None:
        await self.git.run("init", "-q")
        (self.root / "README.md").write_text(README)
        await self.git.run("add", "--", "README.md")
        await self.git.run("commit", "-q", "--no-verify", "-m", "init bead store (by anvild)")

    async def _recover(self) -> None:
        lock = self.root / ".git" / "index.lock"
        if lock.exists():
            lock.unlink()
            self._note("removed a stale .git/index.lock (git was stopped mid-command)")
        git_dir = self.root / ".git"
        if (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists():
            await self.git.run("rebase", "--abort", check=False)
            self._note("aborted a rebase of queued changes (git was stopped mid-rebase)")
        if not (await self.git.run("rev-parse", "--verify", "-q", "HEAD", check=False)).strip():
            await self.git.run(
                "commit", "-q", "--no-verify", "--allow-empty", "-m", "init bead store (by anvild)"
            )
        status = await self.git.run(
            "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", BEADS_DIR, CONVOYS_DIR
        )
        dirty = _status_paths(status)
        if dirty:
            await self._restore(dirty)
            for path in dirty:
                self._note(f"discarded the uncommitted change to {path} (never acknowledged)")

    async def _restore(self, paths: Iterable[str]) -> None:
        """Put `paths` back as HEAD has them; paths HEAD does not have are deleted."""
        paths = list(paths)
        listed = await self.git.run("ls-tree", "-r", "-z", "--name-only", "HEAD", "--", *paths)
        tracked = {p for p in listed.decode().split("\0") if p}
        new = [p for p in paths if p not in tracked]
        if tracked:
            await self.git.run("checkout", "-q", "HEAD", "--", *sorted(tracked))
        if new:
            await self.git.run("rm", "-q", "--cached", "--ignore-unmatch", "--", *new)
            for path in new:
                (self.root / path).unlink(missing_ok=True)

    def _note(self, text: str) -> None:
        self.recovered.append(text)
        log.warning("beads.recovered", repo=str(self.root), what=text)

    def _load(self) -> Board:
        reserved: set[str] = set()
        beads = self._load_dir(BEADS_DIR, decode_bead, reserved)
        convoys = self._load_dir(CONVOYS_DIR, decode_convoy, reserved)
        return Board({b.id: b for b in beads}, {c.id: c for c in convoys}, frozenset(reserved))

    def _load_dir(
        self, directory: str, decode: Callable[[bytes], _Record], reserved: set[str]
    ) -> list[_Record]:
        """The beads or convoys of `directory` in creation order (created_at, then the id's
        counter: several in one second). One that cannot be read, or whose id is not its file
        name, is logged and its id reserved."""
        found = []
        for path in sorted((self.root / directory).glob("*.json")):
            try:
                item = decode(path.read_bytes())
                if item.id != path.stem:
                    raise CodecError(f"its id {item.id!r} is not its file name")
            except (OSError, CodecError) as exc:
                log.error("beads.unreadable", path=str(path), error=str(exc))
                reserved.add(path.stem)
                continue
            found.append(item)
        return sorted(found, key=lambda item: (item.created_at, _counter(item.id)))

    # -- reading ---------------------------------------------------------------------------

    @property
    def board(self) -> Board:
        """The current board (a frozen value: safe to keep and read)."""
        return self._board

    def bead(self, bead_id: str) -> Bead:
        return self._board.bead(bead_id)

    def beads(self) -> tuple[Bead, ...]:
        return tuple(self._board.beads.values())

    def ready(self, role: str | None = None) -> list[Bead]:
        return self._board.ready(role)

    def convoy(self, convoy_id: str) -> Convoy:
        return self._board.convoy(convoy_id)

    def convoys(self) -> tuple[Convoy, ...]:
        return tuple(self._board.convoys.values())

    def progress(self, convoy_id: str) -> Progress:
        return self._board.progress(self._board.convoy(convoy_id))

    def context_for(self, session_id: str) -> str:
        """The convoy context for a session's system prompt ("" when none applies)."""
        return self._board.context_for(session_id)

    def assigned(self, session_id: str) -> list[Bead]:
        return self._board.assigned(session_id)

    async def wait_bead(self, bead_id: str) -> Bead:
        """Block until the bead is settled for now (completed, failed or pending_approval);
        the bead as it is then. `BeadNotFound` at once for an unknown id."""
        while True:
            bead = self._board.bead(bead_id)
            if bead.status in SETTLED:
                return bead
            await self._next_change()

    async def wait_convoy(self, convoy_id: str) -> Convoy:
        """Block until the convoy is completed, failed or abandoned."""
        while True:
            convoy = self._board.convoy(convoy_id)
            if not convoy.status.open:
                return convoy
            await self._next_change()

    async def _next_change(self) -> None:
        """Until the board changes here; with a remote, at most `pull_interval`, then a pull
        (a change made by another daemon)."""
        if self._link is None:
            await self._changed.wait()
            return
        with trio.move_on_after(self.pull_interval):
            await self._changed.wait()
            return
        await self.refresh()

    # -- changing --------------------------------------------------------------------------

    async def apply(self, make: Callable[[Board, str], Change]) -> Change:
        """Run one change: `make(board, now)` decides, then files, commit, memory, events."""
        async with self._lock:
            if not self._opened:
                if self.unavailable is not None:
                    raise BeadStoreError(
                        f"the bead store is unavailable: {self.unavailable}; fix it and "
                        "restart the daemon (see its log)"
                    )
                raise BeadStoreError("the bead store is not open yet; try again in a moment")
            change = make(self._board, self._clock())
            # Shielded: a cancel (Tflush, a cancelled tool call) between the rename and the
            # commit would leave a visible, uncommitted file. A change takes milliseconds.
            with trio.CancelScope(shield=True):
                committed = await self._commit(change)
                if self._link is not None:
                    change, committed = await self._publish(self._link, make, change, committed)
                if not committed:
                    return attrs.evolve(change, board=self._board, events=())
                self._board = change.board
        log.info("beads.changed", repo=str(self.root), change=change.message)
        self._changed.set()
        self._changed = trio.Event()
        for event in change.events:
            if self.on_event is not None:
                self.on_event(event)
        return change

    async def _commit(self, change: Change) -> bool:
        """Write and commit the change's files; False when it changes no byte (the same text
        written twice within a second): nothing to commit, and nothing happened."""
        files = [(f"{BEADS_DIR}/{b.id}.json", encode(b)) for b in change.beads]
        files += [(f"{CONVOYS_DIR}/{c.id}.json", encode(c)) for c in change.convoys]
        previous = await trio.to_thread.run_sync(self._read_files, [p for p, _ in files])
        files = [(p, data) for p, data in files if previous[p] != data]
        if not files:
            return False
        paths = [p for p, _ in files]
        previous = {p: previous[p] for p in paths}
        try:
            await trio.to_thread.run_sync(self._write_files, files)
            await self.git.run("add", "--", *paths)
            # With a remote, a second paragraph names the daemon: the same change made by two
            # daemons in the same second must not be one commit (a push would find it there).
            where = () if self._link is None else ("-m", f"on {self.host} (pid {os.getpid()})")
            await self.git.run(
                "commit", "-q", "--no-verify", "-m", change.message, *where, "--", *paths
            )
        except (OSError, BeadStoreError) as exc:
            with trio.CancelScope(shield=True):
                await self._undo(previous)
            if isinstance(exc, BeadStoreError):
                raise BeadStoreError(f"the change was not recorded: {exc}") from exc
            raise BeadStoreError(
                f"the change was not recorded: cannot write {self.root}: {exc.strerror or exc}"
            ) from exc
        return True

    def _read_files(self, paths: list[str]) -> dict[str, bytes | None]:
        previous: dict[str, bytes | None] = {}
        for path in paths:
            try:
                previous[path] = (self.root / path).read_bytes()
            except FileNotFoundError:
                previous[path] = None
        return previous

    async def _undo(self, previous: dict[str, bytes | None]) -> None:
        """Put the files of a change that was not committed back as they were (HEAD's bytes:
        the board only ever holds committed values), and unstage them if git can."""
        try:
            await trio.to_thread.run_sync(
                self._write_files, [(p, data) for p, data in previous.items() if data is not None]
            )
            for path, data in previous.items():
                if data is None:
                    (self.root / path).unlink(missing_ok=True)
        except OSError as exc:
            log.error("beads.undo_failed", paths=list(previous), error=str(exc))
        # The index may hold the new content: unstage it (the next `open` would otherwise).
        await self.git.run("reset", "-q", "--", *previous, check=False)

    def _write_files(self, files: list[tuple[str, bytes]]) -> None:
        for path, data in files:
            target = self.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}{TMP_SUFFIX}")
            replace_durably(target, data, temp=tmp, mode=0o644)

    # -- the remote ----------------------------------------------------------------------------

    async def _publish(
        self, link: RemoteLink, make: Callable[[Board, str], Change], change: Change, done: bool
    ) -> tuple[Change, bool]:
        """Push the committed change (`done`: it made a commit). Rejected: another daemon
        changed the board; take its board and decide again (`make` raises when the change's
        precondition no longer holds). Unreachable: the change stays queued. A change that
        was rejected and cannot be pushed (the remote is gone, or busy beyond `PUSH_TRIES`)
        is withdrawn: `BeadStoreError`, nothing changed."""
        for attempt in range(PUSH_TRIES):
            outcome, message = await link.push()
            if outcome is Push.DONE:
                self._reached(pushed=True)
                return change, done
            if outcome is Push.OFFLINE:
                await self._unreached("push", message)
                return change, done
            await trio.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))
            fetched = await link.fetch()
            if fetched.returncode != 0:
                await self._withdraw(link, done)
                await self._unreached("fetch", fetched.message)
                raise BeadStoreError(
                    "another daemon changed the shared board, and then the remote could not "
                    f"be reached to see how ({fetched.message}): nothing changed; try again"
                )
            self.sync_state.last_pull = self._clock()
            if done:
                await self.git.run("reset", "-q", "--hard", "HEAD~1")
            self._dropped(await link.integrate())
            self._adopt(await trio.to_thread.run_sync(self._load))
            change = make(self._board, self._clock())
            done = await self._commit(change)
        await self._withdraw(link, done)
        raise BeadStoreError(
            f"the shared board is busy: {PUSH_TRIES} pushes of this change were rejected, each "
            "time after another daemon's change; nothing changed, try again"
        )

    async def _withdraw(self, link: RemoteLink, done: bool) -> None:
        """Take back the change just committed (`done`) and never pushed."""
        if done:
            await self.git.run("reset", "-q", "--hard", "HEAD~1")
        self._adopt(await trio.to_thread.run_sync(self._load))
        self.sync_state.queued = await link.queued()

    async def sync(self) -> None:
        """Pull the shared board and push the queue (no-op without a remote). A failure is
        kept in `sync_state`, never raised."""
        link = self._link
        if link is None:
            return
        async with self._lock:
            if not self._opened:
                return
            self._last_try = trio.current_time()
            with trio.CancelScope(shield=True):
                try:
                    before = await link.head()
                    await self._exchange(link)
                    if await link.head() != before:
                        self._adopt(await trio.to_thread.run_sync(self._load))
                except (OSError, BeadStoreError) as exc:
                    self.sync_state.last_error = f"{self._clock()} sync: {exc}"
                    log.error("beads.sync_failed", repo=str(self.root), error=str(exc))

    async def refresh(self) -> None:
        """`sync` unless the last one was tried less than `pull_bound` seconds ago."""
        if self._link is not None and trio.current_time() - self._last_try >= self.pull_bound:
            await self.sync()

    async def run_sync(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The background sync: every `pull_interval` seconds (returns at once without a
        remote)."""
        task_status.started()
        if self._link is None:
            return
        while True:
            await trio.sleep(self.pull_interval)
            await self.sync()

    async def _join(self, *, fresh: bool) -> None:
        """At `open`: a new repository takes the remote's board when it has one; then the
        queue (changes made offline, or committed before a kill -9) is pushed."""
        assert self._link is not None
        if fresh:
            fetched = await self._link.fetch()
            if fetched.returncode == 0 and (base := await self._link.tracking()) is not None:
                await self.git.run("reset", "-q", "--hard", base)
        await self._exchange(self._link)

    async def _exchange(self, link: RemoteLink) -> None:
        """Fetch, put the queue on top, push it (a rejected push starts over, with back-off)."""
        for attempt in range(PUSH_TRIES):
            fetched = await link.fetch()
            if fetched.returncode != 0:
                await self._unreached("fetch", fetched.message)
                return
            self.sync_state.last_pull = self._clock()
            self._dropped(await link.integrate())
            if await link.queued() == 0:
                self._reached(pushed=False)
                return
            outcome, message = await link.push()
            if outcome is Push.DONE:
                self._reached(pushed=True)
                return
            if outcome is Push.OFFLINE:
                await self._unreached("push", message)
                return
            await trio.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))
        self.sync_state.last_error = f"{self._clock()} push: rejected {PUSH_TRIES} times"
        self.sync_state.queued = await link.queued()

    def _reached(self, *, pushed: bool) -> None:
        state = self.sync_state
        if pushed:
            state.last_push = self._clock()
        state.queued = 0
        if state.last_error is not None:
            log.info("beads.sync_restored", repo=str(self.root), remote=state.remote)
        state.last_error = None

    async def _unreached(self, what: str, message: str) -> None:
        assert self._link is not None
        self.sync_state.last_error = f"{self._clock()} {what}: {message}"
        self.sync_state.queued = await self._link.queued()
        log.warning(
            "beads.sync_failed", repo=str(self.root), what=what, error=message,
            queued=self.sync_state.queued,
        )  # fmt: skip

    def _dropped(self, subjects: list[str]) -> None:
        for subject in subjects:
            log.error("beads.sync_dropped", repo=str(self.root), change=subject)
            self.sync_state.dropped.append(f"{self._clock()} {subject}")
        del self.sync_state.dropped[:-MAX_DROPPED]

    def _adopt(self, board: Board) -> None:
        """Take a board that came from the remote; waiters look again, and what it changed
        goes to `on_event` (`pulled_events`: never a verb the bead gates act on)."""
        events = pulled_events(self._board, board)
        self._board = board
        self._changed.set()
        self._changed = trio.Event()
        for event in events:
            if self.on_event is not None:
                self.on_event(event)

    # -- the verbs (each one commit) ---------------------------------------------------------

    async def create(self, spec: NewBead, *, by: str) -> Bead:
        change = await self.apply(lambda b, now: b.new_bead(spec, by=by, now=now))
        return change.board.bead(change.answer)

    async def add_dep(self, bead_id: str, dep: str, *, by: str) -> Bead:
        return _bead(await self.apply(lambda b, now: b.add_dep(bead_id, dep, by=by, now=now)))

    async def remove_dep(self, bead_id: str, dep: str, *, by: str) -> Bead:
        return _bead(await self.apply(lambda b, now: b.remove_dep(bead_id, dep, by=by, now=now)))

    async def claim(self, bead_id: str, session: str, *, by: str) -> Bead:
        return _bead(
            await self.apply(
                lambda b, now: b.claim(bead_id, session, by=by, now=now, host=self.host)
            )
        )

    async def complete(
        self, bead_id: str, result: str | None, *, by: str, only_session: str | None = None
    ) -> Bead:
        return _bead(
            await self.apply(
                lambda b, now: b.complete(
                    bead_id, result, by=by, now=now, only_session=only_session
                )
            )
        )

    async def fail(
        self, bead_id: str, reason: str, *, by: str, only_session: str | None = None
    ) -> Bead:
        return _bead(
            await self.apply(
                lambda b, now: b.fail(bead_id, reason, by=by, now=now, only_session=only_session)
            )
        )

    async def approve(self, bead_id: str, *, by: str, approver: str | None = None) -> Bead:
        return _bead(
            await self.apply(lambda b, now: b.approve(bead_id, by=by, now=now, approver=approver))
        )

    async def reject(
        self, bead_id: str, reason: str, *, by: str, approver: str | None = None
    ) -> Bead:
        return _bead(
            await self.apply(
                lambda b, now: b.reject(bead_id, reason, by=by, now=now, approver=approver)
            )
        )

    async def decide(self, bead_id: str, decision: GateDecision) -> Bead:
        """Apply a session result gate's decision (`Board.decide`): checked and committed
        under the one lock, so of two deliveries of the same decision one commits and the
        other gets `BeadConflict`."""
        return _bead(await self.apply(lambda b, now: b.decide(bead_id, decision, now=now)))

    async def release(self, bead_id: str, *, by: str) -> Bead:
        return _bead(await self.apply(lambda b, now: b.release(bead_id, by=by, now=now)))

    async def set_result(self, bead_id: str, text: str, *, by: str) -> Bead:
        return _bead(await self.apply(lambda b, now: b.set_result(bead_id, text, by=by, now=now)))

    async def set_description(self, bead_id: str, text: str, *, by: str) -> Bead:
        return _bead(
            await self.apply(lambda b, now: b.set_description(bead_id, text, by=by, now=now))
        )

    async def create_convoy(self, spec: NewConvoy, *, by: str) -> Convoy:
        change = await self.apply(lambda b, now: b.new_convoy(spec, by=by, now=now))
        return change.board.convoy(change.answer)

    async def add_bead(self, convoy_id: str, bead_id: str, *, by: str) -> Convoy:
        change = await self.apply(lambda b, now: b.add_bead(convoy_id, bead_id, by=by, now=now))
        return change.board.convoy(convoy_id)

    async def remove_bead(self, convoy_id: str, bead_id: str, *, by: str) -> Convoy:
        change = await self.apply(lambda b, now: b.remove_bead(convoy_id, bead_id, by=by, now=now))
        return change.board.convoy(convoy_id)

    async def end_convoy(
        self, convoy_id: str, status: ConvoyStatus, *, by: str, reason: str = ""
    ) -> Convoy:
        change = await self.apply(
            lambda b, now: b.end_convoy(convoy_id, status, by=by, now=now, reason=reason)
        )
        return change.board.convoy(convoy_id)

    async def set_context(self, convoy_id: str, text: str, *, by: str) -> Convoy:
        change = await self.apply(lambda b, now: b.set_context(convoy_id, text, by=by, now=now))
        return change.board.convoy(convoy_id)


def _bead(change: Change) -> Bead:
    if not change.beads:
        raise BeadError("internal: a bead change changed no bead")
    return change.board.bead(change.beads[0].id)


def _counter(ident: str) -> int:
    tail = ident.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _status_paths(status: bytes) -> list[str]:
    """The paths of `git status --porcelain=v1 -z` (the rename source is skipped)."""
    entries = status.decode("utf-8", "replace").split("\0")
    paths: list[str] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":
            i += 1  # the next entry is the original path
    return paths
