"""A running `SessionManager` over scripted providers, for the supervisor's tests."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from anvild.agent.permissions.policy import Mode
from anvild.agent.tools.base import Tool
from anvild.agent.tools.files import EditFile, ReadFile, WriteFile
from anvild.agent.tools.todo import TodoWriteTool
from anvild.llm import capabilities as caps
from anvild.llm.errors import ConfigError
from anvild.llm.provider import Provider
from anvild.llm.registry import Limits, Pricing, ResolvedModel
from anvild.llm.testing import Script, ScriptedProvider
from anvild.session.manager import NewSession, SessionManager
from anvild.session.session import Session, SessionSettings, ToolSetup
from anvild.store import SessionStore


def target(
    provider: Provider,
    *,
    name: str = "fake",
    kind: str = "anthropic",
    window: int = 32000,
    pricing: Pricing | None = None,
    provider_name: str | None = None,
) -> ResolvedModel:
    return ResolvedModel(
        name=name,
        provider_name=provider_name or provider.name,
        kind=kind,  # type: ignore[arg-type]
        model=f"{name}-model",
        limits=Limits(window, 1024),
        capabilities=caps.for_target(kind),
        pricing=pricing,
        provider=provider,
        authenticated=True,
    )


class Models:
    """A resolver over fixed targets; unknown names fail like the registry's."""

    def __init__(self, targets: Mapping[str, ResolvedModel], default: str = "fake") -> None:
        self.targets = dict(targets)
        self.default = default

    def __call__(self, name: str | None) -> ResolvedModel:
        name = name or self.default
        if name not in self.targets:
            known = ", ".join(sorted(self.targets))
            raise ConfigError(f"unknown model {name!r} (known aliases: {known})")
        return self.targets[name]


def file_tools(extra: Sequence[Any] = ()) -> Any:
    def build(setup: ToolSetup) -> list[Tool]:
        return [ReadFile(), WriteFile(), EditFile(), TodoWriteTool(), *extra]

    return build


def settings(tmp_path: Path, **changes: Any) -> SessionSettings:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    base = SessionSettings(
        mode=Mode.BYPASS,
        user_config_dir=config,
        role_text_dir=config / "roles",
        sandbox_role_dir=config / "sandbox-roles",
        home=tmp_path,
        reap_delay=30.0,
        # No deadline unless a test sets one: under autojump_clock, a worker thread (a synced
        # record, a path resolution) lets the clock jump straight to the next deadline.
        turn_deadline=None,
    )
    return attrs.evolve(base, **changes)


@asynccontextmanager
async def running(
    tmp_path: Path,
    models: Models | Sequence[Script],
    *,
    tools: Sequence[Any] = (),
    ids: Sequence[str] = (),
    **changes: Any,
) -> AsyncIterator[SessionManager]:
    """A started manager whose data dir is `tmp_path/data`; cancelled on exit."""
    if not isinstance(models, Models):
        models = Models({"fake": target(ScriptedProvider(models))})
    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        models,
        settings=settings(tmp_path, **changes),
        tools=file_tools(tools),
        default_cwd=workspace(tmp_path),
        **({"new_id": iter(ids).__next__} if ids else {}),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir(exist_ok=True)
    return path


async def ask(session: Session, text: str) -> str:
    """Submit `text`, wait until it is handled, and return `out`."""
    seq = session.submit(text)
    await session.wait_handled(seq)
    return session.out


async def new(manager: SessionManager, **kwargs: Any) -> Session:
    return await manager.create(NewSession(**kwargs))


def loads_on_loop(manager: SessionManager) -> list[bool]:
    """From now on, each replay of a session's records to build it (`manager.store.load`)
    appends whether it ran on the calling thread (the event loop's) rather than a worker."""
    loop = threading.current_thread()
    load = manager.store.load
    calls: list[bool] = []

    def recorded(session_id: str) -> Any:
        calls.append(threading.current_thread() is loop)
        return load(session_id)

    manager.store.load = recorded  # type: ignore[method-assign]
    return calls


async def unloaded(manager: SessionManager, *sessions: Session) -> None:
    """Put each (idle) session back to its summary, as an idle unload does."""
    for session in sessions:
        assert await manager.unload(session), session.id
