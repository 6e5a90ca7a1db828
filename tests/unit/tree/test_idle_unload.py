"""Idle unload seen from a 9P client: a session unloaded for idleness answers every file of its
directory as before, keeps its qids, is listed without being built, and works again (ctl, in)
through fids walked before the unload as through new ones."""

from __future__ import annotations

from pathlib import Path

import trio

from anvild.llm import stream
from anvild.llm.testing import script
from anvild.ninep import messages as m
from anvild.session import SessionManager, kept
from anvild.tree.outcome import outcome_file
from anvild.tree.sessions import SESSION_FILES
from tests.unit.session.support import loads_on_loop, unloaded
from tests.unit.tree.test_sessions_tree import (
    ORDWR,
    OREAD,
    Client,
    dir_names,
    live_ids,
    new_session,
    read_some,
    rename_to,
    served,
    walk,
)

FILES = (*SESSION_FILES, "outcome")
STREAMS = ("log", "events")  # a new reader's backlog: one read of what is there
READABLE = tuple(name for name in FILES if name not in ("in", *STREAMS))  # `in` is write-only


async def _backlog(c: Client, path: str) -> str:
    fid = await c.open(path, OREAD)
    reply = await c.raw.rpc(m.Tread(0, fid, 0, 1 << 20))
    assert isinstance(reply, m.Rread), reply
    await c.clunk(fid)
    return reply.data.decode()


async def _answers(c: Client, sid: str) -> dict[str, str]:
    found = {}
    for name in READABLE:
        found[name] = await c.get(f"{sid}/{name}")
    for name in STREAMS:
        found[name] = await _backlog(c, f"{sid}/{name}")
    found["agent/list"] = await c.get("list")
    return found


async def _qids(c: Client, sid: str) -> list[m.Qid]:
    fid = 1 << 20
    qids: list[m.Qid] = []
    for name in FILES:
        reply = await c.raw.rpc(m.Twalk(0, 0, fid, (sid, name)))
        assert isinstance(reply, m.Rwalk), reply
        qids += reply.qids
        await c.clunk(fid)
    return qids


def _built(manager: SessionManager) -> list[str]:
    return [s.id for s in manager.built_sessions()]


async def test_an_unloaded_session_answers_every_file_as_before(tmp_path: Path) -> None:
    with trio.fail_after(20):
        await _unloaded_answers(tmp_path)


async def _unloaded_answers(tmp_path: Path) -> None:
    usage = stream.Usage(100, 20, 0, 0)
    turns = [script.text("Hello there.", usage=usage), script.text("Again.")]
    async with served(tmp_path, turns, extensions=[outcome_file()]) as (manager, con, _):
        c = await con()
        sid = await new_session(c, b"alias=calm")
        assert await c.put(f"{sid}/in", b"hi") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert await c.get(f"{sid}/out") == "Hello there.\n"  # read: idle
        before = await _answers(c, sid)
        qids = await _qids(c, sid)
        held = 1 << 21  # a fid walked before the unload, opened after it
        assert isinstance(await c.raw.rpc(m.Twalk(0, 0, held, (sid, "state"))), m.Rwalk)

        assert await manager.unload(manager.get(sid))
        assert _built(manager) == []
        assert manager.list_text().startswith(f"{sid}\tcalm\tidle\t")
        assert await dir_names(c, "") == [*(await dir_names(c, ""))[:-1], sid]
        assert _built(manager) == []  # listed, not built

        with trio.fail_after(5):
            after = await _answers(c, sid)
        assert after == before
        assert "ASSISTANT: Hello there.\n" in after["log"]
        assert '"type":"turn_finished"' in after["events"].replace(" ", "")
        assert await _qids(c, sid) == qids
        assert _built(manager) == [sid]

        assert await manager.unload(manager.get(sid))
        assert isinstance(await c.raw.rpc(m.Topen(0, held, OREAD)), m.Ropen)
        assert await c.read_all(held) == b"idle\n"
        await c.clunk(held)
        assert _built(manager) == [sid]

        assert await manager.unload(manager.get(sid))
        reply, _ = await c.rdwr(f"{sid}/ctl", b"clear")
        assert isinstance(reply, m.Rwrite), reply
        assert await c.put("calm/in", b"once more") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert await c.get(f"{sid}/out") == "Again.\n"
        assert "USER: once more" in await read_some(c, f"{sid}/log")


async def test_a_session_is_unloaded_after_idle_unload_unless_someone_reads_it(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, [], idle_unload=0.2) as (manager, con, _):
        unloaded: dict[str, trio.Event] = {}
        manager.unload_listeners.append(lambda sid: unloaded.setdefault(sid, trio.Event()).set())
        c = await con()
        watched = await new_session(c)
        quiet = await new_session(c)
        unloaded[watched], unloaded[quiet] = trio.Event(), trio.Event()
        events = await c.open(f"{watched}/events", OREAD)  # a reader holds it built
        with trio.fail_after(5):
            await unloaded[quiet].wait()
        await trio.sleep(0.5)
        assert _built(manager) == [watched]
        await c.clunk(events)
        with trio.fail_after(5):
            await unloaded[watched].wait()
        assert _built(manager) == []
        assert await c.get(f"{quiet}/state") == "idle\n"
        assert _built(manager) == [quiet]


async def test_a_rebuild_after_an_unload_runs_no_session_start_hook(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    tables = {"start": {"event": "SessionStart", "command": f"cat >> {starts}; echo >> {starts}"}}

    def count() -> list[str]:
        text = starts.read_text() if starts.exists() else ""
        return [line for line in text.splitlines() if line.strip()]

    async def started(n: int) -> None:
        with trio.fail_after(10):
            while len(count()) < n:  # noqa: ASYNC110 - a hook's process writes the file
                await trio.sleep(0.02)

    async with served(tmp_path, [script.text("ok")], hooks=lambda cwd: tables) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        assert await c.put(f"{sid}/in", b"hi") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        await started(1)
        assert await manager.unload(manager.get(sid))
        assert await c.get(f"{sid}/state") == "await\n"  # built again
        await trio.sleep(0.3)
        assert len(count()) == 1  # an unload is no start
    async with served(tmp_path, [], hooks=lambda cwd: tables) as (manager, con, _):
        c = await con()
        assert await c.get(f"{sid}/state") == "await\n"
        await started(2)  # a restart is one: its hooks run, told "resume"
    assert '"source":"resume"' in count()[1].replace(" ", "")


async def test_a_wait_opened_before_an_unload_waits_for_the_rebuilt_session(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, [script.text("First."), script.text("Second.")]) as (
        manager,
        con,
        _,
    ):
        c = await con()
        sid = await new_session(c)
        assert await c.put(f"{sid}/in", b"one") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        assert await c.get(f"{sid}/out") == "First.\n"
        waiting = await c.open(f"{sid}/wait", OREAD)  # opened at rest: every prompt handled
        assert await manager.unload(manager.get(sid))
        assert await c.put(f"{sid}/in", b"two") == m.Rclunk(0)
        with trio.fail_after(5):
            assert await c.read_all(waiting) == b"await\n"  # its turn over, its answer unread
        await c.clunk(waiting)
        assert await c.get(f"{sid}/out") == "Second.\n"
        assert await c.get(f"{sid}/wait") == "idle\n"


async def test_what_an_unload_spilled_is_used_once_and_a_crash_leaves_it_stale(
    tmp_path: Path,
) -> None:
    big = " ".join(f"word{i}" for i in range(6000))  # packed over kept.IN_MEMORY
    async with served(tmp_path, [script.text(big)], extensions=[outcome_file()]) as (
        manager,
        con,
        _,
    ):
        c = await con()
        sid = await new_session(c)
        assert await c.put(f"{sid}/in", b"long") == m.Rclunk(0)
        assert await c.get(f"{sid}/wait") == "await\n"
        before = await _answers(c, sid)
        assert await manager.unload(manager.get(sid))
        spilled = manager.store.directory / f"{sid}{kept.SUFFIX}"
        assert spilled.exists()
        assert await _answers(c, sid) == before
        assert not spilled.exists()  # taken at the rebuild
        assert await manager.unload(manager.get(sid))
        assert spilled.exists()
    # The daemon stops with it unloaded (as a kill -9 would leave it): the next start drops it
    async with served(tmp_path, []) as (manager, con, _):
        assert not spilled.exists()
        c = await con()
        assert "USER: long\n" in await _backlog(c, f"{sid}/log")  # rebuilt as at a restart


async def test_a_shelved_backlog_is_not_used_once_the_records_changed(tmp_path: Path) -> None:
    shelved = kept.shelve(kept.Kept(("a",), ("{}",), "ctx", 2), tmp_path, "s1", 3, 100)
    assert shelved.take(3, 100) == kept.Kept(("a",), ("{}",), "ctx", 2)
    assert shelved.take(4, 120) is None


async def test_fids_held_across_an_unload_replay_its_records_in_a_worker_thread(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, []) as (manager, con, _):
        c = await con()
        sid = await new_session(c)
        directory, state, wait = 1 << 20, (1 << 20) + 1, (1 << 20) + 2
        assert isinstance(await walk(c, directory, sid), m.Rwalk)
        assert isinstance(await walk(c, state, sid, "state"), m.Rwalk)
        ctl = await c.open(f"{sid}/ctl", ORDWR)
        loads = loads_on_loop(manager)

        await unloaded(manager, manager.get(sid))
        assert isinstance(await c.raw.rpc(m.Topen(0, state, OREAD)), m.Ropen)  # walked before
        assert await c.read_all(state) == b"idle\n"
        await unloaded(manager, manager.get(sid))
        await c.clunk(state)  # opened before the unload: closed after it
        await unloaded(manager, manager.get(sid))
        assert isinstance(await c.raw.rpc(m.Twalk(0, directory, wait, ("wait",))), m.Rwalk)
        assert isinstance(await c.raw.rpc(m.Topen(0, wait, OREAD)), m.Ropen)
        assert await c.read_all(wait) == b"idle\n"
        await c.clunk(wait)
        await unloaded(manager, manager.get(sid))
        assert isinstance(await c.write(ctl, b"clear"), m.Rwrite)  # opened before the unload
        await c.clunk(ctl)
        assert loads == [False] * 4


async def test_kill_rename_and_removal_of_an_unloaded_session_replay_in_a_worker_thread(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, []) as (manager, con, _):
        c = await con()
        renamed, killed, removed = [await new_session(c) for _ in range(3)]
        assert isinstance(await walk(c, 70, renamed), m.Rwalk)  # directories walked before
        assert isinstance(await walk(c, 71, removed), m.Rwalk)
        loads = loads_on_loop(manager)
        await unloaded(manager, *manager.built_sessions())

        assert await c.raw.rpc(m.Twstat(0, 70, rename_to("r1"))) == m.Rwstat(0)
        reply, _ = await c.rdwr("ctl", f"kill {killed}".encode())
        assert isinstance(reply, m.Rwrite), reply
        assert await c.raw.rpc(m.Tremove(0, 71)) == m.Rremove(0)
        assert loads == [False, False, False]
        assert manager.get("r1").id == renamed
        assert await live_ids(c) == [renamed]
