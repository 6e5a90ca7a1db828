"""AnviLLM's sandbox role schema, rewritten into anvil's before a role file is validated.

AnviLLM (`~/.config/anvillm/sandbox-roles/<role>.yaml`) writes

    filesystem: {ro: ["{CWD}", "/usr"], rw: []}
    network: {enabled: false}

which is anvil's `filesystem: {read_only: [...], read_write: [...]}` and `network: false`.
`to_native` renames those keys and nothing else; `anvild.sandbox.roles.parse_role` then applies
its own fail-closed checks to the result (unknown keys, types, no way to ask for full access;
`git` is read-only unless the file says `git: commit`). A key given in both spellings, an unknown
key under `network`, or a `network` mapping without `enabled` is refused here, naming the file,
the key and the fix. Pure: a parsed YAML mapping in, a new mapping out.
"""

from __future__ import annotations

from typing import Any, Final

from anvild.sandbox import RoleConfigError

__all__ = ["FILESYSTEM_KEYS", "to_native"]

FILESYSTEM_KEYS: Final = {"ro": "read_only", "rw": "read_write"}
"""AnviLLM's `filesystem` keys and anvil's names for them."""


def _network(where: str, value: Any) -> Any:
    if not isinstance(value, dict):
        return value  # anvil's `network: true|false`, checked by the role parser
    unknown = sorted(set(value) - {"enabled"}, key=str)
    if unknown:
        raise RoleConfigError(
            f"{where}: unknown key network.{unknown[0]}; AnviLLM's network mapping takes only "
            "enabled (network: {enabled: true|false}), or write network: true|false."
        )
    if "enabled" not in value:
        raise RoleConfigError(
            f"{where}: network is a mapping without enabled; write network: {{enabled: false}} "
            "(or network: false)."
        )
    enabled = value["enabled"]
    if not isinstance(enabled, bool):
        raise RoleConfigError(f"{where}: network.enabled must be true or false, got {enabled!r}.")
    return enabled


def _filesystem(where: str, value: Any) -> Any:
    if not isinstance(value, dict):
        return value  # refused by the role parser, which says what a filesystem is
    out = {k: v for k, v in value.items() if k not in FILESYSTEM_KEYS}
    for theirs, ours in FILESYSTEM_KEYS.items():
        if theirs not in value:
            continue
        if ours in value:
            raise RoleConfigError(
                f"{where}: filesystem.{theirs} and filesystem.{ours} are the same list in "
                f"AnviLLM's and anvil's spelling; keep one of them."
            )
        out[ours] = value[theirs]
    return out


def to_native(doc: dict[Any, Any], where: str) -> dict[Any, Any]:
    """`doc` (a role file's top-level mapping) with AnviLLM's keys renamed to anvil's."""
    out = dict(doc)
    if "network" in out:
        out["network"] = _network(where, out["network"])
    if "filesystem" in out:
        out["filesystem"] = _filesystem(where, out["filesystem"])
    return out
