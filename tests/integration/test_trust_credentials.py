"""A repository cannot redirect a trusted credential (review finding 4, course 06.B).

Two local HTTP servers record every request's headers: A is the endpoint the user config names
(with a key from an environment variable), B is where a project config tries to move it.

- Without a grant the project's base_url is ignored, the warning names the key and the file,
  and B never sees a request.
- After `anvilctl trust grant` (the real command, run as a subprocess) the project's base_url
  applies and requests go to B, but *without* the key: a grant moves an endpoint, it does not
  extend a credential to a new origin (docs/decisions.md, "Credentials follow approved origins").
- A one-byte edit of the project file voids the grant: requests go back to A, with the key.
- Nothing B recorded (headers, query, body) ever contains the key.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from anvild.config import Config, load
from anvild.llm.registry import KINDS
from anvild.llm.types import ChatRequest, Message
from tests.support.conformance import complete
from tests.support.fake_provider import FakeProvider, RecordedRequest, Turn

KEY_ENV = "ANVIL_TEST_PROVIDER_KEY"
KEY = "sk-test-credential-7f3a9c"
ANVILCTL = Path(sys.executable).parent / "anvilctl"


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeProvider, FakeProvider]]:
    a = FakeProvider([Turn.reply("from A", repeat=True)])
    b = FakeProvider([Turn.reply("from B", repeat=True)])
    async with trio.open_nursery() as nursery:
        await nursery.start(a.serve)
        await nursery.start(b.serve)
        yield a, b
        nursery.cancel_scope.cancel()


def version(kind: str) -> str:
    return "v1beta" if kind == "gemini" else "v1"


def leaks(request: RecordedRequest) -> bool:
    everything = json.dumps([request.headers, request.query, request.body, request.path])
    return KEY in everything


async def ask(config: Config) -> str:
    async with httpx.AsyncClient() as client:
        resolved = config.registry(client, env={KEY_ENV: KEY}).resolve("corp:some-model")
        done = await complete(
            resolved.provider,
            ChatRequest(model=resolved.model, messages=[Message.user_text("hello")]),
        )
    return done.message.text()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_project_cannot_redirect_a_credential(
    kind: str, servers: tuple[FakeProvider, FakeProvider], tmp_path: Path
) -> None:
    a, b = servers
    user = tmp_path / "xdg-config/anvil/config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(
        f'[providers.corp]\nkind = "{kind}"\nbase_url = "{a.url}/{version(kind)}"\n'
        f'api_key_env = "{KEY_ENV}"\n'
    )
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    project = repo / ".anvil/config.toml"
    project.parent.mkdir()
    project.write_text(f'[providers.corp]\nbase_url = "{b.url}/{version(kind)}"\n')
    data_dir = tmp_path / "xdg-data/anvil"

    def config() -> Config:
        return load(repo, user_file=user, data_dir=data_dir)

    # 1. No grant: ignored, with a warning that names the key and the file; A gets the key.
    untrusted = config()
    [warning] = untrusted.warnings
    assert warning.key == "providers.corp.base_url"
    assert str(project.resolve()) in str(warning)
    assert "providers.corp.base_url" in str(warning)
    assert await ask(untrusted) == "from A"
    assert b.requests == []
    assert leaks(a.requests[-1])  # the approved origin does get the credential

    # 2. `anvilctl trust grant`: the endpoint moves to B, the credential does not follow.
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg-data")}
    result = await trio.run_process(
        [str(ANVILCTL), "trust", "grant", str(repo)], env=env, capture_stdout=True
    )
    assert b"granted: " in result.stdout
    granted = config()
    assert granted.warnings == ()
    assert granted.providers["corp"].base_url == f"{b.url}/{version(kind)}"
    assert await ask(granted) == "from B"
    assert len(b.requests) == 1
    requests_to_a = len(a.requests)

    # 3. A one-byte edit voids the grant: back to A, with the key.
    project.write_bytes(project.read_bytes() + b" ")
    edited = config()
    assert [w.key for w in edited.warnings] == ["providers.corp.base_url"]
    assert "changed since it was trusted" in str(edited.warnings[0])
    assert await ask(edited) == "from A"
    assert len(a.requests) == requests_to_a + 1
    assert len(b.requests) == 1

    # 4. B never saw the key, anywhere in anything it recorded.
    assert not any(leaks(request) for request in b.requests)
    assert all(leaks(request) for request in a.requests)
