"""Checkpoints of sessions: `Workspaces` (daemon-wide) and `SessionCheckpoints` (one session).

    <data dir>/checkpoints/<workspace key>/git, index     the shadow repository (`Shadow`)
    <data dir>/checkpoints/<workspace key>/undo.json      an undo being applied (the intent)
    <data dir>/checkpoints/<workspace key>/sessions/ID.jsonl   the session's steps, one a line

A session's history is a list of `Step`s: each turn (a `before` snapshot at its first mutating
tool call, an `after` one at its end; neither for a turn that changed nothing through a
mutating call), each undo and each rewind (itself a step: undoing it redoes). A later line for
the same step replaces an earlier one (a turn's line at its first change, then at its end).
Operations on one workspace hold its lock; failures of git are logged and cost the checkpoint,
never the turn. An undo is all or nothing across a crash (`anvild.checkpoints.revert`). A line
is written at once (it survives kill -9); a turn's is fsynced soon after by the syncer thread,
an undo's or rewind's before its intent is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, cast

import attrs
import structlog
import trio

from anvild.checkpoints import revert
from anvild.checkpoints.shadow import GitFailed, Shadow, Snapshot, TooLarge
from anvild.checkpoints.watch import WatchPool
from anvild.store.syncer import sync_soon

log = structlog.get_logger(__name__)

DEFAULT_MAX_FILE_BYTES: Final = 1 << 20
IGNORED_NAMED: Final = 10
"""The most ignored paths (a wholly ignored directory is one) an undo's answer names."""
SNAPSHOT_SECONDS: Final = 60.0
"""The longest one snapshot may take; a workspace whose snapshot takes longer is not
checkpointed any more (logged once), so a session in a huge tree is not held at every turn."""


class UndoRefused(Exception):
    """An undo or rewind that was not done; the message says why and what to do."""


def _strs(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class Step:
    """One step of a session's history. `number` is the turn's number (for an undo or rewind:
    its own sequence number); `label` the prompt's first line or the verb; `messages` the
    transcript's length before the turn (`anchor` identifies it); `skipped` the paths the step
    changed that snapshots leave out (`path<TAB>why`); `changes` its `changes` file's text."""

    kind: str  # turn | undo | rewind
    number: int
    label: str
    before: str | None = None
    after: str | None = None
    outcome: str = ""
    messages: int = 0
    anchor: str = ""  # the transcript's first and last message before the turn, hashed
    skipped: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    changes: str = ""
    pending: bool = False  # a turn whose end is not recorded yet

    @property
    def changed(self) -> bool:
        return self.before is not None and self.after is not None and self.before != self.after

    def line(self) -> bytes:
        return json.dumps(attrs.asdict(self), sort_keys=True).encode() + b"\n"


def workspace_key(cwd: Path) -> str:
    resolved = os.path.realpath(cwd)  # `Path.resolve`'s string, at half the cost (every `new`)
    digest = hashlib.sha256(resolved.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{cwd.name or 'root'}-{digest}"


class Workspace:
    """One workspace's shadow repository, its lock and its undo intent."""

    def __init__(
        self, root: Path, cwd: Path, max_file_bytes: int, watch: WatchPool | None = None
    ) -> None:
        self.root = root
        self.shadow = Shadow(root, cwd, max_file_bytes=max_file_bytes, watch=watch)
        self.lock = trio.Lock()
        self.intent = root / "undo.json"
        self.disabled = ""  # why this workspace is not checkpointed ("": it is)
        self._opened = False

    async def ready(self) -> None:
        """Open the repository (once) and finish an undo a crash cut short. Under `lock`."""
        if not self._opened:
            await self.shadow.open()
            self._opened = True
        found = revert.read_intent(self.intent)
        if found is None:
            return
        payload, targets = found
        await revert.apply(self.shadow, targets)
        after = await self.shadow.snapshot(scan=True)
        step = Step(**cast(dict[str, Any], payload["step"]))
        assert step.before is not None
        changes = await changes_text(self.shadow, step.before, after.tree, ())
        step = attrs.evolve(step, after=after.tree, changes=changes)
        history = self.root / "sessions" / f"{payload['session']}.jsonl"
        _append(history, step.line())
        self.intent.unlink()
        log.info("checkpoints.undo_finished", workspace=str(self.shadow.work_tree))


class Workspaces:
    """The shadow repositories of every workspace, under `root` (`<data dir>/checkpoints`)."""

    def __init__(
        self,
        root: Path,
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        watch: WatchPool | bool = True,
    ) -> None:
        """`watch`: skip the scans of an unchanged workspace by its change watcher (True: a
        pool of its own; False: always scan)."""
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.watch = WatchPool() if watch is True else watch or None
        self._open: dict[str, Workspace] = {}

    def workspace(self, cwd: str | Path) -> Workspace:
        cwd = Path(cwd)
        key = workspace_key(cwd)
        found = self._open.get(key)
        if found is None:
            found = Workspace(self.root / key, cwd, self.max_file_bytes, self.watch)
            self._open[key] = found
            if cwd.resolve() in (Path("/"), Path.home().resolve()):
                found.disabled = f"{cwd} is the root or the home directory: not checkpointed"
        return found

    def session(self, session_id: str, cwd: str | Path) -> SessionCheckpoints:
        return SessionCheckpoints(self.workspace(cwd), session_id)

    def undo_owners(self) -> set[str]:
        """The sessions whose undo a crash cut short (a leftover intent in their workspace):
        at start they are built at once, so the undo rolls forward before anyone asks.
        Blocking; an intent that cannot be read is left to the workspace's next `ready`."""
        owners = set()
        for intent in self.root.glob("*/undo.json"):
            try:
                found = revert.read_intent(intent)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("checkpoints.intent_unreadable", path=str(intent), error=str(exc))
                continue
            if found is not None and isinstance(owner := found[0].get("session"), str):
                owners.add(owner)
        return owners

    def close(self) -> None:
        """Release every workspace's change watcher (its inotify instance)."""
        for workspace in self._open.values():
            workspace.shadow.close()
        if self.watch is not None:
            self.watch.close()


def _append(path: Path, line: bytes, *, sync: bool = True) -> None:
    """Append `line`; fsynced before this returns with `sync`, else by the syncer soon after."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as file:
        file.write(line)
        file.flush()
        if sync:
            os.fsync(file.fileno())
    if not sync:
        sync_soon(path)


def _load(path: Path) -> list[Step]:
    steps: dict[tuple[str, int], Step] = {}
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    for raw in lines:
        try:
            step = Step(**json.loads(raw))
        except (ValueError, TypeError):
            continue  # a line torn by a crash
        steps[(step.kind, step.number)] = step
    return list(steps.values())


class SessionCheckpoints:
    """The checkpoints of one session: the agent's `before_change` hook, the turn's start and
    end (from the session), `undo` and `rewind`, and what `agent/ID/turns/` shows."""

    def __init__(self, workspace: Workspace, session_id: str) -> None:
        self._workspace = workspace
        self._id = session_id
        self._path = workspace.root / "sessions" / f"{session_id}.jsonl"
        self._steps = _load(self._path)
        self._turn: Step | None = None
        self._diffs: dict[tuple[str, str], bytes] = {}

    # -- reading -------------------------------------------------------------------------------

    def turns(self) -> list[Step]:
        return [s for s in self._steps if s.kind == "turn"]

    def turn(self, number: int) -> Step | None:
        return next((s for s in self.turns() if s.number == number), None)

    async def diff(self, step: Step) -> bytes:
        if not step.changed:
            return b""
        assert step.before is not None
        assert step.after is not None
        key = (step.before, step.after)
        if key not in self._diffs:
            self._diffs[key] = await self._workspace.shadow.diff(*key)
        return self._diffs[key]

    # -- a turn --------------------------------------------------------------------------------

    def begin_turn(self, number: int, prompt: str, messages: int, anchor: str = "") -> None:
        """A turn starts: `messages` is the transcript's length before it, `anchor` what
        `rewind N conversation` checks the transcript against."""
        label = next((line.strip() for line in prompt.splitlines() if line.strip()), "")
        self._turn = Step("turn", number, label[:200], messages=messages, anchor=anchor)
        self._turn = attrs.evolve(self._turn, pending=True)

    async def before_change(self) -> None:
        """The agent is about to run a mutating call: snapshot once per turn."""
        turn = self._turn
        if turn is None or turn.before is not None:
            return
        snap = await self._snapshot()
        if snap is not None:
            self._turn = attrs.evolve(turn, before=snap.tree, skipped=_lines(snap))
            self._write(self._turn)

    async def end_turn(self, outcome: str) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        if turn.before is None:
            self._write(attrs.evolve(turn, outcome=outcome, pending=False, skipped=()))
            return
        self._write(await self._finished(turn, outcome))

    async def recover(self) -> None:
        """At start: finish an undo a crash cut short, close a turn a crash cut. A new session
        in a workspace with no undo pending has nothing to recover: the repository is opened by
        its first snapshot, not before its first prompt runs."""
        if not self._path.exists() and not self._workspace.intent.exists():
            return
        try:
            async with self._workspace.lock:
                await self._workspace.ready()
        except (GitFailed, OSError) as exc:
            log.warning("checkpoints.recover_failed", session=self._id, error=str(exc))
            return
        self._steps = _load(self._path)
        last = self._steps[-1] if self._steps else None
        if last is not None and last.pending and last.before is not None:
            self._write(await self._finished(last, "interrupted"))

    async def _finished(self, turn: Step, outcome: str) -> Step:
        assert turn.before is not None
        snap = await self._snapshot()
        if snap is None:
            return attrs.evolve(turn, outcome=outcome, pending=False, before=None)
        before = set(turn.skipped)
        skipped = tuple(line for line in _lines(snap) if line not in before)
        changes = await self._changes_text(turn.before, snap.tree, skipped)
        return attrs.evolve(
            turn, after=snap.tree, outcome=outcome, pending=False, skipped=skipped, changes=changes
        )

    async def _snapshot(self) -> Snapshot | None:
        workspace = self._workspace
        if workspace.disabled:
            return None
        try:
            async with workspace.lock:
                with trio.move_on_after(SNAPSHOT_SECONDS):
                    await workspace.ready()
                    return await workspace.shadow.snapshot()
                workspace.shadow.clear_lock()  # a killed git may have left it
                raise TooLarge(
                    f"a snapshot of {workspace.shadow.work_tree} took over {SNAPSHOT_SECONDS:g} "
                    "seconds: it is not checkpointed"
                )
        except TooLarge as exc:
            workspace.disabled = str(exc)
            workspace.shadow.close()  # its change watcher too
            log.warning("checkpoints.workspace_too_large", session=self._id, error=str(exc))
            return None
        except (GitFailed, OSError) as exc:
            log.warning("checkpoints.snapshot_failed", session=self._id, error=str(exc))
            return None

    async def _changes_text(self, old: str, new: str, skipped: Sequence[str]) -> str:
        return await changes_text(self._workspace.shadow, old, new, skipped)

    def _write(self, step: Step, *, sync: bool = False) -> None:
        """Keep `step`; a failed write (disk full) costs its line on disk, never the turn. The
        line is written at once (it survives kill -9) and fsynced by the syncer thread, not on
        the event loop (a thousand turns ending together would stall every stream), unless
        `sync`: what follows depends on the line surviving a power cut."""
        try:
            _append(self._path, step.line(), sync=sync)
        except OSError as exc:
            log.warning("checkpoints.write_failed", session=self._id, error=str(exc))
        key = (step.kind, step.number)
        self._steps = [s for s in self._steps if (s.kind, s.number) != key] + [step]

    # -- undo and rewind -----------------------------------------------------------------------

    async def undo(self, *, force: bool = False) -> str:
        """Revert the last step that changed files (a turn, an undo, a rewind)."""
        last = next((s for s in reversed(self._steps) if s.changed), None)
        if last is None:
            raise UndoRefused("nothing to undo: no turn of this session changed files")
        assert last.before is not None
        assert last.after is not None
        what = f"turn {last.number}" if last.kind == "turn" else f"{last.kind} {last.number}"
        label = f"undo {what}"
        return await self._revert("undo", label, last.after, last.before, force, last.skipped)

    async def rewind(self, number: int, *, force: bool = False) -> tuple[str, Step]:
        """Revert the files to before turn `number`; the turn's step (for its transcript)."""
        turn = self.turn(number)
        if turn is None:
            known = ", ".join(str(s.number) for s in self.turns()) or "none yet"
            raise UndoRefused(f"turn {number} has no checkpoint (turns with one: {known})")
        later = self._steps[self._steps.index(turn) :]
        target = next((s.before for s in later if s.before is not None), None)
        base = next((s.after for s in reversed(self._steps) if s.after is not None), None)
        if target is None or base is None or target == base:
            return f"no file changes since turn {number}", turn
        skipped = tuple(dict.fromkeys(line for s in later for line in s.skipped))
        text = await self._revert("rewind", f"rewind {number}", base, target, force, skipped)
        return text, turn

    async def _revert(
        self, kind: str, label: str, base: str, target: str, force: bool, skipped: Sequence[str]
    ) -> str:
        workspace = self._workspace
        shadow = workspace.shadow
        async with workspace.lock:
            await workspace.ready()
            now = await shadow.snapshot(scan=True)
            found = await revert.plan(shadow, base, target, now, force=force)
            if found.conflicts:
                paths = "".join(f"\n  {line}" for line in found.conflicts)
                raise UndoRefused(
                    f"{label}: not done, these files changed since and do not merge:{paths}\n"
                    f"write `{kind} force` to overwrite them (their edits are kept in the undo "
                    "step, which `undo` takes back)"
                )
            number = 1 + max((s.number for s in self._steps if s.kind == kind), default=0)
            step = Step(kind, number, label, before=now.tree, pending=False, outcome="done")
            payload: dict[str, object] = {"session": self._id, "step": attrs.asdict(step)}
            revert.write_intent(workspace.intent, payload, found.targets)
            await revert.apply(shadow, found.targets)
            after = await shadow.snapshot()
            changes = await self._changes_text(now.tree, after.tree, ())
            self._write(attrs.evolve(step, after=after.tree, changes=changes), sync=True)
            workspace.intent.unlink()
            try:
                ignored = await shadow.ignored()
            except GitFailed as exc:  # only the report's list: the revert is done
                log.warning("checkpoints.ignored_failed", session=self._id, error=str(exc))
                ignored = []
        report = _report(label, found, skipped, ignored)
        if kind == "undo" and label.startswith("undo rewind"):
            report += (
                "\nfiles only: a conversation cut by `rewind N conversation` stays cut "
                "(the transcript is not restored)"
            )
        return report


async def changes_text(shadow: Shadow, old: str, new: str, skipped: Sequence[str]) -> str:
    """The `changes` file: STATUS +ADDED -DELETED PATH [mode OLD -> NEW], then S lines for
    the paths the snapshots skipped."""
    counts = await shadow.numstat(old, new)
    lines = []
    for change in await shadow.changes(old, new):
        added, deleted = counts.get(change.path, ("0", "0"))
        line = f"{change.status}\t+{added}\t-{deleted}\t{change.path}"
        old_entry, new_entry = change.old, change.new
        if old_entry is not None and new_entry is not None and old_entry.mode != new_entry.mode:
            line += f"\tmode {old_entry.mode} -> {new_entry.mode}"
        lines.append(line + "\n")
    lines.extend(f"S\t-\t-\t{line}\n" for line in skipped)
    return "".join(lines)


def _lines(snapshot: Snapshot) -> tuple[str, ...]:
    return tuple(s.line() for s in snapshot.skipped)


def _report(
    label: str, found: revert.Plan, skipped: Sequence[str], ignored: Sequence[str] = ()
) -> str:
    lines = [f"{label}: {len(found.targets)} file(s) restored"]
    if found.merged:
        lines.append("merged with later edits: " + " ".join(found.merged))
    left = tuple(dict.fromkeys((*found.left, *skipped)))
    if left:
        lines.append("left as they are (not checkpointed): " + "; ".join(left))
    if ignored:
        named = " ".join(ignored[:IGNORED_NAMED])
        more = len(ignored) - IGNORED_NAMED
        lines.append(
            "ignored (.gitignore, .git/info/exclude), never checkpointed nor restored: "
            + named
            + (f" and {more} more" if more > 0 else "")
        )
    return "\n".join(lines)


__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "SessionCheckpoints",
    "Step",
    "UndoRefused",
    "Workspace",
    "Workspaces",
    "changes_text",
    "workspace_key",
]
