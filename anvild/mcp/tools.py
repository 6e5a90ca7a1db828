"""What a session sees of its MCP servers: the tools, the two generic tools, the status.

`SessionMcp` is one session's handle: at every turn start (`ensure_started`, awaited in the turn
through `McpRegistry.prepare`) it asks the pool which servers apply to the session's cwd and
role, gets each one's shared `Server` (starting it the first time) and waits for the first
attempts, each at most its `startup_timeout`. A server not ready then is reported once (the
pool's `report`) and its tools are absent; the session goes on. `tools()`: an `McpTool` per
exposed tool of each ready server (`mcp__SERVER__TOOL`), and `mcp_resources` / `mcp_prompts`
when a server offers resources or prompts. `McpRegistry` (the session's registry) rebuilds its
MCP part when `specs()` sees a new `SessionMcp.version` (a server's state or tool list changed,
e.g. by `notifications/tools/list_changed`); the loop reads the specs at every step, and calls
go to the tools the model was last shown.

Effects: a server's calls have unknown effects (the policy asks; role ceilings that write
nothing refuse them) unless its config says `read_only = true` (the user vouches for it).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from anvild.agent.tools.base import (
    Args,
    ArgsValidator,
    Cancellation,
    Effects,
    Failed,
    InvalidArgs,
    Tool,
    ToolContext,
    ToolOutput,
    object_schema,
)
from anvild.agent.tools.bash import STDOUT_KEEP
from anvild.agent.tools.registry import ToolRegistry, truncate_middle
from anvild.llm.size import SizedSpecs, specs_bytes
from anvild.llm.types import ToolCall, ToolResult, ToolSpec
from anvild.mcp.config import ServerSpec
from anvild.mcp.names import tool_name
from anvild.mcp.pool import McpPool
from anvild.mcp.server import CallFailed, Placement, Server, State

if TYPE_CHECKING:  # loaded with the first server (anvild.mcp.server)
    import mcp_types
    from mcp import ClientSession

RESOURCES: Final = "mcp_resources"
PROMPTS: Final = "mcp_prompts"
LIST_TIMEOUT: Final = 30.0
MAX_RESULT_CHARS: Final = sum(STDOUT_KEEP)
"""A result keeps this much (head and tail), as bash keeps of a command's stdout."""
MORE_HINT: Final = "ask the tool for less (a narrower query, a page, a limit) to see them"


def _text_of(blocks: Iterable[Any]) -> str:
    import mcp_types

    parts: list[str] = []
    for block in blocks:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            size = len(block.data) * 3 // 4
            parts.append(f"[{block.type}: {block.mime_type}, about {size} bytes, not shown]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            parts.append(_resource_text(block.resource))
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource {block.uri}: read it with {RESOURCES}]")
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True)))
    return "\n".join(parts)


def _resource_text(contents: Any) -> str:
    import mcp_types

    if isinstance(contents, mcp_types.TextResourceContents):
        return contents.text
    if isinstance(contents, mcp_types.BlobResourceContents):
        try:
            size = len(base64.b64decode(contents.blob))
        except ValueError:
            size = len(contents.blob)
        kind = contents.mime_type or "unknown type"
        return f"[binary resource {contents.uri}: {kind}, {size} bytes]"
    return json.dumps(contents.model_dump(mode="json", exclude_none=True))


@attrs.frozen
class McpTool:
    """One tool of one server, as the model sees it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    server: Server = attrs.field(eq=False)
    tool: str
    read_only: bool = False
    cancellation: Cancellation = Cancellation.UNKNOWN

    def effects(self, args: Args) -> Effects:
        return Effects(reads=True) if self.read_only else Effects.unknown_effects()

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        server = self.server

        async def run(session: ClientSession) -> mcp_types.CallToolResult:
            return await session.call_tool(self.tool, dict(args))

        try:
            result = await server.request(f"tool {self.tool}", run, server.spec.tool_timeout)
        except CallFailed as exc:
            raise Failed(str(exc)) from exc
        text = _text_of(result.content)
        if not text.strip() and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False)
        return _bounded(text or "(no output)", is_error=bool(result.is_error))


def _bounded(text: str, *, is_error: bool = False) -> ToolOutput:
    return ToolOutput(truncate_middle(text, MAX_RESULT_CHARS, hint=MORE_HINT), is_error)


def _schema(tool: mcp_types.Tool) -> dict[str, Any] | None:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    if schema.get("type") != "object":
        return None
    try:
        ArgsValidator(schema)
        json.dumps(schema)
    except (ValueError, TypeError):
        return None
    return schema


def _description(server: str, tool: mcp_types.Tool) -> str:
    text = (tool.description or tool.title or "").strip()
    return (
        f"{text}\n\n(MCP server {server}, tool {tool.name})"
        if text
        else (f"Tool {tool.name} of the MCP server {server}.")
    )


def server_tools(server: Server) -> list[McpTool]:
    """The exposed tools of a ready server; tools whose schema is not a JSON object schema
    are left out."""
    out = []
    for tool in server.tools:
        if not server.spec.exposes(tool.name):
            continue
        schema = _schema(tool)
        if schema is None:
            continue
        out.append(
            McpTool(
                tool_name(server.name, tool.name),
                _description(server.name, tool),
                schema,
                server,
                tool.name,
                server.spec.read_only,
            )
        )
    return out


class _Generic:
    """What the two generic tools share: the session's ready servers, by config name."""

    cancellation = Cancellation.UNKNOWN

    def __init__(self, handle: SessionMcp) -> None:
        self._handle = handle

    def effects(self, args: Args) -> Effects:
        return Effects(reads=True)

    def _servers(self, args: Args, capability: str) -> list[Server]:
        wanted = args.get("server")
        servers = [
            s
            for s in self._handle.servers()
            if s.state is State.READY
            and s.capabilities is not None
            and getattr(s.capabilities, capability) is not None
        ]
        if wanted is None:
            return servers
        chosen = [s for s in servers if s.name == wanted]
        if not chosen:
            names = ", ".join(s.name for s in servers) or "none"
            raise InvalidArgs(
                f"No ready MCP server {wanted!r} offers {capability}; these do: {names}."
            )
        return chosen

    @staticmethod
    async def _ask(server: Server, what: str, call: Callable[[ClientSession], Any]) -> Any:
        try:
            return await server.request(what, call, min(server.spec.tool_timeout, LIST_TIMEOUT))
        except CallFailed as exc:
            raise Failed(str(exc)) from exc


class ResourcesTool(_Generic):
    name = RESOURCES
    description = (
        "List or read the resources of the session's MCP servers (files, records, documents "
        "they publish). action=list (optionally for one `server`) gives one line per resource: "
        "server, uri, name, type, description. action=read needs `server` and `uri` and gives "
        "the resource's text (binary content is described, not shown)."
    )
    summary = "List (action=list) or read (action=read, server, uri) MCP servers' resources."
    input_schema: Mapping[str, Any] = object_schema(
        {
            "action": {"type": "string", "enum": ["list", "read"]},
            "server": {"type": "string", "description": "The MCP server's config name."},
            "uri": {"type": "string", "description": "The resource to read (action=read)."},
        },
        required=("action",),
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        if args["action"] == "read":
            if "server" not in args or "uri" not in args:
                raise InvalidArgs("action=read needs `server` and `uri` (from action=list).")
            (server,) = self._servers(args, "resources")
            uri = args["uri"]

            async def read(session: ClientSession) -> Any:
                return await session.read_resource(uri)

            result = await self._ask(server, f"reading {uri}", read)
            return _bounded("\n".join(_resource_text(c) for c in result.contents))
        lines = []
        for server in self._servers(args, "resources"):

            async def listing(session: ClientSession) -> Any:
                return await session.list_resources()

            result = await self._ask(server, "listing resources", listing)
            for r in result.resources:
                about = " ".join((r.description or "").split())
                lines.append(f"{server.name}\t{r.uri}\t{r.name}\t{r.mime_type or '-'}\t{about}")
        return _bounded("\n".join(lines) or "No MCP server offers resources.")


class PromptsTool(_Generic):
    name = PROMPTS
    description = (
        "List or get the prompts of the session's MCP servers (templates they offer). "
        "action=list gives one line per prompt: server, name, arguments (a * marks a required "
        "one), description. action=get needs `server` and `name`, and `arguments` (an object "
        "of strings) for the prompt's arguments; it gives the prompt's messages."
    )
    summary = "List (action=list) or get (action=get, server, name, arguments) MCP prompts."
    input_schema: Mapping[str, Any] = object_schema(
        {
            "action": {"type": "string", "enum": ["list", "get"]},
            "server": {"type": "string", "description": "The MCP server's config name."},
            "name": {"type": "string", "description": "The prompt (action=get)."},
            "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        required=("action",),
    )

    async def call(self, args: Args, ctx: ToolContext) -> ToolOutput:
        if args["action"] == "get":
            if "server" not in args or "name" not in args:
                raise InvalidArgs("action=get needs `server` and `name` (from action=list).")
            (server,) = self._servers(args, "prompts")
            name, arguments = args["name"], dict(args.get("arguments", {}))

            async def get(session: ClientSession) -> Any:
                return await session.get_prompt(name, arguments)

            result = await self._ask(server, f"getting prompt {name}", get)
            parts = [f"{m.role}: {_text_of([m.content])}" for m in result.messages]
            return _bounded("\n\n".join(parts))
        lines = []
        for server in self._servers(args, "prompts"):

            async def listing(session: ClientSession) -> Any:
                return await session.list_prompts()

            result = await self._ask(server, "listing prompts", listing)
            for p in result.prompts:
                names = ",".join(a.name + ("*" if a.required else "") for a in (p.arguments or ()))
                about = " ".join((p.description or "").split())
                lines.append(f"{server.name}\t{p.name}\t{names or '-'}\t{about}")
        return _bounded("\n".join(lines) or "No MCP server offers prompts.")


@attrs.frozen
class McpSetup:
    """What one session's MCP servers run for."""

    session_id: str
    role: str
    placement: Placement


class SessionMcp:
    """One session's view of its MCP servers; see the module docstring."""

    def __init__(self, pool: McpPool, setup: McpSetup) -> None:
        self.pool = pool
        self.setup = setup
        self._specs: tuple[ServerSpec, ...] = ()
        self._servers: dict[str, Server] = {}
        self._reported: dict[str, str] = {}
        self._config_error = ""
        self._started = False

    @property
    def started(self) -> bool:
        return self._started

    def servers(self) -> list[Server]:
        return list(self._servers.values())

    def specs(self) -> tuple[ServerSpec, ...]:
        """The servers that apply to the session (before its first turn: as the config is now)."""
        if self._started:
            return self._specs
        try:
            return self._applying()
        except Exception:
            return ()

    def _applying(self) -> tuple[ServerSpec, ...]:
        cwd = self.setup.placement.cwd
        return tuple(s for s in self.pool.servers(cwd) if s.for_role(self.setup.role))

    async def ensure_started(self) -> None:
        """Get this turn's servers, starting what is new; wait for their first attempts."""
        try:
            specs = self._applying()
            self._config_error = ""
        except Exception as exc:  # a broken config must not stop the turn
            specs, self._config_error = self._specs, f"{type(exc).__name__}: {exc}"
        self._specs, self._started = specs, True
        servers = {s.name: self.pool.server(s, self.setup.placement) for s in specs}
        self._servers = servers
        if not servers:
            return
        async with trio.open_nursery() as nursery:
            for server in servers.values():
                nursery.start_soon(self._wait_first, server)
        for server in servers.values():
            self._check(server)

    @staticmethod
    async def _wait_first(server: Server) -> None:
        with trio.move_on_after(server.spec.startup_timeout + 1.0):
            await server.first_attempt.wait()

    def _check(self, server: Server) -> None:
        if server.state is State.READY:
            self._reported.pop(server.name, None)
            return
        if server.name in self._reported:
            return
        error = server.last_error or f"still {server.state.value} after its startup_timeout"
        self._reported[server.name] = error
        self.pool.report(self.setup.session_id, server.name, error)

    @property
    def version(self) -> tuple[object, ...]:
        return tuple((s.name, id(s), s.version, s.state) for s in self._servers.values())

    def tools(self) -> list[Tool]:
        tools: list[Tool] = []
        resources = prompts = False
        for server in self._servers.values():
            if server.state is not State.READY:
                continue
            tools.extend(server_tools(server))
            caps = server.capabilities
            resources = resources or (caps is not None and caps.resources is not None)
            prompts = prompts or (caps is not None and caps.prompts is not None)
        if resources:
            tools.append(ResourcesTool(self))
        if prompts:
            tools.append(PromptsTool(self))
        return tools

    def status(self) -> str:
        """The session's `mcp` file: one line per server: name, transport, state, tool count,
        last error (`-`: none). Before the first turn the servers are `lazy`."""
        lines = []
        if self._config_error:
            lines.append(f"# config error: {self._config_error}")
        for spec in self.specs():
            server = self._servers.get(spec.name)
            if server is None:
                lines.append(f"{spec.name}\t{spec.transport}\tlazy\t0\t-")
                continue
            count = len([t for t in server.tools if spec.exposes(t.name)])
            error = " ".join(server.last_error.split()) or "-"
            lines.append(f"{spec.name}\t{spec.transport}\t{server.state.value}\t{count}\t{error}")
        return "".join(f"{line}\n" for line in lines)


def session_mcp(pool: McpPool, setup: McpSetup) -> SessionMcp:
    """The handle of a session (registered with the pool for its `mcp` file)."""
    handle = SessionMcp(pool, setup)
    pool.register(setup.session_id, handle)
    return handle


class McpRegistry(ToolRegistry):
    """A session's tools: its own, then its MCP servers' (`SessionMcp.tools`), refreshed when
    `specs()` reads a new `SessionMcp.version`. A server tool never shadows a native one."""

    def __init__(self, tools: Iterable[Tool], mcp: SessionMcp | None = None) -> None:
        super().__init__(tools)
        self.mcp = mcp
        self._extra = ToolRegistry(max_output_chars=self.max_output_chars)
        self._seen: tuple[object, ...] | None = None

    def _refresh(self) -> None:
        mcp = self.mcp
        if mcp is None or mcp.version == self._seen:
            return
        self._seen = mcp.version
        extra = ToolRegistry(max_output_chars=self.max_output_chars)
        for tool in mcp.tools():
            if tool.name in extra or super().__contains__(tool.name):
                continue
            try:
                extra.register(tool)
            except ValueError:
                continue
        self._extra = extra

    async def prepare(self) -> None:
        """Start (or re-check) the session's servers, inside the turn: a cancel or the turn's
        deadline stops the wait, which the servers' `startup_timeout`s bound."""
        if self.mcp is not None:
            await self.mcp.ensure_started()

    def names(self) -> list[str]:
        return sorted([*super().names(), *self._extra.names()])

    def get(self, name: str) -> Tool | None:
        return super().get(name) or self._extra.get(name)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or name in self._extra

    def __len__(self) -> int:
        return super().__len__() + len(self._extra)

    def specs(self, *, compact: bool = False) -> tuple[ToolSpec, ...]:
        self._refresh()
        own, extra = super().specs(compact=compact), self._extra.specs(compact=compact)
        merged = sorted((*own, *extra), key=lambda s: s.name)
        return SizedSpecs(merged, specs_bytes(own) + specs_bytes(extra))  # a list's size adds up

    def effects(self, call: ToolCall) -> Effects:
        if call.name in self._extra:
            return self._extra.effects(call)
        return super().effects(call)

    async def dispatch(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        if call.name in self._extra and not super().__contains__(call.name):
            return await self._extra.dispatch(call, ctx)
        return await super().dispatch(call, ctx)


__all__ = [
    "PROMPTS",
    "RESOURCES",
    "McpRegistry",
    "McpSetup",
    "McpTool",
    "PromptsTool",
    "ResourcesTool",
    "SessionMcp",
    "server_tools",
    "session_mcp",
]
