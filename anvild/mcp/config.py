"""One MCP server as the config describes it (`[mcp_servers.NAME]`, checked by
`anvild.config.schema`), and the servers that apply to a session.

A `ServerSpec` is immutable and hashable by its `key` (the canonical JSON of its table, plus
the cwd and sandbox it runs for): equal keys share one running server (`anvild.mcp.pool`).
Only tables from the user config or a granted project reach here (the whole table is
executable authority: `anvild.config.trust`). A credential header (`headers_env`) is bound to
the origin of the `url` the *user* config names (`credential_origin`), as provider keys are:
a granted project's server gets none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import attrs

from anvild.config import Config
from anvild.config.load import Trust
from anvild.llm.registry import origin_of

DEFAULT_STARTUP_TIMEOUT: Final = 10.0
DEFAULT_TOOL_TIMEOUT: Final = 60.0


def _tuple(value: Any) -> tuple[str, ...]:
    return tuple(value)


def _mapping(value: Any) -> Mapping[str, str]:
    return dict(value)


@attrs.frozen
class ServerSpec:
    """A configured server. `argv` (stdio) or `url` (streamable HTTP) is set, never both."""

    name: str
    argv: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_mapping, eq=False)
    cwd: str | None = None
    url: str | None = None
    headers_env: Mapping[str, str] = attrs.field(factory=dict, converter=_mapping, eq=False)
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    enabled_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    sandbox: bool = True
    sandbox_read: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    roles: tuple[str, ...] | None = None
    read_only: bool = False
    credential_origin: str | None = None
    origin: str = "user config"  # where the table came from, for messages

    @property
    def transport(self) -> str:
        return "http" if self.url is not None else "stdio"

    @property
    def key(self) -> str:
        """What identifies the server's process or connection (not the tool filters)."""
        data = {
            "argv": self.argv,
            "env": dict(sorted(self.env.items())),
            "cwd": self.cwd,
            "url": self.url,
            "headers_env": dict(sorted(self.headers_env.items())),
            "sandbox": self.sandbox,
            "sandbox_read": self.sandbox_read,
            "credential_origin": self.credential_origin,
            "startup_timeout": self.startup_timeout,
        }
        return json.dumps(data, sort_keys=True)

    def for_role(self, role: str) -> bool:
        return self.roles is None or role in self.roles

    def exposes(self, tool: str) -> bool:
        """Whether the server's tool `tool` is given to the model (enabled/disabled_tools)."""
        if self.enabled_tools is not None and tool not in self.enabled_tools:
            return False
        return tool not in self.disabled_tools

    def credential_headers(self, env: Mapping[str, str]) -> tuple[dict[str, str], str]:
        """The headers to send and, when some are withheld, why (else "")."""
        if not self.headers_env or self.url is None:
            return {}, ""
        if self.credential_origin is None or origin_of(self.url) != self.credential_origin:
            return {}, (
                f"headers_env withheld: credentials go only to an origin the user config names "
                f"(this table comes from {self.origin}); move the server to the user config"
            )
        headers: dict[str, str] = {}
        missing = []
        for header, variable in self.headers_env.items():
            value = env.get(variable, "").strip()
            if value:
                headers[header] = value
            else:
                missing.append(variable)
        why = f"environment variable {', '.join(missing)} is not set" if missing else ""
        return headers, why


def spec_from(name: str, table: Mapping[str, Any], trust: Trust, origin: str) -> ServerSpec:
    """A checked table (`anvild.config.schema`) as a spec; `trust` is its source's."""
    command = list(table.get("command", ()))
    url = table.get("url")
    enabled = table.get("enabled_tools")
    roles = table.get("roles")
    return ServerSpec(
        name=name,
        argv=(*command, *table.get("args", ())),
        env=table.get("env", {}),
        cwd=table.get("cwd"),
        url=url,
        headers_env=table.get("headers_env", {}),
        startup_timeout=table.get("startup_timeout", DEFAULT_STARTUP_TIMEOUT),
        tool_timeout=table.get("tool_timeout", DEFAULT_TOOL_TIMEOUT),
        enabled_tools=None if enabled is None else tuple(enabled),
        disabled_tools=table.get("disabled_tools", ()),
        sandbox=table.get("sandbox", True),
        sandbox_read=table.get("sandbox_read", ()),
        roles=None if roles is None else tuple(roles),
        read_only=table.get("read_only", False),
        credential_origin=origin_of(url) if url is not None and trust is Trust.USER else None,
        origin=origin,
    )


def servers_of(config: Config) -> tuple[ServerSpec, ...]:
    """The servers `config` configures, by name. Untrusted project tables never get here:
    `anvild.config.load` drops them with a warning."""
    specs = []
    for name, table in sorted(config.mcp_servers.items()):
        source = config.sources.get(("mcp_servers", name))
        trust = source.trust if source is not None else Trust.BUILTIN
        if not trust.trusted:  # defensive: load drops these already
            continue
        specs.append(spec_from(name, table, trust, str(source) if source else "built-in"))
    return tuple(specs)


__all__ = [
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TOOL_TIMEOUT",
    "ServerSpec",
    "servers_of",
    "spec_from",
]
