"""Per role: `roles` picks which sessions get a server, and the role's ceiling holds for MCP
tools too: a reviewer may call a server the user vouched for (`read_only = true`), never one
whose effects are unknown; the permission rules select server tools by name."""

from __future__ import annotations

import posixpath
from pathlib import Path

import mcp_types

from anvild.agent.permissions.policy import CEILINGS, Allow, Ask, Deny, Policy, resolve_request
from anvild.agent.permissions.rules import RuleSet
from anvild.config.load import Trust
from anvild.mcp import McpPool, McpSetup, Placement, Server, ServerSpec, session_mcp
from anvild.mcp.config import spec_from
from anvild.mcp.tools import server_tools
from anvild.sandbox import WorkspaceWrite
from anvild.sandbox.roles import load_role

WS = "/work/repo"


def ready_server(spec: ServerSpec) -> Server:
    server = Server(spec, Placement(Path(WS), WorkspaceWrite(), load_role("developer")), {})
    server.tools = (mcp_types.Tool(name="search", input_schema={"type": "object"}),)
    return server


def decide(spec: ServerSpec, role: str, *, allow: tuple[str, ...] = ()) -> object:
    (tool,) = server_tools(ready_server(spec))
    request = resolve_request(
        tool.name, {}, tool.effects({}), cwd=WS, home="/home/dev", canonical=posixpath.normpath
    )
    policy = Policy(
        WS,
        rules=RuleSet.parse(allow=allow),
        home="/home/dev",
        sandbox=WorkspaceWrite(),
        ceiling=CEILINGS[role],
    )
    return policy.decide(request)


def test_roles_pick_the_sessions_that_get_a_server(tmp_path: Path) -> None:
    specs = (
        spec_from("docs", {"command": ["a"], "roles": ["reviewer"]}, Trust.USER, "user"),
        spec_from("all", {"command": ["b"]}, Trust.USER, "user"),
    )
    pool = McpPool(lambda cwd: specs)
    place = Placement(tmp_path, WorkspaceWrite(), load_role("developer"))
    reviewer = session_mcp(pool, McpSetup("r", "reviewer", place))
    developer = session_mcp(pool, McpSetup("d", "developer", place))
    assert [s.name for s in reviewer.specs()] == ["docs", "all"]
    assert [s.name for s in developer.specs()] == ["all"]


def test_a_reviewer_calls_only_servers_vouched_for() -> None:
    vouched = spec_from("docs", {"command": ["a"], "read_only": True}, Trust.USER, "user")
    unknown = spec_from("docs", {"command": ["a"]}, Trust.USER, "user")
    assert decide(vouched, "reviewer") == Allow()
    refused = decide(unknown, "reviewer", allow=("mcp__docs__*",))
    assert isinstance(refused, Deny)
    assert "reviewer role makes no changes" in refused.reason


def test_rules_select_a_servers_tools_by_name() -> None:
    unknown = spec_from("docs", {"command": ["a"]}, Trust.USER, "user")
    assert isinstance(decide(unknown, "developer"), Ask)
    assert decide(unknown, "developer", allow=("mcp__docs__*",)) == Allow()
    assert decide(unknown, "developer", allow=("mcp__docs",)) == Allow()
    assert isinstance(decide(unknown, "developer", allow=("mcp__other__*",)), Ask)
