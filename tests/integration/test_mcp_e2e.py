"""End to end: MCP servers through the real `anvild`, a scripted model (the fake provider) calling
their tools in a session (README, MCP servers).

The servers: the real `@modelcontextprotocol/server-everything` and `server-filesystem` from
npm (installed, pinned, by `make mcp-servers`, which `make test` runs; the tests skip only when
npm itself is missing), and tests/support/mcp_server.py (written with the SDK). Checked: the
model sees `mcp__NAME__TOOL` and the two generic tools, results reach the next request, a call
that runs past `tool_timeout` fails alone, a server killed mid-call fails that call and is
restarted, a project's server waits for `anvilctl trust grant`, server-filesystem runs in the
session's sandbox (it sees the workspace, not the rest of the machine), list_changed reaches
the next step, and a server that cannot start shows in `mcp` and on `agent/events` while the
session keeps working.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from anvild.sandbox.bwrap import DEFAULT_GID, DEFAULT_UID
from tests.integration.test_daemon_cli import Anvild
from tests.integration.test_project_config_e2e import Events, new, project, turn
from tests.integration.test_sessions_e2e import (
    TURN_TIMEOUT,
    FakeServer,
    anvilctl,
    ok,
    read,
    start_daemon,
    user_config,
)

REPO = Path(__file__).resolve().parents[2]
NPM_DIR = Path(os.environ.get("ANVIL_MCP_NPM_DIR", Path.home() / ".cache" / "anvil" / "npm"))
SCOPE = "node_modules/@modelcontextprotocol"


@pytest.fixture(scope="module")
def npm_servers() -> Iterator[Path]:
    """The npm servers' node_modules, where the sandbox's uid can read them (as root the
    sandbox runs as uid 65534, which cannot enter /root: a readable copy then)."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("npm is not installed: the MCP tests against the npm servers need node and npm")
    for name in ("server-everything", "server-filesystem"):
        if not (NPM_DIR / SCOPE / name / "dist" / "index.js").is_file():
            pytest.fail(f"{NPM_DIR / SCOPE / name} is missing: run `make mcp-servers`")
    if os.geteuid() != 0:
        yield NPM_DIR / "node_modules"
        return
    top = Path(tempfile.mkdtemp(prefix="anvil-mcp-npm-", dir="/var/tmp"))
    try:
        top.chmod(0o755)
        shutil.copytree(NPM_DIR / "node_modules", top / "node_modules", symlinks=True)
        yield top / "node_modules"
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A workspace the sandbox can enter and write (as root: uid 65534's)."""
    top = Path(tempfile.mkdtemp(prefix="anvil-mcp-", dir="/var/tmp"))
    top.chmod(0o755)
    work = top / "work"
    work.mkdir()
    if os.geteuid() == 0:
        os.chown(work, DEFAULT_UID, DEFAULT_GID)
    try:
        yield work
    finally:
        shutil.rmtree(top, ignore_errors=True)


def calls(contains: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "contains": contains,
        "tool_calls": [{"name": name, "arguments": arguments}],
        "repeat": True,
    }


TURNS = [
    calls("use echo", "mcp__every__echo", {"message": "hello-mcp"}),
    calls("list resources", "mcp_resources", {"action": "list", "server": "every"}),
    calls("run long", "mcp__every__trigger-long-running-operation", {"duration": 30, "steps": 3}),
    calls("py echo", "mcp__py__echo", {"text": "from-python"}),
    calls("go slow", "mcp__py__slow", {"seconds": 60}),
    calls("grow then call", "mcp__py__grow", {}),
    calls("grew", "mcp__py__grown", {}),
    calls("project echo", "mcp__proj__echo", {"text": "project-ok"}),
    calls("read inside", "mcp__fs__read_text_file", {"path": "WORK/inside.txt"}),
    calls("read outside", "mcp__fs__read_text_file", {"path": "OUTSIDE"}),
    calls("write inside", "mcp__fs__write_file", {"path": "WORK/made.txt", "content": "by fs"}),
    {"text": "done", "repeat": True},
]


def script(work: Path, outside: Path) -> list[dict[str, Any]]:
    text = json.dumps(TURNS).replace("WORK", str(work)).replace("OUTSIDE", str(outside))
    turns: list[dict[str, Any]] = json.loads(text)
    return turns


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("SECRET-OUTSIDE\n")
    return secret


@pytest.fixture
def fake(tmp_path: Path, workdir: Path, outside: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path, script(workdir, outside))
    yield server
    server.stop()


def q(value: str | Path) -> str:
    return json.dumps(str(value))


def everything(npm: Path, **more: str) -> str:
    entry = npm / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    lines = [
        "[mcp_servers.every]",
        'command = "node"',
        f'args = [{q(entry)}, "stdio"]',
        f"sandbox_read = [{q(npm)}]",
        *(f"{k} = {v}" for k, v in more.items()),
    ]
    return "\n".join(lines) + "\n"


def python_server(name: str, *args: str, **more: str) -> str:
    argv = ", ".join(q(a) for a in ("-m", "tests.support.mcp_server", *args))
    lines = [
        f"[mcp_servers.{name}]",
        f"command = {q(sys.executable)}",
        f"args = [{argv}]",
        f"env = {{ PYTHONPATH = {q(REPO)} }}",
        "sandbox = false",
        *(f"{k} = {v}" for k, v in more.items()),
    ]
    return "\n".join(lines) + "\n"


def configure(tmp_path: Path, fake: FakeServer, *tables: str) -> Path:
    path = user_config(tmp_path, fake.url)
    rules = '[permissions]\nallow = ["mcp__every__*", "mcp__py__*", "mcp__proj__*", "mcp__fs__*"]\n'
    path.write_text(path.read_text() + "\n" + rules + "\n" + "\n".join(tables))
    return path


@pytest.fixture
def daemons() -> Iterator[list[Anvild]]:
    started: list[Anvild] = []
    yield started
    for daemon in started:
        if daemon.proc.poll() is None:
            code, log = daemon.stop()
            assert code == 0, log


def start(namespace: Path, config: Path, daemons: list[Anvild]) -> Anvild:
    daemon = start_daemon(namespace, config)
    daemons.append(daemon)
    return daemon


def tools_of(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["body"].get("tools", [])]


def last_result(request: dict[str, Any]) -> str:
    message = request["body"]["messages"][-1]
    assert message["role"] == "tool", message
    return str(message["content"])


def mcp_lines(namespace: Path, session: str) -> dict[str, list[str]]:
    lines = read(namespace, f"agent/{session}/mcp").splitlines()
    return {line.split("\t")[0]: line.split("\t") for line in lines}


def until(condition: Callable[[], bool], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def wait_requests(fake: FakeServer, count: int) -> None:
    url = f"{fake.url}/_fake/wait?requests={count}&timeout={TURN_TIMEOUT}"
    with urllib.request.urlopen(url, timeout=TURN_TIMEOUT + 5) as reply:
        assert reply.status == 200


def test_the_model_calls_server_everything_and_reads_its_resources(
    tmp_path: Path,
    namespace: Path,
    workdir: Path,
    fake: FakeServer,
    npm_servers: Path,
    daemons: list[Anvild],
) -> None:
    start(namespace, configure(tmp_path, fake, everything(npm_servers)), daemons)
    session = new(namespace, workdir, "headless")
    assert mcp_lines(namespace, session)["every"][2] == "lazy"  # nothing starts before a turn
    assert turn(namespace, session, "use echo").strip() == "done"
    first, second = fake.requests()
    offered = tools_of(first)
    assert "mcp__every__echo" in offered
    assert {"mcp_resources", "mcp_prompts", "bash"} <= set(offered)
    assert "Echo: hello-mcp" in last_result(second)  # the result reached the next request
    every = mcp_lines(namespace, session)["every"]
    assert every[1:3] == ["stdio", "ready"]
    assert int(every[3]) >= 10
    assert every[4] == "-"
    assert turn(namespace, session, "list resources").strip() == "done"
    listed = last_result(fake.requests()[-1])
    assert listed.startswith("every\t"), listed


def test_a_call_past_its_timeout_fails_alone(
    tmp_path: Path,
    namespace: Path,
    workdir: Path,
    fake: FakeServer,
    npm_servers: Path,
    daemons: list[Anvild],
) -> None:
    start(
        namespace,
        configure(tmp_path, fake, everything(npm_servers, tool_timeout="2")),
        daemons,
    )
    session = new(namespace, workdir, "headless")
    began = time.monotonic()
    assert turn(namespace, session, "run long").strip() == "done"
    assert time.monotonic() - began < 25  # not the operation's 30 s
    result = last_result(fake.requests()[-1])
    assert "timed out after 2 s (tool_timeout)" in result, result
    assert mcp_lines(namespace, session)["every"][2] == "ready"
    assert turn(namespace, session, "use echo").strip() == "done"  # the server goes on
    assert "Echo: hello-mcp" in last_result(fake.requests()[-1])


def test_a_server_killed_mid_call_fails_the_call_and_is_restarted(
    tmp_path: Path, namespace: Path, workdir: Path, fake: FakeServer, daemons: list[Anvild]
) -> None:
    marker = tmp_path / "starts"
    start(
        namespace,
        configure(tmp_path, fake, python_server("py", "--marker", str(marker))),
        daemons,
    )
    session = new(namespace, workdir, "headless")
    ok(anvilctl(namespace, "write", f"agent/{session}/in", stdin="go slow"))
    wait_requests(fake, 1)
    until(lambda: "slow " in marker.read_text())  # the call is in flight
    (pid,) = [line.split()[1] for line in marker.read_text().splitlines() if "start" in line]
    os.kill(int(pid), signal.SIGKILL)
    assert read(namespace, f"agent/{session}/wait") == "await\n"
    assert read(namespace, f"agent/{session}/out").strip() == "done"
    result = last_result(fake.requests()[-1])
    assert "went away during tool slow" in result, result
    assert "being restarted" in result
    until(lambda: marker.read_text().count("start ") == 2)  # restarted
    # A turn takes the tools of the servers ready when it starts: wait for the restart's
    # handshake, not only for its process (a busy machine leaves it `restarting` a while).
    until(lambda: mcp_lines(namespace, session)["py"][2] == "ready")
    assert turn(namespace, session, "py echo").strip() == "done"
    assert last_result(fake.requests()[-1]) == "from-python"


def test_list_changed_reaches_the_next_step(
    tmp_path: Path, namespace: Path, workdir: Path, fake: FakeServer, daemons: list[Anvild]
) -> None:
    start(namespace, configure(tmp_path, fake, python_server("py")), daemons)
    session = new(namespace, workdir, "headless")
    assert turn(namespace, session, "grow then call").strip() == "done"
    first, second, third = fake.requests()  # one turn: grow, then grown, then the answer
    assert "mcp__py__grown" not in tools_of(first)
    assert last_result(second) == "grew"
    assert "mcp__py__grown" in tools_of(second)
    assert last_result(third) == "grown here"


def test_a_project_server_runs_only_after_the_grant(
    tmp_path: Path,
    namespace: Path,
    workdir: Path,
    fake: FakeServer,
    daemons: list[Anvild],
    open_events: Callable[[Path], Events],
) -> None:
    repo = workdir / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".anvil").mkdir()
    project(repo, python_server("proj"))
    daemon = start(namespace, configure(tmp_path, fake), daemons)
    events = open_events(namespace)
    session = new(namespace, repo, "headless")
    assert turn(namespace, session, "hello").strip() == "done"
    assert not [t for t in tools_of(fake.requests()[-1]) if t.startswith("mcp")]
    assert read(namespace, f"agent/{session}/mcp") == ""
    shown = read(namespace, f"agent/{session}/config")
    assert "mcp_servers.proj = " in shown
    assert "\tproject ignored (executable)" in shown
    log_lines = (daemon.data_dir / "logs" / "anvild.log").read_text()
    command = next(
        json.loads(line)["message"].split("apply it with `")[1].rstrip("`")
        for line in log_lines.splitlines()
        if "config.session_note" in line and "apply it with" in line
    )
    ok(anvilctl(namespace, *shlex.split(command)[1:]))
    assert turn(namespace, session, "project echo").strip() == "done"
    request = fake.requests()[-1]
    assert "mcp__proj__echo" in tools_of(request)
    assert last_result(request) == "project-ok"
    assert mcp_lines(namespace, session)["proj"][2] == "ready"
    seen = events.after_stop(daemon)
    ignored = [e for e in seen if e.get("type") == "config_ignored" and e.get("id") == session]
    assert len(ignored) == 1
    assert "mcp_servers.proj" in ignored[0]["keys"]


def test_server_filesystem_is_confined_to_the_workspace(
    tmp_path: Path,
    namespace: Path,
    workdir: Path,
    fake: FakeServer,
    npm_servers: Path,
    outside: Path,
    daemons: list[Anvild],
) -> None:
    entry = npm_servers / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
    # The server itself would allow the whole machine ("/"): the sandbox is what confines it.
    table = (
        f'[mcp_servers.fs]\ncommand = "node"\nargs = [{q(entry)}, "/"]\n'
        f"sandbox_read = [{q(npm_servers)}]\n"
    )
    start(namespace, configure(tmp_path, fake, table), daemons)
    (workdir / "inside.txt").write_text("INSIDE-TEXT\n")
    session = new(namespace, workdir, "headless")
    assert turn(namespace, session, "read inside").strip() == "done"
    assert "INSIDE-TEXT" in last_result(fake.requests()[-1])
    assert turn(namespace, session, "read outside").strip() == "done"
    result = last_result(fake.requests()[-1])
    assert "SECRET-OUTSIDE" not in result
    assert "ENOENT" in result or "no such file" in result.lower(), result
    assert turn(namespace, session, "write inside").strip() == "done"
    assert (workdir / "made.txt").read_text() == "by fs"


def test_a_server_that_cannot_start_is_reported_and_the_session_works(
    tmp_path: Path,
    namespace: Path,
    workdir: Path,
    fake: FakeServer,
    daemons: list[Anvild],
    open_events: Callable[[Path], Events],
) -> None:
    daemon = start(
        namespace,
        configure(tmp_path, fake, python_server("broken", "--fail"), python_server("py")),
        daemons,
    )
    events = open_events(namespace)
    session = new(namespace, workdir, "headless")
    assert turn(namespace, session, "py echo").strip() == "done"
    assert last_result(fake.requests()[-1]) == "from-python"
    assert not [t for t in tools_of(fake.requests()[-1]) if t.startswith("mcp__broken__")]
    assert turn(namespace, session, "hello again").strip() == "done"
    broken = mcp_lines(namespace, session)["broken"]
    assert broken[1:4] == ["stdio", "failed", "0"]
    assert "refusing to start (--fail)" in broken[4]
    seen = events.after_stop(daemon)
    failed = [e for e in seen if e.get("type") == "mcp_server_failed"]
    assert len(failed) == 1, failed  # once, though two turns started
    assert (failed[0]["id"], failed[0]["server"]) == (session, "broken")
    assert "exited with status 3" in failed[0]["error"]
