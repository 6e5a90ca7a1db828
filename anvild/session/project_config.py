"""A session's project config: its cwd's `.anvil/config.toml` merged onto the daemon's config.

`ProjectConfigs` (one per manager, built by `anvild.daemon.wiring`) finds a cwd's project file
as `anvild.config.find_project_config` does and merges it with `anvild.config.merge_project`
(the trust and provenance rules of `anvild.config.load`); a version resolves each model name
once. At session creation (the lookup its model was resolved with) and at every turn start
(`before_turn`, the session's one hook) it checks the file found and the inode, size and
mtime of that file and of the trust grants; a change re-reads them. A bad file is reported and
the last good version of that file (or none) applies: a project file never stops a session.
What applies: `instructions` (user, then project: the first part of the prompt's `extra`
layer), the rules (project deny and ask always; allow only granted), and, granted, the default
mode (within the user's `max_mode`), providers and models (the session's model is resolved
again). Ignored keys are reported once per session and file version: `config_ignored` on
`agent/events`, a NOTE in the session's `log`, a warning in the daemon's log, each with the
`anvilctl trust grant` command. `text` is the session's `config` file. docs/decisions.md.
"""

from __future__ import annotations

import os
import shlex
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs
import structlog

from anvild.agent.permissions.policy import Mode
from anvild.agent.permissions.rules import RuleSet
from anvild.config import Config, Trust, find_project_config, merge_project, user_data_dir
from anvild.config.report import settings
from anvild.config.trust import TRUST_FILE
from anvild.llm.registry import ResolvedModel
from anvild.session.events import ConfigIgnored, ConfigInvalid, SessionEvent
from anvild.session.session import Session
from anvild.session.settings import wider

log = structlog.get_logger(__name__)

Resolver = Callable[[str | None], ResolvedModel]
Stamp = tuple[object, ...]

_MODELS: Final = frozenset({"providers", "models", "default_model"})
DAEMON_WIDE: Final = frozenset(
    {
        "env_passthrough",
        "sessions",
        "context",
        "server",
        "beads",
        "checkpoints",
        "budget",
        "telemetry",
    }
)
"""Top-level keys a project may set that a session does not apply (daemon-wide, or unused).
A granted project's hooks and MCP servers apply to its sessions."""
_NOT_APPLIED: Final = ("permissions.max_mode", "permissions.full_access")
HEADER: Final = "# Instructions from the config (user, then project)"
JUST_RESOLVED: Final = 1.0  # seconds: a `new`'s lookup still counts as "at its creation"


@attrs.frozen
class Merged:
    """One version of the config that applies in a project (shared by its sessions)."""

    config: Config
    rules: RuleSet
    resolve: Resolver
    models_changed: bool  # the project layer sets providers, models or default_model
    error: str = ""  # a newer version of the file that could not be used, and why

    @property
    def instructions(self) -> str:
        items = self.config.instructions
        if not items:
            return ""
        parts = [HEADER, *(f"## {i.source.file}\n\n{i.text.strip()}" for i in items)]
        return "\n\n".join(parts)


@attrs.define
class _Known:
    stamp: Stamp
    merged: Merged


@attrs.define
class _State:
    merged: Merged | None = None
    reported: set[str] = attrs.field(factory=set)
    retargeted: str | None = None  # the model name last resolved here, None: never


def _stat(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return (str(path), None)
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


class ProjectConfigs:
    """The project config of every session of one manager; see the module docstring."""

    def __init__(
        self,
        base: Config,
        *,
        resolve: Resolver,
        registry: Callable[[Config], Resolver],
        max_mode: Mode = Mode.ACCEPT_EDITS,
    ) -> None:
        """`base`: the daemon's config, loaded with `project=False`; `resolve` its model
        resolver; `registry` builds one for a merged config; `max_mode` the user's ceiling."""
        self._base = Merged(base, _rules(base), _per_name(resolve), models_changed=False)
        self._registry = registry
        self._max_mode = max_mode
        self._trust = (base.trust_dir or user_data_dir()) / TRUST_FILE
        self._known: dict[Path, _Known] = {}
        self._states: weakref.WeakKeyDictionary[Session, _State] = weakref.WeakKeyDictionary()
        self._by_id: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._resolved: tuple[str, float, Merged] | None = None  # the last `resolve`'s
        self.publish: Callable[[SessionEvent], None] | None = None

    # -- the config of a cwd ---------------------------------------------------------------------

    def current(self, cwd: Path) -> Merged:
        """What applies in `cwd` now, re-read if the file or the grants changed."""
        try:
            path = find_project_config(cwd)
        except OSError:
            path = None
        if path is None:
            return self._base
        stamp = (_stat(path), _stat(self._trust))
        known = self._known.get(path)
        if known is not None and known.stamp == stamp:
            return known.merged
        try:
            config = merge_project(self._base.config, path)
            merged = Merged(
                config,
                _rules(config),
                _per_name(self._registry(config)) if _sets_models(config) else self._base.resolve,
                models_changed=_sets_models(config),
            )
        except Exception as exc:  # a bad project file never stops a session: report, keep going
            previous = known.merged if known is not None else self._base
            merged = attrs.evolve(previous, error=f"{path}: {exc}")
            log.warning("config.project_invalid", file=str(path), error=str(exc))
        self._known[path] = _Known(stamp, merged)
        return merged

    def resolve(self, cwd: Path, name: str | None) -> ResolvedModel:
        """`name` (None: the default) as the config that applies in `cwd` resolves it."""
        merged = self.current(cwd)
        self._resolved = (str(cwd), time.monotonic(), merged)
        return merged.resolve(name)

    def _just_resolved(self, cwd: str) -> Merged | None:
        """What `resolve` found for `cwd` a moment ago (for a `new`), taken once: the session's
        first apply, right after, reports that version instead of looking the file up again."""
        found, self._resolved = self._resolved, None
        if found is None or found[0] != cwd or time.monotonic() - found[1] > JUST_RESOLVED:
            return None
        return found[2]

    def extra_context(self, inner: Callable[[str], str] | None) -> Callable[[str], str]:
        """`SessionSettings.extra_context`: the session's config instructions, then `inner`'s."""

        def extra(session_id: str) -> str:
            session = self._by_id.get(session_id)
            state = self._states.get(session) if session is not None else None
            merged = state.merged if state is not None and state.merged else self._base
            parts = [merged.instructions, inner(session_id) if inner is not None else ""]
            return "\n\n".join(p.strip() for p in parts if p.strip())

        return extra

    # -- the session's hook ----------------------------------------------------------------------

    def before_turn(self, session: Session) -> None:
        """Apply what the session's cwd brings now (at creation and at every turn start)."""
        try:
            self._apply(session)
        except Exception:  # a bug here must not stop the session: its turn runs as before
            log.exception("config.apply_failed", session=session.id)

    def _apply(self, session: Session) -> None:
        state = self._states.get(session)
        merged = None
        if state is None:  # at its creation
            state = self._states[session] = _State()
            self._by_id[session.id] = session
            merged = self._just_resolved(session.cwd)
        if merged is None:
            merged = self.current(Path(session.cwd))
        self._report(session, merged, state)
        session.set_policy(merged.rules, self._mode(session, merged))
        fresh = state.merged is not merged or state.retargeted != session.model
        state.merged = merged
        if fresh and (merged.models_changed or state.retargeted is not None):
            self._retarget(session, merged, state)

    def _mode(self, session: Session, merged: Merged) -> Mode:
        """A granted project's `permissions.mode` for a session that asked for none, within the
        user's ceiling; otherwise the session's own."""
        source = merged.config.sources.get(("permissions", "mode"))
        if session.record.permission is not None or source is None:
            return session.mode
        if source.trust is not Trust.PROJECT_GRANTED:
            return session.mode
        mode = Mode(merged.config.permissions.mode)
        return self._max_mode if wider(mode, self._max_mode) else mode

    def _retarget(self, session: Session, merged: Merged, state: _State) -> None:
        """The session's model as `merged` resolves it now (a granted project may move it)."""
        try:
            target = merged.resolve(session.model)
        except Exception as exc:  # the name is gone from this version: keep the current target
            self._tell(session, state, f"model {session.model}: {exc}; the session keeps it")
            return
        state.retargeted = session.model
        session.set_provider(target)

    def _report(self, session: Session, merged: Merged, state: _State) -> None:
        config, project = merged.config, merged.config.project
        if merged.error and merged.error not in state.reported:
            state.reported.add(merged.error)
            using = "its last good version" if project is not None else "no project config"
            self._emit(ConfigInvalid(session.id, merged.error, using))
            self._tell(session, state, f"{merged.error}; using {using}")
        if project is None or project.granted or project.sha256 in state.reported:
            return
        ignored = tuple(w.key for w in config.warnings if w.file == project.path)
        state.reported.add(project.sha256)
        if not ignored:
            return
        command = self.grant_command(project.path, project.sha256)
        self._emit(ConfigIgnored(session.id, str(project.path), ignored, command))
        log.warning(
            "config.project_ignored", session=session.id, file=str(project.path), keys=ignored
        )
        self._tell(
            session,
            state,
            f"{project.path}: ignored {', '.join(ignored)} (not granted); review it with "
            f"`anvilctl trust show {project.path.parent.parent}` and apply it with `{command}`",
        )

    def grant_command(self, path: Path, sha256: str) -> str:
        """The command that grants this version of the file, where this daemon reads grants."""
        where = self._trust.parent
        data = "" if where == user_data_dir() else f" --data-dir {shlex.quote(str(where))}"
        return (
            f"anvilctl trust grant{data} --sha256 {sha256} {shlex.quote(str(path.parent.parent))}"
        )

    def _tell(self, session: Session, state: _State, message: str) -> None:
        session.log.publish(f"NOTE: {message}")
        log.warning("config.session_note", session=session.id, message=message)

    def _emit(self, event: SessionEvent) -> None:
        if self.publish is not None:
            self.publish(event)

    # -- the `config` file -----------------------------------------------------------------------

    def text(self, session: Session) -> str:
        """The session's `config` file: what applied at its last turn start, by origin."""
        state = self._states.get(session)
        merged = state.merged if state is not None and state.merged else self._base
        config, project = merged.config, merged.config.project
        lines = [f"cwd {session.cwd}"]
        if project is None and merged.error:
            lines.append("project none applies")
        elif project is None:
            lines.append("project none (no .anvil/config.toml from the cwd up to the git root)")
        else:
            trust = (
                "granted"
                if project.granted
                else "not granted: " + self.grant_command(project.path, project.sha256)
            )
            lines.append(f"project {project.path} sha256 {project.sha256} ({trust})")
        if merged.error:
            lines.append(f"error {merged.error} (using the version below)")
        for setting in settings(config):
            line = setting.line()
            top = setting.key.split(".")[0]
            if (
                setting.origin.startswith("project")
                and "ignored" not in setting.origin
                and (top in DAEMON_WIDE or setting.key in _NOT_APPLIED)
            ):
                line += " (daemon-wide: not applied in a session)"
            lines.append(line)
        return "\n".join(lines) + "\n"


def _per_name(resolve: Resolver, limit: int = 64) -> Resolver:
    """`resolve`, each name's model built once per config version (building one makes its
    provider's adapter, a good part of a `new`); a name that does not resolve is tried again."""
    known: dict[str | None, ResolvedModel] = {}

    def once(name: str | None) -> ResolvedModel:
        found = known.get(name)
        if found is None:
            if len(known) >= limit:  # `provider:model` names are the user's to invent
                known.clear()
            found = known[name] = resolve(name)
        return found

    return once


def _rules(config: Config) -> RuleSet:
    perms = config.permissions
    return RuleSet.parse(allow=perms.allow, ask=perms.ask, deny=perms.deny)


def _sets_models(config: Config) -> bool:
    project = config.project
    return project is not None and any(
        key[0] in _MODELS
        for layer, source in config.layers
        if source.file == project.path
        for key in layer
    )


__all__ = ["DAEMON_WIDE", "HEADER", "Merged", "ProjectConfigs"]
