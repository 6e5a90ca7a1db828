"""The embedded default with the real llama-server binary and SmolLM2-135M.

The fake server (tests/unit/daemon/test_daemon_llama.py) proves the supervision; this proves
that the real binary accepts the command line the daemon gives it, becomes healthy, answers
as the `local` model through the registry, and is gone after the daemon stops it.

Skipped with the command to run when `make llama-server` has not been run; with
ANVIL_REQUIRE_LLAMA=1 (as `make test` sets it) it fails instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
import trio

from anvild.config import load
from anvild.daemon.llama import LlamaNotBuilt, LlamaPaths, LlamaServer, State, with_local_model

pytestmark = pytest.mark.slow


@pytest.fixture
def real_paths() -> LlamaPaths:
    """The built binary, model and template; skips (or fails) when they are not there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_LLAMA_")}
    try:
        return LlamaPaths.find(env)
    except LlamaNotBuilt as exc:
        if os.environ.get("ANVIL_REQUIRE_LLAMA") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


async def test_the_real_llama_server_starts_answers_and_stops(
    tmp_path: Path, real_paths: LlamaPaths
) -> None:
    llama = LlamaServer(real_paths, log_file=tmp_path / "llama-server.log")
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
