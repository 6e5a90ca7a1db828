"""`PostOffice`: sending, delivering and reading mail; the one place mail is moved.

- A mailbox is a live session's id or `user`; sessions are reached through the narrow `Peers`
  protocol. A stored message's `to` is the id, never an alias.
- `send` checks the draft first (`InvalidMessage`: nothing written), takes the sender from the
  caller, never the draft, then writes the recipient's inbox, then the sender's `sent`. A message
  to nobody is kept in `sent` and comes back as an ERROR_REPORT from `anvild`.
- `report_rejected`: a write refused only at Tclunk also gets an ERROR_REPORT (some clients
  ignore clunk errors).
- `mark_read` moves messages to `received`; `watch(callback)` is called after each delivery.
File I/O runs in worker threads; writes are atomic per file.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Final, Protocol, TypeAlias

import attrs
import structlog
import trio

from anvild.lines.jsonl import dumps, timestamp
from anvild.mail.errors import MailStoreError
from anvild.mail.message import (
    Draft,
    Message,
    MessageIds,
    MessageType,
    check_draft,
    parse_draft,
)
from anvild.mail.store import Box, MailStore

log = structlog.get_logger(__name__)

USER: Final = "user"
"""The human's mailbox (`agent/user/`)."""
DAEMON: Final = "anvild"
"""The sender of the daemon's own ERROR_REPORTs (not a mailbox: a reply to it is undeliverable)."""


@attrs.frozen
class Peer:
    """A live session as `list_sessions` shows it."""

    id: str
    alias: str | None
    role: str
    state: str


class Peers(Protocol):
    """What the post office needs to know about sessions (the daemon adapts its manager)."""

    def peers(self) -> Sequence[Peer]:
        """The live sessions, in creation order."""
        ...

    def find(self, name: str) -> Peer | None:
        """The live session with this id or alias, or None."""
        ...


# -- events on agent/events --------------------------------------------------------------------


@attrs.frozen
class MailSent:
    TAG: ClassVar[str] = "mail_sent"
    id: str
    sender: str
    to: str
    message_type: str
    subject: str
    claimed_from: str | None = None  # a different `from` the body claimed (ignored)


@attrs.frozen
class MailUndeliverable:
    TAG: ClassVar[str] = "mail_undeliverable"
    id: str
    sender: str
    to: str
    error: str


@attrs.frozen
class MailRejected:
    TAG: ClassVar[str] = "mail_rejected"
    mailbox: str
    error: str


@attrs.frozen
class MailRead:
    TAG: ClassVar[str] = "mail_read"
    mailbox: str
    ids: tuple[str, ...]


MailEvent: TypeAlias = MailSent | MailUndeliverable | MailRejected | MailRead


def encode_event(event: MailEvent, *, now: dt.datetime | None = None) -> str:
    """One JSON line, like the session events: `type` and `ts` first; `sender` is `from`."""
    data: dict[str, Any] = attrs.asdict(event)
    if "sender" in data:
        data = {("from" if k == "sender" else k): v for k, v in data.items()}
    if "ids" in data:
        data["ids"] = list(data["ids"])
    if data.get("claimed_from") is None:
        data.pop("claimed_from", None)
    return dumps({"type": event.TAG, "ts": timestamp(now), **data})


# -- the post office ---------------------------------------------------------------------------


@attrs.frozen
class Sent:
    """What `send` did: the message (in the sender's `sent`), and why it was not delivered
    (None when it was)."""

    message: Message
    undeliverable: str | None = None


def _ignore(event: MailEvent) -> None:
    return None


class PostOffice:
    """Every mailbox of the daemon. See the module docstring."""

    def __init__(
        self,
        store: MailStore,
        peers: Peers,
        *,
        on_event: Callable[[MailEvent], None] = _ignore,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.peers = peers
        self._on_event = on_event
        self._clock = clock
        self._ids = MessageIds(clock)
        self._watchers: list[Callable[[str, Message], None]] = []

    def watch(self, callback: Callable[[str, Message], None]) -> None:
        """Call `callback(mailbox, message)` after each delivery to a mailbox."""
        self._watchers.append(callback)

    def resolve(self, name: str) -> str | None:
        """The mailbox a draft's `to` names: `user`, or a live session's id; None for nobody."""
        if name == USER:
            return USER
        peer = self.peers.find(name)
        return None if peer is None else peer.id

    # -- sending -----------------------------------------------------------------------------

    async def send_bytes(self, sender: str, data: bytes) -> Sent:
        """An outbox body: parse it (`InvalidMessage`), then `send`."""
        return await self.send(sender, parse_draft(data))

    async def send_args(self, sender: str, args: Any) -> Sent:
        """A tool's arguments: check them (`InvalidMessage`), then `send`."""
        return await self.send(sender, check_draft(args))

    async def send(self, sender: str, draft: Draft) -> Sent:
        """Deliver `draft` from `sender` now (see the module docstring). Raises
        `MailStoreError` if it could not be written (then it was not sent)."""
        recipient = self.resolve(draft.to)
        message = Message.from_draft(
            draft,
            id=self._ids.next(),
            sender=sender,
            to=recipient or draft.to,
            timestamp=int(self._clock()),
        )
        if recipient is None:
            why = (
                f"no live session has the id or alias {draft.to!r} (it never existed or it has "
                "exited); read agent/list (or use list_sessions) for the live sessions, or send "
                'to "user" for the human'
            )
            await trio.to_thread.run_sync(self.store.put, sender, Box.SENT, message)
            self._publish(MailUndeliverable(message.id, sender, draft.to, why))
            await self.report(
                sender,
                f"Undeliverable: {message.subject or message.type.value}",
                f"Your message {message.id} to {draft.to!r} was not delivered: {why}.",
                in_reply_to=message.id,
                metadata={"error": "undeliverable", "to": draft.to},
            )
            return Sent(message, why)
        await trio.to_thread.run_sync(self.store.deliver, sender, recipient, message)
        claimed = draft.claimed_from if draft.claimed_from not in (None, sender) else None
        self._publish(
            MailSent(message.id, sender, recipient, message.type.value, message.subject, claimed)
        )
        self._delivered(recipient, message)
        return Sent(message)

    async def report(
        self,
        mailbox: str,
        subject: str,
        body: str,
        *,
        in_reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
        kind: MessageType = MessageType.ERROR_REPORT,
    ) -> Message | None:
        """A message from the daemon into `mailbox`'s inbox, an ERROR_REPORT unless `kind`
        says otherwise (None if it could not be written: logged, never raised, since it reports
        another event)."""
        message = Message(
            id=self._ids.next(),
            sender=DAEMON,
            to=mailbox,
            type=kind,
            subject=subject[:200],
            body=body,
            metadata=metadata or {},
            timestamp=int(self._clock()),
            in_reply_to=in_reply_to,
        )
        try:
            await trio.to_thread.run_sync(self.store.put, mailbox, Box.INBOX, message)
        except MailStoreError as exc:
            log.error("mail.report_failed", mailbox=mailbox, error=str(exc))
            return None
        self._delivered(mailbox, message)
        return message

    async def report_rejected(self, mailbox: str, error: str, *, mail_back: bool = True) -> None:
        """An outbox write of `mailbox` was refused with `error`: the event, and an ERROR_REPORT
        unless `mail_back` is false (the writer saw the refusal on its Twrite)."""
        self._publish(MailRejected(mailbox, error))
        if not mail_back:
            return
        await self.report(
            mailbox,
            "Not sent: the message was refused",
            f"What you wrote to your outbox was not sent: {error}",
            metadata={"error": "rejected"},
        )

    # -- reading -----------------------------------------------------------------------------

    async def unread(self, mailbox: str) -> list[Message]:
        return await trio.to_thread.run_sync(self.store.messages, mailbox, Box.INBOX)

    async def mark_read(self, mailbox: str, ids: Iterable[str]) -> list[str]:
        moved = await trio.to_thread.run_sync(self.store.mark_read, mailbox, list(ids))
        if moved:
            self._publish(MailRead(mailbox, tuple(moved)))
        return moved

    async def take_unread(self, mailbox: str) -> list[Message]:
        """The unread messages, now marked read (those another reader took first are left
        out)."""
        messages = await self.unread(mailbox)
        moved = set(await self.mark_read(mailbox, [m.id for m in messages]))
        return [m for m in messages if m.id in moved]

    async def archived(self, mailbox: str, box: Box) -> list[Message]:
        return await trio.to_thread.run_sync(self.store.messages, mailbox, box)

    async def get(self, mailbox: str, box: Box, message_id: str) -> Message | None:
        return await trio.to_thread.run_sync(self.store.get, mailbox, box, message_id)

    async def ids(self, mailbox: str, box: Box) -> list[str]:
        """The ids of `box`'s messages, oldest first (a directory listing: thousands of
        messages take a while, so it runs in a worker thread, never on the 9P loop)."""
        return await trio.to_thread.run_sync(self.store.ids, mailbox, box)

    async def has(self, mailbox: str, box: Box, message_id: str) -> bool:
        """Whether `box` holds the message `message_id` (a stat, in a worker thread)."""
        return await trio.to_thread.run_sync(self.store.has, mailbox, box, message_id)

    def unread_count(self, mailbox: str) -> int:
        """How many messages wait in the inbox (a directory listing, done inline)."""
        return self.store.count(mailbox, Box.INBOX)

    # -- internals ---------------------------------------------------------------------------

    def _publish(self, event: MailEvent) -> None:
        try:
            self._on_event(event)
        except Exception:  # an observer's bug must not undo a delivery
            log.exception("mail.event_failed", event=event.TAG)

    def _delivered(self, mailbox: str, message: Message) -> None:
        for watcher in self._watchers:
            try:
                watcher(mailbox, message)
            except Exception:
                log.exception("mail.watcher_failed", mailbox=mailbox)


__all__ = [
    "DAEMON",
    "USER",
    "MailEvent",
    "MailRead",
    "MailRejected",
    "MailSent",
    "MailUndeliverable",
    "Peer",
    "Peers",
    "PostOffice",
    "Sent",
    "encode_event",
]
