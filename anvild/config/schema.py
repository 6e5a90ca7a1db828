"""The config file format: validation of one parsed TOML document into flat, typed settings.

Each file is checked on its own, before merging, so every error names the file, the key and what
was expected (`...config.toml: models.tiny.context_window: expected a positive integer, got
string "8k"`). A valid document becomes a *layer*: key paths (tuples, so an alias may contain
dots) to leaf values, which merging, provenance and trust work on. `hooks.<name>` and
`mcp_servers.<name>` tables are checked here and each kept as one leaf (one authority).
Every key of the format, and who may set it, is in `KEYS` (authority: `anvild.config.trust`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

from anvild.agent.permissions.rules import RuleKind, RuleSyntaxError, parse_rule
from anvild.llm.capabilities import Replay, SchemaDialect
from anvild.llm.errors import ConfigError
from anvild.llm.registry import KINDS

Key: TypeAlias = tuple[str, ...]
Layer: TypeAlias = dict[Key, Any]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME_RULE = "a name of letters, digits, '.', '_' or '-', starting with a letter or digit"

TOP_KEYS: Final = (
    "default_model",
    "instructions",
    "env_passthrough",
    "providers",
    "models",
    "permissions",
    "sessions",
    "context",
    "checkpoints",
    "hooks",
    "mcp_servers",
    "beads",
    "server",
    "subagents",
    "budget",
    "web",
    "telemetry",
)
BEADS_KEYS: Final = ("repo", "remote", "host")
"""`[beads] repo = "/abs/path"`: the bead store's git repository (default <data dir>/beads);
`remote = "URL"`: a git remote shared by several daemons (a path, ssh://host/path, host:path);
`host = "NAME"`: this daemon's name on the shared board (default: the host name)."""
REMOTE_SCHEMES: Final = ("ssh", "git", "http", "https", "file")
PROVIDER_KEYS: Final = ("kind", "base_url", "api_key_env", "context_window", "max_output_tokens")
MODEL_KEYS: Final = (
    "provider",
    "model",
    "context_window",
    "max_output_tokens",
    "pricing",
    "capabilities",
)
PRICING_KEYS: Final = ("input", "output", "cache_read", "cache_write")
CAPABILITY_KEYS: Final = (
    "images",
    "schema_dialect",
    "signed_reasoning",
    "max_tokens_field",
    "temperature",
    "replay",
)
PERMISSION_KEYS: Final = ("allow", "ask", "deny", "mode", "max_mode", "full_access")
RULE_KEYS: Final = ("allow", "ask", "deny")
MODES: Final = ("plan", "default", "accept-edits", "bypass")
"""The permission modes (`anvild.agent.permissions.policy.Mode`), narrowest authority first."""
HOOK_EVENTS: Final = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Stop",
    "PreCompact",
    "SessionEnd",
    "Notification",
)
"""The events a `[hooks.NAME]` table may run on (Claude Code's names; `anvild.hooks`)."""
MATCHED_EVENTS: Final = ("PreToolUse", "PostToolUse", "PreCompact", "SessionStart")
"""The events whose hooks may have a `matcher` (a tool name, a compaction trigger, a source)."""
HOOK_KEYS: Final = ("event", "command", "matcher", "timeout", "max_blocks")
HOOK_TIMEOUT_LIMIT: Final = 3600
MAX_BLOCKS_LIMIT: Final = 100
SESSION_KEYS: Final = (
    "max_steps",
    "token_budget",
    "turn_deadline",
    "reap_delay",
    "max_prompt_bytes",
)
MAX_STEPS_LIMIT: Final = 1000
CONTEXT_KEYS: Final = ("auto_compact", "clear_at", "compaction_model", "keep_tool_results")
"""`[context]`: `auto_compact` and `clear_at` are percentages of the window (0: off),
`compaction_model` a model name, `keep_tool_results` how many recent results are never cleared."""
CHECKPOINT_KEYS: Final = ("enabled", "max_file_bytes")
"""`[checkpoints]`: whether turns are checkpointed (`anvild.checkpoints`), and the size above
which a file is left out of them (recorded as skipped)."""
MAX_FILE_BYTES_LIMIT: Final = 1 << 30
SERVER_LIMITS: Final = {"max_connections": 100_000, "max_fids": 1_000_000, "max_outstanding": 65535}
"""`[server]` integer keys and their largest values (65535: every tag but NOTAG)."""
SERVER_KEYS: Final = ("handshake_timeout", *SERVER_LIMITS)
WEB_KEYS: Final = ("listen", "allow_remote")
"""`[web]`: where the daemon serves the web board (`listen = "127.0.0.1:8080"`, off when unset)
and whether that address may be reachable from other machines (`anvild.web`)."""
HANDSHAKE_TIMEOUT_LIMIT: Final = 3600
MAX_PROMPT_BYTES_LIMIT: Final = 16 << 20
MCP_SERVER_KEYS: Final = (
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers_env",
    "startup_timeout",
    "tool_timeout",
    "enabled_tools",
    "disabled_tools",
    "sandbox",
    "sandbox_read",
    "roles",
    "read_only",
)
"""`[mcp_servers.NAME]` keys (`anvild.mcp.config` reads the checked table; README, MCP servers)."""
MCP_ROLES: Final = ("developer", "reviewer", "planner", "tester", "conductor")
SUBAGENT_KEYS: Final = ("max_depth", "max_per_turn", "roles")
"""`[subagents]`: how deep `task` children may nest, how many one turn may start, and the roles
whose sessions get the `task` tool (default every role but reviewer)."""
SUBAGENT_LIMITS: Final = {"max_depth": 8, "max_per_turn": 64}
MCP_TIMEOUT_LIMIT: Final = 3600
BUDGET_KEYS: Final = ("daily_usd", "daily_tokens", "roles", "convoys")
LIMIT_KEYS: Final = ("daily_usd", "daily_tokens")
TELEMETRY_KEYS: Final = ("otlp_endpoint", "headers_env", "service_name", "capture_content")
"""`[telemetry]`: where OpenTelemetry traces and metrics go (OTLP over HTTP; none: off), the
environment variable holding the exporter's headers (`k=v,k2=v2`), the service name, and
whether prompt and output text is exported (redacted; default off) (`anvild.telemetry`)."""
"""`[budget]`: daemon-wide daily limits (USD, tokens), `[budget.roles.NAME]` the same per role,
`[budget.convoys]` the same for each convoy (`anvild.budget`); a day is a UTC day."""
"""The largest `[sessions] max_prompt_bytes` (a prompt is held in memory and journaled)."""


def render_key(key: Key) -> str:
    """A key path as TOML writes it: `models."gpt-4.1".model`."""
    return ".".join(part if _BARE_KEY.match(part) else f'"{part}"' for part in key)


class ConfigFileError(ConfigError):
    """A config file that cannot be used as written: says which file, which key, and why."""

    def __init__(self, file: Path | str, key: Key | None, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        where = f"{file}: {render_key(key)}" if key else str(file)
        super().__init__(f"{where}: {problem}")


def _describe(value: object) -> str:
    kinds = {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        list: "array",
        dict: "table",
    }
    kind = kinds.get(type(value), type(value).__name__)
    text = repr(value) if isinstance(value, str | int | float | bool) else ""
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}".strip()


class _Checker:
    def __init__(self, file: Path | str) -> None:
        self.file = file
        self.layer: Layer = {}

    def fail(self, key: Key, expected: str, value: object) -> ConfigFileError:
        return ConfigFileError(self.file, key, f"expected {expected}, got {_describe(value)}")

    def table(self, key: Key, value: object) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, "a table", value)
        return value

    def known(self, key: Key, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
        for name in table:
            if name not in allowed:
                where = f"in [{render_key(key)}]" if key else "at the top level"
                raise ConfigFileError(
                    self.file,
                    (*key, name),
                    f"unknown key; expected one of {', '.join(allowed)} {where}",
                )

    def string(self, key: Key, value: object, *, nonempty: bool = True) -> str:
        if not isinstance(value, str) or (nonempty and not value.strip()):
            raise self.fail(key, "a non-empty string" if nonempty else "a string", value)
        return value

    def name(self, key: Key, value: str) -> str:
        if not NAME.match(value):
            raise ConfigFileError(self.file, key, f"expected {NAME_RULE}, got {value!r}")
        return value

    def positive_int(self, key: Key, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(key, "a positive integer", value)
        return value

    def price(self, key: Key, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self.fail(key, "a number of USD per million tokens (0 or more)", value)
        return float(value)

    def seconds(self, key: Key, value: object, *, zero: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self.fail(key, f"a number of seconds (0 or more; 0 means {zero})", value)
        return float(value)

    def bounded_int(self, key: Key, value: object, limit: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise self.fail(key, f"a whole number from 1 to {limit}", value)
        return value

    def boolean(self, key: Key, value: object) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, "true or false", value)
        return value

    def choice(self, key: Key, value: object, choices: tuple[str, ...]) -> str:
        if not isinstance(value, str) or value not in choices:
            raise self.fail(key, "one of " + ", ".join(repr(c) for c in choices), value)
        return value

    def url(self, key: Key, value: object) -> str:
        text = self.string(key, value)
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.fail(key, "an http:// or https:// URL with a host", value)
        if parts.username or parts.password or parts.query or parts.fragment:
            raise self.fail(key, "a URL without credentials, query or fragment", value)
        return text.rstrip("/")

    def strings(self, key: Key, value: object, pattern: re.Pattern[str] | None = None) -> list[str]:
        what = "an array of environment variable names" if pattern else "an array of strings"
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, what, value)
        if pattern is not None:
            for item in value:
                if not pattern.match(item):
                    raise self.fail(key, what, item)
        return list(value)

    def set(self, key: Key, value: object) -> None:
        self.layer[key] = value


def check_document(doc: Mapping[str, Any], file: Path | str) -> Layer:
    """Validate a parsed config document; the flat layer of its settings."""
    c = _Checker(file)
    c.known((), doc, TOP_KEYS)
    for top, value in doc.items():
        key: Key = (top,)
        if top == "default_model":
            c.set(key, c.string(key, value))
        elif top == "instructions":
            c.set(key, c.string(key, value, nonempty=False))
        elif top == "env_passthrough":
            c.set(key, c.strings(key, value, ENV_NAME))
        elif top == "providers":
            for name, table in c.table(key, value).items():
                _check_provider(c, (top, c.name((top, name), name)), table)
        elif top == "models":
            for alias, table in c.table(key, value).items():
                _check_model(c, (top, c.name((top, alias), alias)), table)
        elif top == "permissions":
            table = c.table(key, value)
            c.known(key, table, PERMISSION_KEYS)
            for name, rules in table.items():
                if name in ("mode", "max_mode"):
                    c.set((top, name), c.choice((top, name), rules, MODES))
                    continue
                if name == "full_access":
                    c.set((top, name), c.boolean((top, name), rules))
                    continue
                c.set((top, name), c.strings((top, name), rules))
                for index, rule in enumerate(rules, 1):
                    try:
                        parse_rule(rule, RuleKind(name))
                    except RuleSyntaxError as exc:
                        raise ConfigFileError(c.file, (top, name), f"rule {index}: {exc}") from exc
        elif top == "beads":
            table = c.table(key, value)
            c.known(key, table, BEADS_KEYS)
            for name, item in table.items():
                path = c.string((top, name), item)
                if name == "remote":
                    c.set((top, name), _check_remote(c, (top, name), path))
                    continue
                if name == "host":
                    c.set((top, name), c.name((top, name), path))
                    continue
                if not Path(path).expanduser().is_absolute():
                    raise c.fail((top, name), "an absolute path (or one starting with ~)", item)
                c.set((top, name), path)
        elif top == "hooks":
            for name, entry in c.table(key, value).items():
                sub = (top, c.name((top, name), name))
                c.set(sub, _check_hook(c, sub, entry))
        elif top == "sessions":
            table = c.table(key, value)
            c.known(key, table, SESSION_KEYS)
            for name, item in table.items():
                sub = (top, name)
                if name == "max_steps":
                    c.set(sub, c.bounded_int(sub, item, MAX_STEPS_LIMIT))
                elif name == "token_budget":
                    c.set(sub, c.positive_int(sub, item))
                elif name == "turn_deadline":
                    c.set(sub, c.seconds(sub, item, zero="no deadline"))
                elif name == "max_prompt_bytes":
                    c.set(sub, c.bounded_int(sub, item, MAX_PROMPT_BYTES_LIMIT))
                else:
                    c.set(sub, c.seconds(sub, item, zero="at once"))
        elif top == "context":
            table = c.table(key, value)
            c.known(key, table, CONTEXT_KEYS)
            for name, item in table.items():
                sub = (top, name)
                if name == "compaction_model":
                    c.set(sub, c.string(sub, item))
                elif name == "keep_tool_results":
                    if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item <= 1000:
                        raise c.fail(sub, "an integer from 0 to 1000", item)
                    c.set(sub, item)
                elif (
                    isinstance(item, int | float) and not isinstance(item, bool) and 0 <= item < 100
                ):
                    c.set(sub, float(item))
                else:
                    raise c.fail(sub, "a percentage of the window, from 0 (off) to below 100", item)
        elif top == "budget":
            _check_budget(c, key, value)
        elif top == "telemetry":
            table = c.table(key, value)
            c.known(key, table, TELEMETRY_KEYS)
            for name, item in table.items():
                sub = (top, name)
                if name == "otlp_endpoint":
                    c.set(sub, c.url(sub, item))
                elif name == "headers_env":
                    text = c.string(sub, item)
                    if not ENV_NAME.match(text):
                        raise c.fail(sub, "an environment variable name", item)
                    c.set(sub, text)
                elif name == "service_name":
                    c.set(sub, c.string(sub, item))
                else:
                    c.set(sub, c.boolean(sub, item))
        elif top == "checkpoints":
            table = c.table(key, value)
            c.known(key, table, CHECKPOINT_KEYS)
            for name, item in table.items():
                sub = (top, name)
                if name == "enabled":
                    c.set(sub, c.boolean(sub, item))
                else:
                    c.set(sub, c.bounded_int(sub, item, MAX_FILE_BYTES_LIMIT))
        elif top == "web":
            table = c.table(key, value)
            c.known(key, table, WEB_KEYS)
            for name, item in table.items():
                sub = (top, name)
                if name == "allow_remote":
                    c.set(sub, c.boolean(sub, item))
                elif isinstance(item, str) and item.strip():
                    c.set(sub, item.strip())
                else:
                    raise c.fail(sub, 'an address HOST:PORT, e.g. "127.0.0.1:8080"', item)
        elif top == "server":
            table = c.table(key, value)
            c.known(key, table, SERVER_KEYS)
            for name, item in table.items():
                sub = (top, name)
                if name in SERVER_LIMITS:
                    c.set(sub, c.bounded_int(sub, item, SERVER_LIMITS[name]))
                elif (
                    isinstance(item, int | float)
                    and not isinstance(item, bool)
                    and (0 < item <= HANDSHAKE_TIMEOUT_LIMIT)
                ):
                    c.set(sub, float(item))
                else:
                    limit = HANDSHAKE_TIMEOUT_LIMIT
                    raise c.fail(sub, f"a number of seconds above 0, at most {limit}", item)
        elif top == "mcp_servers":
            for name, entry in c.table(key, value).items():
                sub = (top, c.name((top, name), name))
                c.set(sub, _check_mcp_server(c, sub, entry))
        elif top == "subagents":
            table = c.table(key, value)
            c.known(key, table, SUBAGENT_KEYS)
            for name, item in table.items():
                sub = (top, name)
                if name == "roles":
                    roles = _strings(c, sub, item)
                    for role in roles:
                        c.choice(sub, role, MCP_ROLES)
                    c.set(sub, roles)
                else:
                    c.set(sub, c.bounded_int(sub, item, SUBAGENT_LIMITS[name]))
    return c.layer


def _percent(item: object) -> bool:
    return isinstance(item, int | float) and not isinstance(item, bool) and 0 <= item < 100


def _strings(c: _Checker, key: Key, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise c.fail(key, "an array of non-empty strings", value)
    return list(value)


def _check_mcp_server(c: _Checker, key: Key, value: object) -> dict[str, Any]:
    """One `[mcp_servers.NAME]` table, checked; kept as one leaf (the whole table is authority).
    A server is either stdio (`command`, with `args`, `env`, `cwd`) or streamable HTTP (`url`,
    with `headers_env`: header name -> the environment variable holding its value)."""
    table = c.table(key, value)
    c.known(key, table, MCP_SERVER_KEYS)
    if ("command" in table) == ("url" in table):
        raise ConfigFileError(
            c.file,
            key,
            "set either command (a server run over stdio) or url (a streamable HTTP server), "
            "not both and not neither",
        )
    stdio_only, http_only = ("args", "env", "cwd", "sandbox", "sandbox_read"), ("headers_env",)
    for name in stdio_only if "url" in table else http_only:
        if name in table:
            kind = "an HTTP server (url)" if "url" in table else "a stdio server (command)"
            raise ConfigFileError(c.file, (*key, name), f"not used by {kind}; remove it")
    out: dict[str, Any] = {}
    for name, item in table.items():
        sub = (*key, name)
        if name == "command":
            if isinstance(item, str):
                out[name] = [c.string(sub, item)]
            else:
                out[name] = _strings(c, sub, item)
                if not out[name]:
                    raise c.fail(sub, "a program (a string, or a non-empty array: argv)", item)
        elif name in ("args", "sandbox_read", "enabled_tools", "disabled_tools"):
            out[name] = _strings(c, sub, item)
        elif name == "roles":
            out[name] = _strings(c, sub, item)
            unknown = [r for r in out[name] if r not in MCP_ROLES]
            if unknown:
                raise ConfigFileError(
                    c.file,
                    sub,
                    f"unknown role {unknown[0]!r}: the roles are {', '.join(MCP_ROLES)}",
                )
        elif name in ("env", "headers_env"):
            pairs = c.table(sub, item)
            for k, v in pairs.items():
                if not isinstance(v, str):
                    raise c.fail((*sub, k), "a string", v)
                if name == "env" and not ENV_NAME.match(k):
                    raise ConfigFileError(c.file, (*sub, k), "not an environment variable name")
                if name == "headers_env" and not ENV_NAME.match(v):
                    raise c.fail((*sub, k), "the name of an environment variable", v)
            out[name] = dict(pairs)
        elif name == "cwd":
            out[name] = c.string(sub, item)
        elif name == "url":
            out[name] = c.url(sub, item)
        elif name in ("startup_timeout", "tool_timeout"):
            if (
                isinstance(item, bool)
                or not isinstance(item, int | float)
                or not 0 < item <= MCP_TIMEOUT_LIMIT
            ):
                raise c.fail(sub, f"a number of seconds above 0, at most {MCP_TIMEOUT_LIMIT}", item)
            out[name] = float(item)
        else:  # sandbox, read_only
            out[name] = c.boolean(sub, item)
    return out


def _check_limits(c: _Checker, key: Key, table: Mapping[str, Any]) -> None:
    """`daily_usd` (USD above 0) and `daily_tokens` (a positive integer) of one budget."""
    for name, item in table.items():
        sub = (*key, name)
        if name == "daily_tokens":
            c.set(sub, c.positive_int(sub, item))
        elif isinstance(item, bool) or not isinstance(item, int | float) or item <= 0:
            raise c.fail(sub, "a number of USD above 0", item)
        else:
            c.set(sub, float(item))


def _check_budget(c: _Checker, key: Key, value: object) -> None:
    table = c.table(key, value)
    c.known(key, table, BUDGET_KEYS)
    _check_limits(c, key, {k: v for k, v in table.items() if k in LIMIT_KEYS})
    if "convoys" in table:
        sub = (*key, "convoys")
        convoys = c.table(sub, table["convoys"])
        c.known(sub, convoys, LIMIT_KEYS)
        _check_limits(c, sub, convoys)
    if "roles" in table:
        sub = (*key, "roles")
        for role, limits in c.table(sub, table["roles"]).items():
            at = (*sub, c.name((*sub, role), role))
            checked = c.table(at, limits)
            c.known(at, checked, LIMIT_KEYS)
            _check_limits(c, at, checked)


def _check_provider(c: _Checker, key: Key, value: object) -> None:
    table = c.table(key, value)
    c.known(key, table, PROVIDER_KEYS)
    for name, item in table.items():
        sub = (*key, name)
        if name == "kind":
            c.set(sub, c.choice(sub, item, KINDS))
        elif name == "base_url":
            c.set(sub, c.url(sub, item))
        elif name == "api_key_env":
            text = c.string(sub, item)
            if not ENV_NAME.match(text):
                raise c.fail(sub, "an environment variable name", item)
            c.set(sub, text)
        else:
            c.set(sub, c.positive_int(sub, item))


def _check_model(c: _Checker, key: Key, value: object) -> None:
    table = c.table(key, value)
    c.known(key, table, MODEL_KEYS)
    for name, item in table.items():
        sub = (*key, name)
        if name == "provider":
            c.set(sub, c.name(sub, c.string(sub, item)))
        elif name == "model":
            c.set(sub, c.string(sub, item))
        elif name in ("context_window", "max_output_tokens"):
            c.set(sub, c.positive_int(sub, item))
        elif name == "pricing":
            pricing = c.table(sub, item)
            c.known(sub, pricing, PRICING_KEYS)
            for kind, price in pricing.items():
                c.set((*sub, kind), c.price((*sub, kind), price))
        else:
            capabilities = c.table(sub, item)
            c.known(sub, capabilities, CAPABILITY_KEYS)
            for cap, setting in capabilities.items():
                at = (*sub, cap)
                if cap == "schema_dialect":
                    c.set(at, c.choice(at, setting, tuple(d.value for d in SchemaDialect)))
                elif cap == "replay":
                    c.set(at, c.choice(at, setting, tuple(r.value for r in Replay)))
                elif cap == "max_tokens_field":
                    c.set(at, c.string(at, setting))
                else:
                    c.set(at, c.boolean(at, setting))


def _check_remote(c: _Checker, key: Key, url: str) -> str:
    """A git URL for the shared bead board: `scheme://...` of a known scheme, scp-like
    `[user@]host:path`, or an absolute path (`~` expanded). Never an option, never blanks."""
    expected = (
        "a git URL: an absolute path (or one starting with ~), ssh://host/path.git, "
        "[user@]host:path.git, or git://, http(s)://, file:// URL"
    )
    if url.startswith("-") or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise c.fail(key, expected, url)
    scheme, sep, rest = url.partition("://")
    if sep:
        if scheme.lower() not in REMOTE_SCHEMES or not rest:
            raise c.fail(key, expected, url)
        return url
    if re.match(r"^[^/:]+:", url) and "::" not in url:  # `transport::address` runs a helper
        return url
    path = Path(url).expanduser()
    if not path.is_absolute():
        raise c.fail(key, expected, url)
    return str(path)


def _check_hook(c: _Checker, key: Key, value: object) -> dict[str, Any]:
    """One `[hooks.NAME]` table, checked and kept as one leaf (`anvild.hooks` reads it): `event`
    and `command` (a string run with `sh -c`, or an argv array) are required."""
    table = c.table(key, value)
    c.known(key, table, HOOK_KEYS)
    for required in ("event", "command"):
        if required not in table:
            raise ConfigFileError(
                c.file,
                (*key, required),
                f"missing: a hook needs event (one of {', '.join(HOOK_EVENTS)}) and command",
            )
    event = c.choice((*key, "event"), table["event"], HOOK_EVENTS)
    hook: dict[str, Any] = {"event": event}
    command = table["command"]
    if isinstance(command, list):
        argv = c.strings((*key, "command"), command)
        if not argv or not argv[0].strip():
            raise c.fail((*key, "command"), "a command string or a non-empty argv array", command)
        hook["command"] = argv
    else:
        hook["command"] = c.string((*key, "command"), command)
    if "matcher" in table:
        at = (*key, "matcher")
        if event not in MATCHED_EVENTS:
            raise ConfigFileError(
                c.file,
                at,
                f"{event} hooks take no matcher; only {', '.join(MATCHED_EVENTS)} hooks do",
            )
        pattern = c.string(at, table["matcher"], nonempty=False)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigFileError(
                c.file,
                at,
                f"not a regular expression ({exc}): write a tool name (bash), an alternation "
                '(bash|write_file), a pattern (mcp__.*) or "*" for every tool',
            ) from exc
        hook["matcher"] = pattern
    if "timeout" in table:
        timeout = table["timeout"]
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= HOOK_TIMEOUT_LIMIT
        ):
            limit = HOOK_TIMEOUT_LIMIT
            raise c.fail((*key, "timeout"), f"seconds above 0, at most {limit}", timeout)
        hook["timeout"] = float(timeout)
    if "max_blocks" in table:
        at = (*key, "max_blocks")
        if event != "Stop":
            raise ConfigFileError(
                c.file, at, "only a Stop hook takes max_blocks (how often it may continue a turn)"
            )
        hook["max_blocks"] = c.bounded_int(at, table["max_blocks"], MAX_BLOCKS_LIMIT)
    return hook


def parse_bytes(data: bytes, file: Path | str) -> Layer:
    """Decode and validate one config file's bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(file, None, f"not UTF-8 text ({exc})") from exc
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(file, None, f"not valid TOML: {exc}") from exc
    return check_document(doc, file)
