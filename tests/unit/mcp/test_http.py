"""A streamable HTTP server (tests/support/mcp_server.py --http): its tools work like a stdio
server's, a credential header goes only where the user config said, and a server that went away
fails the call in flight and is reached again once it is back."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from anvild.agent.tools.base import ToolContext
from anvild.config.load import Trust
from anvild.llm.types import ToolCall, ToolResult
from anvild.mcp import McpPool, McpRegistry, McpSetup, Placement, ServerSpec, State, session_mcp
from anvild.mcp.config import spec_from
from anvild.sandbox import WorkspaceWrite
from anvild.sandbox.roles import load_role

# The SDK's streamable HTTP client leaves its SSE generators to the garbage collector when it
# closes (mcp 2.3.0: httpx2's EventSource in the GET stream task); trio warns about each.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "Bearer t0k-4f1e"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve(port: int) -> subprocess.Popen[bytes]:
    """The test server on `port`, once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_server", "--http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            assert proc.poll() is None, "the HTTP test server exited"
            assert time.monotonic() < deadline, "the HTTP test server did not listen"
            time.sleep(0.1)


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def http_server(servers: list[subprocess.Popen[bytes]]) -> str:
    port = free_port()
    servers.append(serve(port))
    return f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
async def pool(http_server: str) -> AsyncIterator[tuple[McpPool, list[ServerSpec]]]:
    specs: list[ServerSpec] = []
    pool = McpPool(lambda cwd: tuple(specs), env={"TEST_MCP_TOKEN": TOKEN})
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        yield pool, specs
        await pool.stop()


async def call(pool: McpPool, tmp_path: Path, tool: str, args: dict[str, str]) -> ToolResult:
    place = Placement(tmp_path, WorkspaceWrite(), load_role("developer"))
    mcp = session_mcp(pool, McpSetup("s1", "developer", place))
    await mcp.ensure_started()
    registry = McpRegistry([], mcp)
    registry.specs()
    return await registry.dispatch(ToolCall("c1", tool, args), ToolContext(cwd=tmp_path))


async def header(pool: McpPool, tmp_path: Path) -> str:
    result = await call(pool, tmp_path, "mcp__web__header", {"name": "authorization"})
    assert not result.is_error, result.content
    return result.content


async def test_the_user_configs_server_gets_its_credential(
    pool: tuple[McpPool, list[ServerSpec]], http_server: str, tmp_path: Path
) -> None:
    table = {"url": http_server, "headers_env": {"Authorization": "TEST_MCP_TOKEN"}}
    pool[1].append(spec_from("web", table, Trust.USER, "user config"))
    assert await header(pool[0], tmp_path) == TOKEN


async def test_a_granted_projects_server_gets_none(
    pool: tuple[McpPool, list[ServerSpec]], http_server: str, tmp_path: Path
) -> None:
    table = {"url": http_server, "headers_env": {"Authorization": "TEST_MCP_TOKEN"}}
    pool[1].append(spec_from("web", table, Trust.PROJECT_GRANTED, "/repo/.anvil/config.toml"))
    assert await header(pool[0], tmp_path) == "(none)"


async def test_a_server_gone_fails_the_call_and_is_reached_again(
    pool: tuple[McpPool, list[ServerSpec]],
    http_server: str,
    servers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    pool[1].append(spec_from("web", {"url": http_server}, Trust.USER, "user config"))
    assert (await call(pool[0], tmp_path, "mcp__web__echo", {"text": "one"})).content == "one"
    servers[0].kill()
    servers[0].wait()
    gone = await call(pool[0], tmp_path, "mcp__web__echo", {"text": "two"})
    assert gone.is_error
    assert "went away during tool echo" in gone.content
    servers.append(serve(int(http_server.split(":")[2].split("/")[0])))
    (server,) = pool[0].running()
    with trio.fail_after(20):
        while server.state is not State.READY or server.restarts == 0:  # noqa: ASYNC110
            await trio.sleep(0.1)
    assert (await call(pool[0], tmp_path, "mcp__web__echo", {"text": "three"})).content == "three"
