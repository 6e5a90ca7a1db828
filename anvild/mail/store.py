"""`MailStore`: every mailbox's messages on disk, `<data dir>/mail/<mailbox>/`.

    inbox/<id>.json  received/<id>.json  sent/<id>.json  settings.json ({"auto": true})

One JSON object per file. Each file is written as `.<name>.tmp`, fsynced, renamed, and the
directory fsynced: after a crash a message is whole or absent. Delivery writes the recipient's
copy before the sender's `sent` copy (a crash never leaves a message sent that nobody got).
Marking read is one rename per message. A file that does not decode is skipped and logged,
never hiding the others. Blocking I/O: the post office calls it from worker threads.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import structlog

from anvild.mail.errors import InvalidMessage, MailStoreError, UnknownMailbox
from anvild.mail.message import Message, decode, encode, is_message_id
from anvild.store.durable import replace_durably
from anvild.store.journal import sync_directory

log = structlog.get_logger(__name__)

MAILBOX_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Box(enum.StrEnum):
    INBOX = "inbox"
    RECEIVED = "received"
    SENT = "sent"


def check_mailbox(name: str) -> str:
    if not MAILBOX_RE.fullmatch(name) or name in (".", ".."):
        raise UnknownMailbox(f"{name!r} is not a mailbox name (a session id or `user`)")
    return name


class MailStore:
    """The mailboxes under `root` (created on first use)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, mailbox: str, box: Box) -> Path:
        return self.root / check_mailbox(mailbox) / box.value

    # -- writes ------------------------------------------------------------------------------

    def put(self, mailbox: str, box: Box, message: Message) -> None:
        """Store `message` in `mailbox`'s `box`, durably (see the module docstring)."""
        directory = self._dir(mailbox, box)
        _write_durably(directory, f"{message.id}.json", encode(message))

    def deliver(self, sender: str, recipient: str, message: Message) -> None:
        """The recipient's inbox copy, then the sender's sent copy."""
        self.put(recipient, Box.INBOX, message)
        self.put(sender, Box.SENT, message)

    def mark_read(self, mailbox: str, ids: Iterable[str]) -> list[str]:
        """Move these messages from inbox to received; returns the ids moved (an id already
        moved, by another reader, is skipped)."""
        inbox = self._dir(mailbox, Box.INBOX)
        received = self._dir(mailbox, Box.RECEIVED)
        moved: list[str] = []
        try:
            received.mkdir(parents=True, exist_ok=True)
            for message_id in ids:
                if not is_message_id(message_id):
                    continue
                try:
                    os.rename(inbox / f"{message_id}.json", received / f"{message_id}.json")
                except FileNotFoundError:
                    continue
                moved.append(message_id)
            if moved:
                sync_directory(received)
                sync_directory(inbox)
        except OSError as exc:
            raise MailStoreError(f"mailbox {mailbox}: could not mark messages read: {exc}") from exc
        return moved

    def set_auto(self, mailbox: str, auto: bool) -> None:
        directory = self.root / check_mailbox(mailbox)
        _write_durably(directory, "settings.json", json.dumps({"auto": auto}).encode() + b"\n")

    # -- reads -------------------------------------------------------------------------------

    def auto(self, mailbox: str) -> bool:
        path = self.root / check_mailbox(mailbox) / "settings.json"
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:
            log.warning("mail.settings_unreadable", path=str(path), error=str(exc))
            return False
        return isinstance(data, dict) and data.get("auto") is True

    def auto_mailboxes(self) -> list[str]:
        """Every mailbox with auto-prompt on (at daemon start)."""
        if not self.root.is_dir():
            return []
        return [p.name for p in sorted(self.root.iterdir()) if p.is_dir() and self.auto(p.name)]

    def messages(self, mailbox: str, box: Box) -> list[Message]:
        """The messages of `box`, oldest first (ids sort by creation)."""
        directory = self._dir(mailbox, box)
        loaded = (self._load(directory / f"{i}.json") for i in self.ids(mailbox, box))
        return [message for message in loaded if message is not None]

    def ids(self, mailbox: str, box: Box) -> list[str]:
        """The ids of `box`'s messages, oldest first."""
        directory = self._dir(mailbox, box)
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise MailStoreError(f"mailbox {mailbox}: cannot list {box.value}: {exc}") from exc
        return [
            stem
            for stem, _, ext in (n.partition(".") for n in names)
            if ext == "json" and is_message_id(stem)
        ]

    def has(self, mailbox: str, box: Box, message_id: str) -> bool:
        """Whether `box` holds the message `message_id` (one stat, no listing)."""
        if not is_message_id(message_id):
            return False
        try:
            return (self._dir(mailbox, box) / f"{message_id}.json").is_file()
        except OSError:
            return False

    def get(self, mailbox: str, box: Box, message_id: str) -> Message | None:
        if not is_message_id(message_id):
            return None
        return self._load(self._dir(mailbox, box) / f"{message_id}.json")

    def count(self, mailbox: str, box: Box) -> int:
        return len(self.ids(mailbox, box))

    def _load(self, path: Path) -> Message | None:
        try:
            return decode(path.read_bytes())
        except FileNotFoundError:
            return None  # moved by a concurrent reader
        except (OSError, InvalidMessage) as exc:
            log.warning("mail.file_skipped", path=str(path), error=str(exc))
            return None


def _write_durably(directory: Path, name: str, data: bytes) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        replace_durably(directory / name, data, temp=directory / f".{name}.tmp", mode=0o600)
    except OSError as exc:
        raise MailStoreError(f"could not write {directory / name}: {exc}") from exc


__all__ = ["MAILBOX_RE", "Box", "MailStore", "check_mailbox"]
