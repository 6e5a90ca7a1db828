"""The bead and convoy tree (`anvild.tree.beads`) over a real 9P connection, in-process.

A `BeadStore` over a real git repository is mounted on a `RootTree`, served by
`anvild.ninep.Server` on trio memory streams and driven with raw 9P messages, the way `9p rdwr`,
`9p write` and `9p read` drive it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from anvild.beads import BeadStore
from anvild.ninep import messages as m
from anvild.ninep.constants import Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import RawClient
from anvild.session.events import SessionStateChanged
from anvild.tree.beads import BEAD_FILES, CONVOY_FILES, BeadsTree
from anvild.tree.root import RootTree
from tests.unit.tree.test_sessions_tree import Client, dir_names, error_text


class Sessions:
    """Stand-in for the session manager: live ids and their aliases."""

    def __init__(self) -> None:
        self.live: dict[str, str | None] = {"a1b2c3d4": "dev1", "e5f6a7b8": None}

    def resolve(self, name: str) -> str | None:
        for sid, alias in self.live.items():
            if name in (sid, alias):
                return sid
        return None

    def is_live(self, sid: str) -> bool:
        return sid in self.live


Connect = Callable[[], Awaitable[Client]]


@asynccontextmanager
async def served(tmp_path: Path) -> AsyncIterator[tuple[BeadsTree, Connect, RootTree, Sessions]]:
    store = BeadStore(tmp_path / "beads")
    await store.open()
    sessions = Sessions()
    root = RootTree()
    tree = BeadsTree(store, resolve_session=sessions.resolve, session_live=sessions.is_live)
    tree.mount(root)
    server = Server(lambda req: root.root)
    streams: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def connect() -> Client:
            client_stream, server_stream = trio.testing.memory_stream_pair()
            streams.append(client_stream)
            nursery.start_soon(server.serve, server_stream)
            raw = RawClient(client_stream, Dialect.P9P2000_U)
            await raw.handshake()
            return Client(raw)

        yield tree, connect, root, sessions
        for s in streams:
            await s.aclose()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


async def new(c: Client, path: str, line: str) -> str:
    reply, answer = await c.rdwr(path, line.encode())
    assert isinstance(reply, m.Rwrite), reply
    assert answer.endswith(b"\n")
    return answer.decode().strip()


async def ok(c: Client, path: str, line: str) -> None:
    reply = await c.put(path, line.encode())
    assert reply == m.Rclunk(0), reply


async def refused(c: Client, path: str, line: str) -> str:
    return error_text(await c.put(path, line.encode()))


def events_of(root: RootTree) -> list[dict[str, Any]]:
    reader = root.events.open_reader()
    data = reader.read_nowait(1 << 20) or b""
    return [json.loads(line) for line in data.decode().splitlines()]


async def test_new_with_the_ideas_file_quoting_and_the_bead_files(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, _root, _s):
        c = await con()
        first = await new(
            c, "beads/ctl", 'new "Research auth system" researcher "Analyze existing auth code"'
        )
        assert first == "research-auth-001"
        second = await new(
            c,
            "beads/ctl",
            "new 'Implement OAuth' developer 'Add OAuth, it''s based on research' "
            "research-auth-001 requires_approval",
        )
        assert second == "implement-oauth-002"
        assert await c.get("beads/list") == (
            "research-auth-001\tpending\tresearcher\t-\tResearch auth system\n"
            "implement-oauth-002\tpending\tdeveloper\t-\tImplement OAuth\n"
        )
        assert await c.get("beads/ready") == (
            "research-auth-001\tpending\tresearcher\t-\tResearch auth system\n"
        )
        assert await dir_names(c, "beads") == ["ctl", "list", "ready", "sync", first, second]
        assert await dir_names(c, f"beads/{second}") == list(BEAD_FILES)
        b = f"beads/{second}"
        assert await c.get(f"{b}/status") == "pending\n"
        assert await c.get(f"{b}/title") == "Implement OAuth\n"
        assert await c.get(f"{b}/description") == "Add OAuth, it's based on research\n"
        assert await c.get(f"{b}/role") == "developer\n"
        assert await c.get(f"{b}/assigned_to") == "-\n"
        assert await c.get(f"{b}/result") == ""
        assert await c.get(f"{b}/depends_on") == "research-auth-001\n"
        assert await c.get(f"{b}/requires_approval") == "true\n"
        assert await c.get(f"{b}/approved_by") == "-\n"
        assert await c.get(f"{b}/convoy") == "-\n"


async def test_a_bead_from_claim_to_approval(tmp_path: Path) -> None:
    async with served(tmp_path) as (tree, con, _root, _s):
        c = await con()
        bead = await new(c, "beads/ctl", 'new "Fix parser" developer "x" requires_approval=yes')
        ctl = f"beads/{bead}/ctl"
        await ok(c, ctl, "claim dev1")  # an alias: stored as the session id
        assert await c.get(f"beads/{bead}/assigned_to") == "a1b2c3d4\n"
        assert await refused(c, ctl, "claim e5f6a7b8") == (
            f"ctl: bead {bead} is already claimed by a1b2c3d4 (in_progress since "
            f"{tree.store.bead(bead).updated_at}); only a release (write release to its ctl) "
            "makes it claimable again"
        )
        await ok(c, f"beads/{bead}/result", "/tmp/fix.md\n")
        await ok(c, ctl, "complete")
        assert await c.get(f"beads/{bead}/status") == "pending_approval\n"
        assert await c.get(f"beads/{bead}/result") == "/tmp/fix.md\n"
        await ok(c, ctl, "approve")
        assert await c.get(f"beads/{bead}/status") == "completed\n"
        assert await c.get(f"beads/{bead}/approved_by") == "user\n"
        log = git(tmp_path / "beads", "log", "--format=%s").splitlines()
        assert log[:5] == [
            f"approve {bead} (by user)",
            f"complete {bead}: pending approval (by user)",
            f"result {bead} (by user)",
            f"claim {bead} for a1b2c3d4 (by user)",
            f"new {bead}: Fix parser (role developer) (by user)",
        ]


async def test_reject_fails_the_bead_and_release_retries_it(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, _root, _s):
        c = await con()
        bead = await new(c, "beads/ctl", 'new "Fix parser" developer "" requires_approval')
        ctl = f"beads/{bead}/ctl"
        await ok(c, ctl, "claim a1b2c3d4")
        await ok(c, ctl, 'complete "patch in /tmp/p.diff"')
        await ok(c, ctl, "reject the tests do not pass")
        assert await c.get(f"beads/{bead}/status") == "failed\n"
        assert await c.get(f"beads/{bead}/reason") == "the tests do not pass\n"
        assert await c.get(f"beads/{bead}/result") == "patch in /tmp/p.diff\n"
        await ok(c, ctl, "release")
        assert await c.get(f"beads/{bead}/status") == "pending\n"
        assert await c.get(f"beads/{bead}/assigned_to") == "-\n"


async def test_twenty_clients_claim_one_bead_exactly_one_wins(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, _root, sessions):
        for n in range(20):
            sessions.live[f"worker{n:02d}"] = None
        setup = await con()
        bead = await new(setup, "beads/ctl", 'new "Contended" developer')
        clients = [await con() for _ in range(20)]
        replies: dict[int, m.Message] = {}

        async def claim(n: int) -> None:
            replies[n] = await clients[n].put(f"beads/{bead}/ctl", f"claim worker{n:02d}".encode())

        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(claim, n)
        winners = [n for n, r in replies.items() if r == m.Rclunk(0)]
        assert len(winners) == 1
        holder = f"worker{winners[0]:02d}"
        losers = [error_text(r) for n, r in replies.items() if n != winners[0]]
        assert len(losers) == 19
        assert all(f"already claimed by {holder} " in text for text in losers)
        claims = [
            s
            for s in git(tmp_path / "beads", "log", "--format=%s").splitlines()
            if s.startswith("claim")
        ]
        assert claims == [f"claim {bead} for {holder} (by user)"]


async def test_bad_lines_fail_the_write_and_change_nothing(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, _root, _s):
        c = await con()
        a = await new(c, "beads/ctl", 'new "A" dev')
        b = await new(c, "beads/ctl", f'new "B" dev "" {a}')
        repo = tmp_path / "beads"
        head = git(repo, "rev-parse", "HEAD")
        listing = await c.get("beads/list")
        cases = [
            (
                "beads/ctl",
                f"dep add {a} {b}",
                f"bead {a} cannot depend on {b}: that would make a cycle ({a} -> {b} -> {a})",
            ),
            ("beads/ctl", 'new "C" dev "" nope-009', "dependency 'nope-009' is not a bead"),
            ("beads/ctl", "dep add zz-001 a-001", "no bead 'zz-001'"),
            ("beads/ctl", "dep frob a b", "unknown dep action 'frob'"),
            ("beads/ctl", 'new "unclosed dev', 'unbalanced " in'),
            ("beads/ctl", "new Title", "new needs a title and a role"),
            ("beads/ctl", 'new "T" dev colour=red', "unknown option colour="),
            ("beads/ctl", "frob", "unknown command 'frob'; known commands: dep, new"),
            (f"beads/{a}/ctl", "claim nobody", "no live session 'nobody'"),
            (f"beads/{b}/ctl", "claim dev1", f"bead {b} is not ready: it depends on {a}"),
            (f"beads/{a}/ctl", "complete", f"bead {a} is pending: complete needs a bead that is"),
            (f"beads/{a}/ctl", "fail", "fail: wrong number of arguments"),
            ("convoys/ctl", "new", "new takes a title and a goal (0 words given)"),
            ("convoys/ctl", 'new "X" "goal" coordinator=ghost', "no live session 'ghost'"),
        ]
        for path, line, expected in cases:
            text = await refused(c, path, line)
            assert expected in text, (line, text)
        gone = await c.raw.rpc(m.Twalk(0, 0, 99, ("beads", "zz-001")))
        assert isinstance(gone, m.Rwalk), gone
        assert len(gone.qids) == 1  # `beads` walked, the unknown bead did not
        assert git(repo, "rev-parse", "HEAD") == head
        assert git(repo, "status", "--porcelain") == ""
        assert await c.get("beads/list") == listing


async def test_an_exited_session_orphans_its_bead_until_release(tmp_path: Path) -> None:
    async with served(tmp_path) as (tree, con, root, sessions):
        c = await con()
        bead = await new(c, "beads/ctl", 'new "Work" developer')
        await ok(c, f"beads/{bead}/ctl", "claim a1b2c3d4")
        del sessions.live["a1b2c3d4"]
        tree.on_session_event(SessionStateChanged("a1b2c3d4", "exited", "killed"))
        assert await c.get("beads/list") == (
            f"{bead}\tin_progress\tdeveloper\ta1b2c3d4\tWork\torphaned\n"
        )
        orphaned = [e for e in events_of(root) if e["type"] == "bead_orphaned"]
        assert orphaned == [
            {
                "type": "bead_orphaned",
                "ts": orphaned[0]["ts"],
                "id": bead,
                "session": "a1b2c3d4",
                "reason": "killed",
            }
        ]
        await ok(c, f"beads/{bead}/ctl", "release")
        assert await c.get("beads/list") == f"{bead}\tpending\tdeveloper\t-\tWork\n"
        await ok(c, f"beads/{bead}/ctl", "claim e5f6a7b8")


async def test_a_convoy_through_its_files(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, root, _s):
        c = await con()
        convoy = await new(
            c, "convoys/ctl", 'new "Implement auth system" "Add OAuth" coordinator=dev1'
        )
        assert convoy == "implement-auth-001"
        a = await new(c, "beads/ctl", 'new "Research auth" researcher "Analyze"')
        b = await new(c, "beads/ctl", f'new "Implement OAuth" developer "" {a} convoy={convoy}')
        await ok(c, f"convoys/{convoy}/ctl", f"add_bead {a}")
        assert await dir_names(c, f"convoys/{convoy}") == list(CONVOY_FILES)
        assert await c.get(f"convoys/{convoy}/beads") == f"{b}\n{a}\n"
        assert await c.get(f"convoys/{convoy}/coordinator") == "a1b2c3d4\n"
        assert await c.get(f"convoys/{convoy}/goal") == "Add OAuth\n"
        assert await c.get(f"convoys/{convoy}/status") == "planning\n"
        await ok(c, f"convoys/{convoy}/context", "Security: OWASP top 10.\n")
        assert await c.get(f"convoys/{convoy}/context") == "Security: OWASP top 10.\n"
        assert await c.get(f"convoys/{convoy}/progress") == "0/2 0%\n"
        assert await c.get("convoys/list") == (
            f"{convoy}\tplanning\t0/2\ta1b2c3d4\tImplement auth system\n"
        )
        for bead in (a, b):
            await ok(c, f"beads/{bead}/ctl", "claim e5f6a7b8")
            await ok(c, f"beads/{bead}/ctl", "complete done")
        assert await c.get(f"convoys/{convoy}/progress") == "2/2 100%\n"
        assert await c.get(f"convoys/{convoy}/status") == "completed\n"
        assert await refused(c, f"convoys/{convoy}/ctl", f"add_bead {a}") == (
            f"ctl: convoy {convoy} is completed: cannot add a bead to it any more"
        )
        kinds = [(e["type"], e.get("action")) for e in events_of(root)]
        assert ("convoy_changed", "complete") in kinds
        assert ("bead_created", None) in kinds


async def test_abandon_and_remove_bead(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, _root, _s):
        c = await con()
        convoy = await new(c, "convoys/ctl", 'new "Side quest"')
        a = await new(c, "beads/ctl", f'new "A" dev "" convoy={convoy}')
        await ok(c, f"convoys/{convoy}/ctl", f"remove_bead {a}")
        assert await c.get(f"beads/{a}/convoy") == "-\n"
        assert await refused(c, f"convoys/{convoy}/ctl", f"remove_bead {a}") == (
            f"ctl: bead '{a}' is not in convoy {convoy} (its beads: none)"
        )
        await ok(c, f"convoys/{convoy}/ctl", "abandon")
        assert await c.get(f"convoys/{convoy}/status") == "abandoned\n"


async def test_wait_blocks_until_the_bead_and_the_convoy_settle(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, _root, _s):
        c, waiter = await con(), await con()
        convoy = await new(c, "convoys/ctl", 'new "Auth"')
        bead = await new(c, "beads/ctl", f'new "Work" developer "" convoy={convoy}')
        got: dict[str, str] = {}

        async def wait(path: str) -> None:
            got[path] = await waiter.get(path)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait, f"beads/{bead}/wait")
                await trio.testing.wait_all_tasks_blocked()
                await ok(c, f"beads/{bead}/ctl", "claim dev1")
                await trio.testing.wait_all_tasks_blocked()
                assert got == {}  # claimed is not settled
                await ok(c, f"beads/{bead}/ctl", "complete")
        assert got == {f"beads/{bead}/wait": "completed\n"}
        assert await c.get(f"convoys/{convoy}/wait") == "completed\n"  # at once: it is


async def test_a_flushed_or_clunked_wait_ends_without_an_answer(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, con, _root, _s):
        c = await con()
        bead = await new(c, "beads/ctl", 'new "Work" developer')
        fid = await c.open(f"beads/{bead}/wait", 0)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(c.raw.send, m.Tread(1, fid, 0, 100))
                await trio.testing.wait_all_tasks_blocked()
                assert await c.raw.rpc(m.Tflush(2, 1)) == m.Rflush(2)
        assert await c.clunk(fid) == m.Rclunk(0)
        assert await c.get(f"beads/{bead}/status") == "pending\n"


async def test_orphans_found_at_start_are_announced(tmp_path: Path) -> None:
    async with served(tmp_path) as (tree, con, root, sessions):
        c = await con()
        bead = await new(c, "beads/ctl", 'new "Work" developer')
        await ok(c, f"beads/{bead}/ctl", "claim a1b2c3d4")
        assert tree.announce_orphans("not restored") == 0
        del sessions.live["a1b2c3d4"]
        assert tree.announce_orphans("not restored") == 1
        orphaned = [e for e in events_of(root) if e["type"] == "bead_orphaned"]
        assert [(e["id"], e["session"], e["reason"]) for e in orphaned] == [
            (bead, "a1b2c3d4", "not restored")
        ]


async def test_new_names_the_beads_approver_which_never_changes(tmp_path: Path) -> None:
    async with served(tmp_path) as (tree, con, _root, _s):
        c = await con()
        bead = await new(
            c, "beads/ctl", 'new "Fix parser" developer requires_approval approver=dev1'
        )
        assert await c.get(f"beads/{bead}/approver") == "a1b2c3d4\n"  # the alias's id
        plain = await new(c, "beads/ctl", 'new "Fix lexer" developer requires_approval')
        assert await c.get(f"beads/{plain}/approver") == "user\n"
        assert await refused(
            c, "beads/ctl", 'new "X" developer requires_approval approver=nobody'
        ) == (
            "ctl: approver=nobody is not a live session: name a session from agent/list (its id "
            "or alias), or user for a person only"
        )
        assert "does not require approval: add requires_approval" in await refused(
            c, "beads/ctl", 'new "X" developer approver=dev1'
        )
        assert await refused(c, f"beads/{bead}/ctl", "approver user") == (
            f"ctl: the approver of bead {bead} is a1b2c3d4, fixed when the bead was created: no "
            "verb changes it; create a new bead with approver=SESSION|user"
        )
        assert tree.store.bead(bead).approver == "a1b2c3d4"
        assert len(tree.store.beads()) == 2  # refused lines created nothing
        log = git(tmp_path / "beads", "log", "--format=%s").splitlines()
        assert f"new {bead}: Fix parser (role developer, approver a1b2c3d4) (by user)" in log
        shown = (tmp_path / "beads" / "beads" / f"{bead}.json").read_text()
        assert '"approver": "a1b2c3d4"' in shown
