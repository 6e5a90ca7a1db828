"""Loading: built-in defaults, the user config and the project config, merged with provenance.

    builtin   the providers anvil knows (`anthropic`, `openai`, `gemini`, `ollama`, ...)
    user      platformdirs.user_config_dir("anvil")/config.toml        trusted
    project   .anvil/config.toml, the nearest one from the cwd up to the git root

Later layers win key by key, except `instructions` (concatenated, user first) and
`permissions.*` and `env_passthrough` (unions: a project can add a deny rule, never remove the
user's). A project key with authority (`trust.authority_of`) is dropped with a warning unless
that file's digest is granted. Every key records its `Source` (`anvilctl trust show`). The
credential binding comes from trusted layers only. The daemon and `anvilctl -p` load with
`project=False`; each session merges its cwd's project file (`merge_project`).
"""

from __future__ import annotations

import enum
import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import platformdirs
import structlog

from anvild.config.schema import (
    MODES,
    ConfigFileError,
    Key,
    Layer,
    check_document,
    parse_bytes,
    render_key,
)
from anvild.config.trust import TrustStore, authority_of, digest
from anvild.llm.http import Timeouts
from anvild.llm.kinds import KIND_TABLE
from anvild.llm.registry import (
    Kind,
    Limits,
    ModelSpec,
    Pricing,
    ProviderFactory,
    ProviderSpec,
    Registry,
    adapter_factory,
    origin_of,
)
from anvild.llm.retry import RetryPolicy
from anvild.sandbox.secrets import Redactor

log = structlog.get_logger(__name__)

APP: Final = "anvil"
PROJECT_DIR: Final = ".anvil"
CONFIG_FILE: Final = "config.toml"


def _hosted(kind: Kind, context_window: int) -> dict[str, Any]:
    """A built-in provider for the hosted service of `kind` (the provider kinds table)."""
    row = KIND_TABLE[kind]
    return {
        "kind": kind,
        "base_url": row.base_url,
        "api_key_env": row.api_key_env,
        "context_window": context_window,
        "max_output_tokens": 4096,
    }


# Conservative limits: the smallest context and output the models behind each provider are
# known to accept, so `provider:model` without an alias never overflows a window.
BUILTIN: Final[Mapping[str, Any]] = {
    "providers": {
        "anthropic": _hosted("anthropic", 200_000),
        "openai": _hosted("openai-responses", 128_000),
        "openai-chat": _hosted("openai-chat", 128_000),
        "gemini": _hosted("gemini", 128_000),
        "ollama": {
            "kind": "openai-chat",
            "base_url": "http://127.0.0.1:11434/v1",
            "context_window": 4096,
            "max_output_tokens": 1024,
        },
        "llamacpp": {
            "kind": "openai-chat",
            "base_url": "http://127.0.0.1:8080/v1",
            "context_window": 4096,
            "max_output_tokens": 1024,
        },
    }
}
FALLBACK_LIMITS: Final = Limits(context_window=8192, max_output_tokens=2048)


class Trust(enum.StrEnum):
    BUILTIN = "builtin"
    USER = "user"
    PROJECT_GRANTED = "project, granted"
    PROJECT = "project, untrusted"

    @property
    def trusted(self) -> bool:
        return self is not Trust.PROJECT


@attrs.frozen
class Source:
    file: Path | None  # None for the built-in defaults
    trust: Trust

    def __str__(self) -> str:
        return "built-in default" if self.file is None else f"{self.file} ({self.trust})"


@attrs.frozen
class ConfigWarning:
    file: Path
    key: str
    category: str
    message: str

    def __str__(self) -> str:
        return self.message


@attrs.frozen
class Instruction:
    text: str
    source: Source


@attrs.frozen
class Permissions:
    """`[permissions]`: the rules; `mode`, the permission mode of a session that asks for none;
    `max_mode`, the widest mode a session may ask for (`new permission=`, `anvilctl -p
    --permission-mode`); `full_access`, whether `sandbox=full-access` (no sandbox) is granted.
    Only the user config may set `full_access` (a project file's is ignored, granted or not)."""

    allow: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    mode: str = "default"
    max_mode: str = "accept-edits"
    full_access: bool = False


@attrs.frozen
class CheckpointLimits:
    """`[checkpoints]`: whether each turn's workspace changes are checkpointed (in the data dir:
    `anvild.checkpoints`), and the size in bytes above which a file is skipped (not undoable)."""

    enabled: bool = True
    max_file_bytes: int = 1 << 20


@attrs.frozen
class SessionLimits:
    """`[sessions]`: defaults for every session. `max_steps` per turn; `token_budget` (tokens
    per turn, None: none); `turn_deadline` in seconds (None: none; `0` in the file); `reap_delay`,
    how long an ephemeral session stays listed after its turn; `idle_unload`, how long a
    session at rest stays in memory unused (0: for good); `max_prompt_bytes`, the largest
    prompt (or `context`) a write to a session's file may hold."""

    max_steps: int = 50
    token_budget: int | None = None
    turn_deadline: float | None = 3600.0
    reap_delay: float = 60.0
    max_prompt_bytes: int = 1 << 20
    idle_unload: float = 600.0


@attrs.frozen
class DailyLimit:
    """One budget's limits per UTC day: USD and tokens (None: no limit of that kind)."""

    usd: float | None = None
    tokens: int | None = None

    @property
    def limited(self) -> bool:
        return self.usd is not None or self.tokens is not None


@attrs.frozen
class BudgetLimits:
    """`[budget]`: the daemon-wide daily limit, each role's (`[budget.roles.NAME]`) and each
    convoy's (`[budget.convoys]`, the same for every convoy). Enforced by `anvild.budget`."""

    daemon: DailyLimit = DailyLimit()
    roles: Mapping[str, DailyLimit] = attrs.field(factory=dict)
    convoy: DailyLimit = DailyLimit()

    @property
    def any(self) -> bool:
        return (
            self.daemon.limited
            or self.convoy.limited
            or any(r.limited for r in self.roles.values())
        )


def _daily(merged: Mapping[Key, Any], *prefix: str) -> DailyLimit:
    return DailyLimit(
        usd=merged.get((*prefix, "daily_usd")), tokens=merged.get((*prefix, "daily_tokens"))
    )


def _budget(merged: Mapping[Key, Any]) -> BudgetLimits:
    roles = {k[2] for k in merged if k[:2] == ("budget", "roles")}
    return BudgetLimits(
        daemon=_daily(merged, "budget"),
        roles={role: _daily(merged, "budget", "roles", role) for role in sorted(roles)},
        convoy=_daily(merged, "budget", "convoys"),
    )


@attrs.frozen
class TelemetrySettings:
    """`[telemetry]`: OTLP/HTTP traces and metrics to `otlp_endpoint` (None: off), with the
    headers in the environment variable `headers_env` (`k=v,k2=v2`), as `service_name`;
    prompt and output text only with `capture_content` (`anvild.telemetry`)."""

    otlp_endpoint: str | None = None
    headers_env: str = "OTEL_EXPORTER_OTLP_HEADERS"
    service_name: str = "anvild"
    capture_content: bool = False


@attrs.frozen
class SubagentLimits:
    """`[subagents]`: the deepest a `task` child may be (a top-level session is depth 0), how
    many children one turn may start, and the roles whose sessions get the `task` tool."""

    max_depth: int = 2
    max_per_turn: int = 8
    roles: tuple[str, ...] = ("developer", "planner", "tester", "conductor")


@attrs.frozen
class ContextLimits:
    """`[context]`: the shares of a session's window (percent; 0: off) at which old tool results
    are cleared from requests (`clear_at`) and the history is compacted (`auto_compact`), the
    model that writes compaction summaries (None: the session's), and how many recent tool
    results are never cleared."""

    auto_compact: float = 85.0
    clear_at: float = 60.0
    compaction_model: str | None = None
    keep_tool_results: int = 3


@attrs.frozen
class ServerLimits:
    """`[server]`: the 9P server's limits (`anvild.ninep.server.Server`): seconds a connection
    has to finish Tversion (and, over TCP, a Tattach with the token); connections at once; fids
    and outstanding requests per connection. The daemon reads them from the user config only."""

    handshake_timeout: float = 10.0
    max_connections: int = 1024
    max_fids: int = 4096
    max_outstanding: int = 256


@attrs.frozen
class ProjectFile:
    """The project config file as it was read: its bytes' digest and whether it is granted."""

    path: Path
    sha256: str
    granted: bool
    # What was set in it (all keys, authority ones included, granted or not).
    settings: Mapping[Key, Any]

    @property
    def authority_keys(self) -> list[tuple[Key, str]]:
        return [(k, c) for k in self.settings if (c := authority_of(k)) is not None]


@attrs.frozen
class Config:
    default_model: str | None
    instructions: tuple[Instruction, ...]
    providers: Mapping[str, ProviderSpec]
    models: Mapping[str, ModelSpec]
    env_passthrough: tuple[str, ...]
    permissions: Permissions
    hooks: Mapping[str, Any]
    mcp_servers: Mapping[str, Any]
    sources: Mapping[Key, Source]  # every merged leaf key -> where its value came from
    warnings: tuple[ConfigWarning, ...]
    user_file: Path
    project: ProjectFile | None
    beads_repo: Path | None = None  # `[beads] repo`; None: <data dir>/beads
    beads_remote: str | None = None  # `[beads] remote`: a git URL shared by daemons
    beads_host: str | None = None  # `[beads] host`; None: the host name
    sessions: SessionLimits = SessionLimits()  # `[sessions]`
    context: ContextLimits = ContextLimits()  # `[context]`
    checkpoints: CheckpointLimits = CheckpointLimits()  # `[checkpoints]`
    server: ServerLimits = ServerLimits()  # `[server]`
    subagents: SubagentLimits = SubagentLimits()  # `[subagents]`
    budget: BudgetLimits = BudgetLimits()  # `[budget]`
    telemetry: TelemetrySettings = TelemetrySettings()  # `[telemetry]`
    # Every layer that was merged, lowest first (the project's kept keys only), and the data dir
    # whose trust grants were consulted: `merge_project` re-merges a project onto these.
    layers: tuple[tuple[Layer, Source], ...] = ()
    trust_dir: Path | None = None

    def redactor(self, env: Mapping[str, str]) -> Redactor:
        """What logs must never show: `env`'s secrets (`env_passthrough` ones too) and the
        values of the providers' key variables."""
        return Redactor.from_environ(
            env,
            passthrough=self.env_passthrough,
            extra_secret_names=[p.api_key_env for p in self.providers.values() if p.api_key_env],
        )

    def source_of(self, key: str) -> Source | None:
        """Provenance by rendered key, e.g. `providers.local.base_url`."""
        for candidate, source in self.sources.items():
            if render_key(candidate) == key:
                return source
        return None

    def registry(
        self,
        client: httpx.AsyncClient,
        *,
        env: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        timeouts: Timeouts | None = None,
        factory: ProviderFactory = adapter_factory,
    ) -> Registry:
        return Registry(
            self.providers,
            self.models,
            client=client,
            default_model=self.default_model,
            env=env,
            retry=retry,
            timeouts=timeouts,
            factory=factory,
        )


def user_config_file() -> Path:
    return platformdirs.user_config_path(APP) / CONFIG_FILE


def user_data_dir() -> Path:
    return platformdirs.user_data_path(APP)


def find_project_config(start: Path) -> Path | None:
    """The nearest `.anvil/config.toml` from `start` up to the git root that contains it.

    Outside a git repository only `start` itself is looked at: walking up to `/` could pick up
    a config from a shared directory (`/tmp/.anvil`) that nobody in this project wrote.
    """
    # String paths: every `new` looks (twice), and pathlib's objects were most of the cost.
    here = os.path.realpath(start)
    chain = [here]
    while (parent := os.path.dirname(chain[-1])) != chain[-1]:
        chain.append(parent)
    root = next((d for d in chain if stat_mode(os.path.join(d, ".git")) is not None), None)
    search = chain[: chain.index(root) + 1] if root is not None else [here]
    for directory in search:
        candidate = os.path.join(directory, PROJECT_DIR, CONFIG_FILE)
        mode = stat_mode(candidate)
        if mode is not None and stat.S_ISREG(mode):
            return Path(candidate)
    return None


def stat_mode(path: str) -> int | None:
    """The mode of `path` (following links), None where `Path.exists` is False: the errors it
    ignores count as absent, any other (a permission denied) is raised, as `Path` does."""
    try:
        return os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise
    except ValueError:  # an embedded NUL byte
        return None


_ABSENT: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigFileError(path, None, f"cannot be read: {exc.strerror or exc}") from exc


# Lists where a later layer adds to earlier ones instead of replacing them.
_UNION_KEYS: Final = {
    ("env_passthrough",),
    ("permissions", "allow"),
    ("permissions", "ask"),
    ("permissions", "deny"),
}


def load(
    cwd: Path | None = None,
    *,
    user_file: Path | None = None,
    data_dir: Path | None = None,
    project_file: Path | None = None,
    project: bool = True,
) -> Config:
    """Load and merge the configuration that applies in `cwd`.

    `user_file` and `data_dir` default to the platformdirs locations (tests pass their own, or
    set XDG_CONFIG_HOME / XDG_DATA_HOME); `project_file` defaults to the one found from `cwd`.
    `project=False` loads the built-in and user layers only: the daemon's own settings at
    startup, which no directory it happens to run in may change (a session's cwd brings its
    project config: `merge_project`).
    """
    user_path = user_file if user_file is not None else user_config_file()
    trust_dir = data_dir if data_dir is not None else user_data_dir()
    if project_file is None and project:
        project_file = find_project_config(cwd if cwd is not None else Path.cwd())

    layers: list[tuple[Layer, Source]] = [
        (check_document(BUILTIN, "built-in defaults"), Source(None, Trust.BUILTIN))
    ]
    user_bytes = _read(user_path)
    if user_bytes is not None:
        layers.append((parse_bytes(user_bytes, user_path), Source(user_path, Trust.USER)))
    found: ProjectFile | None = None
    warnings: tuple[ConfigWarning, ...] = ()
    if project_file is not None and project:
        found, warnings = _project_layer(project_file, TrustStore(trust_dir), layers)
    return _build(layers, user_path, found, warnings, trust_dir)


def merge_project(base: Config, project_file: Path | None) -> Config:
    """`base` (loaded with `project=False`) with `project_file` merged on top by the rules of
    `load`, the grants read from `base.trust_dir` now. Raises `ConfigFileError` for a bad
    file; None (or a file that vanished) gives `base` again."""
    layers = [(layer, source) for layer, source in base.layers if source.trust.trusted]
    found: ProjectFile | None = None
    warnings: tuple[ConfigWarning, ...] = ()
    if project_file is not None:
        store = TrustStore(base.trust_dir if base.trust_dir is not None else user_data_dir())
        found, warnings = _project_layer(project_file, store, layers)
    if found is None and base.project is None:
        return base
    return _build(layers, base.user_file, found, warnings, base.trust_dir)


def _project_layer(
    project_file: Path, store: TrustStore, layers: list[tuple[Layer, Source]]
) -> tuple[ProjectFile | None, tuple[ConfigWarning, ...]]:
    """Read `project_file` and append what of it may apply to `layers`."""
    project_bytes = _read(project_file)
    if project_bytes is None:
        return None, ()
    warnings: list[ConfigWarning] = []
    path = project_file.resolve()
    settings = parse_bytes(project_bytes, path)
    sha = digest(project_bytes)
    granted = store.is_granted(path, sha)
    found = ProjectFile(path, sha, granted, settings)
    stale = not granted and store.find(path) is not None
    kept: Layer = {}
    for key, value in settings.items():
        category = authority_of(key)
        if key == ("permissions", "full_access"):
            warnings.append(_user_only(path, key))
            continue
        if category is None or granted:
            kept[key] = value
            continue
        warning = _ignored(path, key, category, stale)
        warnings.append(warning)
        log.warning("config.ignored", file=str(path), key=warning.key, category=category)
    if not granted:
        warnings += _orphans(path, settings, kept, layers)
    trust = Trust.PROJECT_GRANTED if granted else Trust.PROJECT
    layers.append((kept, Source(path, trust)))
    return found, tuple(warnings)


def _orphans(
    path: Path, settings: Layer, kept: Layer, layers: list[tuple[Layer, Source]]
) -> list[ConfigWarning]:
    """Drop from `kept` the models whose provider exists only in the project's ignored keys,
    and a `default_model` naming one of them: data that cannot apply without the authority it
    depends on (each dropped key gets a warning), instead of an unknown-provider error."""
    known = {k[1] for layer, _ in layers for k in layer if k[0] == "providers"}
    ignored = {k[1] for k in settings if k[0] == "providers"} - known
    dropped = {
        key[1]: value
        for key, value in kept.items()
        if key[0] == "models" and key[2:] == ("provider",) and value in ignored
    }
    out: list[ConfigWarning] = []
    for key in [k for k in kept if k[0] == "models" and k[1] in dropped]:
        del kept[key]
        out.append(_depends(path, key, f"its provider {dropped[key[1]]!r} is ignored"))
    default = kept.get(("default_model",))
    if default is not None and default in dropped:
        del kept[("default_model",)]
        out.append(_depends(path, ("default_model",), f"model {default!r} is ignored"))
    return out


def _depends(path: Path, key: Key, why: str) -> ConfigWarning:
    rendered = render_key(key)
    where = path.parent.parent
    return ConfigWarning(
        file=path,
        key=rendered,
        category="depends on authority",
        message=(
            f"{path}: ignored {rendered}: {why} (not granted); review it with "
            f"`anvilctl trust show {where}` and allow it with `anvilctl trust grant {where}`"
        ),
    )


def _ignored(path: Path, key: Key, category: str, stale: bool) -> ConfigWarning:
    where = path.parent.parent
    rendered = render_key(key)
    reason = (
        "the file changed since it was trusted, which voided its trust grant"
        if stale
        else "a project config may not make this change without a trust grant"
    )
    return ConfigWarning(
        file=path,
        key=rendered,
        category=category,
        message=(
            f"{path}: ignored {rendered} ({category}): {reason}; review it with "
            f"`anvilctl trust show {where}` and allow it with `anvilctl trust grant {where}`"
        ),
    )


def _user_only(path: Path, key: Key) -> ConfigWarning:
    rendered = render_key(key)
    message = (
        f"{path}: ignored {rendered}: only the user config ({user_config_file()}) or the "
        "daemon's command line can grant running commands without a sandbox"
    )
    return ConfigWarning(file=path, key=rendered, category="permission", message=message)


def _build(
    layers: list[tuple[Layer, Source]],
    user_file: Path,
    project: ProjectFile | None,
    warnings: tuple[ConfigWarning, ...],
    trust_dir: Path | None = None,
) -> Config:
    merged: dict[Key, Any] = {}
    sources: dict[Key, Source] = {}
    instructions: list[Instruction] = []
    for layer, source in layers:
        for key, value in layer.items():
            if key == ("instructions",):
                if value.strip():
                    instructions.append(Instruction(value, source))
                sources[key] = source
                continue
            if key in _UNION_KEYS and key in merged:
                merged[key] = list(dict.fromkeys([*merged[key], *value]))
            else:
                merged[key] = value
            sources[key] = source

    providers = _providers(merged, sources, layers)
    models = _models(merged, sources, providers)
    default_model = merged.get(("default_model",))
    modes = list(MODES)  # narrowest first
    mode = merged.get(("permissions", "mode"), Permissions().mode)
    max_mode = merged.get(("permissions", "max_mode"), Permissions().max_mode)
    if modes.index(mode) > modes.index(max_mode):
        key = (
            ("permissions", "mode")
            if ("permissions", "mode") in sources
            else ("permissions", "max_mode")
        )
        raise ConfigFileError(
            _file_of(sources, key),
            key,
            f"permissions.mode = {mode!r} is wider than permissions.max_mode = {max_mode!r}; "
            f"the modes from narrowest to widest are {', '.join(modes)}",
        )
    deadline = merged.get(("sessions", "turn_deadline"), SessionLimits().turn_deadline)
    budget = merged.get(("sessions", "token_budget"))
    return Config(
        default_model=default_model,
        instructions=tuple(instructions),
        providers=providers,
        models=models,
        env_passthrough=tuple(merged.get(("env_passthrough",), ())),
        permissions=Permissions(
            allow=tuple(merged.get(("permissions", "allow"), ())),
            ask=tuple(merged.get(("permissions", "ask"), ())),
            deny=tuple(merged.get(("permissions", "deny"), ())),
            mode=mode,
            max_mode=max_mode,
            full_access=bool(merged.get(("permissions", "full_access"), False)),
        ),
        sessions=SessionLimits(
            max_steps=merged.get(("sessions", "max_steps"), SessionLimits().max_steps),
            token_budget=budget,
            turn_deadline=deadline or None,
            reap_delay=merged.get(("sessions", "reap_delay"), SessionLimits().reap_delay),
            idle_unload=merged.get(("sessions", "idle_unload"), SessionLimits().idle_unload),
            max_prompt_bytes=merged.get(
                ("sessions", "max_prompt_bytes"), SessionLimits().max_prompt_bytes
            ),
        ),
        context=ContextLimits(**{k[1]: v for k, v in merged.items() if k[0] == "context"}),
        checkpoints=CheckpointLimits(
            **{k[1]: v for k, v in merged.items() if k[0] == "checkpoints"}
        ),
        server=ServerLimits(**{k[1]: v for k, v in merged.items() if k[0] == "server"}),
        subagents=SubagentLimits(
            max_depth=merged.get(("subagents", "max_depth"), SubagentLimits().max_depth),
            max_per_turn=merged.get(("subagents", "max_per_turn"), SubagentLimits().max_per_turn),
            roles=tuple(merged.get(("subagents", "roles"), SubagentLimits().roles)),
        ),
        budget=_budget(merged),
        telemetry=TelemetrySettings(**{k[1]: v for k, v in merged.items() if k[0] == "telemetry"}),
        hooks={k[1]: v for k, v in merged.items() if k[0] == "hooks"},
        mcp_servers={k[1]: v for k, v in merged.items() if k[0] == "mcp_servers"},
        sources=sources,
        warnings=warnings,
        user_file=user_file,
        project=project,
        beads_repo=_path(merged.get(("beads", "repo"))),
        beads_remote=merged.get(("beads", "remote")),
        beads_host=merged.get(("beads", "host")),
        layers=tuple(layers),
        trust_dir=trust_dir,
    )


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value).expanduser()


def _names(merged: Mapping[Key, Any], top: str) -> list[str]:
    return list(dict.fromkeys(k[1] for k in merged if k[0] == top and len(k) > 2))


def _file_of(sources: Mapping[Key, Source], key: Key) -> str:
    source = sources.get(key)
    return "built-in defaults" if source is None or source.file is None else str(source.file)


def _required(
    merged: Mapping[Key, Any],
    sources: Mapping[Key, Source],
    table: tuple[str, str],
    values: Mapping[str, object],
) -> None:
    """A `ConfigFileError` in the file of the table's first key when a field it needs is
    missing, e.g. "missing; provider 'x' needs kind and base_url"."""
    for field, value in values.items():
        if value is None:
            first = next(k for k in merged if k[:2] == table)
            section, name = table
            raise ConfigFileError(
                _file_of(sources, first),
                (*table, field),
                f"missing; {section.removesuffix('s')} {name!r} needs {' and '.join(values)}",
            )


def _providers(
    merged: Mapping[Key, Any],
    sources: Mapping[Key, Source],
    layers: list[tuple[Layer, Source]],
) -> dict[str, ProviderSpec]:
    providers: dict[str, ProviderSpec] = {}
    for name in _names(merged, "providers"):

        def get(field: str, name: str = name) -> Any:
            return merged.get(("providers", name, field))

        kind: Kind | None = get("kind")
        base_url: str | None = get("base_url")
        _required(merged, sources, ("providers", name), {"kind": kind, "base_url": base_url})
        assert kind is not None
        assert base_url is not None
        # The credential binding comes from trusted layers only (built-in and user): the key
        # variable they name and the origin of the base_url they name.
        trusted_env: str | None = None
        trusted_url: str | None = None
        for layer, source in layers:
            if source.trust in (Trust.BUILTIN, Trust.USER):
                trusted_env = layer.get(("providers", name, "api_key_env"), trusted_env)
                trusted_url = layer.get(("providers", name, "base_url"), trusted_url)
        api_key_env: str | None = get("api_key_env")
        credential_origin = (
            origin_of(trusted_url)
            if api_key_env is not None and api_key_env == trusted_env and trusted_url is not None
            else None
        )
        window = get("context_window") or FALLBACK_LIMITS.context_window
        output = get("max_output_tokens") or min(FALLBACK_LIMITS.max_output_tokens, window)
        providers[name] = ProviderSpec(
            name=name,
            kind=kind,
            base_url=base_url,
            api_key_env=api_key_env,
            credential_origin=credential_origin,
            default_limits=Limits(context_window=window, max_output_tokens=output),
        )
    return providers


def _models(
    merged: Mapping[Key, Any],
    sources: Mapping[Key, Source],
    providers: Mapping[str, ProviderSpec],
) -> dict[str, ModelSpec]:
    models: dict[str, ModelSpec] = {}
    for alias in _names(merged, "models"):

        def get(*field: str, alias: str = alias) -> Any:
            return merged.get(("models", alias, *field))

        provider, model = get("provider"), get("model")
        _required(merged, sources, ("models", alias), {"provider": provider, "model": model})
        if provider not in providers:
            key = ("models", alias, "provider")
            known = ", ".join(sorted(providers)) or "none"
            raise ConfigFileError(
                _file_of(sources, key),
                key,
                f"unknown provider {provider!r} (known providers: {known})",
            )
        defaults = providers[provider].default_limits
        window = get("context_window") or defaults.context_window
        output = get("max_output_tokens") or min(defaults.max_output_tokens, window)
        if output > window:
            key = ("models", alias, "max_output_tokens")
            raise ConfigFileError(
                _file_of(sources, key),
                key,
                f"expected at most the context_window ({window}), got {output}",
            )
        prices = {k[3]: v for k, v in merged.items() if k[:3] == ("models", alias, "pricing")}
        capabilities = {
            k[3]: v for k, v in merged.items() if k[:3] == ("models", alias, "capabilities")
        }
        models[alias] = ModelSpec(
            alias=alias,
            provider=provider,
            model=model,
            limits=Limits(context_window=window, max_output_tokens=output),
            pricing=Pricing(**prices) if prices else None,
            capabilities=capabilities,
        )
    return models
