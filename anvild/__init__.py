"""anvild: LLM coding-agent sessions published as plain files over 9P.

`__version__` is the installed distribution's version (`importlib.metadata`), whose one source
is `version` in pyproject.toml (docs/decisions.md, "One version"). It is looked up on first use,
so importing `anvild.<subsystem>` (as anvilctl does) does not load importlib.metadata.
"""

from __future__ import annotations

import functools


@functools.cache
def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("anvild")
    except metadata.PackageNotFoundError:  # imported from a tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
