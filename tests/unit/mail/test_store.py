"""The mailboxes on disk (`anvild.mail.store`): layout, durability, marking read, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anvild.mail import Box, MailStore, Message, MessageType, UnknownMailbox
from anvild.mail.message import MessageIds

IDS = MessageIds()


def message(sender: str = "a1", to: str = "b2", body: str = "hello") -> Message:
    return Message(
        id=IDS.next(),
        sender=sender,
        to=to,
        type=MessageType.QUESTION,
        subject="s",
        body=body,
        metadata={},
        timestamp=1,
    )


def test_deliver_writes_the_recipients_inbox_and_the_senders_sent(tmp_path: Path) -> None:
    store = MailStore(tmp_path / "mail")
    m = message()
    store.deliver("a1", "b2", m)
    assert json.loads((tmp_path / f"mail/b2/inbox/{m.id}.json").read_text())["body"] == "hello"
    assert (tmp_path / f"mail/a1/sent/{m.id}.json").is_file()
    assert store.messages("b2", Box.INBOX) == [m]
    assert store.messages("a1", Box.SENT) == [m]
    assert store.messages("a1", Box.INBOX) == []
    assert not list((tmp_path / "mail").rglob("*.tmp"))


def test_mark_read_moves_to_received_once(tmp_path: Path) -> None:
    store = MailStore(tmp_path)
    first, second = message(body="1"), message(body="2")
    store.put("b2", Box.INBOX, first)
    store.put("b2", Box.INBOX, second)
    assert store.mark_read("b2", [first.id]) == [first.id]
    assert store.mark_read("b2", [first.id, "msg-nonsense"]) == []  # already moved; not an id
    assert store.messages("b2", Box.INBOX) == [second]
    assert store.messages("b2", Box.RECEIVED) == [first]
    assert store.get("b2", Box.RECEIVED, first.id) == first


def test_messages_come_oldest_first(tmp_path: Path) -> None:
    store = MailStore(tmp_path)
    made = [message(body=str(i)) for i in range(5)]
    for m in reversed(made):
        store.put("u", Box.INBOX, m)
    assert store.messages("u", Box.INBOX) == made


def test_a_bad_file_is_skipped_and_left_alone(tmp_path: Path) -> None:
    store = MailStore(tmp_path)
    good = message()
    store.put("b2", Box.INBOX, good)
    bad = tmp_path / "b2/inbox/msg-0000000000000001.json"
    bad.write_text("{not json")
    (tmp_path / "b2/inbox/.msg-0000000000000002.json.tmp").write_text("torn")
    assert store.messages("b2", Box.INBOX) == [good]
    assert bad.read_text() == "{not json"


def test_mailbox_names_cannot_escape(tmp_path: Path) -> None:
    store = MailStore(tmp_path)
    for name in ("..", "../x", "", "a/b"):
        with pytest.raises(UnknownMailbox):
            store.put(name, Box.INBOX, message())


def test_the_auto_setting_is_durable(tmp_path: Path) -> None:
    store = MailStore(tmp_path)
    assert store.auto("a1") is False
    store.set_auto("a1", True)
    store.set_auto("b2", False)
    assert MailStore(tmp_path).auto("a1") is True
    assert MailStore(tmp_path).auto_mailboxes() == ["a1"]
    (tmp_path / "a1/settings.json").write_text("garbage")
    assert store.auto("a1") is False
