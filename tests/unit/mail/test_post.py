"""Sending, delivering, undeliverable mail and reading (`anvild.mail.post`), with fake peers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from anvild.mail import (
    DAEMON,
    USER,
    Box,
    InvalidMessage,
    MailEvent,
    MailStore,
    MessageType,
    Peer,
    PostOffice,
    encode_event,
)
from anvild.mail.post import MailRead, MailSent, MailUndeliverable


class FakePeers:
    def __init__(self, *peers: Peer) -> None:
        self.live = list(peers)

    def peers(self) -> Sequence[Peer]:
        return self.live

    def find(self, name: str) -> Peer | None:
        return next((p for p in self.live if name in (p.id, p.alias)), None)


DEV = Peer("a1", "dev", "developer", "idle")
REV = Peer("b2", "rev", "reviewer", "idle")


def office(tmp_path: Path, events: list[MailEvent] | None = None) -> PostOffice:
    sink = events if events is not None else []
    return PostOffice(MailStore(tmp_path / "mail"), FakePeers(DEV, REV), on_event=sink.append)


async def test_send_by_alias_delivers_to_the_id_with_the_real_sender(tmp_path: Path) -> None:
    events: list[MailEvent] = []
    post = office(tmp_path, events)
    data = json.dumps(
        {"from": "b2", "to": "rev", "type": "REVIEW_REQUEST", "subject": "OAuth", "body": "pls"}
    ).encode()
    sent = await post.send_bytes("a1", data)
    assert sent.undeliverable is None
    inbox = await post.unread("b2")
    assert [(m.sender, m.to, m.type, m.subject) for m in inbox] == [
        ("a1", "b2", MessageType.REVIEW_REQUEST, "OAuth")
    ]
    assert await post.archived("a1", Box.SENT) == inbox
    assert events == [MailSent(sent.message.id, "a1", "b2", "REVIEW_REQUEST", "OAuth", "b2")]
    line = json.loads(encode_event(events[0]))
    assert (line["type"], line["from"], line["claimed_from"]) == ("mail_sent", "a1", "b2")


async def test_an_invalid_draft_writes_nothing(tmp_path: Path) -> None:
    post = office(tmp_path)
    with pytest.raises(InvalidMessage):
        await post.send_bytes("a1", b'{"to": "rev", "type": "NOPE", "body": "x"}')
    assert not (tmp_path / "mail").exists()


async def test_undeliverable_mail_comes_back_as_an_error_report(tmp_path: Path) -> None:
    events: list[MailEvent] = []
    post = office(tmp_path, events)
    sent = await post.send_bytes("a1", b'{"to": "ghost", "type": "QUESTION", "body": "hi?"}')
    assert sent.undeliverable is not None
    assert "no live session has the id or alias 'ghost'" in sent.undeliverable
    [report] = await post.unread("a1")
    assert (report.sender, report.type, report.in_reply_to) == (
        DAEMON,
        MessageType.ERROR_REPORT,
        sent.message.id,
    )
    assert "'ghost'" in report.body
    assert await post.archived("a1", Box.SENT) == [sent.message]
    assert isinstance(events[0], MailUndeliverable)


async def test_the_human_has_a_mailbox(tmp_path: Path) -> None:
    post = office(tmp_path)
    await post.send_bytes("a1", b'{"to": "user", "type": "APPROVAL_REQUEST", "body": "ok?"}')
    await post.send_bytes(USER, b'{"to": "dev", "type": "APPROVAL_RESPONSE", "body": "yes"}')
    assert [m.sender for m in await post.unread(USER)] == ["a1"]
    assert [m.sender for m in await post.unread("a1")] == [USER]


async def test_take_unread_archives_and_watchers_see_deliveries(tmp_path: Path) -> None:
    events: list[MailEvent] = []
    post = office(tmp_path, events)
    seen: list[tuple[str, str]] = []
    post.watch(lambda mailbox, message: seen.append((mailbox, message.body)))
    for body in ("one", "two"):
        await post.send_args("a1", {"to": "b2", "type": "STATUS_UPDATE", "body": body})
    taken = await post.take_unread("b2")
    assert [m.body for m in taken] == ["one", "two"]
    assert await post.take_unread("b2") == []
    assert [m.body for m in await post.archived("b2", Box.RECEIVED)] == ["one", "two"]
    assert seen == [("b2", "one"), ("b2", "two")]
    assert isinstance(events[-1], MailRead)
    assert events[-1].ids == tuple(m.id for m in taken)


async def test_a_rejected_write_is_reported_to_the_writer(tmp_path: Path) -> None:
    post = office(tmp_path)
    await post.report_rejected("a1", "malformed JSON at line 1 column 2")
    [report] = await post.unread("a1")
    assert report.type is MessageType.ERROR_REPORT
    assert "malformed JSON at line 1 column 2" in report.body
