"""The bead board: every bead and convoy in memory, and each change as a pure function.

`Board` is frozen. Each operation raises a `BeadError` (nothing changed) or returns a `Change`:
the next board, the files to rewrite, the commit message and the events. Rules kept here only:
- a status change is a row of `model.TRANSITIONS`;
- `claim` needs a pending bead with every dependency completed; a held bead names its holder;
- dependencies exist, are not the bead itself, close no cycle, change only while pending;
- `complete` with `requires_approval` -> pending_approval, one more round (`submissions`);
  approve/reject are refused from the assigned session and from any session but the bead's
  `approver` (`user` always accepted); `decide` applies only in the same round;
- a bead is in at most one convoy; a convoy starts on its first claim and completes when every
  member bead is completed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from anvild.beads.errors import BeadConflict, BeadNotFound, InvalidBeadRequest
from anvild.beads.events import (
    BeadChanged,
    BeadCreated,
    BeadEvent,
    ConvoyChanged,
    ConvoyCreated,
)
from anvild.beads.model import (
    ROLE_RE,
    TRANSITIONS,
    USER,
    Bead,
    BeadStatus,
    Convoy,
    ConvoyStatus,
    Progress,
    next_id,
    sources_of,
)

__all__ = ["MAX_TITLE", "Board", "Change", "NewBead", "NewConvoy"]

MAX_TITLE = 200
B = BeadStatus
C = ConvoyStatus

# A bead's text field -> the statuses it may be written in, and what a refusal says.
_TEXT_OPEN: dict[str, tuple[tuple[BeadStatus, ...], str]] = {
    "result": (
        (B.PENDING, B.IN_PROGRESS),
        "its result is final; write a result while the bead is pending or in progress (or "
        "complete RESULT)",
    ),
    "description": ((B.PENDING,), "its description changes only while it is pending"),
}


@attrs.frozen
class NewBead:
    """What `new` on `agent/beads/ctl` (or a tool) asks for."""

    title: str
    role: str
    description: str = ""
    depends_on: tuple[str, ...] = ()
    requires_approval: bool = False
    convoy: str | None = None
    approver: str = USER  # a session id, or `user`; the caller resolves and checks the name


@attrs.frozen
class NewConvoy:
    title: str
    goal: str = ""
    coordinator: str | None = None
    context: str = ""


@attrs.frozen
class GateDecision:
    """How a session's result gate ended for the bead the session works on: `verdict` (approve
    or reject, with `reason`) of `session`'s gate for approval round `round`, answered by
    `answered_by` (`user` or a session id)."""

    session: str
    round: int
    verdict: str
    reason: str
    answered_by: str


@attrs.frozen
class Change:
    """One accepted change: one commit."""

    board: Board
    message: str
    beads: tuple[Bead, ...] = ()
    convoys: tuple[Convoy, ...] = ()
    events: tuple[BeadEvent, ...] = ()
    answer: str = ""  # what a read on the ctl fid returns (the new id)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _check_title(title: str, what: str) -> str:
    text = " ".join(title.split())
    if not text:
        raise InvalidBeadRequest(f"the {what} title is empty; give one in quotes")
    if bad := _CONTROL.search(text):
        raise InvalidBeadRequest(
            f"the {what} title holds the control character U+{ord(bad.group()):04X}; a title "
            "is a name and may not contain control characters (U+0000-U+001F, U+007F-U+009F): "
            "remove it"
        )
    if len(text) > MAX_TITLE:
        raise InvalidBeadRequest(
            f"the {what} title is {len(text)} characters long; keep it under {MAX_TITLE} "
            "and put the rest in the description"
        )
    return text


def _check_role(role: str) -> str:
    if not ROLE_RE.fullmatch(role):
        raise InvalidBeadRequest(
            f"bad role {role!r}: a role is a name of letters, digits, '.', '_' or '-' "
            "(e.g. developer, reviewer, researcher)"
        )
    return role


def _check_actor(name: str, what: str) -> str:
    if not name or any(c.isspace() for c in name) or len(name) > 128:
        raise InvalidBeadRequest(f"bad {what} {name!r}: give a session id or alias")
    return name


@attrs.frozen
class Board:
    """Every bead and convoy, in creation order."""

    beads: Mapping[str, Bead] = attrs.field(factory=dict)
    convoys: Mapping[str, Convoy] = attrs.field(factory=dict)
    reserved: frozenset[str] = frozenset()
    """Ids whose files exist but could not be read: never given to a new bead or convoy."""

    # -- queries --------------------------------------------------------------------------

    def bead(self, bead_id: str) -> Bead:
        bead = self.beads.get(bead_id)
        if bead is None:
            raise BeadNotFound(f"no bead {bead_id!r}: read agent/beads/list for the bead ids")
        return bead

    def convoy(self, convoy_id: str) -> Convoy:
        convoy = self.convoys.get(convoy_id)
        if convoy is None:
            raise BeadNotFound(
                f"no convoy {convoy_id!r}: read agent/convoys/list for the convoy ids"
            )
        return convoy

    def unmet(self, bead: Bead) -> list[Bead]:
        """The dependencies of `bead` that are not completed."""
        deps = (self.beads.get(d) for d in bead.depends_on)
        return [d for d in deps if d is not None and d.status is not B.COMPLETED]

    def is_ready(self, bead: Bead) -> bool:
        return bead.status is B.PENDING and not self.unmet(bead)

    def ready(self, role: str | None = None) -> list[Bead]:
        """Pending beads whose dependencies are all completed (of `role`, if given)."""
        return [
            b for b in self.beads.values() if self.is_ready(b) and (role is None or b.role == role)
        ]

    def progress(self, convoy: Convoy) -> Progress:
        members = [self.beads.get(i) for i in convoy.beads]
        done = sum(1 for b in members if b is not None and b.status is B.COMPLETED)
        return Progress(done, len(convoy.beads))

    def assigned(self, session: str) -> list[Bead]:
        """Beads claimed by `session` and not finished (in progress or awaiting approval)."""
        return [
            b
            for b in self.beads.values()
            if b.assigned_to == session and b.status in (B.IN_PROGRESS, B.PENDING_APPROVAL)
        ]

    def context_for(self, session: str) -> str:
        """The system-prompt layer for `session`: under `# Convoy context`, the goal and shared
        context of every convoy one of its unfinished beads belongs to; "" when there is none.
        A pure function of the board, so the prompt's bytes change only when this text does."""
        seen: dict[str, Convoy] = {}
        for bead in self.assigned(session):
            if bead.convoy is not None and bead.convoy in self.convoys:
                seen.setdefault(bead.convoy, self.convoys[bead.convoy])
        parts = []
        for convoy in sorted(seen.values(), key=lambda c: c.id):
            head = f"## Convoy {convoy.id}: {convoy.title}"
            body = [head]
            if convoy.goal.strip():
                body.append(f"Goal: {convoy.goal.strip()}")
            if convoy.context.strip():
                body.append(convoy.context.strip())
            parts.append("\n\n".join(body))
        if not parts:
            return ""
        head = (
            "# Convoy context\n\nYou are working on beads of the convoys below; their goal and "
            "shared context apply to that work."
        )
        return "\n\n".join([head, *parts])

    # -- building changes -------------------------------------------------------------------

    def _with(
        self,
        beads: Iterable[Bead] = (),
        convoys: Iterable[Convoy] = (),
    ) -> Board:
        new_beads = dict(self.beads)
        new_convoys = dict(self.convoys)
        for b in beads:
            new_beads[b.id] = b
        for c in convoys:
            new_convoys[c.id] = c
        return Board(new_beads, new_convoys, self.reserved)

    def _change(
        self,
        message: str,
        beads: Iterable[Bead] = (),
        convoys: Iterable[Convoy] = (),
        events: Iterable[BeadEvent] = (),
        answer: str = "",
    ) -> Change:
        beads, convoys = tuple(beads), tuple(convoys)
        return Change(self._with(beads, convoys), message, beads, convoys, tuple(events), answer)

    def _transition(self, bead: Bead, verb: str) -> BeadStatus:
        target = TRANSITIONS.get((verb, bead.status))
        if target is None:
            needs = " or ".join(s.value for s in sources_of(verb))
            holder = f" (assigned to {bead.assigned_to})" if bead.assigned_to else ""
            raise BeadConflict(
                f"bead {bead.id} is {bead.status.value}{holder}: {verb} needs a bead that is "
                f"{needs}"
            )
        return target

    def _bead_event(self, bead: Bead, action: str, by: str, detail: str = "") -> BeadChanged:
        return BeadChanged(bead.id, action, bead.status.value, bead.assigned_to, by, detail)

    def _convoy_event(
        self, convoy: Convoy, action: str, by: str, detail: str = ""
    ) -> ConvoyChanged:
        p = self.progress(convoy)
        return ConvoyChanged(convoy.id, action, convoy.status.value, p.done, p.total, by, detail)

    def _follow_convoy(
        self, bead: Bead, by: str, now: str
    ) -> tuple[list[Convoy], list[BeadEvent], str]:
        """What a member bead's new status does to its convoy: (convoys, events, note)."""
        if bead.convoy is None or bead.convoy not in self.convoys:
            return [], [], ""
        convoy = self.convoys[bead.convoy]
        if not convoy.status.open:
            return [], [], ""
        after = self._with([bead])
        if bead.status is B.COMPLETED:
            members = [after.beads.get(i) for i in convoy.beads]
            if members and all(m is not None and m.status is B.COMPLETED for m in members):
                done = attrs.evolve(convoy, status=C.COMPLETED, updated_at=now)
                event = after._convoy_event(done, "complete", by, "its last bead completed")
                return [done], [event], f"; convoy {convoy.id} completed"
        if bead.status is B.IN_PROGRESS and convoy.status is C.PLANNING:
            moving = attrs.evolve(convoy, status=C.IN_PROGRESS, updated_at=now)
            event = after._convoy_event(moving, "start", by, f"bead {bead.id} was claimed")
            return [moving], [event], f"; convoy {convoy.id} in progress"
        return [], [], ""

    def _status_change(
        self, bead: Bead, action: str, by: str, now: str, message: str, detail: str = ""
    ) -> Change:
        convoys, events, note = self._follow_convoy(bead, by, now)
        first = self._bead_event(bead, action, by, detail)
        return self._change(f"{message}{note} (by {by})", [bead], convoys, [first, *events])

    # -- beads -----------------------------------------------------------------------------

    def new_bead(self, spec: NewBead, *, by: str, now: str) -> Change:
        title = _check_title(spec.title, "bead")
        role = _check_role(spec.role)
        deps = tuple(dict.fromkeys(spec.depends_on))
        for dep in deps:
            if dep not in self.beads:
                raise InvalidBeadRequest(
                    f"dependency {dep!r} is not a bead: read agent/beads/list for the bead ids"
                )
        approver = spec.approver.strip() or USER
        if approver != USER and not spec.requires_approval:
            raise InvalidBeadRequest(
                f"approver={approver} names who approves the bead's completion, and this bead "
                "does not require approval: add requires_approval, or leave approver out"
            )
        convoy = None
        if spec.convoy is not None:
            convoy = self._open_convoy(spec.convoy, "add a bead to")
        bead_id = next_id(title, [*self.beads, *self.reserved], "bead")
        bead = Bead(
            id=bead_id,
            title=title,
            role=role,
            description=spec.description,
            depends_on=deps,
            requires_approval=spec.requires_approval,
            approver=approver,
            convoy=convoy.id if convoy else None,
            created_at=now,
            updated_at=now,
        )
        convoys = []
        events: list[BeadEvent] = [BeadCreated(bead_id, title, role, deps, by)]
        message = f"new {bead_id}: {title} (role {role}"
        if deps:
            message += f", after {', '.join(deps)}"
        if convoy is not None:
            grown = attrs.evolve(convoy, beads=(*convoy.beads, bead_id), updated_at=now)
            convoys.append(grown)
            message += f", in convoy {convoy.id}"
        if approver != USER:
            message += f", approver {approver}"
        message += f") (by {by})"
        change = self._change(message, [bead], convoys, answer=bead_id)
        if convoys:
            events.append(change.board._convoy_event(convoys[0], "add_bead", by, bead_id))
        return attrs.evolve(change, events=tuple(events))

    def _cycle(self, bead_id: str, dep: str) -> list[str] | None:
        """The path dep -> ... -> bead_id along depends_on, if there is one."""
        stack: list[tuple[str, list[str]]] = [(dep, [dep])]
        seen: set[str] = set()
        while stack:
            current, path = stack.pop()
            if current == bead_id:
                return path
            if current in seen:
                continue
            seen.add(current)
            node = self.beads.get(current)
            if node is not None:
                stack.extend((d, [*path, d]) for d in node.depends_on)
        return None

    def add_dep(self, bead_id: str, dep: str, *, by: str, now: str) -> Change:
        bead = self.bead(bead_id)
        if dep not in self.beads:
            raise InvalidBeadRequest(
                f"dependency {dep!r} is not a bead: read agent/beads/list for the bead ids"
            )
        if dep == bead_id:
            raise InvalidBeadRequest(f"bead {bead_id} cannot depend on itself")
        if dep in bead.depends_on:
            raise InvalidBeadRequest(f"bead {bead_id} already depends on {dep}")
        if bead.status is not B.PENDING:
            raise BeadConflict(
                f"bead {bead_id} is {bead.status.value}: dependencies change only while a bead "
                "is pending"
            )
        path = self._cycle(bead_id, dep)
        if path is not None:
            cycle = " -> ".join([bead_id, *path])
            raise InvalidBeadRequest(
                f"bead {bead_id} cannot depend on {dep}: that would make a cycle ({cycle}); "
                "remove one of these dependencies first"
            )
        changed = attrs.evolve(bead, depends_on=(*bead.depends_on, dep), updated_at=now)
        event = self._bead_event(changed, "dep add", by, dep)
        return self._change(f"dep add {bead_id} {dep} (by {by})", [changed], events=[event])

    def remove_dep(self, bead_id: str, dep: str, *, by: str, now: str) -> Change:
        bead = self.bead(bead_id)
        if dep not in bead.depends_on:
            have = ", ".join(bead.depends_on) or "none"
            raise InvalidBeadRequest(
                f"bead {bead_id} does not depend on {dep!r} (its dependencies: {have})"
            )
        if bead.status is not B.PENDING:
            raise BeadConflict(
                f"bead {bead_id} is {bead.status.value}: dependencies change only while a bead "
                "is pending"
            )
        deps = tuple(d for d in bead.depends_on if d != dep)
        changed = attrs.evolve(bead, depends_on=deps, updated_at=now)
        event = self._bead_event(changed, "dep remove", by, dep)
        return self._change(f"dep remove {bead_id} {dep} (by {by})", [changed], events=[event])

    def claim(
        self, bead_id: str, session: str, *, by: str, now: str, host: str | None = None
    ) -> Change:
        """`session` (on the daemon of `host`, when the board is shared) takes the bead."""
        bead = self.bead(bead_id)
        _check_actor(session, "claimant")
        if bead.status is B.IN_PROGRESS or bead.status is B.PENDING_APPROVAL:
            who = "you" if bead.assigned_to == session and bead.host == host else bead.assigned_to
            if bead.host is not None:
                who = f"{who} on host {bead.host}"
            raise BeadConflict(
                f"bead {bead_id} is already claimed by {who} ({bead.status.value} since "
                f"{bead.updated_at}); only a release (write release to its ctl) makes it "
                "claimable again"
            )
        target = self._transition(bead, "claim")
        unmet = self.unmet(bead)
        if unmet:
            waiting = ", ".join(f"{d.id} ({d.status.value})" for d in unmet)
            raise BeadConflict(
                f"bead {bead_id} is not ready: it depends on {waiting}; claim it when they are "
                "completed (agent/beads/ready lists the claimable beads)"
            )
        claimed = attrs.evolve(bead, status=target, assigned_to=session, host=host, updated_at=now)
        return self._status_change(
            claimed, "claim", by, now, f"claim {bead_id} for {session}", session
        )

    def _check_holder(self, bead: Bead, only_session: str | None, verb: str) -> None:
        if only_session is not None and bead.assigned_to != only_session:
            holder = bead.assigned_to or "nobody"
            raise BeadConflict(
                f"bead {bead.id} is assigned to {holder}, not to you: you can only {verb} a "
                "bead you claimed"
            )

    def complete(
        self,
        bead_id: str,
        result: str | None,
        *,
        by: str,
        now: str,
        only_session: str | None = None,
    ) -> Change:
        bead = self.bead(bead_id)
        self._check_holder(bead, only_session, "complete")
        verb = "submit" if bead.requires_approval else "complete"
        target = self._transition(bead, verb)
        done = attrs.evolve(
            bead,
            status=target,
            result=bead.result if result is None else result,
            updated_at=now,
            submissions=bead.submissions + (target is B.PENDING_APPROVAL),
        )
        if target is B.PENDING_APPROVAL:
            message = f"complete {bead_id}: pending approval"
        else:
            message = f"complete {bead_id}"
        return self._status_change(done, "complete", by, now, message)

    def fail(
        self,
        bead_id: str,
        reason: str,
        *,
        by: str,
        now: str,
        only_session: str | None = None,
    ) -> Change:
        bead = self.bead(bead_id)
        reason = reason.strip()
        if not reason:
            raise InvalidBeadRequest("fail needs a reason: fail REASON")
        self._check_holder(bead, only_session, "fail")
        target = self._transition(bead, "fail")
        failed = attrs.evolve(bead, status=target, reason=reason, updated_at=now)
        return self._status_change(
            failed, "fail", by, now, f"fail {bead_id}: {_first_line(reason)}", reason
        )

    def _check_not_own(self, bead: Bead, approver: str, verb: str) -> None:
        """An agent never approves (or rejects) its own work, and a session only the work of
        a bead that names it as approver."""
        if approver == USER:
            return
        if approver == bead.assigned_to:
            raise BeadConflict(
                f"session {approver} cannot {verb} bead {bead.id}: it is assigned to that "
                "session, and an agent never answers the approval of its own work; a person "
                "or another session must"
            )
        if approver != bead.approver:
            named = "user" if bead.approver == USER else f"session {bead.approver} or user"
            raise BeadConflict(
                f"session {approver} cannot {verb} bead {bead.id}: only {named} may (the "
                f"approver named when the bead was created); ask a human to write approve or "
                f"reject REASON to agent/beads/{bead.id}/ctl"
            )

    def approve(
        self, bead_id: str, *, by: str, now: str, approver: str | None = None, via: str = ""
    ) -> Change:
        """`approved_by` is `approver` (default `by`): `user`, or an approver session's id.
        `via` says how the answer came (a session's approval file), for the commit and event."""
        bead = self.bead(bead_id)
        approver = approver or by
        self._check_not_own(bead, approver, "approve")
        target = self._transition(bead, "approve")
        done = attrs.evolve(bead, status=target, approved_by=approver, updated_at=now)
        message = f"approve {bead_id}" + (f" {via}" if via else "")
        return self._status_change(done, "approve", by, now, message, via)

    def reject(
        self,
        bead_id: str,
        reason: str,
        *,
        by: str,
        now: str,
        approver: str | None = None,
        via: str = "",
    ) -> Change:
        bead = self.bead(bead_id)
        reason = reason.strip()
        if not reason:
            raise InvalidBeadRequest("reject needs a reason: reject REASON")
        self._check_not_own(bead, approver or by, "reject")
        target = self._transition(bead, "reject")
        failed = attrs.evolve(bead, status=target, reason=reason, updated_at=now)
        message = f"reject {bead_id}" + (f" {via}" if via else "") + f": {_first_line(reason)}"
        return self._status_change(failed, "reject", by, now, message, reason)

    def decide(self, bead_id: str, decision: GateDecision, *, now: str) -> Change:
        """The same verdict for the bead as its session's result gate `decision`. Refused with
        `BeadConflict` when it no longer applies (the bead is not pending approval in that round
        for that session, e.g. already decided), so a decision is applied at most once however
        often it is offered."""
        d, bead = decision, self.bead(bead_id)
        if (
            bead.status is not B.PENDING_APPROVAL
            or bead.assigned_to != d.session
            or bead.submissions != d.round
        ):
            raise BeadConflict(
                f"bead {bead_id} is {bead.status.value} (assigned to "
                f"{bead.assigned_to or 'nobody'}, approval round {bead.submissions}): the "
                f"decision of session {d.session}'s gate for round {d.round} does not apply to it"
            )
        by = d.answered_by if d.answered_by == USER else f"session {d.answered_by}"
        via = f"through session {d.session}'s result gate"
        if d.verdict == "approve":
            return self.approve(bead_id, by=by, now=now, approver=d.answered_by, via=via)
        if d.verdict == "reject":
            return self.reject(bead_id, d.reason, by=by, now=now, approver=d.answered_by, via=via)
        raise InvalidBeadRequest(f"a gate's verdict {d.verdict!r} is not approve or reject")

    def release(self, bead_id: str, *, by: str, now: str) -> Change:
        bead = self.bead(bead_id)
        target = self._transition(bead, "release")
        was = bead.assigned_to or "nobody"
        released = attrs.evolve(bead, status=target, assigned_to=None, host=None, updated_at=now)
        return self._status_change(
            released, "release", by, now, f"release {bead_id} (was {was})", was
        )

    def set_result(self, bead_id: str, text: str, *, by: str, now: str) -> Change:
        return self._set_text(bead_id, "result", text, by, now)

    def set_description(self, bead_id: str, text: str, *, by: str, now: str) -> Change:
        return self._set_text(bead_id, "description", text, by, now)

    def _set_text(self, bead_id: str, field: str, text: str, by: str, now: str) -> Change:
        """A bead's text `field` set to `text`, while its status is one `_TEXT_OPEN` allows."""
        bead = self.bead(bead_id)
        open_in, refused = _TEXT_OPEN[field]
        if bead.status not in open_in:
            raise BeadConflict(f"bead {bead_id} is {bead.status.value}: {refused}")
        change: dict[str, Any] = {field: text, "updated_at": now}
        changed = attrs.evolve(bead, **change)
        event = self._bead_event(changed, field, by)
        return self._change(f"{field} {bead_id} (by {by})", [changed], events=[event])

    # -- convoys ---------------------------------------------------------------------------

    def _open_convoy(self, convoy_id: str, verb: str) -> Convoy:
        convoy = self.convoy(convoy_id)
        if not convoy.status.open:
            raise BeadConflict(
                f"convoy {convoy_id} is {convoy.status.value}: cannot {verb} it any more"
            )
        return convoy

    def new_convoy(self, spec: NewConvoy, *, by: str, now: str) -> Change:
        title = _check_title(spec.title, "convoy")
        if spec.coordinator is not None:
            _check_actor(spec.coordinator, "coordinator")
        convoy_id = next_id(title, [*self.convoys, *self.reserved], "convoy")
        convoy = Convoy(
            id=convoy_id,
            title=title,
            goal=spec.goal,
            coordinator=spec.coordinator,
            context=spec.context,
            created_at=now,
            updated_at=now,
        )
        event = ConvoyCreated(convoy_id, title, spec.coordinator, by)
        message = f"new convoy {convoy_id}: {title} (by {by})"
        return self._change(message, convoys=[convoy], events=[event], answer=convoy_id)

    def add_bead(self, convoy_id: str, bead_id: str, *, by: str, now: str) -> Change:
        convoy = self._open_convoy(convoy_id, "add a bead to")
        bead = self.bead(bead_id)
        if bead.convoy == convoy_id:
            raise InvalidBeadRequest(f"bead {bead_id} is already in convoy {convoy_id}")
        if bead.convoy is not None:
            raise BeadConflict(
                f"bead {bead_id} is in convoy {bead.convoy}; a bead is in one convoy at a time "
                f"(write remove_bead {bead_id} to that convoy's ctl first)"
            )
        status = convoy.status
        if status is C.PLANNING and bead.status is not B.PENDING:
            status = C.IN_PROGRESS
        grown = attrs.evolve(convoy, beads=(*convoy.beads, bead_id), status=status, updated_at=now)
        member = attrs.evolve(bead, convoy=convoy_id, updated_at=now)
        change = self._change(f"add_bead {convoy_id} {bead_id} (by {by})", [member], [grown])
        event = change.board._convoy_event(grown, "add_bead", by, bead_id)
        return attrs.evolve(change, events=(event,))

    def remove_bead(self, convoy_id: str, bead_id: str, *, by: str, now: str) -> Change:
        convoy = self._open_convoy(convoy_id, "remove a bead from")
        if bead_id not in convoy.beads:
            have = ", ".join(convoy.beads) or "none"
            raise InvalidBeadRequest(
                f"bead {bead_id!r} is not in convoy {convoy_id} (its beads: {have})"
            )
        shrunk = attrs.evolve(
            convoy, beads=tuple(b for b in convoy.beads if b != bead_id), updated_at=now
        )
        members: list[Bead] = []
        bead = self.beads.get(bead_id)
        if bead is not None:
            members.append(attrs.evolve(bead, convoy=None, updated_at=now))
        change = self._change(f"remove_bead {convoy_id} {bead_id} (by {by})", members, [shrunk])
        event = change.board._convoy_event(shrunk, "remove_bead", by, bead_id)
        return attrs.evolve(change, events=(event,))

    def end_convoy(
        self, convoy_id: str, status: ConvoyStatus, *, by: str, now: str, reason: str = ""
    ) -> Change:
        """`complete`, `abandon` or `fail REASON` on a convoy's ctl."""
        verb = {C.COMPLETED: "complete", C.ABANDONED: "abandon", C.FAILED: "fail"}[status]
        convoy = self._open_convoy(convoy_id, verb)
        if status is C.FAILED and not reason.strip():
            raise InvalidBeadRequest("fail needs a reason: fail REASON")
        ended = attrs.evolve(convoy, status=status, updated_at=now)
        p = self.progress(convoy)
        detail = reason.strip() or f"{p.done}/{p.total} beads completed"
        message = f"{verb} convoy {convoy_id}: {_first_line(detail)} (by {by})"
        event = self._convoy_event(ended, verb, by, detail)
        return self._change(message, convoys=[ended], events=[event])

    def set_context(self, convoy_id: str, text: str, *, by: str, now: str) -> Change:
        convoy = self.convoy(convoy_id)
        changed = attrs.evolve(convoy, context=text, updated_at=now)
        event = self._convoy_event(changed, "context", by)
        return self._change(
            f"context convoy {convoy_id} (by {by})", convoys=[changed], events=[event]
        )


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 72 else line[:69] + "..."
