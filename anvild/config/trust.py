"""The trust boundary: which keys carry authority, and the grants that let a project set them.

A project config (`.anvil/config.toml`, possibly someone else's) may add instructions and data.
A key carrying *authority* takes effect from a project file only under a grant for that exact
file content: endpoint (`providers.*.kind`, `.base_url`, default limits), credential
(`.api_key_env`), `env_passthrough`, permission (`permissions.allow`, `.mode`, `.max_mode`;
`full_access` never from a project), executable (`hooks.*`, `mcp_servers.*`), budget
(`models.*.pricing.*`, `sessions.*`, `context.*`, `subagents.*`,
`checkpoints.*`), data location (`beads.repo`), listener (`web.*`: the daemon reads it from the
user config only).
Everything else (`default_model`, `instructions`, model aliases, `permissions.deny`/`.ask`) is
instruction or data.
A grant binds the file's absolute path to the SHA-256 of its bytes, kept in the user data dir's
`trust.toml` (0600, replaced atomically); any edit voids it, and the digest is taken from the
bytes that are parsed. A grant never extends a credential: keys go only to origins the user
config or the defaults approved (`anvild.llm.registry`).
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import attrs
import tomlkit

from anvild.config.schema import ConfigFileError, Key

TRUST_FILE: Final = "trust.toml"


def authority_of(key: Key) -> str | None:
    """The authority category of a key path, or None for instruction/data keys."""
    match key:
        case ("providers", _, "api_key_env") | ("telemetry", "headers_env") | ("remotes", *_):
            return "credential"
        case ("telemetry", _):
            return "endpoint"
        case ("providers", *_):
            return "endpoint"
        case ("env_passthrough",):
            return "env passthrough"
        case ("permissions", "allow" | "mode" | "max_mode" | "full_access"):
            return "permission"
        case ("sessions" | "context" | "subagents" | "checkpoints", _):
            return "budget"
        case ("hooks" | "mcp_servers", *_):
            return "executable"
        case ("models", _, "pricing", *_) | ("budget", *_):
            return "budget"
        case ("beads", *_):
            return "data location"
        case ("web", _):
            return "listener"
    return None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@attrs.frozen
class Grant:
    path: Path
    sha256: str
    granted_at: str
    keys: tuple[str, ...] = ()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class TrustStore:
    """The user's trust grants, one file in the user data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.file = data_dir / TRUST_FILE

    def grants(self) -> list[Grant]:
        try:
            data = self.file.read_bytes()
        except FileNotFoundError:
            return []
        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigFileError(self.file, None, f"not valid TOML: {exc}") from exc
        entries = doc.get("grant", [])
        if not isinstance(entries, list):
            raise ConfigFileError(self.file, ("grant",), "expected an array of tables")
        out: list[Grant] = []
        for index, entry in enumerate(entries):
            out.append(self._grant(entry, index))
        return out

    def _grant(self, entry: Any, index: int) -> Grant:
        key = ("grant", str(index))
        if not isinstance(entry, dict):
            raise ConfigFileError(self.file, key, "expected a table")
        path, sha, when = entry.get("path"), entry.get("sha256"), entry.get("granted_at", "")
        keys = entry.get("keys", [])
        if not isinstance(path, str) or not isinstance(sha, str) or len(sha) != 64:
            raise ConfigFileError(self.file, key, "expected a path and a 64-digit sha256")
        if not isinstance(when, str) or not isinstance(keys, list):
            raise ConfigFileError(self.file, key, "expected granted_at text and a keys array")
        return Grant(Path(path), sha, when, tuple(str(k) for k in keys))

    def find(self, path: Path) -> Grant | None:
        """The grant recorded for this file, whatever its digest."""
        resolved = path.resolve()
        for grant in self.grants():
            if grant.path == resolved:
                return grant
        return None

    def is_granted(self, path: Path, sha256: str) -> bool:
        grant = self.find(path)
        return grant is not None and grant.sha256 == sha256

    def grant(self, path: Path, sha256: str, keys: Iterable[str] = ()) -> Grant:
        """Record a grant for `path` at `sha256`, replacing any earlier one for that path."""
        resolved = path.resolve()
        new = Grant(resolved, sha256, _now(), tuple(keys))
        self._write([g for g in self.grants() if g.path != resolved] + [new])
        return new

    def revoke(self, path: Path) -> Grant | None:
        """Remove the grant for `path`; the removed grant, or None if there was none."""
        resolved = path.resolve()
        grants = self.grants()
        removed = next((g for g in grants if g.path == resolved), None)
        if removed is not None:
            self._write([g for g in grants if g.path != resolved])
        return removed

    def _write(self, grants: list[Grant]) -> None:
        doc = tomlkit.document()
        doc.add(tomlkit.comment("anvil trust grants: written by `anvilctl trust`; edit with it"))
        table = tomlkit.aot()
        for grant in grants:
            item = tomlkit.table()
            item.add("path", str(grant.path))
            item.add("sha256", grant.sha256)
            item.add("granted_at", grant.granted_at)
            item.add("keys", list(grant.keys))
            table.append(item)
        doc.add("grant", table)
        # Imported here: `anvild.store` is the whole record layer, and `anvild.config` is
        # imported by anvilctl commands that never write a grant.
        from anvild.store.durable import replace_durably

        self.file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = self.file.with_name(f".trust-{secrets.token_hex(8)}.toml")  # one per writer
        replace_durably(self.file, tomlkit.dumps(doc).encode(), temp=temp, mode=0o600)
