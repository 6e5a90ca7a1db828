"""The bead and convoy part of the `agent/` tree (DESIGN.md section 4), served from a `BeadStore`.

    agent/beads/  ctl (new, dep add|remove)  list  ready  sync  <bead-id>/ (fields, wait, ctl)
    agent/convoys/  ctl (new)  list  <id>/ (title goal status ... context progress wait ctl)

Like the session tree this owns no state: each file asks the store at open or calls one store
verb on a ctl line or a clunked body, and turns a `BeadError` into the write's 9P error (a
refused write changes nothing). Lines are split by `anvild.beads.words`; unquoted `key=value`
words are options, quoted words are always text. File writes are `by user`; `claim SESSION`
names who works. A bead in progress whose session is gone is orphaned (`list` marks it, one
`bead_orphaned` event). `approve`/`reject` go through `answer` (the coord bead gates), so a bead
and its session's result gate hold one verdict. Directory nodes are kept (stable qids); `wait`
blocks in the store once per open. With a `[beads] remote`, opening `list` or `ready` pulls
first (`BeadStore.refresh`) and `sync` shows the remote's state. Details: docs/decisions.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from anvild.beads import (
    BeadError,
    BeadStore,
    ConvoyStatus,
    InvalidBeadRequest,
    NewBead,
    NewConvoy,
)
from anvild.beads.board import Board, Change
from anvild.beads.events import BeadOrphaned, encode_event
from anvild.beads.model import Bead, BeadStatus, Convoy
from anvild.beads.words import Word, split_words
from anvild.fs import CtlFile, Directory, DynamicChildren, SnapshotFile, ValueFile, WaitFile
from anvild.fs.ctl import Command, CommandError, CommandSpec, CommandTable
from anvild.ninep.backend import Node
from anvild.session.events import SessionEvent, SessionStateChanged
from anvild.tree._text import line_publisher, value_line, written_text
from anvild.tree.refusals import admit_bead_change, fs_error, kind_of
from anvild.tree.root import RootTree

__all__ = ["BEAD_FILES", "CONVOY_FILES", "USER", "BeadsTree"]

USER = "user"
"""Who a file write is done by, and the name `claim` accepts for a person."""

BEAD_FILES = (
    "status",
    "title",
    "description",
    "role",
    "assigned_to",
    "host",
    "result",
    "depends_on",
    "requires_approval",
    "approver",
    "approved_by",
    "convoy",
    "reason",
    "wait",
    "ctl",
)
CONVOY_FILES = (
    "title",
    "goal",
    "status",
    "coordinator",
    "beads",
    "context",
    "progress",
    "wait",
    "ctl",
)

NEW_BEAD_USAGE = (
    'new "Title" ROLE ["Description"] [DEP-ID ...] [convoy=ID] [requires_approval] '
    "[approver=SESSION|user]"
)
NEW_CONVOY_USAGE = 'new "Title" ["Goal"] [coordinator=SESSION]'
MANY = 1 << 16
MAX_TEXT_BYTES = 1 << 20
"""The largest description, result or convoy context written through a file (one git commit)."""
TEXT_LIMIT_NAME = "a bead's or convoy's text is at most 1 MiB"


class WordTable(CommandTable):
    """A command table that splits lines with `anvild.beads.words` (double quotes too)."""

    def parse_line(self, line: str) -> Command:
        try:
            words = split_words(line)
        except InvalidBeadRequest as exc:
            raise CommandError(str(exc)) from exc
        if not words:
            raise CommandError("empty command")
        verb = words[0].text
        if verb not in self:
            known = ", ".join(self.verbs) or "none"
            raise CommandError(f"unknown command {verb!r}; known commands: {known}")
        return self[verb].parse([w.text for w in words], line)


def _body(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _words_of(command: Command) -> list[Word]:
    """The line's words after the verb, with their quoting (options are unquoted only)."""
    return split_words(command.line)[1:]


def _options(words: list[Word], known: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Positional words and `key=value` options; `known` maps each key to its usage."""
    args: list[str] = []
    options: dict[str, str] = {}
    for word in words:
        key, eq, value = word.text.partition("=")
        if not word.quoted and eq and key.isidentifier():
            if key not in known:
                names = ", ".join(f"{k}=" for k in known) or "none"
                raise InvalidBeadRequest(f"unknown option {key}=; known options: {names}")
            if key in options:
                raise InvalidBeadRequest(f"option {key}= given twice")
            options[key] = value
        else:
            args.append(word.text)
    return args, options


def _yes(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("", "yes", "true", "1", "on"):
        return True
    if lowered in ("no", "false", "0", "off"):
        return False
    raise InvalidBeadRequest(f"{key}={value}: write {key}=yes or {key}=no")


class BeadsTree:
    """`agent/beads/` and `agent/convoys/` for one `BeadStore`; `mount` them on a `RootTree`.

    `resolve_session(name)` gives the id of the live session with that id or alias (None when
    there is none); `session_live(id)` tells whether a session is still live (not exited)."""

    def __init__(
        self,
        store: BeadStore,
        *,
        resolve_session: Callable[[str], str | None] = lambda name: None,
        session_live: Callable[[str], bool] = lambda session_id: False,
    ) -> None:
        self.store = store
        self.resolve_session = resolve_session
        self.session_live = session_live
        self.publish: Callable[[str], None] = lambda line: None
        self.answer: Callable[[str, str, str], Awaitable[object]] = self._answer_alone
        self._bead_nodes: dict[str, Directory] = {}
        self._convoy_nodes: dict[str, Directory] = {}
        self.beads_dir = Directory(
            "beads",
            [
                CtlFile("ctl", self._beads_table()),
                SnapshotFile("list", self._pulled(self._list_text)),
                SnapshotFile("ready", self._pulled(self._ready_text)),
                SnapshotFile("sync", lambda: self.store.sync_state.text()),
            ],
            dynamic=_Children(self._bead_ids, self._bead_node),
        )
        self.convoys_dir = Directory(
            "convoys",
            [
                CtlFile("ctl", self._convoys_table()),
                SnapshotFile("list", self._pulled(self._convoy_list_text)),
            ],
            dynamic=_Children(self._convoy_ids, self._convoy_node),
        )

    def mount(self, root: RootTree) -> None:
        """Add `beads/` and `convoys/` to `root`; bead events go to its `events`."""
        root.root.add(self.beads_dir)
        root.root.add(self.convoys_dir)

        self.publish = line_publisher(root)
        self.store.on_event = lambda event: self.publish(encode_event(event))

    async def _answer_alone(self, bead_id: str, verdict: str, reason: str) -> Bead:
        """`approve` / `reject REASON` straight on the store (the daemon replaces this with
        `BeadGates.answer`, which answers the assigned session's result gate too)."""
        if verdict == "approve":
            return await self.store.approve(bead_id, by=USER)
        return await self.store.reject(bead_id, reason, by=USER)

    # -- orphans -----------------------------------------------------------------------------

    def orphaned(self, bead: Bead) -> bool:
        """In progress, claimed on this daemon (a shared board holds other daemons' beads),
        and the session it is assigned to is no longer live."""
        return (
            bead.status is BeadStatus.IN_PROGRESS
            and bead.assigned_to is not None
            and bead.assigned_to != USER
            and bead.host in (None, self.store.host)
            and not self.session_live(bead.assigned_to)
        )

    def announce_orphans(self, reason: str) -> int:
        """One `bead_orphaned` event per orphaned bead (the daemon calls it once its sessions
        are restored); how many there were."""
        count = 0
        for bead in self.store.beads():
            if self.orphaned(bead) and bead.assigned_to is not None:
                self.publish(encode_event(BeadOrphaned(bead.id, bead.assigned_to, reason)))
                count += 1
        return count

    def on_session_event(self, event: SessionEvent) -> None:
        """For `SessionManager(on_event=...)`: when a session exits, one `bead_orphaned` event
        per bead it had in progress."""
        if isinstance(event, SessionStateChanged) and event.state == "exited":
            for bead in self.store.assigned(event.id):
                if bead.status is BeadStatus.IN_PROGRESS:
                    orphan = BeadOrphaned(bead.id, event.id, event.detail or "exited")
                    self.publish(encode_event(orphan))

    # -- texts -------------------------------------------------------------------------------

    def _pulled(self, text: Callable[[], str]) -> Callable[[], str | Awaitable[str]]:
        """`text` as it is, or, with a remote, after a pull when the last one is too old."""
        if self.store.sync_state.remote is None:
            return text

        async def fresh() -> str:
            await self.store.refresh()
            return text()

        return fresh

    def _list_text(self) -> str:
        return "".join(b.list_line(orphaned=self.orphaned(b)) + "\n" for b in self.store.beads())

    def _ready_text(self) -> str:
        return "".join(b.list_line() + "\n" for b in self.store.ready())

    def _convoy_list_text(self) -> str:
        board = self.store.board
        return "".join(c.list_line(board.progress(c)) + "\n" for c in board.convoys.values())

    # -- agent/beads/ctl ---------------------------------------------------------------------

    def _beads_table(self) -> WordTable:
        return WordTable(
            [
                CommandSpec("new", self._new_bead, usage=NEW_BEAD_USAGE, max_args=MANY),
                CommandSpec(
                    "dep",
                    self._dep,
                    usage="dep add BEAD DEP | dep remove BEAD DEP",
                    min_args=3,
                    max_args=3,
                ),
            ]
        )

    async def _new_bead(self, command: Command) -> str:
        try:
            words = _words_of(command)
            flags = [w for w in words if not w.quoted and w.text == "requires_approval"]
            rest = [w for w in words if w not in flags]
            args, options = _options(
                rest,
                {
                    "convoy": "convoy=ID",
                    "requires_approval": "requires_approval=yes|no",
                    "approver": "approver=SESSION|user",
                },
            )
            if len(args) < 2:
                raise InvalidBeadRequest(
                    f"new needs a title and a role; usage: {NEW_BEAD_USAGE} (quote a title "
                    'that has blanks: "Research auth")'
                )
            approval = bool(flags) or _yes(
                "requires_approval", options.get("requires_approval", "no")
            )
            approver = self._approver(options.get("approver", USER))
            spec = NewBead(
                title=args[0],
                role=args[1],
                description=args[2] if len(args) > 2 else "",
                depends_on=tuple(args[3:]),
                requires_approval=approval,
                convoy=options.get("convoy"),
                approver=approver,
            )
            bead = await self.store.create(spec, by=USER)
        except BeadError as exc:
            raise kind_of(exc)(str(exc)) from exc
        return bead.id

    def _approver(self, name: str) -> str:
        """`approver=` of a new bead: `user`, or a live session (stored as its id)."""
        if name == USER:
            return USER
        session = self.resolve_session(name)
        if session is None:
            raise InvalidBeadRequest(
                f"approver={name} is not a live session: name a session from agent/list (its "
                f"id or alias), or {USER} for a person only"
            )
        return session

    async def _dep(self, command: Command) -> str:
        action, bead_id, dep = command.args
        try:
            if action == "add":
                await self.store.add_dep(bead_id, dep, by=USER)
            elif action == "remove":
                await self.store.remove_dep(bead_id, dep, by=USER)
            else:
                raise InvalidBeadRequest(
                    f"unknown dep action {action!r}: write dep add BEAD DEP or dep remove BEAD DEP"
                )
        except BeadError as exc:
            raise kind_of(exc)(str(exc)) from exc
        return ""

    # -- one bead ------------------------------------------------------------------------------

    def _bead_ids(self) -> list[str]:
        return [b.id for b in self.store.beads()]

    def _bead_node(self, bead_id: str) -> Directory | None:
        return _kept(self._bead_nodes, bead_id, self.store.board.beads, self._bead_directory)

    def _bead_directory(self, bead_id: str) -> Directory:
        store = self.store

        def get() -> Bead:
            return store.bead(bead_id)

        def rest(command: Command) -> str:
            words = _words_of(command)
            return " ".join(w.text for w in words)

        async def claim(command: Command) -> str:
            name = command.args[0]
            session = USER if name == USER else self.resolve_session(name)
            if session is None:
                raise CommandError(
                    f"no live session {name!r}: claim names the session that will work on the "
                    f"bead (read agent/list), or {USER} for work you take yourself"
                )
            return await _run(lambda: store.claim(bead_id, session, by=USER))

        async def complete(command: Command) -> str:
            result = rest(command) if command.args else None
            return await _run(lambda: store.complete(bead_id, result, by=USER))

        async def fail(command: Command) -> str:
            return await _run(lambda: store.fail(bead_id, rest(command), by=USER))

        async def approve(command: Command) -> str:
            return await _run(lambda: self.answer(bead_id, "approve", ""))

        async def reject(command: Command) -> str:
            return await _run(lambda: self.answer(bead_id, "reject", rest(command)))

        async def release(command: Command) -> str:
            return await _run(lambda: store.release(bead_id, by=USER))

        async def fixed_approver(command: Command) -> str:
            raise CommandError(
                f"the approver of bead {bead_id} is {get().approver}, fixed when the bead was "
                "created: no verb changes it; create a new bead with approver=SESSION|user"
            )

        table = WordTable(
            [
                CommandSpec("claim", claim, usage="claim SESSION", min_args=1, max_args=1),
                CommandSpec("complete", complete, usage="complete [RESULT]", max_args=MANY),
                CommandSpec("fail", fail, usage="fail REASON", min_args=1, max_args=MANY),
                CommandSpec("approve", approve, usage="approve"),
                CommandSpec("reject", reject, usage="reject REASON", min_args=1, max_args=MANY),
                CommandSpec("release", release, usage="release"),
                CommandSpec("approver", fixed_approver, usage="approver", max_args=MANY),
            ]
        )

        files: list[Node] = [
            SnapshotFile("status", lambda: value_line(get().status.value)),
            SnapshotFile("title", lambda: value_line(get().title)),
            _text_file(store, bead_id, lambda: get().description, Board.set_description),
            SnapshotFile("role", lambda: value_line(get().role)),
            SnapshotFile("assigned_to", lambda: value_line(get().assigned_to)),
            SnapshotFile("host", lambda: value_line(get().host)),
            _text_file(store, bead_id, lambda: get().result, Board.set_result),
            SnapshotFile("depends_on", lambda: "".join(f"{d}\n" for d in get().depends_on)),
            SnapshotFile(
                "requires_approval", lambda: "true\n" if get().requires_approval else "false\n"
            ),
            SnapshotFile("approver", lambda: value_line(get().approver)),
            SnapshotFile("approved_by", lambda: value_line(get().approved_by)),
            SnapshotFile("convoy", lambda: value_line(get().convoy)),
            SnapshotFile("reason", lambda: _body(get().reason)),
            WaitFile("wait", lambda: lambda: _status_of(store.wait_bead(bead_id))),
            CtlFile("ctl", table),
        ]
        return Directory(bead_id, files)

    # -- agent/convoys ---------------------------------------------------------------------

    def _convoys_table(self) -> WordTable:
        return WordTable(
            [CommandSpec("new", self._new_convoy, usage=NEW_CONVOY_USAGE, max_args=MANY)]
        )

    async def _new_convoy(self, command: Command) -> str:
        try:
            args, options = _options(_words_of(command), {"coordinator": "coordinator=SESSION"})
            if not 1 <= len(args) <= 2:
                raise InvalidBeadRequest(
                    f"new takes a title and a goal ({len(args)} words given); usage: "
                    f'{NEW_CONVOY_USAGE} (quote words that have blanks: "Auth system")'
                )
            coordinator = options.get("coordinator")
            if coordinator is not None:
                resolved = USER if coordinator == USER else self.resolve_session(coordinator)
                if resolved is None:
                    raise InvalidBeadRequest(
                        f"no live session {coordinator!r} for coordinator=: read agent/list, "
                        f"or write coordinator={USER}"
                    )
                coordinator = resolved
            spec = NewConvoy(
                title=args[0], goal=args[1] if len(args) > 1 else "", coordinator=coordinator
            )
            convoy = await self.store.create_convoy(spec, by=USER)
        except BeadError as exc:
            raise kind_of(exc)(str(exc)) from exc
        return convoy.id

    def _convoy_ids(self) -> list[str]:
        return [c.id for c in self.store.convoys()]

    def _convoy_node(self, convoy_id: str) -> Directory | None:
        return _kept(
            self._convoy_nodes, convoy_id, self.store.board.convoys, self._convoy_directory
        )

    def _convoy_directory(self, convoy_id: str) -> Directory:
        store = self.store

        def get() -> Convoy:
            return store.convoy(convoy_id)

        async def add_bead(command: Command) -> str:
            return await _run(lambda: store.add_bead(convoy_id, command.args[0], by=USER))

        async def remove_bead(command: Command) -> str:
            return await _run(lambda: store.remove_bead(convoy_id, command.args[0], by=USER))

        def ender(status: ConvoyStatus) -> Callable[[Command], Awaitable[str]]:
            async def end(command: Command) -> str:
                reason = " ".join(w.text for w in _words_of(command))
                return await _run(
                    lambda: store.end_convoy(convoy_id, status, by=USER, reason=reason)
                )

            return end

        table = WordTable(
            [
                CommandSpec("add_bead", add_bead, usage="add_bead ID", min_args=1, max_args=1),
                CommandSpec(
                    "remove_bead", remove_bead, usage="remove_bead ID", min_args=1, max_args=1
                ),
                CommandSpec("complete", ender(ConvoyStatus.COMPLETED), usage="complete"),
                CommandSpec("abandon", ender(ConvoyStatus.ABANDONED), usage="abandon"),
                CommandSpec(
                    "fail",
                    ender(ConvoyStatus.FAILED),
                    usage="fail REASON",
                    min_args=1,
                    max_args=MANY,
                ),
            ]
        )

        files: list[Node] = [
            SnapshotFile("title", lambda: value_line(get().title)),
            SnapshotFile("goal", lambda: _body(get().goal)),
            SnapshotFile("status", lambda: value_line(get().status.value)),
            SnapshotFile("coordinator", lambda: value_line(get().coordinator)),
            SnapshotFile("beads", lambda: "".join(f"{b}\n" for b in get().beads)),
            _text_file(store, convoy_id, lambda: get().context, Board.set_context),
            SnapshotFile("progress", lambda: store.progress(convoy_id).text()),
            WaitFile("wait", lambda: lambda: _status_of(store.wait_convoy(convoy_id))),
            CtlFile("ctl", table),
        ]
        return Directory(convoy_id, files)


def _kept(
    nodes: dict[str, Directory],
    key: str,
    known: Mapping[str, object],
    build: Callable[[str], Directory],
) -> Directory | None:
    """The directory kept for `key` (stable qids), built on first use while the board knows it."""
    node = nodes.get(key)
    if node is None:
        if key not in known:
            return None
        node = nodes[key] = build(key)
    return node


async def _run(action: Callable[[], Awaitable[object]]) -> str:
    """A ctl verb's store change; a refusal becomes the write's 9P error."""
    try:
        await action()
    except BeadError as exc:
        raise kind_of(exc)(str(exc)) from exc
    return ""


class _SetText(Protocol):
    """A board's text setter (`Board.set_result`, `set_description`, `set_context`)."""

    __name__: str

    def __call__(self, board: Board, key: str, text: str, /, *, by: str, now: str) -> Change: ...


def _text_file(
    store: BeadStore, key: str, read: Callable[[], str], set_text: _SetText
) -> ValueFile:
    """The text file of a bead's or convoy's field, named after its setter: the board admits
    a write before its body is read (the change with an empty text), and the clunked body is
    one commit `by user`."""
    name = set_text.__name__.removeprefix("set_")

    async def commit(data: bytes) -> None:
        text = written_text(name, data)
        try:
            await store.apply(lambda board, now: set_text(board, key, text, by=USER, now=now))
        except BeadError as exc:
            raise fs_error(name, exc) from exc

    return ValueFile(
        name,
        lambda: _body(read()),
        commit,
        limit=MAX_TEXT_BYTES,
        limit_name=TEXT_LIMIT_NAME,
        admit=admit_bead_change(
            name, lambda: store.board, lambda board: set_text(board, key, "", by=USER, now="")
        ),
    )


async def _status_of(waiting: Awaitable[Bead | Convoy]) -> str:
    try:
        value = await waiting
    except BeadError as exc:
        raise fs_error("wait", exc) from exc
    return f"{value.status.value}\n"


class _Children(DynamicChildren):
    def __init__(
        self, ids: Callable[[], list[str]], node: Callable[[str], Directory | None]
    ) -> None:
        self._ids = ids
        self._node = node

    async def entries(self) -> Sequence[Node]:
        return [n for i in self._ids() if (n := self._node(i)) is not None]

    async def lookup(self, name: str) -> Node | None:
        return self._node(name)
