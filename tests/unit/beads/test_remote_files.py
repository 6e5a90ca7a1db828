"""The shared board through the files (`agent/beads/ready`, `list`, `sync`, `BEAD/host`): two
bead trees, each over its own clone of one bare remote, served over in-process 9P."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from anvild.beads import BeadStore
from anvild.ninep.backend import Node
from anvild.ninep.constants import Dialect
from anvild.ninep.server import Server
from anvild.ninep.testing import RawClient
from anvild.tree.beads import BeadsTree
from anvild.tree.root import RootTree
from tests.unit.beads.test_remote import bare_repo
from tests.unit.tree.test_beads_tree import new, ok, refused
from tests.unit.tree.test_sessions_tree import Client


def _serving(root: RootTree) -> Callable[[object], Node]:
    return lambda request: root.root


@asynccontextmanager
async def hosts(tmp_path: Path, *names: str) -> AsyncIterator[list[Client]]:
    bare = bare_repo(tmp_path)
    stores: list[BeadStore] = []
    clients: list[Client] = []
    streams: list[Any] = []
    async with trio.open_nursery() as nursery:
        for name in names:
            store = BeadStore(tmp_path / name, remote=str(bare), host=name, pull_bound=0.0)
            await store.open()
            stores.append(store)
            root = RootTree()
            tree = BeadsTree(store, resolve_session=lambda s: s if s.startswith("s") else None)
            tree.mount(root)
            server = Server(_serving(root))
            client_stream, server_stream = trio.testing.memory_stream_pair()
            streams.append(client_stream)
            nursery.start_soon(server.serve, server_stream)
            raw = RawClient(client_stream, Dialect.P9P2000_U)
            await raw.handshake()
            clients.append(Client(raw))
        yield clients
        for stream in streams:
            await stream.aclose()
    for store in stores:
        store.close()


async def test_ready_and_list_show_the_other_hosts_changes_and_a_lost_claim_names_the_host(
    tmp_path: Path,
) -> None:
    async with hosts(tmp_path, "h1", "h2") as (one, two):
        bead = await new(one, "beads/ctl", 'new "Shared work" developer')
        assert (await two.get("beads/ready")).startswith(f"{bead}\tpending\tdeveloper\t-\t")
        await ok(two, f"beads/{bead}/ctl", "claim s2")
        assert await one.get("beads/ready") == ""
        assert (await one.get("beads/list")).startswith(f"{bead}\tin_progress\tdeveloper\ts2\t")
        # No session here is live: s2 is another daemon's (not orphaned), and on its own
        # daemon the bead is orphaned.
        assert not (await one.get("beads/list")).endswith("\torphaned\n")
        assert (await two.get("beads/list")).endswith("\torphaned\n")
        assert await one.get(f"beads/{bead}/host") == "h2\n"
        text = await refused(one, f"beads/{bead}/ctl", "claim s1")
        assert "already claimed by s2 on host h2 (in_progress since" in text
        convoy = await new(two, "convoys/ctl", 'new "Release" "ship it"')
        assert (await one.get("convoys/list")).startswith(f"{convoy}\tplanning\t0/0\t")
        sync = await one.get("beads/sync")
        assert sync.startswith(f"remote\t{tmp_path / 'remote.git'}\nhost\th1\nstate\tin sync\n")
        assert "\nqueued\t0\nlast_error\t-\n" in sync
