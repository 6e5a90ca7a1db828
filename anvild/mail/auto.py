"""Auto-prompt: an idle session with new mail is told so, once per batch of new mail.

A mailbox with auto-prompt on (`mail=auto`, or ctl `automail on`; kept in `settings.json`) is
marked pending on delivery and prompted as soon as it is idle with nothing queued (`poke`). The
mark is cleared when the prompt is submitted: one batch gives one prompt. Not prompted: a session
in `await` (its `out` is unread), stopped, failed or waiting for approval, nor mail that waited
across a daemon restart. Sessions are reached through the narrow `Prompter` protocol.
"""

from __future__ import annotations

from typing import Final, Protocol

import structlog
import trio

from anvild.mail.message import Message
from anvild.mail.post import PostOffice

log = structlog.get_logger(__name__)

PROMPT: Final = (
    "You have new mail: {count} unread message(s) in your inbox ({senders}). Use the read_inbox "
    "tool to read them, then act on them (reply with send_message where a reply is expected)."
)


class Prompter(Protocol):
    def is_idle(self, mailbox: str) -> bool:
        """The session `mailbox` is idle with no prompt queued (False for `user`, unknown)."""
        ...

    def prompt(self, mailbox: str, text: str) -> None:
        """Submit `text` to the session as a prompt (raises if it is refused)."""
        ...


class AutoMail:
    """The auto-prompt setting of every mailbox, and the prompting. See the module docstring."""

    def __init__(self, office: PostOffice, prompter: Prompter) -> None:
        self._office = office
        self._prompter = prompter
        self._on: set[str] = set(office.store.auto_mailboxes())
        self._pending: dict[str, set[str]] = {}  # mailbox -> senders of the new mail
        office.watch(self._delivered)

    def enabled(self, mailbox: str) -> bool:
        return mailbox in self._on

    async def set(self, mailbox: str, on: bool) -> None:
        """Turn auto-prompt on or off (durably). Turning it on with unread mail waiting
        prompts an idle session at once."""
        await trio.to_thread.run_sync(self._office.store.set_auto, mailbox, on)
        if on:
            self._on.add(mailbox)
            if self._office.unread_count(mailbox):
                self._pending.setdefault(mailbox, set())
                self.poke(mailbox)
        else:
            self._on.discard(mailbox)
            self._pending.pop(mailbox, None)

    def poke(self, mailbox: str) -> None:
        """The session may have become idle: prompt it if it has pending mail."""
        senders = self._pending.get(mailbox)
        if senders is None or not self._prompter.is_idle(mailbox):
            return
        del self._pending[mailbox]
        count = self._office.unread_count(mailbox)
        if not count:
            return  # read meanwhile
        who = ", ".join(sorted(senders)) if senders else "waiting since before"
        text = PROMPT.format(count=count, senders=f"from {who}" if senders else who)
        try:
            self._prompter.prompt(mailbox, text)
        except Exception as exc:  # a session refusing a prompt must not break delivery
            log.warning("mail.auto_prompt_refused", mailbox=mailbox, error=str(exc))

    def _delivered(self, mailbox: str, message: Message) -> None:
        if mailbox not in self._on:
            return
        self._pending.setdefault(mailbox, set()).add(message.sender)
        self.poke(mailbox)


__all__ = ["PROMPT", "AutoMail", "Prompter"]
