"""The built llama-server and model for the tests that run the real embedded model."""

from __future__ import annotations

import os

import pytest

from anvild.daemon.llama import LlamaNotBuilt, LlamaPaths


def built_llama() -> LlamaPaths:
    """The built binary, model and template (found as the daemon finds them, ignoring the
    caller's ANVIL_LLAMA_* overrides); skips the test when they are not there, or fails it under
    ANVIL_REQUIRE_LLAMA=1 (`make test`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_LLAMA_")}
    try:
        return LlamaPaths.find(env)
    except LlamaNotBuilt as exc:
        if os.environ.get("ANVIL_REQUIRE_LLAMA") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def llama_env(paths: LlamaPaths) -> dict[str, str]:
    """The environment that points a daemon at `paths`."""
    return {
        "ANVIL_LLAMA_SERVER": str(paths.server),
        "ANVIL_LLAMA_MODEL": str(paths.model),
        "ANVIL_LLAMA_TEMPLATE": str(paths.template),
    }
