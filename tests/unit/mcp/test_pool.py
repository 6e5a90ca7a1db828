"""The MCP client against a real server (tests/support/mcp_server.py over stdio): tools reach
the registry, calls are bounded, a timeout or a killed server fails one call and nothing else,
a dead server is restarted, list_changed refreshes the list, a failing server is reported once
and leaves the session working, servers are shared per (config, cwd) and stop with the pool."""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from anvild.agent.tools.base import ToolContext
from anvild.agent.tools.registry import ToolRegistry
from anvild.llm.types import ToolCall
from anvild.mcp import McpPool, McpRegistry, McpSetup, Placement, ServerSpec, State, session_mcp
from anvild.mcp.tools import MAX_RESULT_CHARS, PROMPTS, RESOURCES, SessionMcp
from anvild.sandbox import WorkspaceWrite
from anvild.sandbox.roles import load_role

ROOT = Path(__file__).resolve().parents[3]


def python_server(name: str = "py", *extra: str, **options: Any) -> ServerSpec:
    return ServerSpec(
        name,
        argv=(sys.executable, "-m", "tests.support.mcp_server", *extra),
        env={"PYTHONPATH": str(ROOT)},
        sandbox=False,
        **options,
    )


class Harness:
    def __init__(self, pool: McpPool, cwd: Path, servers: list[ServerSpec]) -> None:
        self.pool = pool
        self.cwd = cwd
        self.servers = servers  # what the pool's config names, for every cwd
        self.reports: list[tuple[str, str, str]] = []
        pool.report = lambda *args: self.reports.append(args)

    def handle(self, session_id: str = "s1", cwd: Path | None = None) -> SessionMcp:
        place = Placement(cwd or self.cwd, WorkspaceWrite(), load_role("developer"))
        return session_mcp(self.pool, McpSetup(session_id, "developer", place))

    async def started(self, *specs: ServerSpec) -> tuple[SessionMcp, McpRegistry]:
        """Session s1's handle with `specs` configured, started, and its tools listed."""
        self.servers.extend(specs)
        mcp = self.handle()
        registry = McpRegistry([], mcp)
        await mcp.ensure_started()
        registry.specs()
        return mcp, registry


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    servers: list[ServerSpec] = []
    pool = McpPool(lambda cwd: tuple(servers))
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        yield Harness(pool, tmp_path, servers)
        await pool.stop()


async def call(registry: ToolRegistry, name: str, args: dict[str, Any], cwd: Path) -> Any:
    return await registry.dispatch(ToolCall("c1", name, args), ToolContext(cwd=cwd))


async def until(predicate: Any, limit: float = 20.0) -> None:
    """Poll `predicate` (server state changes in another task, with no event to wait on)."""
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.05)


async def test_tools_reach_the_registry_and_calls_return_results(
    harness: Harness, tmp_path: Path
) -> None:
    harness.servers.append(python_server())
    mcp = harness.handle()
    registry = McpRegistry([], mcp)
    assert registry.specs() == ()  # nothing before the first turn: servers start lazily
    assert mcp.status() == "py\tstdio\tlazy\t0\t-\n"
    await mcp.ensure_started()
    names = [s.name for s in registry.specs()]
    assert "mcp__py__echo" in names
    assert RESOURCES in names
    assert PROMPTS in names
    result = await call(registry, "mcp__py__echo", {"text": "hi there"}, tmp_path)
    assert (result.content, result.is_error) == ("hi there", False)
    echo = registry.get("mcp__py__echo")
    assert echo is not None
    assert echo.effects({"text": "x"}).unknown  # not vouched for: the policy asks
    assert mcp.status() == "py\tstdio\tready\t7\t-\n"
    assert harness.reports == []


async def test_a_big_result_is_cut_with_the_usual_note(harness: Harness, tmp_path: Path) -> None:
    _, registry = await harness.started(python_server())
    result = await call(registry, "mcp__py__big", {"size": 100_000}, tmp_path)
    assert len(result.content) == MAX_RESULT_CHARS  # what bash keeps of a command's stdout
    assert "characters cut; ask the tool for less" in result.content
    assert result.content.startswith("xxxx")
    assert result.content.endswith("xxxx")


async def test_a_read_only_server_is_vouched_for_and_filters_apply(harness: Harness) -> None:
    _, registry = await harness.started(python_server(read_only=True, disabled_tools=("touch",)))
    names = [s.name for s in registry.specs()]
    assert "mcp__py__touch" not in names
    echo = registry.get("mcp__py__echo")
    assert echo is not None
    assert echo.effects({"text": "x"}).read_only


async def test_a_timeout_ends_the_call_and_nothing_else(harness: Harness, tmp_path: Path) -> None:
    mcp, registry = await harness.started(python_server(tool_timeout=1.0))
    (server,) = mcp.servers()
    pid = server.pid
    with trio.fail_after(10):
        result = await call(registry, "mcp__py__slow", {"seconds": 30}, tmp_path)
    assert result.is_error
    assert "timed out after 1 s (tool_timeout)" in result.content
    assert "the server keeps running" in result.content
    again = await call(registry, "mcp__py__echo", {"text": "still here"}, tmp_path)
    assert (again.content, again.is_error) == ("still here", False)
    assert (server.pid, server.state) == (pid, State.READY)


async def test_a_server_killed_mid_call_fails_the_call_and_is_restarted(
    harness: Harness, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    marker.touch()
    mcp, registry = await harness.started(python_server("py", "--marker", str(marker)))
    (server,) = mcp.servers()
    pid = server.pid
    assert pid is not None
    results: list[Any] = []

    async def slow() -> None:
        results.append(await call(registry, "mcp__py__slow", {"seconds": 30}, tmp_path))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        await until(lambda: "slow " in marker.read_text())  # the call is in flight
        os.kill(pid, signal.SIGKILL)
    (result,) = results
    assert result.is_error
    assert "went away during tool slow" in result.content
    assert "being restarted" in result.content
    await until(lambda: server.state is State.READY and server.pid not in (None, pid))
    assert server.restarts == 1
    await mcp.ensure_started()
    registry.specs()
    again = await call(registry, "mcp__py__echo", {"text": "back"}, tmp_path)
    assert (again.content, again.is_error) == ("back", False)


async def test_list_changed_reaches_the_next_specs(harness: Harness, tmp_path: Path) -> None:
    _, registry = await harness.started(python_server())
    assert "mcp__py__grown" not in [s.name for s in registry.specs()]
    result = await call(registry, "mcp__py__grow", {}, tmp_path)
    assert result.content == "grew"
    # The call that changed the list returns once the new list is in: the next step sees it.
    assert "mcp__py__grown" in [s.name for s in registry.specs()]
    grown = await call(registry, "mcp__py__grown", {}, tmp_path)
    assert grown.content == "grown here"


async def test_the_merged_specs_size_is_the_size_of_their_json(harness: Harness) -> None:
    """The merged definitions carry the sum of their two parts' sizes (`llm.size.SizedSpecs`):
    it must be what encoding them afresh gives."""
    from anvild.agent.tools.search import Glob, Grep
    from anvild.llm.size import specs_bytes
    from anvild.llm.types import converter

    harness.servers.append(python_server())
    mcp = harness.handle()
    registry = McpRegistry([Grep(), Glob()], mcp)
    await mcp.ensure_started()
    for compact in (False, True):
        specs = registry.specs(compact=compact)
        assert {"grep", "glob", "mcp__py__echo"} <= {s.name for s in specs}
        expected = len(json.dumps([converter.unstructure(s) for s in specs]).encode())
        assert specs_bytes(list(specs)) == expected  # a list: measured afresh
        assert specs_bytes(specs) == expected


async def test_a_failing_server_is_reported_once_and_the_others_work(
    harness: Harness, tmp_path: Path
) -> None:
    mcp, registry = await harness.started(python_server("bad", "--fail"), python_server("good"))
    await mcp.ensure_started()  # a second turn: not reported again
    names = [s.name for s in registry.specs()]
    assert not [n for n in names if n.startswith("mcp__bad__")]
    assert "mcp__good__echo" in names
    ((session, server, error),) = harness.reports
    assert (session, server) == ("s1", "bad")
    assert "exited with status 3" in error
    assert "refusing to start (--fail)" in error
    bad = mcp.status().splitlines()[0].split("\t")
    assert bad[:4] == ["bad", "stdio", "failed", "0"]
    assert "refusing to start" in bad[4]
    result = await call(registry, "mcp__good__echo", {"text": "ok"}, tmp_path)
    assert result.content == "ok"


async def test_a_failed_server_stays_failed_while_it_is_retried(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anvild.mcp import server

    monkeypatch.setattr(server, "BACKOFF_START", 0.05)
    monkeypatch.setattr(server, "BACKOFF_MAX", 0.1)
    mcp, _ = await harness.started(python_server("bad", "--fail"))
    (pool_server,) = harness.pool.running()
    seen: set[str] = set()
    with trio.fail_after(20):
        while pool_server.restarts < 2:  # until a retry has spawned the server again and failed
            seen.add(mcp.status().split("\t")[2])
            await trio.sleep(0.005)
    assert seen == {"failed"}
    assert "refusing to start" in mcp.status().split("\t")[4]


async def test_resources_and_prompts_through_the_two_generic_tools(
    harness: Harness, tmp_path: Path
) -> None:
    _, registry = await harness.started(python_server())
    listed = await call(registry, RESOURCES, {"action": "list"}, tmp_path)
    assert listed.content.startswith("py\tmemo://greeting\tgreeting\ttext/plain")
    read = await call(
        registry, RESOURCES, {"action": "read", "server": "py", "uri": "memo://greeting"}, tmp_path
    )
    assert read.content == "hello from a resource"
    missing = await call(registry, RESOURCES, {"action": "read", "server": "py"}, tmp_path)
    assert missing.is_error
    assert "needs `server` and `uri`" in missing.content
    prompts = await call(registry, PROMPTS, {"action": "list"}, tmp_path)
    assert prompts.content.startswith("py\treview\ttopic*\t")
    got = await call(
        registry,
        PROMPTS,
        {"action": "get", "server": "py", "name": "review", "arguments": {"topic": "the diff"}},
        tmp_path,
    )
    assert got.content == "user: Please review the diff."


async def test_servers_are_shared_per_config_and_cwd_and_stop_with_the_pool(
    harness: Harness, tmp_path: Path
) -> None:
    harness.servers.append(python_server())
    other = tmp_path / "other"
    other.mkdir()
    first, second = harness.handle("s1"), harness.handle("s2")
    elsewhere = harness.handle("s3", cwd=other)
    for handle in (first, second, elsewhere):
        await handle.ensure_started()
    assert first.servers()[0] is second.servers()[0]
    assert first.servers()[0] is not elsewhere.servers()[0]
    pids = [h.servers()[0].pid for h in (first, elsewhere)]
    await harness.pool.stop()
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_a_server_no_live_session_uses_is_stopped(tmp_path: Path) -> None:
    spec = python_server()
    pool = McpPool(lambda cwd: (spec,), idle_after=0.0, reap_every=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        harness = Harness(pool, tmp_path, [spec])
        kept, dropped = harness.handle("s1"), harness.handle("s2", cwd=tmp_path / "elsewhere")
        (tmp_path / "elsewhere").mkdir()
        await kept.ensure_started()
        await dropped.ensure_started()
        (server,) = dropped.servers()
        pid = server.pid
        assert pid is not None
        del dropped  # the session is gone
        gc.collect()
        await until(lambda: server.state is State.STOPPED)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert pool.running() == kept.servers()  # the live session's server runs on
        await pool.stop()
