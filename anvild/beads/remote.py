"""The bead repository's git remote: fetch, integrate, push, and the sync state people read.

The remote's `main` is the shared board; `refs/remotes/origin/main` is what this daemon last saw
of it, and the local commits past it are the queue. Git arbitrates: a push that is not a
fast-forward is rejected, so of two daemons changing the board at once one push lands and the
other fetches, rebases its queue onto it (beads are one file each) and pushes again. A queued
commit that no longer applies (the same file changed on the remote) is dropped and reported:
the remote wins, as a claim that lost the race. Every network command is bounded by a time
limit; a remote that cannot be reached leaves the queue as it is (`SyncState.last_error`).
The URL is passed on each command (nothing in `.git/config`), never as an option.
`pulled_events` says what a pulled board changed, as events `by` `remote` (action `pull`).
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from anvild.beads.board import Board
from anvild.beads.errors import BeadStoreError
from anvild.beads.events import BeadChanged, BeadCreated, BeadEvent, ConvoyChanged, ConvoyCreated
from anvild.beads.git import Git, GitResult
from anvild.beads.model import BeadStatus

__all__ = ["PULLED_BY", "TRACKING", "Push", "RemoteLink", "SyncState", "pulled_events"]

PULLED_BY: Final = "remote"

TRACKING: Final = "refs/remotes/origin/main"
_FETCH_SPEC: Final = "+refs/heads/*:refs/remotes/origin/*"


class Push(enum.Enum):
    DONE = "done"  # the remote has every local commit (or there was nothing to push)
    REJECTED = "rejected"  # not a fast-forward, or the remote could not take its ref lock
    OFFLINE = "offline"  # the remote could not be reached: the commits stay queued


@attrs.define
class SyncState:
    """What `agent/beads/sync` shows: the remote, when it was last reached, the queue."""

    remote: str | None = None
    host: str | None = None
    last_push: str | None = None
    last_pull: str | None = None
    queued: int = 0
    last_error: str | None = None
    dropped: list[str] = attrs.field(factory=list)
    """Subjects of queued commits dropped because the remote changed the same file."""

    def text(self) -> str:
        if self.remote is None:
            return "remote\t-\nstate\tlocal only: no [beads] remote configured\n"
        if self.last_error is not None:
            state = "offline" if self.queued else "error"
        else:
            state = "queued" if self.queued else "in sync"
        rows = [
            ("remote", self.remote),
            ("host", self.host or "-"),
            ("state", state),
            ("last_push", self.last_push or "-"),
            ("last_pull", self.last_pull or "-"),
            ("queued", str(self.queued)),
            ("last_error", self.last_error or "-"),
            *(("dropped", subject) for subject in self.dropped),
        ]
        return "".join(f"{key}\t{' '.join(value.split())}\n" for key, value in rows)


class RemoteLink:
    """The git commands that talk to one remote URL, for one bead repository."""

    def __init__(self, git: Git, url: str, *, limit: float) -> None:
        if not url or url.startswith("-"):
            raise BeadStoreError(
                f"bad [beads] remote {url!r}: give a git URL (a path, ssh://host/path.git or "
                "host:path.git)"
            )
        self.git = git
        self.url = url
        self.limit = limit

    async def fetch(self) -> GitResult:
        """Fetch every branch into `refs/remotes/origin/` (pruned); exit 0 when reached."""
        return await self.git.call(
            "fetch", "-q", "--prune", "--no-tags", self.url, _FETCH_SPEC, limit=self.limit
        )

    async def push(self) -> tuple[Push, str]:
        """Push HEAD to the remote's `main`; what happened and git's message."""
        done = await self.git.call(
            "push", "--porcelain", "--no-verify", self.url, "HEAD:refs/heads/main", limit=self.limit
        )
        if done.returncode == 0:
            await self.git.run("update-ref", TRACKING, "HEAD")
            return Push.DONE, ""
        out = done.stdout.decode("utf-8", "replace")
        if "[rejected]" in out or "[remote rejected]" in out:
            return Push.REJECTED, done.message
        return Push.OFFLINE, done.message

    async def tracking(self) -> str | None:
        """The commit the remote's `main` had at the last fetch or push (None: none seen)."""
        out = await self.git.run("rev-parse", "--verify", "-q", TRACKING, check=False)
        return out.decode().strip() or None

    async def head(self) -> str:
        return (await self.git.run("rev-parse", "HEAD")).decode().strip()

    async def queued(self) -> int:
        """Local commits the remote does not have."""
        base = await self.tracking()
        spec = f"{TRACKING}..HEAD" if base else "HEAD"
        return int((await self.git.run("rev-list", "--count", spec)).decode().strip() or "0")

    async def integrate(self) -> list[str]:
        """Put the local queue on top of the fetched remote `main`: a fast-forward when there
        is no queue, else a rebase that drops each queued commit which no longer applies (the
        subjects of the dropped ones)."""
        base = await self.tracking()
        if base is None:
            return []
        ancestor = await self.git.call("merge-base", "--is-ancestor", "HEAD", base)
        if ancestor.returncode == 0:
            await self.git.run("reset", "-q", "--hard", base)
            return []
        behind = await self.git.call("merge-base", "--is-ancestor", base, "HEAD")
        if behind.returncode == 0:
            return []
        dropped: list[str] = []
        done = await self.git.call("rebase", "-q", "--no-autosquash", "--no-autostash", base)
        while done.returncode != 0:
            stopped = await self.git.call("log", "-1", "--format=%s", "REBASE_HEAD")
            if stopped.returncode != 0:
                await self.git.call("rebase", "--abort")
                raise BeadStoreError(f"cannot rebase the queued bead changes: {done.message}")
            dropped.append(stopped.stdout.decode("utf-8", "replace").strip())
            done = await self.git.call("rebase", "--skip")
        return dropped


def pulled_events(old: Board, new: Board) -> list[BeadEvent]:
    """The events of what another daemon changed, `old` being this daemon's board before the
    pull: each new bead or convoy, and each one that differs (action `pull`; which verb made
    the change is in the remote's history, not in the files)."""
    events: list[BeadEvent] = []
    for bead in new.beads.values():
        before = old.beads.get(bead.id)
        if before is None:
            events.append(BeadCreated(bead.id, bead.title, bead.role, bead.depends_on, PULLED_BY))
        if (before is None and bead.status is BeadStatus.PENDING) or before == bead:
            continue
        detail = f"on host {bead.host}" if bead.host else ""
        events.append(
            BeadChanged(bead.id, "pull", bead.status.value, bead.assigned_to, PULLED_BY, detail)
        )
    for convoy in new.convoys.values():
        was = old.convoys.get(convoy.id)
        if was is None:
            events.append(ConvoyCreated(convoy.id, convoy.title, convoy.coordinator, PULLED_BY))
        if was is None or was == convoy:
            continue
        progress = new.progress(convoy)
        status = convoy.status.value
        events.append(
            ConvoyChanged(convoy.id, "pull", status, progress.done, progress.total, PULLED_BY)
        )
    return events
