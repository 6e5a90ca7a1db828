"""Mail in the tree: every session's mailbox files, the human's `agent/user/`, mail events.

    agent/<id>/inbox  outbox  mail/received/  mail/sent/   agent/user/ (the same for the human)

Every file calls the `PostOffice` when 9P asks; the mailbox a file belongs to is fixed when its
directory is made, so a session sends only from its own outbox (`from` is that mailbox).
`inbox` is a snapshot per open, marked read only when a read reached its end and the fid is
clunked (a dropped connection loses nothing). `outbox` is a JSON body (`Framing.JSON`): the
Twrite completing the value checks the draft and recipient and delivers it, or fails with the
reason and sends nothing (`mail_rejected`); a refusal only at clunk also comes back as an
ERROR_REPORT. Archive listings run in a worker thread; the disk is the only truth.
`SessionPeers`, `SessionPrompter`, `SessionResultGate` adapt sessions to mail's protocols and
are bound to the manager after construction (`bind`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Sequence

import structlog
import trio

from anvild.fs import (
    BodyFile,
    Command,
    CommandError,
    CommandSpec,
    Directory,
    DynamicChildren,
    Framing,
    FsNode,
    SnapshotFile,
)
from anvild.mail import (
    USER,
    AutoMail,
    Box,
    InvalidMessage,
    MailEvent,
    MailStoreError,
    Message,
    Peer,
    PostOffice,
    encode_event,
    strict_json,
)
from anvild.mail.errors import UnknownMailbox
from anvild.mail.message import MAX_MESSAGE_BYTES, encode, encode_list, parse_draft
from anvild.ninep.backend import Handle, Node, OpenMode
from anvild.ninep.errors import FsError, NotFound, StorageFailed
from anvild.session import Session, SessionError, SessionManager, SessionNotFound, SessionStatus
from anvild.store import SessionSummary
from anvild.tree._text import event_forwarder
from anvild.tree.refusals import fs_error
from anvild.tree.root import RootTree
from anvild.tree.sessions import NewKey, ReadToEndHandle, SessionExtension, SessionTree

__all__ = [
    "MailTree",
    "SessionPeers",
    "SessionPrompter",
    "SessionResultGate",
    "forward_mail_events",
    "mailbox_files",
]

S = SessionStatus
log = structlog.get_logger("anvild.tree.mail")


# --- adapters: sessions as the mail package sees them ---------------------------------------


class _Bound:
    def __init__(self) -> None:
        self._manager: SessionManager | None = None

    def bind(self, manager: SessionManager) -> None:
        self._manager = manager

    def _peek(self, name: str) -> Session | SessionSummary | None:
        """The live session `name` (id or alias) as it is now, building none: a session at
        rest may be unbuilt, and building it replays its records."""
        if self._manager is None:
            return None
        found = self._manager.peek(name)
        if found is None or isinstance(found, Session):
            return None if found is None or found.status is S.EXITED else found
        return found[0]  # at rest: never exited

    def _live(self, name: str) -> Session | None:
        """The live session `name`, built (for a session's own call: it runs, it is built)."""
        if self._manager is None:
            return None
        try:
            session = self._manager.get(name)
        except SessionNotFound:
            return None
        return None if session.status is S.EXITED else session


class SessionPeers(_Bound):
    """`anvild.mail.Peers` over a session manager; builds no session."""

    def peers(self) -> Sequence[Peer]:
        if self._manager is None:
            return ()
        return [
            Peer(session_id, alias, role, status.value)
            for session_id, alias, role, status in self._manager.briefs()  # building none
            if status is not S.EXITED
        ]

    def find(self, name: str) -> Peer | None:
        s = self._peek(name)
        return None if s is None else Peer(s.id, s.alias, s.role, s.status.value)


class SessionPrompter(_Bound):
    """`anvild.mail.Prompter` over a session manager. A session at rest and not built is
    prompted by `run`, once `SessionManager.load` built it (its records replayed in a worker
    thread, not on the event loop); without `run` it is built at once."""

    def __init__(self) -> None:
        super().__init__()
        self._send, self._receive = trio.open_memory_channel[tuple[str, str]](math.inf)
        self._running = False

    def is_idle(self, mailbox: str) -> bool:
        s = self._peek(mailbox)
        if isinstance(s, Session):
            return s.status is S.IDLE and not s.record.queue
        return s is not None and s.status is S.IDLE  # not built: at rest, nothing queued

    def prompt(self, mailbox: str, text: str) -> None:
        if self._running and isinstance(self._peek(mailbox), SessionSummary):
            self._send.send_nowait((mailbox, text))
            return
        s = self._live(mailbox)
        if s is not None:
            s.submit(text)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Prompt each session that was not built when its prompt came, in order, until
        cancelled; a refusal is logged, as `AutoMail` logs one."""
        self._running = True
        try:
            task_status.started()
            async for mailbox, text in self._receive:
                await self._prompt_loaded(mailbox, text)
        finally:
            self._running = False

    async def _prompt_loaded(self, mailbox: str, text: str) -> None:
        if self._manager is None:
            return
        try:
            session = await self._manager.load(mailbox)
            if session.status is not S.EXITED:
                session.submit(text)
        except SessionError as exc:
            log.warning("mail.auto_prompt_refused", mailbox=mailbox, error=str(exc))


class SessionResultGate(_Bound):
    """`anvild.mail.ResultGate` over a session manager (the `request_approval` tool)."""

    def request_result_approval(self, session_id: str, summary: str, asked_by: str) -> str:
        s = self._live(session_id)
        if s is None:
            raise ValueError(f"session {session_id} is not live")
        try:
            return s.request_result_approval(summary, asked_by)
        except SessionError as exc:
            raise ValueError(str(exc)) from exc


# --- files ----------------------------------------------------------------------------------


class _InboxHandle(ReadToEndHandle):
    clunk_blocks = True

    def __init__(self, office: PostOffice, mailbox: str, messages: list[Message]) -> None:
        self._office = office
        self._mailbox = mailbox
        self._ids = [m.id for m in messages]
        super().__init__(encode_list(messages))

    async def clunk(self) -> None:
        if self._reached_eof and self._ids:
            try:
                await self._office.mark_read(self._mailbox, self._ids)
            except MailStoreError as exc:
                raise StorageFailed(f"inbox: {exc}") from exc

    async def abort(self) -> None:
        self._ids = []  # a lost connection read nothing for sure: the mail stays unread


class _InboxFile(FsNode):
    def __init__(self, office: PostOffice, mailbox: str) -> None:
        super().__init__("inbox", 0o444)
        self._office = office
        self._mailbox = mailbox

    async def open(self, mode: OpenMode) -> Handle:
        try:
            messages = await self._office.unread(self._mailbox) if mode.read else []
        except MailStoreError as exc:
            raise StorageFailed(f"inbox: {exc}") from exc
        return _InboxHandle(self._office, self._mailbox, messages)


class _Archive(DynamicChildren):
    """`mail/received/` or `mail/sent/`: one snapshot file per stored message."""

    def __init__(self, office: PostOffice, mailbox: str, box: Box) -> None:
        self._office = office
        self._mailbox = mailbox
        self._box = box
        self._nodes: dict[str, SnapshotFile] = {}  # stable qids while the daemon runs

    def _node(self, message_id: str) -> SnapshotFile:
        node = self._nodes.get(message_id)
        if node is None:
            node = self._nodes[message_id] = SnapshotFile(
                f"{message_id}.json", self._reader(message_id)
            )
        return node

    def _reader(self, message_id: str) -> Callable[[], Awaitable[bytes]]:
        async def read() -> bytes:
            message = await self._office.get(self._mailbox, self._box, message_id)
            if message is None:
                raise NotFound(f"{message_id}.json: no such message")
            return encode(message)

        return read

    async def entries(self) -> Sequence[Node]:
        try:
            ids = await self._office.ids(self._mailbox, self._box)
        except MailStoreError as exc:
            raise StorageFailed(f"mail/{self._box.value}: {exc}") from exc
        return [self._node(i) for i in ids]

    async def lookup(self, name: str) -> Node | None:
        stem, dot, ext = name.partition(".")
        if not dot or ext != "json" or not await self._office.has(self._mailbox, self._box, stem):
            return None
        return self._node(stem)


def mailbox_files(office: PostOffice, mailbox: str) -> list[Node]:
    """`inbox`, `outbox` and `mail/` of one mailbox (a session's id, or `user`)."""

    async def send(data: bytes) -> None:
        try:
            draft = parse_draft(data)
            if office.resolve(draft.to) is None:
                raise UnknownMailbox(
                    f"no live session has the id or alias {draft.to!r} (it never existed or it "
                    "has exited): nothing was sent; read agent/list for the live sessions, or "
                    'send to "user" for the human'
                )
            await office.send(mailbox, draft)
        except (InvalidMessage, UnknownMailbox) as exc:
            raise fs_error("outbox", exc) from exc
        except MailStoreError as exc:
            raise StorageFailed(f"outbox: the message was not sent: {exc}") from exc

    async def rejected(exc: FsError, seen: bool) -> None:
        # An event for each refused open; mail back only a refusal at clunk (the body ended
        # before its JSON value did): `9p write` and the kernel's clients never show it.
        error = exc.message.removeprefix("outbox: ")
        await office.report_rejected(mailbox, error, mail_back=not seen)

    return [
        _InboxFile(office, mailbox),
        BodyFile(
            "outbox",
            send,
            limit=MAX_MESSAGE_BYTES,
            limit_name="the size of one message",
            framing=Framing.JSON,
            max_depth=strict_json.MAX_DEPTH,
            on_reject=rejected,
        ),
        Directory(
            "mail",
            [
                Directory("received", dynamic=_Archive(office, mailbox, Box.RECEIVED)),
                Directory("sent", dynamic=_Archive(office, mailbox, Box.SENT)),
            ],
        ),
    ]


# --- the tree -------------------------------------------------------------------------------

AUTO_VALUES = {"auto": True, "on": True, "off": False, "manual": False}


class MailTree:
    """Mail's part of the tree; `mount` it on the root and the session tree (before the
    session tree is mounted)."""

    def __init__(self, office: PostOffice, auto: AutoMail | None = None) -> None:
        self.office = office
        self.auto = auto

    def extension(self) -> SessionExtension:
        """The per-session files, the `automail` verb and the `mail=` key of `new`."""
        office, auto = self.office, self.auto

        def files(session: Session) -> Iterable[Node]:
            return mailbox_files(office, session.id)

        def verbs(session: Session) -> Iterable[CommandSpec]:
            if auto is None:
                return ()

            async def automail(command: Command) -> str:
                value = command.args[0]
                if value not in ("on", "off"):
                    raise CommandError(f"automail {value}: write automail on or automail off")
                await _set_auto(auto, session.id, value == "on")
                return ""

            return [
                CommandSpec("automail", automail, usage="automail on|off", min_args=1, max_args=1)
            ]

        def check(value: str) -> None:
            if value not in AUTO_VALUES:
                raise CommandError(f"mail={value}: use mail=auto (prompt on new mail) or mail=off")
            if auto is None:
                raise CommandError("mail=auto: auto-prompt is not available in this daemon")

        async def apply(session: Session, value: str) -> None:
            if auto is not None and AUTO_VALUES[value]:
                await _set_auto(auto, session.id, True)

        keys = (NewKey("mail", check, apply),)
        return SessionExtension(files=files, verbs=verbs, new_keys=keys)

    def mount(self, root: RootTree, sessions: SessionTree) -> None:
        """`agent/user/` on the root, the per-session extension on `sessions`."""
        sessions.extend(self.extension())
        root.root.add(Directory(USER, mailbox_files(self.office, USER)))


async def _set_auto(auto: AutoMail, mailbox: str, on: bool) -> None:
    try:
        await auto.set(mailbox, on)
    except MailStoreError as exc:
        raise CommandError(f"automail: the setting was not saved: {exc}") from exc


def forward_mail_events(root: RootTree) -> Callable[[MailEvent], None]:
    """An `on_event` for `PostOffice` that puts each mail event on `agent/events`."""
    return event_forwarder(root, encode_event)
