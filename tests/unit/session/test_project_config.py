"""`anvild.session.project_config`: a session's cwd brings its `.anvil/config.toml`.

A manager over a scripted provider, with the `ProjectConfigs` the daemon wires in: what the
provider receives as the system prompt, the rules the session's permission gate holds, what is
reported (events, the session's log) and what the `config` file shows, across turns while the
project file and its grant change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from anvild.agent.permissions.gate import PermissionGate
from anvild.agent.permissions.policy import Mode
from anvild.config import TrustStore, digest, load
from anvild.llm.testing import ScriptedProvider, script
from anvild.session.events import ConfigIgnored, ConfigInvalid, SessionCreated, SessionEvent
from anvild.session.manager import NewSession, SessionManager
from anvild.session.project_config import ProjectConfigs
from anvild.session.session import Session
from anvild.store import SessionStore
from tests.unit.session.support import Models, ask, file_tools, settings, target

USER = "USER-MARK"
PROJECT = "PROJECT-MARK"


def repo(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True, exist_ok=True)
    (root / ".anvil").mkdir(exist_ok=True)
    (root / "sub").mkdir(exist_ok=True)
    (root / ".anvil" / "config.toml").write_text(text)
    return root


@asynccontextmanager
async def manager_for(
    tmp_path: Path, provider: ScriptedProvider, events: list[SessionEvent]
) -> AsyncIterator[tuple[SessionManager, ProjectConfigs]]:
    user = tmp_path / "user.toml"
    user.write_text(f'instructions = "{USER}"\n')
    base = load(user_file=user, data_dir=tmp_path / "data", project=False)
    models = Models({"fake": target(provider)})
    configs = ProjectConfigs(base, resolve=models, registry=lambda config: models)
    manager = SessionManager(
        SessionStore(tmp_path / "data" / "sessions"),
        models,
        settings=settings(tmp_path, mode=Mode.DEFAULT, extra_context=configs.extra_context(None)),
        tools=file_tools(),
        on_event=events.append,
        configs=configs,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager, configs
        nursery.cancel_scope.cancel()


def mode(session: Session) -> Mode:
    gate = session.agent.decide
    assert isinstance(gate, PermissionGate)
    return gate.policy.mode


def rules(session: Session) -> tuple[list[str], list[str], list[str]]:
    gate = session.agent.decide
    assert isinstance(gate, PermissionGate)
    r = gate.policy.rules
    return [str(x) for x in r.allow], [str(x) for x in r.ask], [str(x) for x in r.deny]


async def test_instructions_reach_the_prompt_inside_the_project_only(tmp_path: Path) -> None:
    root = repo(tmp_path, f'instructions = "{PROJECT}"\n')
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    provider = ScriptedProvider([script.text("one"), script.text("two")])
    async with manager_for(tmp_path, provider, []) as (manager, _):
        inside = await manager.create(NewSession(cwd=str(root / "sub")))
        other = await manager.create(NewSession(cwd=str(outside)))
        await ask(inside, "hi")
        await ask(other, "hi")
    first, second = (request.system or "" for request in provider.requests)
    assert first.index(USER) < first.index(PROJECT)
    assert USER in second
    assert PROJECT not in second


async def test_deny_and_ask_apply_at_once_allow_only_after_a_grant(tmp_path: Path) -> None:
    root = repo(
        tmp_path,
        '[permissions]\nmode = "accept-edits"\nallow = ["write_file(a.txt)"]\n'
        'ask = ["read_file(b.txt)"]\n'
        'deny = ["read_file(.secret)"]\n',
    )
    events: list[SessionEvent] = []
    provider = ScriptedProvider([script.text("one"), script.text("two"), script.text("three")])
    async with manager_for(tmp_path, provider, events) as (manager, configs):
        session = await manager.create(NewSession(cwd=str(root)))
        assert rules(session) == ([], ["read_file(b.txt)"], ["read_file(.secret)"])
        assert any(isinstance(e, ConfigIgnored) for e in events)  # at creation already
        await ask(session, "hi")
        await ask(session, "hi")
        ignored = [e for e in events if isinstance(e, ConfigIgnored)]
        assert len(ignored) == 1  # once per session, not per turn
        created = next(e for e in events if isinstance(e, SessionCreated))
        assert events.index(created) < events.index(ignored[0])  # reported at creation
        assert ignored[0].keys == ("permissions.mode", "permissions.allow")
        assert mode(session) is Mode.DEFAULT
        project = root / ".anvil" / "config.toml"
        sha = digest(project.read_bytes())
        assert ignored[0].command.endswith(f"--sha256 {sha} {root}")
        assert any("permissions.allow" in line for line in session.log.backlog())
        assert 'permissions.allow = "write_file(a.txt)"\tproject ignored' in configs.text(session)

        TrustStore(tmp_path / "data").grant(project, sha)
        await ask(session, "hi")
        assert rules(session)[0] == ["write_file(a.txt)"]
        assert mode(session) is Mode.ACCEPT_EDITS
        assert "project trusted" in configs.text(session)


async def test_an_edit_applies_at_the_next_turn_and_a_bad_file_keeps_the_last_good(
    tmp_path: Path,
) -> None:
    root = repo(tmp_path, 'instructions = "EDITION-1"\n')
    project = root / ".anvil" / "config.toml"
    events: list[SessionEvent] = []
    provider = ScriptedProvider([script.text(str(n)) for n in range(4)])
    async with manager_for(tmp_path, provider, events) as (manager, configs):
        session = await manager.create(NewSession(cwd=str(root)))
        await ask(session, "hi")
        project.write_text('instructions = "EDITION-2 is longer"\n')
        await ask(session, "hi")
        project.write_text("[permissions\n")
        await ask(session, "hi")
        assert "not valid TOML" in configs.text(session)
        project.unlink()
        await ask(session, "hi")
    systems = [request.system or "" for request in provider.requests]
    assert "EDITION-1" in systems[0]
    assert "EDITION-2" in systems[1]
    assert "EDITION-1" not in systems[1]
    assert "EDITION-2" in systems[2]  # the broken file: the last good version applies
    assert "EDITION-2" not in systems[3]  # the file is gone: none applies
    invalid = [e for e in events if isinstance(e, ConfigInvalid)]
    assert len(invalid) == 1
    assert "not valid TOML" in invalid[0].error


def test_a_file_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    root = repo(tmp_path, 'instructions = "x"\n')
    base = load(user_file=tmp_path / "none.toml", data_dir=tmp_path / "data", project=False)
    models = Models({})
    configs = ProjectConfigs(base, resolve=models, registry=lambda config: models)
    first = configs.current(root)
    assert configs.current(root / "sub") is first
    (root / ".anvil" / "config.toml").write_text('instructions = "y, edited"\n')
    assert configs.current(root) is not first
    assert configs.current(tmp_path).config is base


def test_a_file_bad_from_the_start_gives_the_users_config_and_says_why(tmp_path: Path) -> None:
    root = repo(tmp_path, "instructions = 3\n")
    base = load(user_file=tmp_path / "none.toml", data_dir=tmp_path / "data", project=False)
    models = Models({})
    configs = ProjectConfigs(base, resolve=models, registry=lambda config: models)
    merged = configs.current(root)
    assert merged.config is base
    assert "instructions" in merged.error
    assert str(root / ".anvil" / "config.toml") in merged.error
