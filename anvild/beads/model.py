"""Beads and convoys as values, the bead status table, and the id scheme (all pure).

`Bead` and `Convoy` are frozen attrs values; a change is `attrs.evolve` in `anvild.beads.board`.
Every status change is one row of `TRANSITIONS` (verb, from-status) -> to-status; a verb with no
row for the bead's status is refused naming the statuses it needs. `reject` fails the bead (it
never goes back to its worker by itself); `release` makes a failed bead claimable again, its
result and reason kept.
Ids are `<slug>-<NNN>`: the first two title words (lower-case ASCII, at most 24 characters;
`bead`/`convoy` if empty) and one counter for all beads (one for convoys), one more than the
highest in the store: `research-auth-001`. Never reused while the store holds a higher one, and
never equal to the fixed names of `agent/beads/` (`ctl`, `list`, `ready`).
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

__all__ = [
    "GATE_PREFIX",
    "ID_RE",
    "ROLE_RE",
    "TRANSITIONS",
    "USER",
    "Bead",
    "BeadStatus",
    "Convoy",
    "ConvoyStatus",
    "Progress",
    "next_id",
    "slug",
]


class BeadStatus(enum.Enum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    PENDING_APPROVAL = "pending_approval"
    COMPLETED = "completed"
    FAILED = "failed"


class ConvoyStatus(enum.Enum):
    PLANNING = "planning"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    ABANDONED = "abandoned"

    @property
    def open(self) -> bool:
        """Still taking beads and changes (not completed, failed or abandoned)."""
        return self in (ConvoyStatus.PLANNING, ConvoyStatus.IN_PROGRESS)


B = BeadStatus

TRANSITIONS: Final[Mapping[tuple[str, BeadStatus], BeadStatus]] = {
    ("claim", B.PENDING): B.IN_PROGRESS,
    ("fail", B.PENDING): B.FAILED,
    ("complete", B.IN_PROGRESS): B.COMPLETED,
    ("submit", B.IN_PROGRESS): B.PENDING_APPROVAL,  # complete of a bead that requires approval
    ("fail", B.IN_PROGRESS): B.FAILED,
    ("release", B.IN_PROGRESS): B.PENDING,
    ("approve", B.PENDING_APPROVAL): B.COMPLETED,
    ("reject", B.PENDING_APPROVAL): B.FAILED,
    ("release", B.FAILED): B.PENDING,
}
"""(verb, from-status) -> to-status: the only status changes a bead can make."""


def sources_of(verb: str) -> list[BeadStatus]:
    """The statuses from which `verb` is allowed."""
    return [status for (v, status) in TRANSITIONS if v == verb]


GATE_PREFIX: Final = "bead "
"""A session's result gate for a bead has `asked_by` = `bead <id>`."""
USER: Final = "user"
"""The name of a person in `by`, `assigned_to` and `approved_by` (a file write is by `user`)."""

ID_RE: Final = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*-[0-9]{3,}$")
ROLE_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SLUG_WORDS: Final = 2
SLUG_MAX: Final = 24


def slug(title: str, fallback: str) -> str:
    """The readable part of an id: the title's first words in lower-case ASCII."""
    ascii_text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())[:SLUG_WORDS]
    text = "-".join(words)[:SLUG_MAX].strip("-")
    return text or fallback


def counter_of(ident: str) -> int:
    """The counter at the end of an id (0 if there is none)."""
    tail = ident.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def next_id(title: str, existing: Iterable[str], fallback: str) -> str:
    """A new id for `title`, its counter one more than the highest of `existing`."""
    counter = max((counter_of(i) for i in existing), default=0) + 1
    return f"{slug(title, fallback)}-{counter:03d}"


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class Bead:
    """One unit of work. `assigned_to` is a session id (or `user`) while claimed; `reason` is
    the last fail or reject reason (kept across a release, for the next worker);
    `submissions` counts the completions that went to pending_approval: the approval round,
    which the assigned session's result gate carries as its `ref` (see `anvild.beads`);
    `approver` is who may approve it besides a person: an approver session's id named by the
    bead's creator, fixed at creation, or `user` (only a person; files written before the
    field existed read as `user`); `host` is the host of the daemon that claimed it (kept
    while it is claimed; None without a `[beads] remote`)."""

    id: str
    title: str
    role: str
    description: str = ""
    status: BeadStatus = BeadStatus.PENDING
    assigned_to: str | None = None
    result: str = ""
    depends_on: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    requires_approval: bool = False
    approver: str = USER
    approved_by: str | None = None
    convoy: str | None = None
    reason: str = ""
    created_at: str = ""
    updated_at: str = ""
    submissions: int = 0
    host: str | None = None

    @property
    def gate(self) -> str:
        """The `asked_by` of this bead's result gate on its session."""
        return f"{GATE_PREFIX}{self.id}"

    def list_line(self, *, orphaned: bool = False) -> str:
        """Its line of `agent/beads/list`: id status role assigned_to title, tab-separated,
        `-` for an empty field, then `orphaned` when the assignee's session has ended."""
        fields = [self.id, self.status.value, self.role, self.assigned_to or "-"]
        fields.append(" ".join(self.title.split()) or "-")
        if orphaned:
            fields.append("orphaned")
        return "\t".join(fields)


@attrs.frozen
class Progress:
    """A convoy's progress: completed member beads of all member beads."""

    done: int
    total: int

    @property
    def percent(self) -> int:
        return self.done * 100 // self.total if self.total else 0

    def text(self) -> str:
        return f"{self.done}/{self.total} {self.percent}%\n"


@attrs.frozen
class Convoy:
    """A group of beads toward one goal, with a coordinator and context shared by its workers."""

    id: str
    title: str
    goal: str = ""
    status: ConvoyStatus = ConvoyStatus.PLANNING
    coordinator: str | None = None
    beads: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    context: str = ""
    created_at: str = ""
    updated_at: str = ""

    def list_line(self, progress: Progress) -> str:
        """Its line of `agent/convoys/list`: id status done/total coordinator title."""
        fields = [
            self.id,
            self.status.value,
            f"{progress.done}/{progress.total}",
            self.coordinator or "-",
            " ".join(self.title.split()) or "-",
        ]
        return "\t".join(fields)
