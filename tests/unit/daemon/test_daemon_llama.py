"""The embedded llama-server: when it is the default, finding it, and its child's lifecycle.

The lifecycle tests run `tests/support/fake_llama_server.py` (a tiny HTTP server with /health)
as the binary, so they take a fraction of a second and need no build.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from anvild.config import load
from anvild.daemon.llama import (
    CONTEXT,
    LlamaNotBuilt,
    LlamaPaths,
    LlamaServer,
    LlamaUnavailable,
    State,
    embedded_default_wanted,
    threads_from,
    with_local_model,
)
from tests.support.fake_llama_server import write_fake


def alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def config_with(tmp_path: Path, text: str | None) -> Any:
    user = tmp_path / "config.toml"
    if text is not None:
        user.write_text(text)
    return load(user_file=user, data_dir=tmp_path / "data", project=False)


@pytest.mark.parametrize(
    ("user_config", "env", "wanted"),
    [
        (None, {}, True),
        ("", {"PATH": "/bin"}, True),
        ('instructions = "be brief"\n', {}, True),  # not about models
        (None, {"ANTHROPIC_API_KEY": "sk-ant-x"}, False),
        (None, {"GEMINI_API_KEY": "k"}, False),
        (None, {"OPENAI_API_KEY": ""}, True),  # set but empty is no key
        ('default_model = "anthropic:claude-x"\n', {}, False),
        ('[providers.mine]\nkind = "openai-chat"\nbase_url = "http://h/v1"\n', {}, False),
        ("[providers.ollama]\ncontext_window = 8192\n", {}, False),
    ],
)
def test_when_the_embedded_server_is_the_default(
    tmp_path: Path, user_config: str | None, env: Mapping[str, str], wanted: bool
) -> None:
    assert embedded_default_wanted(config_with(tmp_path, user_config), env) is wanted


async def test_with_local_model_makes_local_the_default_the_registry_resolves(
    tmp_path: Path,
) -> None:
    config = with_local_model(config_with(tmp_path, None), "http://127.0.0.1:4321")
    assert config.default_model == "local"
    async with httpx.AsyncClient() as client:
        resolved = config.registry(client, env={}).resolve()
    assert (resolved.name, resolved.provider_name, resolved.kind) == (
        "local",
        "local",
        "openai-chat",
    )
    assert resolved.model == "smollm2-135m"
    assert resolved.limits.context_window == CONTEXT
    assert not resolved.authenticated
    assert config.providers["local"].base_url == "http://127.0.0.1:4321/v1"


def test_paths_come_from_the_environment_first(tmp_path: Path) -> None:
    server = write_fake(tmp_path / "server")
    (tmp_path / "m.gguf").write_text("")
    (tmp_path / "t.jinja").write_text("")
    env = {
        "ANVIL_LLAMA_SERVER": str(server),
        "ANVIL_LLAMA_MODEL": str(tmp_path / "m.gguf"),
        "ANVIL_LLAMA_TEMPLATE": str(tmp_path / "t.jinja"),
    }
    assert LlamaPaths.find(env, script=tmp_path / "no-script") == LlamaPaths(
        server, tmp_path / "m.gguf", tmp_path / "t.jinja"
    )


def test_paths_come_from_the_script_and_the_environment_overrides_one(tmp_path: Path) -> None:
    for name in ("bin", "model.gguf", "tmpl.jinja", "other"):
        (tmp_path / name).write_text("")
    (tmp_path / "bin").chmod(0o755)
    (tmp_path / "other").chmod(0o755)
    script = tmp_path / "llama-server"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = env ] || exit 9\n'
        f"echo ANVIL_LLAMA_SERVER={tmp_path}/bin\n"
        f"echo ANVIL_LLAMA_MODEL={tmp_path}/model.gguf\n"
        f"echo ANVIL_LLAMA_TEMPLATE={tmp_path}/tmpl.jinja\n"
    )
    script.chmod(0o755)
    assert LlamaPaths.find({}, script=script).server == tmp_path / "bin"
    found = LlamaPaths.find({"ANVIL_LLAMA_SERVER": str(tmp_path / "other")}, script=script)
    assert found == LlamaPaths(tmp_path / "other", tmp_path / "model.gguf", tmp_path / "tmpl.jinja")


def test_a_missing_binary_says_to_run_make_llama_server(tmp_path: Path) -> None:
    (tmp_path / "m").write_text("")
    env = {
        "ANVIL_LLAMA_SERVER": str(tmp_path / "bin" / "llama-server"),
        "ANVIL_LLAMA_MODEL": str(tmp_path / "m"),
        "ANVIL_LLAMA_TEMPLATE": str(tmp_path / "m"),
    }
    with pytest.raises(LlamaNotBuilt) as refused:
        LlamaPaths.find(env)
    assert str(refused.value).startswith(
        f"the default model is a local llama-server, which is not built yet "
        f"({tmp_path}/bin/llama-server is missing): run `make llama-server`"
    )
    env["ANVIL_LLAMA_SERVER"] = str(write_fake(tmp_path / "fake"))
    env["ANVIL_LLAMA_MODEL"] = str(tmp_path / "missing.gguf")
    with pytest.raises(LlamaNotBuilt, match=r"model .*missing.gguf is missing: run `make llama"):
        LlamaPaths.find(env)


def test_without_the_script_the_message_names_the_variables(tmp_path: Path) -> None:
    with pytest.raises(LlamaNotBuilt, match="set ANVIL_LLAMA_SERVER, ANVIL_LLAMA_MODEL and"):
        LlamaPaths.find({}, script=tmp_path / "nope")


def fake_server(tmp_path: Path, *options: str, **kw: Any) -> LlamaServer:
    (tmp_path / "model.gguf").write_text("")
    (tmp_path / "tmpl.jinja").write_text("")
    binary = write_fake(
        tmp_path / "llama-server", "--fake-record", str(tmp_path / "runs"), *options
    )
    paths = LlamaPaths(binary, tmp_path / "model.gguf", tmp_path / "tmpl.jinja")
    kw.setdefault("backoff", 0.01)
    return LlamaServer(paths, log_file=tmp_path / "llama-server.log", env=os.environ, **kw)


def snapshot(llama: LlamaServer) -> tuple[State, str | None]:
    """State and base URL, read through a call (so a type checker does not narrow them)."""
    return llama.state, llama.base_url


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "runs"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_the_child_becomes_ready_serves_and_is_stopped_with_the_daemon(
    tmp_path: Path,
) -> None:
    llama = fake_server(tmp_path, "--fake-unhealthy-for", "0.3")
    async with trio.open_nursery() as nursery:
        await nursery.start(llama.run)
        assert snapshot(llama) == (State.STARTING, None)
        with trio.fail_after(10):
            base_url = await llama.wait_ready()
        assert (llama.state, llama.starts) == (State.READY, 1)
        assert base_url == llama.base_url
        assert base_url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{base_url}/health")).json() == {"status": "ok"}
        [run] = runs(tmp_path)
        assert alive(run["pid"])
        assert os.getpgid(run["pid"]) == run["pid"]  # its own process group
        argv = run["argv"]
        port = base_url.rpartition(":")[2]
        for pair in (
            ["--host", "127.0.0.1"],
            ["--port", port],
            ["--ctx-size", "8192"],
            ["--parallel", "1"],
            ["--chat-template-file", str(tmp_path / "tmpl.jinja")],
            ["--model", str(tmp_path / "model.gguf")],
        ):
            i = argv.index(pair[0])
            assert argv[i : i + 2] == pair
        assert "--jinja" in argv
        nursery.cancel_scope.cancel()
    assert not alive(run["pid"])
    assert snapshot(llama) == (State.STOPPED, None)
    with pytest.raises(LlamaUnavailable, match="stopped: the daemon stopped it"):
        await llama.wait_ready()
    assert (
        "fake llama-server: listening on 127.0.0.1" in (tmp_path / "llama-server.log").read_text()
    )


async def test_the_child_gets_no_api_keys(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_text("")
    script = tmp_path / "llama-server"
    script.write_text(f'#!/bin/sh\nenv > "{tmp_path}/env"\nexit 1\n')
    script.chmod(0o755)
    paths = LlamaPaths(script, tmp_path / "model.gguf", tmp_path / "model.gguf")
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-secret-value-1234"}
    llama = LlamaServer(paths, log_file=tmp_path / "log", env=env, max_restarts=0)
    await llama.run()
    assert llama.state is State.FAILED
    assert "sk-ant-secret" not in (tmp_path / "env").read_text()
    assert "PATH=" in (tmp_path / "env").read_text()


async def test_a_dead_child_is_restarted_and_ready_again(tmp_path: Path) -> None:
    llama = fake_server(tmp_path, "--fake-die-after", "0.5")
    async with trio.open_nursery() as nursery:
        await nursery.start(llama.run)
        with trio.fail_after(10):
            await llama.wait_ready()
            while llama.starts < 2 or llama.state is not State.READY:
                await llama.wait_ready()
                await trio.sleep(0.02)
        first, second = runs(tmp_path)[:2]
        assert first["pid"] != second["pid"]
        assert not alive(first["pid"])
        assert (tmp_path / "llama-server.log.1").exists()  # the previous run's log is kept
        nursery.cancel_scope.cancel()


async def test_restarts_are_bounded_then_it_fails_with_the_reason(tmp_path: Path) -> None:
    llama = fake_server(tmp_path, "--fake-die-after", "0", max_restarts=2)
    with trio.fail_after(10):
        await llama.run()  # returns: the daemon carries on without it
    assert llama.state is State.FAILED
    assert llama.starts == 3
    assert llama.reason == (
        "llama-server exited with status 3 while starting; gave up after 2 restarts within "
        f"300 s (see {tmp_path / 'llama-server.log'})"
    )
    with pytest.raises(LlamaUnavailable, match="is failed: llama-server exited with status 3"):
        await llama.wait_ready()


async def test_a_server_that_never_becomes_healthy_is_given_up(tmp_path: Path) -> None:
    llama = fake_server(tmp_path, "--fake-unhealthy-for", "999", health_timeout=0.5, max_restarts=0)
    with trio.fail_after(10):
        await llama.run()
    assert llama.reason.startswith("llama-server was not healthy after 0.5 s")
    [run] = runs(tmp_path)
    assert not alive(run["pid"])  # the unhealthy one was stopped, not left behind


async def test_a_child_ignoring_sigterm_is_killed_after_the_stop_timeout(tmp_path: Path) -> None:
    llama = fake_server(tmp_path, "--fake-ignore-term", stop_timeout=0.3)
    async with trio.open_nursery() as nursery:
        await nursery.start(llama.run)
        with trio.fail_after(10):
            await llama.wait_ready()
        [run] = runs(tmp_path)
        started = time.monotonic()
        nursery.cancel_scope.cancel()
    assert 0.3 <= time.monotonic() - started < 5
    assert not alive(run["pid"])


def test_the_parent_death_signal_is_set_in_the_command(tmp_path: Path) -> None:
    command = fake_server(tmp_path).command(1234)
    assert command[1:4] == ["--pdeathsig", "KILL", "--"]
    assert signal.SIGKILL.name.removeprefix("SIG") == command[2]


async def test_without_setpriv_it_fails_and_says_what_to_install(tmp_path: Path) -> None:
    llama = fake_server(tmp_path, max_restarts=0)
    llama = LlamaServer(
        llama.paths,
        log_file=tmp_path / "log",
        env={"PATH": str(tmp_path / "empty")},
        max_restarts=0,
    )
    await llama.run()
    assert llama.state is State.FAILED
    assert "setpriv (util-linux) is not on PATH" in llama.reason
    assert "Install util-linux" in llama.reason
    assert runs(tmp_path) == []


def test_the_thread_count_comes_from_the_environment() -> None:
    assert threads_from({}) == 2
    assert threads_from({"ANVIL_LLAMA_THREADS": " 1 "}) == 1
    for bad in ("0", "two", "65", "-1"):
        with pytest.raises(ValueError, match=r"ANVIL_LLAMA_THREADS=.*whole number from 1 to 64"):
            threads_from({"ANVIL_LLAMA_THREADS": bad})
