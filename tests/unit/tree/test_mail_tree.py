"""Mail in the tree (`anvild.tree.mail`) over a real 9P connection, in-process.

A `SessionManager` over scripted providers with the mail tools, a `PostOffice` and `AutoMail`
mounted as the daemon mounts them, driven with raw 9P messages the way `9p read`, `9p write` and
`9p rdwr` drive it.
"""

from __future__ import annotations

import errno
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing

from anvild.llm.testing import ScriptedProvider, script
from anvild.mail import AutoMail, Box, MailStore, Message, MessageType, PostOffice, mail_tools
from anvild.mail.message import MessageIds, encode
from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import RawClient
from anvild.session import SessionManager, chain_tools
from anvild.session.events import SessionEvent, SessionStateChanged
from anvild.store import SessionStore
from anvild.tree.mail import (
    MailTree,
    SessionPeers,
    SessionPrompter,
    forward_mail_events,
)
from anvild.tree.root import RootTree
from anvild.tree.sessions import SESSION_FILES, SessionTree, forward_events
from tests.unit.session.support import (
    Models,
    file_tools,
    loads_on_loop,
    settings,
    target,
    unloaded,
    workspace,
)
from tests.unit.tree.test_sessions_tree import (
    OREAD,
    OTRUNC,
    OWRITE,
    Client,
    dir_names,
    error_text,
    new_session,
)


@attrs.frozen
class Served:
    manager: SessionManager
    office: PostOffice
    root: RootTree
    client: Client
    provider: ScriptedProvider
    server: Server
    connect: Callable[[], Awaitable[tuple[Client, trio.testing.MemorySendStream | Any]]]


@asynccontextmanager
async def served(
    tmp_path: Path, scripts: Sequence[Any] = (), store: MailStore | None = None
) -> AsyncIterator[Served]:
    provider = ScriptedProvider(scripts)
    root = RootTree()
    peers, prompter = SessionPeers(), SessionPrompter()
    office = PostOffice(
        store or MailStore(tmp_path / "data" / "mail"), peers, on_event=forward_mail_events(root)
    )
    auto = AutoMail(office, prompter)
    forward = forward_events(root)

    def on_event(event: SessionEvent) -> None:
        forward(event)
        if isinstance(event, SessionStateChanged) and event.state == "idle":
            auto.poke(event.id)

    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        Models({"fake": target(provider)}),
        settings=settings(tmp_path),
        tools=chain_tools(file_tools(), mail_tools(office)),
        default_cwd=workspace(tmp_path),
        on_event=on_event,
    )
    peers.bind(manager)
    prompter.bind(manager)
    tree = SessionTree(manager)
    MailTree(office, auto).mount(root, tree)
    tree.mount(root)
    server = Server(lambda req: root.root)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await nursery.start(prompter.run)  # as the daemon runs it

        async def connect() -> tuple[Client, Any]:
            client_stream, server_stream = trio.testing.memory_stream_pair()
            nursery.start_soon(server.serve, server_stream)
            raw = RawClient(client_stream, Dialect.P9P2000_U)
            await raw.handshake()
            return Client(raw), client_stream

        client, stream = await connect()
        yield Served(manager, office, root, client, provider, server, connect)
        await stream.aclose()
        nursery.cancel_scope.cancel()


def msg(to: str, kind: str = "QUESTION", **fields: Any) -> bytes:
    return json.dumps({"to": to, "type": kind, "body": "hello", **fields}).encode()


async def test_every_session_has_a_mailbox_and_the_human_has_agent_user(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        sid = await new_session(s.client)
        names = await dir_names(s.client, sid)
        assert names == [*SESSION_FILES, "inbox", "outbox", "mail"]
        assert await dir_names(s.client, f"{sid}/mail") == ["received", "sent"]
        assert "user" in await dir_names(s.client, "")
        assert await dir_names(s.client, "user") == ["inbox", "outbox", "mail"]
        assert await s.client.get(f"{sid}/inbox") == "[]\n"


async def test_outbox_delivers_with_the_real_sender_and_inbox_archives(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        c = s.client
        dev = await new_session(c, b"alias=dev")
        rev = await new_session(c, b"alias=rev")
        body = msg("rev", "REVIEW_REQUEST", subject="OAuth", **{"from": "user"})
        assert await c.put("dev/outbox", body) == m.Rclunk(0)
        [sent] = json.loads(await c.get(f"{dev}/inbox") or "[]") or [None]
        assert sent is None  # nothing came back to the sender
        inbox = json.loads(await c.get("rev/inbox"))
        assert [(x["from"], x["to"], x["type"], x["subject"]) for x in inbox] == [
            (dev, rev, "REVIEW_REQUEST", "OAuth")
        ]
        # the read above reached EOF and clunked: archived
        assert await c.get(f"{rev}/inbox") == "[]\n"
        name = f"{inbox[0]['id']}.json"
        assert await dir_names(c, f"{rev}/mail/received") == [name]
        assert json.loads(await c.get(f"{rev}/mail/received/{name}")) == inbox[0]
        assert json.loads(await c.get(f"{dev}/mail/sent/{name}")) == inbox[0]


async def test_an_inbox_read_that_stops_early_marks_nothing(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        c = s.client
        await new_session(c, b"alias=dev")
        assert await c.put("user/outbox", msg("dev")) == m.Rclunk(0)
        fid = await c.open("dev/inbox", OREAD)
        reply = await c.raw.rpc(m.Tread(0, fid, 0, 5))
        assert reply == m.Rread(0, b'[\n{"i')
        assert await c.clunk(fid) == m.Rclunk(0)
        assert len(json.loads(await c.get("dev/inbox"))) == 1  # still unread, now read


async def test_a_reader_whose_connection_drops_loses_no_mail(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        await new_session(s.client, b"alias=dev")
        assert await s.client.put("user/outbox", msg("dev")) == m.Rclunk(0)
        other, stream = await s.connect()
        fid = await other.open("dev/inbox", OREAD)
        assert len(json.loads(await other.read_all(fid))) == 1  # read to the end, never clunked
        await stream.aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert s.server.statistics().connections_open == 1  # its fids were aborted
        assert len(json.loads(await s.client.get("dev/inbox"))) == 1  # still unread


async def test_bad_outbox_writes_fail_the_twrite_and_write_nothing(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        c = s.client
        dev = await new_session(c, b"alias=dev")
        await new_session(c, b"alias=rev")
        events = s.root.events.open_reader()
        cases = [
            (b'{"to": "rev", "type": x', "outbox: malformed JSON at line 1 column 23"),
            (msg("rev", "GOSSIP"), 'outbox: unknown message type "GOSSIP": the types are'),
            (
                b'{"type": "QUESTION", "body": "x"}',
                'outbox: the message has no recipient: add "to"',
            ),
        ]
        for data, expected in cases:
            fid = await c.open("dev/outbox", OWRITE | OTRUNC)
            reply = await c.write(fid, data)  # refused on the Twrite, whatever the clunk says
            assert error_text(reply).startswith(expected), reply
            assert isinstance(reply, m.Rerror)
            assert reply.errno == errno.EINVAL
            await c.clunk(fid)
        big = msg("rev", body="x" * 200_000)
        fid = await c.open("dev/outbox", OWRITE | OTRUNC)
        replies = [
            await c.write(fid, big[offset : offset + 4096], offset)
            for offset in range(0, len(big), 4096)  # as plan9port's 9p write splits it
        ]
        assert replies[:32] == [m.Rwrite(0, 4096)] * 32
        assert error_text(replies[32]).startswith(
            "outbox: body too large: 135168 bytes exceeds the limit of 131072 bytes"
        )
        assert isinstance(replies[32], m.Rerror)
        assert replies[32].errno == errno.EFBIG
        await c.clunk(fid)
        assert await c.get("rev/inbox") == "[]\n"
        assert await dir_names(c, f"{dev}/mail/sent") == []
        assert await c.get("dev/inbox") == "[]\n"  # seen on the Twrite: no mail about it
        lines = [json.loads(x) for x in (await events.read(1 << 16)).decode().splitlines()]
        assert [x["type"] for x in lines if x["type"].startswith("mail")] == ["mail_rejected"] * 4


async def test_a_body_that_ends_before_its_json_value_is_refused_at_clunk(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as s:
        c = s.client
        await new_session(c, b"alias=rev")
        fid = await c.open("user/outbox", OWRITE | OTRUNC)
        assert await c.write(fid, b'{"to": "rev", "type": ') == m.Rwrite(0, 22)
        reply = await c.clunk(fid)
        assert error_text(reply).startswith("outbox: malformed JSON at line 1 column 23")
        assert await c.get("rev/inbox") == "[]\n"
        [report] = json.loads(await c.get("user/inbox"))  # the clunk's error, as mail
        assert report["type"] == "ERROR_REPORT"
        assert "malformed JSON" in report["body"]


async def test_mail_to_nobody_fails_the_twrite(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        c = s.client
        events = s.root.events.open_reader()
        fid = await c.open("user/outbox", OWRITE | OTRUNC)
        reply = await c.write(fid, msg("ghost"))
        assert "no live session has the id or alias 'ghost'" in error_text(reply)
        assert isinstance(reply, m.Rerror)
        assert reply.errno == errno.ENOENT
        await c.clunk(fid)
        assert await c.get("user/inbox") == "[]\n"
        assert await dir_names(c, "user/mail/sent") == []
        lines = [json.loads(x) for x in (await events.read(1 << 16)).decode().splitlines()]
        assert [x["type"] for x in lines] == ["mail_rejected"]


async def test_automail_prompts_an_idle_session_once(tmp_path: Path) -> None:
    answer = script.text("I read it.")
    async with served(tmp_path, [answer]) as s:
        c = s.client
        reply, answer_line = await c.rdwr("ctl", b"new alias=rev mail=auto")
        assert isinstance(reply, m.Rwrite), reply
        rev = answer_line.decode().strip()
        assert s.office.store.auto(rev)
        assert await c.put("user/outbox", msg("rev")) == m.Rclunk(0)
        assert await c.get("rev/wait") == "await\n"
        [request] = s.provider.requests
        prompt = request.messages[-1].text()
        assert "You have new mail: 1 unread message(s) in your inbox (from user)" in prompt
        assert "read_inbox" in prompt
        # The answer is not read yet (await): more mail does not prompt over it.
        assert await c.put("user/outbox", msg("rev")) == m.Rclunk(0)
        assert len(s.provider.requests) == 1
        reply, _ = await c.rdwr("rev/ctl", b"automail off")
        assert isinstance(reply, m.Rwrite), reply
        assert await c.get("rev/out") == "I read it.\n"  # idle now; automail is off
        assert len(s.provider.requests) == 1
        reply, _ = await c.rdwr("rev/ctl", b"automail maybe")
        assert "automail maybe: write automail on or automail off" in error_text(reply)
        reply, _ = await c.rdwr("ctl", b"new mail=sometimes")
        assert "mail=sometimes: use mail=auto" in error_text(reply)
        assert s.office.store.count(rev, Box.INBOX) == 2


async def test_automail_waits_for_an_unread_answer_then_prompts(tmp_path: Path) -> None:
    scripts = [script.text("first answer"), script.text("handled the mail")]
    async with served(tmp_path, scripts) as s:
        c = s.client
        await new_session(c, b"alias=bot")
        reply, _ = await c.rdwr("bot/ctl", b"automail on")
        assert isinstance(reply, m.Rwrite), reply
        assert await c.put("bot/in", b"work") == m.Rclunk(0)
        assert await c.get("bot/wait") == "await\n"
        assert await c.put("user/outbox", msg("bot", subject="news")) == m.Rclunk(0)
        assert await c.put("user/outbox", msg("bot", subject="more")) == m.Rclunk(0)
        assert len(s.provider.requests) == 1  # the answer in out is not read yet
        assert await c.get("bot/out") == "first answer\n"  # idle: the mail prompt goes in now
        assert await c.get("bot/wait") == "await\n"
        assert len(s.provider.requests) == 2
        prompt = s.provider.requests[1].messages[-1].text()
        assert "2 unread message(s) in your inbox (from user)" in prompt


async def test_mail_to_sessions_at_rest_builds_none_and_an_auto_prompt_replays_off_the_loop(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, [script.text("Read it.")]) as s:
        c = s.client
        quiet = await new_session(c, b"alias=quiet")
        auto = await new_session(c, b"alias=auto mail=auto")
        loads = loads_on_loop(s.manager)
        await unloaded(s.manager, *s.manager.built_sessions())
        assert await c.put("user/outbox", msg("quiet")) == m.Rclunk(0)
        assert s.office.store.count(quiet, Box.INBOX) == 1
        assert s.manager.built_sessions() == ()  # delivered, nothing built
        assert loads == []

        assert await c.put("user/outbox", msg("auto")) == m.Rclunk(0)  # prompts it
        with trio.fail_after(10):
            while not s.provider.requests:  # noqa: ASYNC110 - submitted once it is built
                await trio.sleep(0.01)
        assert "You have new mail" in s.provider.requests[0].messages[-1].text()
        assert [session.id for session in s.manager.built_sessions()] == [auto]
        assert loads == [False]


# -- the archive listings: large, and off the 9P loop -----------------------------------------


async def test_an_archive_of_thousands_lists_every_message_in_order(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        c = s.client
        sid = await new_session(c)
        sent = tmp_path / "data" / "mail" / sid / "sent"
        sent.mkdir(parents=True)
        ids = MessageIds()
        messages = [
            Message(
                id=ids.next(),
                sender=sid,
                to="user",
                type=MessageType.STATUS_UPDATE,
                subject=f"number {i}",
                body="",
                metadata={},
                timestamp=i,
            )
            for i in range(3000)
        ]
        for message in messages:  # (written directly: the store's fsyncs would take a while)
            (sent / f"{message.id}.json").write_bytes(encode(message))
        (sent / ".left-over.json.tmp").write_bytes(b"{")  # a crashed write's leftover
        names = await dir_names(c, f"{sid}/mail/sent")
        assert names == [f"{m.id}.json" for m in messages]
        last = json.loads(await c.get(f"{sid}/mail/sent/{messages[-1].id}.json"))
        assert last["subject"] == "number 2999"
        assert await dir_names(c, f"{sid}/mail/received") == []
        names = (sid, "mail", "sent", ".left-over.json.tmp")
        reply = await c.raw.rpc(m.Twalk(0, 0, 99, names))
        assert isinstance(reply, m.Rwalk), reply
        assert len(reply.qids) == 3  # walk(5): the walk stopped before the leftover


class GatedStore(MailStore):
    """A store whose listing of a `sent` directory, once under way (`listing`), waits in its
    thread until the test lets it finish (`gate`)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listing = threading.Event()
        self.gate = threading.Event()

    def ids(self, mailbox: str, box: Box) -> list[str]:
        if box is Box.SENT:
            self.listing.set()
            if not self.gate.wait(5):
                raise AssertionError("the listing ran on the 9P loop: nothing else could run")
        return super().ids(mailbox, box)


async def test_other_clients_are_answered_while_an_archive_is_listed(tmp_path: Path) -> None:
    store = GatedStore(tmp_path / "data" / "mail")
    async with served(tmp_path, store=store) as s:
        sid = await new_session(s.client)
        other, _ = await s.connect()
        listed: list[list[str]] = []

        async def listing() -> None:
            listed.append(await dir_names(s.client, f"{sid}/mail/sent"))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(listing)
                assert await trio.to_thread.run_sync(store.listing.wait, 5)
                # the listing is under way (and waits); another client is answered meanwhile
                assert await other.get(f"{sid}/state") == "idle\n"
                store.gate.set()
        assert listed == [[]]
