"""The config file format: validation of one parsed TOML document into flat, typed settings.

Each file is checked on its own, before merging, so every error names the file, the key and what
was expected (`...config.toml: models.tiny.context_window: expected a positive integer, got
string "8k"`). A valid document becomes a *layer*: key paths (tuples, so an alias may contain
dots) to leaf values, which merging, provenance and trust work on. `hooks.<name>` and
`mcp_servers.<name>` tables are checked here and each kept as one leaf (one authority).
Every key of the format and how it is checked is in `DOCUMENT`, a table walked by `_check`;
who may set each key: `anvild.config.trust`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

import attrs

from anvild.agent.permissions.rules import RuleKind, RuleSyntaxError, parse_rule
from anvild.llm.capabilities import Replay, SchemaDialect
from anvild.llm.errors import ConfigError
from anvild.llm.registry import KINDS

Key: TypeAlias = tuple[str, ...]
Layer: TypeAlias = dict[Key, Any]
Check: TypeAlias = "Callable[[_Checker, Key, Any], object]"
"""A leaf's check: the value to keep, or a `ConfigFileError`."""
Rule: TypeAlias = "Check | Mapping[str, Rule] | Each"
"""How a value is checked: a leaf check, a table of known keys, or a table of named entries."""
Spec: TypeAlias = Mapping[str, Rule]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME_RULE = "a name of letters, digits, '.', '_' or '-', starting with a letter or digit"

REMOTE_SCHEMES: Final = ("ssh", "git", "http", "https", "file")
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
MAX_STEPS_LIMIT: Final = 1000
MAX_FILE_BYTES_LIMIT: Final = 1 << 30
SERVER_LIMITS: Final = {"max_connections": 100_000, "max_fids": 1_000_000, "max_outstanding": 65535}
"""`[server]` integer keys and their largest values (65535: every tag but NOTAG)."""
HANDSHAKE_TIMEOUT_LIMIT: Final = 3600
MAX_PROMPT_BYTES_LIMIT: Final = 16 << 20
"""The largest `[sessions] max_prompt_bytes` (a prompt is held in memory and journaled)."""
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
MCP_TIMEOUT_LIMIT: Final = 3600


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


@attrs.frozen
class Each:
    """`[key.NAME]` tables: every NAME is checked as a name, its entry by `rule`."""

    rule: Rule


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

    def number(
        self, key: Key, value: object, expected: str, within: Callable[[float], bool]
    ) -> float:
        """An integer or float (not a boolean) for which `within` holds, as a float."""
        if isinstance(value, bool) or not isinstance(value, int | float) or not within(value):
            raise self.fail(key, expected, value)
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
            expected = f"a number of seconds above 0, at most {MCP_TIMEOUT_LIMIT}"
            out[name] = c.number(sub, item, expected, lambda n: 0 < n <= MCP_TIMEOUT_LIMIT)
        else:  # sandbox, read_only
            out[name] = c.boolean(sub, item)
    return out


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


def _check_remote_daemon(c: _Checker, key: Key, value: object) -> dict[str, str]:
    """One `[remotes.NAME]` table, kept as one leaf: `address` (required; `tcp!HOST!PORT` or
    `unix!/path`) and `token_file` (the daemon's agent.token copied here; absolute or ~)."""
    table = c.table(key, value)
    c.known(key, table, ("address", "token_file"))
    if "address" not in table:
        raise ConfigFileError(c.file, (*key, "address"), "missing: write tcp!HOST!PORT")
    address = c.string((*key, "address"), table["address"])
    parts = address.split("!")
    tcp = len(parts) == 3 and parts[0] == "tcp" and parts[1] and parts[2].isdigit()
    unix = len(parts) == 2 and parts[0] == "unix" and parts[1].startswith("/")
    if not (tcp or unix):
        raise c.fail((*key, "address"), "a dial string tcp!HOST!PORT or unix!/path", address)
    remote = {"address": address}
    if "token_file" in table:
        remote["token_file"] = _bead_repo(c, (*key, "token_file"), table["token_file"])
    elif tcp:
        raise ConfigFileError(
            c.file,
            (*key, "token_file"),
            "missing: a TCP daemon needs its token (copy its NAMESPACE/agent.token here)",
        )
    return remote


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
        hook["timeout"] = c.number(
            (*key, "timeout"),
            table["timeout"],
            f"seconds above 0, at most {HOOK_TIMEOUT_LIMIT}",
            lambda n: 0 < n <= HOOK_TIMEOUT_LIMIT,
        )
    if "max_blocks" in table:
        at = (*key, "max_blocks")
        if event != "Stop":
            raise ConfigFileError(
                c.file, at, "only a Stop hook takes max_blocks (how often it may continue a turn)"
            )
        hook["max_blocks"] = c.bounded_int(at, table["max_blocks"], MAX_BLOCKS_LIMIT)
    return hook


def _env_var(c: _Checker, key: Key, value: object) -> str:
    text = c.string(key, value)
    if not ENV_NAME.match(text):
        raise c.fail(key, "an environment variable name", value)
    return text


def _strings(c: _Checker, key: Key, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise c.fail(key, "an array of non-empty strings", value)
    return list(value)


def _rules(c: _Checker, key: Key, value: object) -> list[str]:
    """`[permissions] allow/ask/deny`: an array of rules of the kind the key names."""
    rules = c.strings(key, value)
    for index, rule in enumerate(rules, 1):
        try:
            parse_rule(rule, RuleKind(key[-1]))
        except RuleSyntaxError as exc:
            raise ConfigFileError(c.file, key, f"rule {index}: {exc}") from exc
    return rules


def _bead_repo(c: _Checker, key: Key, value: object) -> str:
    path = c.string(key, value)
    if not Path(path).expanduser().is_absolute():
        raise c.fail(key, "an absolute path (or one starting with ~)", value)
    return path


def _roles(c: _Checker, key: Key, value: object) -> list[str]:
    roles = _strings(c, key, value)
    for role in roles:
        c.choice(key, role, MCP_ROLES)
    return roles


def _address(c: _Checker, key: Key, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise c.fail(key, 'an address HOST:PORT, e.g. "127.0.0.1:8080"', value)
    return value.strip()


def _keep_count(c: _Checker, key: Key, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1000:
        raise c.fail(key, "an integer from 0 to 1000", value)
    return value


def _upto(limit: int) -> Check:
    """A whole number from 1 to `limit`."""
    return lambda c, key, value: c.bounded_int(key, value, limit)


def _seconds(*, zero: str) -> Check:
    return _number(f"a number of seconds (0 or more; 0 means {zero})", lambda n: n >= 0)


def _choice(choices: tuple[str, ...]) -> Check:
    return lambda c, key, value: c.choice(key, value, choices)


def _number(expected: str, within: Callable[[float], bool]) -> Check:
    return lambda c, key, value: c.number(key, value, expected, within)


_PERCENT: Final = _number(
    "a percentage of the window, from 0 (off) to below 100", lambda n: 0 <= n < 100
)
_PRICE: Final = _number("a number of USD per million tokens (0 or more)", lambda n: n >= 0)
_USD: Final = _number("a number of USD above 0", lambda n: n > 0)
_LIMITS: Final[Spec] = {"daily_usd": _USD, "daily_tokens": _Checker.positive_int}
"""`daily_usd` (USD above 0) and `daily_tokens` (a positive integer) of one budget."""

DOCUMENT: Final[Spec] = {
    "default_model": _Checker.string,
    "instructions": lambda c, key, value: c.string(key, value, nonempty=False),
    "env_passthrough": lambda c, key, value: c.strings(key, value, ENV_NAME),
    "providers": Each(
        {
            "kind": _choice(KINDS),
            "base_url": _Checker.url,
            "api_key_env": _env_var,
            "context_window": _Checker.positive_int,
            "max_output_tokens": _Checker.positive_int,
        }
    ),
    "models": Each(
        {
            "provider": lambda c, key, value: c.name(key, c.string(key, value)),
            "model": _Checker.string,
            "context_window": _Checker.positive_int,
            "max_output_tokens": _Checker.positive_int,
            "pricing": dict.fromkeys(("input", "output", "cache_read", "cache_write"), _PRICE),
            "capabilities": {
                "images": _Checker.boolean,
                "schema_dialect": _choice(tuple(d.value for d in SchemaDialect)),
                "signed_reasoning": _Checker.boolean,
                "max_tokens_field": _Checker.string,
                "temperature": _Checker.boolean,
                "replay": _choice(tuple(r.value for r in Replay)),
            },
        }
    ),
    "permissions": {
        "allow": _rules,
        "ask": _rules,
        "deny": _rules,
        "mode": _choice(MODES),
        "max_mode": _choice(MODES),
        "full_access": _Checker.boolean,
    },
    "sessions": {
        "max_steps": _upto(MAX_STEPS_LIMIT),
        "token_budget": _Checker.positive_int,
        "turn_deadline": _seconds(zero="no deadline"),
        "reap_delay": _seconds(zero="at once"),
        "max_prompt_bytes": _upto(MAX_PROMPT_BYTES_LIMIT),
        "idle_unload": _seconds(zero="never"),
    },
    # `auto_compact` and `clear_at` are percentages of the window (0: off), `compaction_model`
    # a model name, `keep_tool_results` how many recent results are never cleared.
    "context": {
        "auto_compact": _PERCENT,
        "clear_at": _PERCENT,
        "compaction_model": _Checker.string,
        "keep_tool_results": _keep_count,
    },
    # Whether turns are checkpointed (`anvild.checkpoints`), and the size above which a file is
    # left out of them (recorded as skipped).
    "checkpoints": {"enabled": _Checker.boolean, "max_file_bytes": _upto(MAX_FILE_BYTES_LIMIT)},
    "hooks": Each(_check_hook),
    "mcp_servers": Each(_check_mcp_server),
    # `repo`: the bead store's git repository (default <data dir>/beads); `remote`: a git remote
    # shared by several daemons (a path, ssh://host/path, host:path); `host`: this daemon's name
    # on the shared board (default: the host name).
    "beads": {
        "repo": _bead_repo,
        "remote": lambda c, key, value: _check_remote(c, key, c.string(key, value)),
        "host": lambda c, key, value: c.name(key, c.string(key, value)),
    },
    "server": {
        "handshake_timeout": _number(
            f"a number of seconds above 0, at most {HANDSHAKE_TIMEOUT_LIMIT}",
            lambda n: 0 < n <= HANDSHAKE_TIMEOUT_LIMIT,
        ),
        **{name: _upto(limit) for name, limit in SERVER_LIMITS.items()},
    },
    # How deep `task` children may nest, how many one turn may start, and the roles whose
    # sessions get the `task` tool (default every role but reviewer).
    "subagents": {"max_depth": _upto(8), "max_per_turn": _upto(64), "roles": _roles},
    # Daemon-wide daily limits (USD, tokens), `[budget.roles.NAME]` the same per role,
    # `[budget.convoys]` the same for each convoy (`anvild.budget`); a day is a UTC day.
    "budget": {**_LIMITS, "roles": Each(_LIMITS), "convoys": _LIMITS},
    # Where the daemon serves the web board (`listen = "127.0.0.1:8080"`, off when unset) and
    # whether that address may be reachable from other machines (`anvild.web`).
    "web": {"listen": _address, "allow_remote": _Checker.boolean},
    # Where OpenTelemetry traces and metrics go (OTLP over HTTP; none: off), the environment
    # variable holding the exporter's headers (`k=v,k2=v2`), the service name, and whether
    # prompt and output text is exported (redacted; default off) (`anvild.telemetry`).
    # Other daemons a conductor session may start sessions on (`start_session` `host`), each
    # by name: its dial address and the file holding its token (`anvild.coord.remotes`).
    "remotes": Each(_check_remote_daemon),
    "telemetry": {
        "otlp_endpoint": _Checker.url,
        "headers_env": _env_var,
        "service_name": _Checker.string,
        "capture_content": _Checker.boolean,
    },
}
"""Every key of the format and how its value is checked; who may set it: `anvild.config.trust`."""


def _check(c: _Checker, key: Key, value: object, rule: Rule) -> None:
    """Check `value` at `key` by `rule`; each leaf goes into the layer."""
    if isinstance(rule, Each):
        for name, item in c.table(key, value).items():
            _check(c, (*key, c.name((*key, name), name)), item, rule.rule)
    elif isinstance(rule, Mapping):
        _check_table(c, key, c.table(key, value), rule)
    else:
        c.set(key, rule(c, key, value))


def _check_table(c: _Checker, key: Key, table: Mapping[str, Any], spec: Spec) -> None:
    c.known(key, table, tuple(spec))
    for name, item in table.items():
        _check(c, (*key, name), item, spec[name])


def check_document(doc: Mapping[str, Any], file: Path | str) -> Layer:
    """Validate a parsed config document; the flat layer of its settings."""
    c = _Checker(file)
    _check_table(c, (), doc, DOCUMENT)
    return c.layer


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
