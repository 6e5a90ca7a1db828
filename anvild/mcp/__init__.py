"""The MCP client: servers from `[mcp_servers.NAME]`, their tools given to sessions.

    config     ServerSpec: one checked `[mcp_servers.NAME]` table; `servers_of(config)`
    names      mcp__SERVER__TOOL, sanitised and bounded to 64 characters, stable
    transport  stdio (sandboxed unless `sandbox = false`) and streamable HTTP channels
    server     Server: one running server, supervised, restarted with back-off
    pool       McpPool: the daemon's servers, shared per (config, cwd, sandbox), a daemon child
    tools      SessionMcp (a session's servers), McpTool, mcp_resources, mcp_prompts,
               McpRegistry (a session's tools with its servers'; starts them per turn)

This package may import data, ninep, llm, sandbox, store, agent, fs and config; never session
or anything above it (tests/unit/test_dependency_rules.py).
"""

from anvild.mcp.config import ServerSpec, servers_of
from anvild.mcp.names import tool_name
from anvild.mcp.pool import McpPool
from anvild.mcp.server import CallFailed, Placement, Server, State
from anvild.mcp.tools import McpRegistry, McpSetup, SessionMcp, session_mcp

__all__ = [
    "CallFailed",
    "McpPool",
    "McpRegistry",
    "McpSetup",
    "Placement",
    "Server",
    "ServerSpec",
    "SessionMcp",
    "State",
    "servers_of",
    "session_mcp",
    "tool_name",
]
