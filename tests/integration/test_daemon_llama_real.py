"""The embedded default with the real llama-server binary and SmolLM2-135M.

The fake server (tests/unit/daemon/test_daemon_llama.py) proves the supervision; this proves
that the real binary accepts the command line the daemon gives it, becomes healthy, answers
as the `local` model through the registry, and is gone after the daemon stops it.

Skipped with the command to run when `make llama-server` has not been run; with
ANVIL_REQUIRE_LLAMA=1 (as `make test` sets it) it fails instead.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
import trio

from anvild.config import load
from anvild.daemon.llama import (
    LlamaPaths,
    LlamaServer,
    State,
    threads_from,
    with_local_model,
)
from tests.integration.test_daemon_cli import Anvild, alive, wait_for
from tests.support.llama import built_llama

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_llama_at_a_time")]


@pytest.fixture
def real_paths() -> LlamaPaths:
    """The built binary, model and template; skips (or fails) when they are not there."""
    return built_llama()


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


async def test_the_real_llama_server_starts_answers_and_stops(
    tmp_path: Path, real_paths: LlamaPaths
) -> None:
    llama = LlamaServer(
        real_paths, log_file=tmp_path / "llama-server.log", threads=threads_from(os.environ)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(llama.run)
        with trio.fail_after(120):
            base_url = await llama.wait_ready()
        pid = llama.pid
        assert pid is not None
        config = with_local_model(
            load(user_file=tmp_path / "none.toml", data_dir=tmp_path, project=False), base_url
        )
        async with httpx.AsyncClient(timeout=120) as client:
            models = (await client.get(f"{base_url}/v1/models")).json()
            assert "smollm2-135m" in [m["id"] for m in models["data"]]
            resolved = config.registry(client, env={}).resolve()
            assert resolved.name == "local"
        nursery.cancel_scope.cancel()
    assert llama.state is State.STOPPED
    assert gone(pid)


def test_kill_9_of_anvild_takes_the_real_llama_server_with_it(
    tmp_path: Path, real_paths: LlamaPaths
) -> None:
    d = Anvild(
        tmp_path / "ns",
        env={
            "ANVIL_LLAMA_SERVER": str(real_paths.server),
            "ANVIL_LLAMA_MODEL": str(real_paths.model),
            "ANVIL_LLAMA_TEMPLATE": str(real_paths.template),
        },
    )
    assert d.wait_serving().endswith("; default model: local llama-server\n")

    def ready() -> list[int]:
        return [r["pid"] for r in d.log_records() if r["event"] == "llama.ready"]

    wait_for(ready, "llama.ready in the daemon's log", timeout=120)
    [pid] = ready()
    assert alive(pid)
    assert d.stop(signal.SIGKILL)[0] == -signal.SIGKILL
    wait_for(lambda: not alive(pid), "llama-server to die with its parent", timeout=5)
