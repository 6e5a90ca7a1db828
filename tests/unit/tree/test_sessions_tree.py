"""The session tree (`anvild.tree.sessions`) over a real 9P connection, in-process.

A `SessionManager` over scripted providers (tests.unit.session.support) is mounted on a
`RootTree`, served by `anvild.ninep.Server` on trio memory streams, and driven with raw 9P
messages, the way `9p rdwr`, `9p write` and `9p read` drive it.
"""

from __future__ import annotations

import errno
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from anvild.agent.permissions.policy import Mode
from anvild.llm import stream
from anvild.llm.testing import Pause, ScriptedProvider, Step, script
from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import RawClient
from anvild.session import Session, SessionManager, SessionStatus
from anvild.session.events import SessionEnded
from anvild.session.roles import ROLES
from anvild.store import PendingResult
from anvild.tree.root import RootTree
from anvild.tree.sessions import (
    SESSION_FILES,
    ModelLine,
    SessionExtension,
    SessionTree,
    forward_events,
)
from tests.unit.session.support import Models, running, target

OREAD, OWRITE, ORDWR, OTRUNC = 0, 1, 2, 0x10
AT_REMOVEDIR = 0x200
S = SessionStatus


class Client:
    """One 9P connection; `fid` numbers are handed out per call."""

    def __init__(self, raw: RawClient) -> None:
        self.raw = raw
        self._fids = iter(range(1, 1 << 30))

    async def open(self, path: str, mode: int) -> int:
        fid = next(self._fids)
        names = tuple(p for p in path.split("/") if p)
        reply = await self.raw.rpc(m.Twalk(0, 0, fid, names))
        assert isinstance(reply, m.Rwalk), reply
        assert len(reply.qids) == len(names), reply
        reply = await self.raw.rpc(m.Topen(0, fid, mode))
        assert isinstance(reply, m.Ropen), reply
        return fid

    async def read_all(self, fid: int) -> bytes:
        out = b""
        while True:
            reply = await self.raw.rpc(m.Tread(0, fid, len(out), 4096))
            assert isinstance(reply, m.Rread), reply
            if not reply.data:
                return out
            out += reply.data

    async def read_all_nowait(self, fid: int) -> bytes:
        """One read (a stream's backlog)."""
        reply = await self.raw.rpc(m.Tread(0, fid, 0, 1 << 16))
        assert isinstance(reply, m.Rread), reply
        return reply.data

    async def write(self, fid: int, data: bytes, offset: int = 0) -> m.Message:
        return await self.raw.rpc(m.Twrite(0, fid, offset, data))

    async def clunk(self, fid: int) -> m.Message:
        return await self.raw.rpc(m.Tclunk(0, fid))

    async def get(self, path: str) -> str:
        fid = await self.open(path, OREAD)
        data = await self.read_all(fid)
        assert await self.clunk(fid) == m.Rclunk(0)
        return data.decode()

    async def put(self, path: str, data: bytes) -> m.Message:
        """`9p write`: OWRITE|OTRUNC, one Twrite, clunk; the first error reply, or Rclunk."""
        fid = await self.open(path, OWRITE | OTRUNC)
        reply = await self.write(fid, data)
        clunked = await self.clunk(fid)
        return reply if isinstance(reply, m.Rerror) else clunked

    async def rdwr(self, path: str, line: bytes) -> tuple[m.Message, bytes]:
        """`9p rdwr`: ORDWR, write a line, read the answer on the same fid."""
        fid = await self.open(path, ORDWR)
        reply = await self.write(fid, line)
        answer = await self.read_all(fid)
        await self.clunk(fid)
        return reply, answer


def error_text(reply: m.Message) -> str:
    assert isinstance(reply, m.Rerror), reply
    return reply.ename


Connect = Callable[..., Awaitable[Client]]
"""`connect(dialect=Dialect.P9P2000_U)`: a new connection to the served tree."""


@asynccontextmanager
async def served(
    tmp_path: Path,
    models: Models | Sequence[Any],
    extensions: Sequence[SessionExtension] = (),
    **changes: Any,
) -> AsyncIterator[tuple[SessionManager, Connect, RootTree]]:
    lines = [ModelLine("fake", "scripted", "fake-model", 32000, True)]
    async with running(tmp_path, models, **changes) as manager:
        root = RootTree()
        tree = SessionTree(manager, models=lambda: lines)
        for extension in extensions:
            tree.extend(extension)
        tree.mount(root)
        server = Server(lambda req: root.root)
        streams: list[trio.testing.MemorySendStream | Any] = []
        async with trio.open_nursery() as nursery:

            async def connect(dialect: Dialect = Dialect.P9P2000_U) -> Client:
                client_stream, server_stream = trio.testing.memory_stream_pair()
                streams.append(client_stream)
                nursery.start_soon(server.serve, server_stream)
                raw = RawClient(client_stream, dialect)
                await raw.handshake()
                return Client(raw)

            yield manager, connect, root
            for s in streams:
                await s.aclose()


async def new_session(c: Client, args: bytes = b"") -> str:
    reply, answer = await c.rdwr("ctl", b"new " + args if args else b"new")
    assert isinstance(reply, m.Rwrite), reply
    assert answer.endswith(b"\n")
    return answer.decode().strip()


async def test_new_then_a_turn_through_in_wait_and_out(tmp_path: Path) -> None:
    usage = stream.Usage(100, 20, 0, 0)
    async with served(tmp_path, [script.text("Hello there.", usage=usage)]) as (manager, con, _):
        c = await con()
        sid = await new_session(c, b"alias=r1")
        assert manager.get(sid).alias == "r1"
        assert await c.get(f"{sid}/state") == "idle\n"
        assert await c.get(f"{sid}/usage") == "-\n"
        assert await c.put(f"{sid}/in", b"hi") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert await c.get(f"{sid}/state") == "await\n"
        assert await c.get(f"{sid}/usage") == "120/32000 (0.4%) compact at 85%\n"
        assert "input 100\noutput 20\n" in await c.get(f"{sid}/cost")
        # The read of out to EOF, then the clunk, moves await to idle.
        assert await c.get(f"{sid}/out") == "Hello there.\n"
        assert await c.get(f"{sid}/state") == "idle\n"
        assert "USER: hi\n" in await read_some(c, "r1/log")
        assert await c.get("r1/alias") == "r1\n"
        assert await c.get("r1/model") == "fake\n"
        assert await c.get("r1/cwd") == f"{tmp_path / 'work'}\n"
        assert await c.get("list") == f"{sid}\tr1\tidle\tdeveloper\tfake\t{tmp_path / 'work'}\n"


async def test_open_without_reading_to_eof_leaves_await(tmp_path: Path) -> None:
    async with served(tmp_path, [script.text("a long answer")]) as (_, con, _root):
        c = await con()
        sid = await new_session(c)
        await c.put(f"{sid}/in", b"hi")
        assert await c.get(f"{sid}/wait") == "await\n"
        fid = await c.open(f"{sid}/out", OREAD)
        reply = await c.raw.rpc(m.Tread(0, fid, 0, 3))
        assert reply == m.Rread(0, b"a l")
        await c.clunk(fid)
        assert await c.get(f"{sid}/state") == "await\n"


async def test_the_tree_lists_the_root_roles_models_and_session_files(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        sid = await new_session(c, b"alias=r1 role=reviewer")
        assert await dir_names(c, "") == [
            "ctl",
            "list",
            "version",
            "events",
            "models",
            "roles",
            "sandbox-roles",
            "scripts",
            sid,
        ]
        assert await dir_names(c, sid) == list(SESSION_FILES)
        assert await dir_names(c, "r1") == list(SESSION_FILES)
        assert await dir_names(c, "roles") == list(ROLES)
        assert await c.get("models") == "fake\tscripted\tfake-model\t32000\tyes\n"
        assert (await c.get("roles/reviewer")).strip()
        assert await c.get("r1/role") == "reviewer\n"
        assert await c.get(f"{sid}/sandbox") == "read-only\n"  # the reviewer role's sandbox
        assert await c.get(f"{sid}/queue") == ""
        assert await c.get(f"{sid}/approval") == ""
        assert await c.get(f"{sid}/todos") == ""


async def dir_names(c: Client, path: str) -> list[str]:
    fid = await c.open(path, OREAD)
    data = await c.read_all(fid)
    await c.clunk(fid)
    names = []
    while data:
        size = int.from_bytes(data[:2], "little") + 2
        names.append(m.decode_stat(data[:size], Dialect.P9P2000_U).name)
        data = data[size:]
    return names


async def test_new_refusals_are_the_writes_errors(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        reply, answer = await c.rdwr("ctl", b"new model=nope")
        assert error_text(reply) == "ctl: unknown model 'nope' (known aliases: fake)"
        assert answer == b""
        reply, _ = await c.rdwr("ctl", b"new cwd=/no/such/dir")
        assert "cwd=/no/such/dir does not exist" in error_text(reply)
        reply, _ = await c.rdwr("ctl", b"new alias=list")
        assert "alias=list is reserved" in error_text(reply)
        reply, _ = await c.rdwr("ctl", b"new alias=anvild")
        assert "alias=anvild is reserved" in error_text(reply)
        assert "choose another" in error_text(reply)
        reply, _ = await c.rdwr("ctl", b"new colour=red")
        assert "new: unknown option colour=" in error_text(reply)
        reply, _ = await c.rdwr("ctl", b"kill nobody")
        assert error_text(reply) == (
            "ctl: no session 'nobody': read agent/list for the live sessions"
        )
        assert await c.get("list") == ""


async def test_kill_removes_the_session_from_list_and_the_tree(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        first = await new_session(c, b"alias=a1")
        second = await new_session(c, b"ephemeral")
        assert [line.split("\t")[0] for line in (await c.get("list")).splitlines()] == [
            first,
            second,
        ]
        reply, answer = await c.rdwr("ctl", b"kill a1")
        assert isinstance(reply, m.Rwrite)
        assert answer == b""
        assert [line.split("\t")[0] for line in (await c.get("list")).splitlines()] == [second]
        gone = await c.raw.rpc(m.Twalk(0, 0, 99, ("a1",)))
        assert isinstance(gone, m.Rerror), gone
        assert await dir_names(c, "") == [
            "ctl",
            "list",
            "version",
            "events",
            "models",
            "roles",
            "sandbox-roles",
            "scripts",
            second,
        ]


async def test_forward_events_puts_session_events_on_agent_events() -> None:
    root = RootTree()
    forward = forward_events(root)
    reader = root.events.open_reader(backlog=False)
    forward(SessionEnded("s1", "killed"))
    data = reader.read_nowait(1 << 16) or b""
    assert b'"type":"session_ended"' in data
    assert b'"id":"s1"' in data
    reader.close()
    root.events.close()
    forward(SessionEnded("s2", "killed"))  # after shutdown: dropped, no error


async def read_some(c: Client, path: str) -> str:
    """One read of a stream file (its backlog), then clunk."""
    fid = await c.open(path, OREAD)
    reply = await c.raw.rpc(m.Tread(0, fid, 0, 8192))
    assert isinstance(reply, m.Rread), reply
    await c.clunk(fid)
    return reply.data.decode()


async def wait_state(manager: SessionManager, sid: str, status: SessionStatus) -> None:
    session = manager.get(sid)
    while session.status is not status:
        await session.wait_changed(session.version)


SLOW: list[Step] = [
    stream.TextDelta(0, "one"),
    Pause(10),
    stream.Finish(stream.FinishReason.END_TURN),
]


async def test_prompts_written_during_a_turn_run_in_order_and_drop_empties_the_queue(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    provider = ScriptedProvider([SLOW, script.text("two"), script.text("three"), SLOW, SLOW])
    async with served(tmp_path, Models({"fake": target(provider)})) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        await c.put(f"{sid}/in", b"p1")
        await wait_state(manager, sid, S.RUNNING)
        for text in (b"p2", b"p3"):
            assert await c.put(f"{sid}/in", text) == m.Rclunk(0)
        assert [line.split("\t")[1] for line in (await c.get(f"{sid}/queue")).splitlines()] == [
            "p2",
            "p3",
        ]
        assert await c.get(f"{sid}/wait") == "await\n"
        assert await c.get(f"{sid}/out") == "three\n"
        prompts = [r.messages[-1].text() for r in provider.requests]
        assert prompts == ["p1", "p2", "p3"]
        # A new turn with two prompts behind it: drop discards them.
        await c.put(f"{sid}/in", b"p4")
        await wait_state(manager, sid, S.RUNNING)
        await c.put(f"{sid}/in", b"p5")
        await c.put(f"{sid}/in", b"p6")
        reply = await c.put(f"{sid}/queue", b"frob")
        assert error_text(reply) == "queue: unknown queue command 'frob': write drop"
        assert await c.put(f"{sid}/queue", b"drop\n") == m.Rclunk(0)
        assert await c.get(f"{sid}/queue") == ""
        assert await c.get(f"{sid}/wait") == "await\n"
        assert len(provider.requests) == 4


async def test_role_is_writable_only_before_the_first_prompt(tmp_path: Path) -> None:
    async with served(tmp_path, [script.text("ok")]) as (_, con, _root):
        c = await con()
        sid = await new_session(c)
        assert await c.put(f"{sid}/role", b"tester\n") == m.Rclunk(0)
        assert await c.get(f"{sid}/role") == "tester\n"
        reply = await c.put(f"{sid}/role", b"wizard")
        assert "role: unknown role 'wizard'" in error_text(reply)
        await c.put(f"{sid}/in", b"hi")
        await c.get(f"{sid}/wait")
        reply = await c.put(f"{sid}/role", b"reviewer")
        assert error_text(reply) == (
            f"role: the role of session {sid} is fixed once it has had a prompt; create a new "
            "session with role=reviewer"
        )
        assert await c.get(f"{sid}/role") == "tester\n"
        assert await c.put(f"{sid}/context", b"Be brief.") == m.Rclunk(0)
        assert await c.get(f"{sid}/context") == "Be brief."
        reply = await c.put(f"{sid}/in", b"   ")
        assert error_text(reply) == "in: the prompt is empty: write some text to `in`"


WRITE = {"file_path": "a.txt", "content": "written\n"}


@pytest.mark.parametrize("answer", [b"approve", b"reject because X"])
async def test_a_call_needing_approval_waits_for_the_approval_file(
    tmp_path: Path, answer: bytes
) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    models = Models({"fake": target(provider)})
    async with served(tmp_path, models, mode=Mode.DEFAULT) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        reply = await c.put(f"{sid}/approval", b"approve")
        assert error_text(reply) == f"approval: no approval is pending (session {sid} is idle)"
        await c.put(f"{sid}/in", b"write a.txt")
        await wait_state(manager, sid, S.AWAIT_APPROVAL)
        assert await c.get(f"{sid}/state") == "await_approval\n"
        assert "tool write_file\n" in await c.get(f"{sid}/approval")
        reply = await c.put(f"{sid}/approval", b"yes please")
        assert "write approve, always or reject REASON" in error_text(reply)
        assert await c.put(f"{sid}/approval", answer) == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        written = (tmp_path / "work" / "a.txt").exists()
        result = provider.requests[-1].messages[-1].tool_results()[0].content
        if answer == b"approve":
            assert written
        else:
            assert not written
            assert "because X" in result


@pytest.mark.parametrize("path", ["wait", "log"])
@pytest.mark.parametrize("release", ["flush", "clunk"])
async def test_a_blocked_read_is_released_by_flush_and_by_clunk(
    tmp_path: Path, path: str, release: str
) -> None:
    provider = ScriptedProvider([SLOW])
    async with served(tmp_path, Models({"fake": target(provider)})) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        fid = await c.open(f"{sid}/{path}", OREAD)
        if path == "log":
            await c.read_all_nowait(fid)  # the backlog; the next read blocks
        else:
            await c.put(f"{sid}/in", b"p1")
            await wait_state(manager, sid, S.RUNNING)
        await c.raw.send(m.Tread(5, fid, 1 << 20, 4096))
        await trio.testing.wait_all_tasks_blocked()
        if release == "flush":
            assert await c.raw.rpc(m.Tflush(6, 5)) == m.Rflush(6)
            assert await c.clunk(fid) == m.Rclunk(0)
        else:
            await c.raw.send(m.Tclunk(6, fid))
            replies = {await c.raw.receive(), await c.raw.receive()}
            assert replies == {m.Rread(5, b""), m.Rclunk(6)}
        # The connection still works, and the blocked read was never answered after a flush.
        assert await c.get(f"{sid}/alias") == "-\n"


async def test_a_large_body_over_many_writes_is_one_prompt(tmp_path: Path) -> None:
    provider = ScriptedProvider([script.text("ok")])
    async with served(tmp_path, Models({"fake": target(provider)})) as (_, con, _root):
        c = await con()
        sid = await new_session(c)
        body = b"".join(b"line %05d of a long diff\n" % i for i in range(2000))
        fid = await c.open(f"{sid}/in", OWRITE | OTRUNC)
        for offset in range(0, len(body), 4096):
            reply = await c.write(fid, body[offset : offset + 4096], offset)
            assert isinstance(reply, m.Rwrite), reply
        assert await c.get(f"{sid}/queue") == ""  # nothing is submitted before the clunk
        assert await c.clunk(fid) == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert len(provider.requests) == 1
        assert provider.requests[0].messages[-1].text() == body.decode()


async def test_an_answer_to_a_result_gate_awaits_the_extensions_answered_hook(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, str, str]] = []

    async def answered(session: Session, gate: PendingResult) -> None:
        seen.append((session.id, gate.asked_by, session.status.value))

    extension = SessionExtension(answered=answered)
    async with served(tmp_path, [], extensions=[extension]) as (_, connect, _):
        c = await connect()
        sid = await new_session(c)
        assert await c.put(f"{sid}/approval", b"approve") != m.Rclunk(0)  # nothing pending
        assert await c.put(f"{sid}/ctl", b"request_approval Added OAuth") == m.Rclunk(0)
        assert await c.put(f"{sid}/approval", b"approve") == m.Rclunk(0)
        assert seen == [(sid, "ctl", "idle")]
        assert await c.put(f"{sid}/ctl", b"request_approval Added tests") == m.Rclunk(0)
        assert await c.put(f"{sid}/ctl", b"reject not enough") == m.Rclunk(0)
        assert seen[1:] == [(sid, "ctl", "stopped")]


async def test_approver_is_named_by_new_shown_read_only_and_never_changed(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, []) as (manager, con, _root):
        c = await con()
        boss = await new_session(c, b"alias=boss")
        worker = await new_session(c, b"alias=w1 approver=boss")
        assert await c.get(f"{boss}/approver") == "user\n"
        assert await c.get("w1/approver") == f"{boss}\n"  # the id, whatever the alias
        reply, _ = await c.rdwr("ctl", b"new approver=ghost")
        assert error_text(reply) == (
            "ctl: approver=ghost is not a live session: name a session from agent/list (its id "
            "or alias), or user for a person only"
        )
        reply = await c.put("w1/ctl", b"approver user")
        assert error_text(reply) == (
            f"ctl: the approver of session {worker} is {boss}, fixed when the session was "
            "created: no verb changes it; create a new session with approver=ID|ALIAS|user"
        )
        fid = await c.open("w1/approver", OREAD)
        await c.clunk(fid)
        walked = await c.raw.rpc(m.Twalk(0, 0, 99, (worker, "approver")))
        assert isinstance(walked, m.Rwalk)
        opened = await c.raw.rpc(m.Topen(0, 99, OWRITE))
        assert isinstance(opened, m.Rerror)  # read-only
        assert manager.get(worker).approver == boss
        manager.get(worker).request_result_approval("done", "ctl")
        assert f"approver {boss}\n" in await c.get("w1/approval")


# --- file verbs on a session's directory: remove kills, rename sets the alias -----------------


async def live_ids(c: Client) -> list[str]:
    return [line.split("\t")[0] for line in (await c.get("list")).splitlines()]


async def walk(c: Client, fid: int, *names: str) -> m.Message:
    return await c.raw.rpc(m.Twalk(0, 0, fid, names))


def rename_to(name: str) -> m.Stat:
    """9pfuse's rename: a Twstat whose every field but the name says "don't touch"."""
    return attrs.evolve(m.Stat.dont_touch(), name=name)


async def test_removing_a_session_directory_kills_it_and_its_files_stay(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (manager, con, _):
        c = await con()
        sid = await new_session(c, b"alias=doomed")
        other = await new_session(c)
        listed = await dir_names(c, sid)
        # `rm -r` unlinks the entries first: each succeeds, removes nothing and kills nothing.
        for name in ("ctl", "in", "log", "alias"):
            assert isinstance(await walk(c, 40, sid, name), m.Rwalk)
            assert await c.raw.rpc(m.Tremove(0, 40)) == m.Rremove(0)
        assert await live_ids(c) == [sid, other]
        assert await dir_names(c, sid) == listed
        assert await c.get(f"{sid}/alias") == "doomed\n"
        # The directory itself (walked by its alias): killed and reaped at once.
        session = manager.get(sid)
        assert isinstance(await walk(c, 41, "doomed"), m.Rwalk)
        assert await c.raw.rpc(m.Tremove(0, 41)) == m.Rremove(0)
        assert session.status is S.EXITED
        assert await live_ids(c) == [other]
        assert isinstance(await walk(c, 42, sid), m.Rerror)
        assert isinstance(await walk(c, 42, "doomed"), m.Rerror)
        assert "doomed" not in await c.get("list")
        # The fid was clunked by the Tremove (remove(5)): the number is free again.
        assert isinstance(await walk(c, 41, other), m.Rwalk)


async def test_removing_a_session_that_waits_for_an_approval_is_refused_with_the_reason(
    tmp_path: Path,
) -> None:
    provider = ScriptedProvider([script.tool_call("c1", "write_file", WRITE), script.text("ok")])
    models = Models({"fake": target(provider)})
    async with served(tmp_path, models, mode=Mode.DEFAULT) as (manager, con, _):
        c = await con()
        gated = await new_session(c)
        assert await c.put(f"{gated}/ctl", b"request_approval Added OAuth") == m.Rclunk(0)
        tool = await new_session(c)
        await c.put(f"{tool}/in", b"write a.txt")
        await wait_state(manager, tool, S.AWAIT_APPROVAL)
        for sid, what in ((gated, "its result"), (tool, "a tool call")):
            assert isinstance(await walk(c, 50, sid), m.Rwalk)
            reply = await c.raw.rpc(m.Tremove(0, 50))
            assert isinstance(reply, m.Rerror), reply
            assert reply.errno == errno.EBUSY
            assert reply.ename == (
                f"{sid}: session {sid} waits for approval of {what}: answer it on its approval "
                "file (approve, or reject REASON), or write kill to its ctl to end it anyway "
                "(the approval is cancelled)"
            )
            assert manager.get(sid).status is S.AWAIT_APPROVAL
        assert await live_ids(c) == [gated, tool]
        # Once answered, the removal goes through.
        assert await c.put(f"{gated}/approval", b"approve") == m.Rclunk(0)
        assert isinstance(await walk(c, 51, gated), m.Rwalk)
        assert await c.raw.rpc(m.Tremove(0, 51)) == m.Rremove(0)
        assert await live_ids(c) == [tool]
        assert not (tmp_path / "work" / "a.txt").exists()


async def test_renaming_a_session_directory_sets_its_alias(tmp_path: Path) -> None:
    # Ids that start with a letter: one of them is tried as an alias.
    async with served(tmp_path, [], ids=["a1b2c3d4", "e5f6a7b8"]) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        taker = await new_session(c, b"alias=taken")
        events = manager.events.open_reader(backlog=False)
        assert isinstance(await walk(c, 60, sid), m.Rwalk)
        assert await c.raw.rpc(m.Twstat(0, 60, rename_to("r1"))) == m.Rwstat(0)
        assert await c.get("r1/alias") == "r1\n"
        assert await c.get("list") == (
            f"{sid}\tr1\tidle\tdeveloper\tfake\t{tmp_path / 'work'}\n"
            f"{taker}\ttaken\tidle\tdeveloper\tfake\t{tmp_path / 'work'}\n"
        )
        assert (await dir_names(c, ""))[-2:] == [sid, taker]  # listed by id still
        # Renamed again (walked by the alias): the old alias no longer walks.
        assert isinstance(await walk(c, 61, "r1"), m.Rwalk)
        assert await c.raw.rpc(m.Twstat(0, 61, rename_to("r2"))) == m.Rwstat(0)
        assert isinstance(await walk(c, 62, "r1"), m.Rerror)
        assert await c.get("r2/alias") == "r2\n"
        assert manager.get("r2").id == sid
        renamed = [json.loads(line) for line in (events.read_nowait(1 << 16) or b"").splitlines()]
        assert [(e["type"], e["id"], e["alias"], e["was"]) for e in renamed] == [
            ("session_renamed", sid, "r1", None),
            ("session_renamed", sid, "r2", "r1"),
        ]
        # Taken, an id, reserved, not a name: refused with the errno of each, nothing changed.
        refusals = {
            "taken": (errno.EEXIST, f"alias=taken is taken by session {taker}"),
            taker: (errno.EEXIST, f"alias={taker} is the id of a session"),
            "list": (errno.EINVAL, "alias=list is reserved"),
            "9lives": (errno.EINVAL, "alias=9lives is not a name"),
        }
        for name, (code, text) in refusals.items():
            reply = await c.raw.rpc(m.Twstat(0, 61, rename_to(name)))
            assert isinstance(reply, m.Rerror), reply
            assert reply.errno == code, name
            assert reply.ename.startswith(f"{sid}: {text}"), reply.ename
        assert await c.get(f"{sid}/alias") == "r2\n"
        # Other attributes of a session directory never change.
        reply = await c.raw.rpc(m.Twstat(0, 61, attrs.evolve(rename_to("r3"), mtime=5)))
        assert isinstance(reply, m.Rerror), reply
        assert reply.errno == errno.EPERM
        assert await c.get(f"{sid}/alias") == "r2\n"
        # Files inside are never renamed.
        assert isinstance(await walk(c, 63, sid, "log"), m.Rwalk)
        reply = await c.raw.rpc(m.Twstat(0, 63, rename_to("journal")))
        assert isinstance(reply, m.Rerror), reply
        assert reply.errno == errno.EPERM


async def test_a_renamed_alias_is_recorded_and_survives_a_restart(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (_, con, _root):
        c = await con()
        sid = await new_session(c, b"alias=before")
        assert isinstance(await walk(c, 70, sid), m.Rwalk)
        assert await c.raw.rpc(m.Twstat(0, 70, rename_to("after"))) == m.Rwstat(0)
        assert "ALIAS: after\n" in await read_some(c, f"{sid}/log")
    async with served(tmp_path, []) as (manager, con, _root):
        assert manager.get("after").id == sid
        c = await con()
        assert await c.get("after/alias") == "after\n"
        assert isinstance(await walk(c, 71, "before"), m.Rerror)


async def test_dot_l_unlinkat_kills_and_renameat_sets_the_alias(tmp_path: Path) -> None:
    async with served(tmp_path, []) as (manager, con, _):
        u = await con()
        sid = await new_session(u)
        gone = await new_session(u)
        c = await con(Dialect.P9P2000_L)
        # v9fs's rm -r: the entries first (each kept), then the directory (AT_REMOVEDIR).
        assert await c.raw.rpc(m.Tunlinkat(0, 0, f"{gone}", 0)) == m.Rlerror(0, errno.EISDIR)
        assert isinstance(await walk(c, 80, gone), m.Rwalk)
        assert await c.raw.rpc(m.Tunlinkat(0, 80, "ctl", 0)) == m.Runlinkat(0)
        assert await c.raw.rpc(m.Tunlinkat(0, 80, "ctl", AT_REMOVEDIR)) == m.Rlerror(
            0, errno.ENOTDIR
        )
        assert await live_ids(u) == [sid, gone]
        assert isinstance(await walk(c, 84, gone, "ctl"), m.Rwalk)
        assert await c.raw.rpc(m.Tunlinkat(0, 0, gone, AT_REMOVEDIR)) == m.Runlinkat(0)
        assert await live_ids(u) == [sid]
        # mv agent/ID agent/NAME; a move out of agent/ is refused (EXDEV).
        assert await c.raw.rpc(m.Trenameat(0, 0, sid, 0, "worker")) == m.Rrenameat(0)
        assert manager.get("worker").alias == "worker"
        assert isinstance(await walk(c, 81, "worker", "alias"), m.Rwalk)
        assert isinstance(await walk(c, 82, "roles"), m.Rwalk)
        reply = await c.raw.rpc(m.Trenameat(0, 0, sid, 82, "elsewhere"))
        assert reply == m.Rlerror(0, errno.EXDEV)
        assert isinstance(await walk(c, 83, sid), m.Rwalk)
        assert await c.raw.rpc(m.Trename(0, 83, 0, "boss")) == m.Rrename(0)
        assert manager.get(sid).alias == "boss"
        assert await c.raw.rpc(m.Trename(0, 83, 82, "nope")) == m.Rlerror(0, errno.EXDEV)
