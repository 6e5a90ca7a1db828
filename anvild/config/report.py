"""Where each effective setting of a merged `Config` came from: one line per setting.

    default_model = "fake"                          user /home/me/.config/anvil/config.toml
    permissions.deny = "bash(rm:*)"                 project trusted /src/app/.anvil/config.toml
    permissions.allow = "bash(make:*)"              project ignored (permission) /src/app/...

A union list (`permissions.*`, `env_passthrough`) gets one line per item, from the layer that
added it; a key a later layer replaced is left out (it does not apply); instructions are listed
per layer, in prompt order. The project's ignored keys come last. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any, Final

import attrs

from anvild.config.load import _UNION_KEYS, Config, Source, Trust
from anvild.config.schema import render_key
from anvild.config.trust import authority_of

ORIGINS: Final = {
    Trust.BUILTIN: "built-in",
    Trust.USER: "user",
    Trust.PROJECT_GRANTED: "project trusted",
    Trust.PROJECT: "project",
}


@attrs.frozen
class Setting:
    key: str
    value: Any
    origin: str  # built-in | user | project | project trusted | project ignored (CATEGORY)
    file: str  # "" for the built-in defaults

    def line(self) -> str:
        value = json.dumps(self.value, ensure_ascii=False)
        return f"{self.key} = {value}\t{self.origin}" + (f" {self.file}" if self.file else "")


def _setting(key: str, value: Any, source: Source) -> Setting:
    return Setting(
        key, value, ORIGINS[source.trust], "" if source.file is None else str(source.file)
    )


def settings(config: Config) -> list[Setting]:
    """Every setting of `config` as it applies, then the project's ignored keys."""
    out: list[Setting] = []
    seen: set[tuple[tuple[str, ...], str]] = set()
    for layer, source in config.layers:
        for key, value in layer.items():
            rendered = render_key(key)
            if key == ("instructions",):
                if value.strip():
                    out.append(_setting(rendered, value, source))
            elif key in _UNION_KEYS:
                for item in value:
                    if (key, item) not in seen:
                        seen.add((key, item))
                        out.append(_setting(rendered, item, source))
            elif config.sources.get(key) == source:
                out.append(_setting(rendered, value, source))
    project = config.project
    if project is not None and not project.granted:
        applied = {
            key for layer, source in config.layers if source.file == project.path for key in layer
        }
        for key, value in project.settings.items():
            if key in applied:
                continue
            origin = f"project ignored ({authority_of(key) or 'depends on authority'})"
            for item in value if key in _UNION_KEYS else [value]:
                out.append(Setting(render_key(key), item, origin, str(project.path)))
    return out


__all__ = ["ORIGINS", "Setting", "settings"]
