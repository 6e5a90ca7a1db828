"""One running MCP server, shared by the sessions whose (config, cwd, sandbox) match.

`Server.run` (a task in the pool's nursery) is the supervisor: connect, `initialize`, list the
tools, then serve until the server goes away (its stdout closes, or a call finds the HTTP
connection broken); then `RESTARTING` and a new attempt after a back-off that doubles from
`BACKOFF_START` to `BACKOFF_MAX` (and starts over once a connection stayed up `STABLE`
seconds). A failed start is `FAILED` with `last_error` (the server's stderr tail included); it
is retried on the same back-off and stays `FAILED` until an attempt succeeds. `first_attempt`
is set once the first attempt ended either way: a session waits for it at most
`startup_timeout`, then goes on without the server's tools.

Calls come from session tasks. Each is bounded by the server's `tool_timeout`: a call that runs
out is abandoned (the SDK tells the server it was cancelled) and reported as `CallFailed`; the
server and the other calls go on. A server that dies mid-call fails that call with
`CallFailed` (the SDK ends every waiting request when the connection closes) and is restarted.
`notifications/tools/list_changed` re-lists the tools (a call that caused one returns once the
new list is in); `version` counts the lists seen.
"""

from __future__ import annotations

import enum
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import structlog
import trio

from anvild.agent.tools.bash import Command
from anvild.mcp.config import ServerSpec
from anvild.sandbox import FullAccess, SandboxError, SandboxPolicy
from anvild.sandbox.bwrap import SandboxSettings
from anvild.sandbox.confine import Sandbox
from anvild.sandbox.roles import Role
from anvild.sandbox.secrets import child_env

if TYPE_CHECKING:  # the SDK (about a second to import) loads when a server first starts
    import mcp_types
    from mcp import ClientSession

    from anvild.mcp.transport import Channel

log = structlog.get_logger(__name__)

BACKOFF_START: Final = 1.0
BACKOFF_MAX: Final = 60.0
STABLE: Final = 30.0
RELIST_WAIT: Final = 5.0
CLIENT_NAME: Final = "anvild"
T = TypeVar("T")


class State(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    RESTARTING = "restarting"
    STOPPED = "stopped"


class CallFailed(Exception):
    """A request to the server did not produce a result; the message says why and what next."""


@attrs.frozen
class Placement:
    """Where a stdio server runs: the session's cwd and its sandbox (policy, role, settings)."""

    cwd: Path
    policy: SandboxPolicy
    role: Role
    settings: SandboxSettings = attrs.field(factory=SandboxSettings)

    def key(self, spec: ServerSpec) -> tuple[object, ...]:
        if spec.url is not None:
            return ("http", spec.key)
        sandboxed = spec.sandbox and not isinstance(self.policy, FullAccess)
        where = (repr(self.policy), repr(self.role), repr(self.settings)) if sandboxed else ()
        return ("stdio", spec.key, str(self.cwd), *where)


class Server:
    """See the module docstring. Built and started by `anvild.mcp.pool.McpPool`."""

    def __init__(self, spec: ServerSpec, placement: Placement, env: Mapping[str, str]) -> None:
        self.spec = spec
        self.placement = placement
        self._env = env
        self.state = State.STARTING
        self.last_error = ""
        self.tools: tuple[mcp_types.Tool, ...] = ()
        self.capabilities: mcp_types.ServerCapabilities | None = None
        self.version = 0
        self.restarts = 0
        self.first_attempt = trio.Event()
        self._session: ClientSession | None = None
        self._channel: Channel | None = None
        self._changed = trio.Event()
        self._notified = 0  # list_changed notifications received
        self._listed = 0  # of those, how many the current tool list reflects
        self._relisted = trio.Event()
        self._scope = trio.CancelScope()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return None if self._channel is None else self._channel.pid

    # -- the supervisor --------------------------------------------------------------------------

    async def run(self) -> None:
        backoff = BACKOFF_START
        with self._scope:
            while True:
                began = trio.current_time()
                try:
                    await self._serve()
                    self.last_error = self._describe(EOFError("it closed the connection"))
                except Exception as exc:
                    self.last_error = self._describe(exc)
                log.warning("mcp.server_down", server=self.name, error=self.last_error)
                ready_before = self.state is State.READY
                self._session, self._channel, self.tools = None, None, ()
                self.state = State.RESTARTING if ready_before else State.FAILED
                self.version += 1
                self.first_attempt.set()
                if trio.current_time() - began > STABLE:
                    backoff = BACKOFF_START
                await trio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                self.restarts += 1
        self.state = State.STOPPED

    def stop(self) -> None:
        self._scope.cancel()

    def _describe(self, exc: BaseException) -> str:
        channel = self._channel
        tail = channel.stderr_tail() if channel is not None else ""
        text = _explain(exc, self.spec.startup_timeout)
        code = None if channel is None else channel.returncode
        if code is not None and code > 0:
            text = f"exited with status {code}: {text}"
        elif code is not None and code < 0:
            text = f"killed by signal {-code}: {text}"
        return f"{text} (stderr: {tail})" if tail else text

    async def _serve(self) -> None:
        import mcp_types
        from mcp import ClientSession

        if self.state is not State.FAILED:  # a failed server stays `failed` until it is up
            self.state = State.STARTING if self.version == 0 else State.RESTARTING
        async with self._open() as channel:
            self._channel = channel
            async with ClientSession(
                channel.read,
                channel.write,
                message_handler=self._on_message,
                client_info=mcp_types.Implementation(name=CLIENT_NAME, version="1"),
            ) as session:
                with trio.fail_after(self.spec.startup_timeout):
                    result = await session.initialize()
                    self.capabilities = result.capabilities
                    tools = await self._list_tools(session)
                self._session, self.tools, self.state = session, tools, State.READY
                self.last_error = ""
                self.version += 1
                self.first_attempt.set()
                log.info("mcp.server_ready", server=self.name, tools=len(tools))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._refresh, session)
                    await channel.ended.wait()
                    nursery.cancel_scope.cancel()

    def _open(self) -> Any:
        from anvild.mcp.transport import http_channel, stdio_channel

        spec = self.spec
        if spec.url is not None:
            headers, why = spec.credential_headers(self._env)
            if why:
                log.warning("mcp.headers_withheld", server=self.name, reason=why)
            return http_channel(spec.url, headers)
        return stdio_channel(self._command())

    def _command(self) -> Command:
        spec, place = self.spec, self.placement
        cwd = place.cwd if spec.cwd is None else place.cwd / os.path.expanduser(spec.cwd)
        if not spec.sandbox or isinstance(place.policy, FullAccess):
            env = child_env(self._env, passthrough=place.settings.passthrough)
            program = shutil.which(spec.argv[0], path=env.get("PATH")) or spec.argv[0]
            return Command((program, *spec.argv[1:]), cwd, {**env, **spec.env})
        readable = tuple(os.path.expanduser(p) for p in spec.sandbox_read)
        role = attrs.evolve(place.role, read_only=(*place.role.read_only, *readable))
        sandbox = Sandbox(place.policy, role=role, settings=place.settings)
        try:
            launch = sandbox.prepare(spec.argv, cwd)
        except SandboxError as exc:
            raise OSError(f"the sandbox cannot run it: {exc}") from exc
        return Command(launch.argv, launch.cwd, {**launch.env, **spec.env}, launch.pass_fds, launch)

    async def _list_tools(self, session: ClientSession) -> tuple[mcp_types.Tool, ...]:
        import mcp_types

        if self.capabilities is not None and self.capabilities.tools is None:
            return ()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tuple(tools)

    async def _on_message(self, message: Any) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._notified += 1
            self._changed.set()

    async def _refresh(self, session: ClientSession) -> None:
        from mcp.shared.exceptions import MCPError

        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            upto = self._notified
            try:
                self.tools = await self._list_tools(session)
                self.version += 1
            except MCPError as exc:
                log.warning("mcp.relist_failed", server=self.name, error=str(exc))
            self._listed = upto
            self._relisted.set()
            self._relisted = trio.Event()

    async def _caught_up(self) -> None:
        """Wait (briefly) until the tool list reflects every list_changed received so far: a
        call that changed the list is followed by a step that sees the new one."""
        with trio.move_on_after(RELIST_WAIT):
            while self._listed < self._notified and self.state is State.READY:
                await self._relisted.wait()

    # -- requests from sessions ------------------------------------------------------------------

    async def request(
        self, what: str, call: Callable[[ClientSession], Awaitable[T]], limit: float
    ) -> T:
        """Run `call` on the live connection within `limit` seconds; `CallFailed` otherwise."""
        import mcp_types
        from mcp.shared.exceptions import MCPError

        session, channel = self._session, self._channel
        if session is None or channel is None or self.state is not State.READY:
            why = f": {self.last_error}" if self.last_error else ""
            raise CallFailed(
                f"MCP server {self.name!r} is {self.state.value}{why}; it is restarted "
                "automatically, try again later or go on without it."
            )
        with trio.move_on_after(limit) as scope:
            try:
                result = await call(session)
                await self._caught_up()
                return result
            except MCPError as exc:
                if exc.error.code == mcp_types.CONNECTION_CLOSED:
                    channel.ended.set()
                    raise CallFailed(
                        f"MCP server {self.name!r} went away during {what} ({self._describe(exc)}"
                        "); it is being restarted. The call may or may not have taken effect."
                    ) from exc
                raise CallFailed(f"MCP server {self.name!r}: {what}: {exc.error.message}") from exc
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                channel.ended.set()
                raise CallFailed(
                    f"MCP server {self.name!r} connection broke during {what} ({exc}); it is being "
                    "restarted. The call may or may not have taken effect."
                ) from exc
        assert scope.cancelled_caught
        raise CallFailed(
            f"MCP server {self.name!r}: {what} timed out after {limit:g} s (tool_timeout) and "
            "was cancelled; the server keeps running. Try again with a smaller request, or "
            "without this tool."
        )


def _explain(exc: BaseException, startup_timeout: float) -> str:
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, trio.TooSlowError):
        return f"did not start within {startup_timeout:g} s (startup_timeout)"
    if isinstance(exc, MCPError):
        return f"protocol error: {exc.error.message}"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_explain(e, startup_timeout) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


__all__ = ["CallFailed", "Placement", "Server", "State"]
