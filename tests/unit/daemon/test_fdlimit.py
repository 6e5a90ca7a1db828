"""The soft descriptor limit is raised toward the connection cap, never past the hard limit and
never down."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from anvild.daemon.fdlimit import RESERVE, raise_nofile


@pytest.fixture
def limits() -> Iterator[tuple[int, int]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield soft, hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_soft_limit_of_1024_is_raised_for_the_default_cap(limits: tuple[int, int]) -> None:
    _, hard = limits
    if hard != resource.RLIM_INFINITY and hard < 1024 + RESERVE:
        pytest.skip(f"the hard limit {hard} leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    got = raise_nofile(1024)
    assert (got.before, got.soft, got.wanted, got.enough) == (1024, 1024 + RESERVE, 2048, True)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (1024 + RESERVE, hard)


def test_never_past_the_hard_limit_nor_down(limits: tuple[int, int]) -> None:
    _, hard = limits
    if hard == resource.RLIM_INFINITY or hard < 64:
        pytest.skip(f"needs a finite hard limit, not {hard}")
    got = raise_nofile(10 * hard)
    assert (got.soft, got.hard, got.enough) == (hard, hard, False)
    # Already above what a small cap wants: left as it is.
    assert raise_nofile(1).soft == hard
