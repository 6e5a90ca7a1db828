"""`[beads]`: `repo` (a path) and `remote` (a git URL shared by several daemons), both a data
location that a project file may set only under a grant."""

from __future__ import annotations

import pytest

from anvild.config import ConfigFileError
from anvild.config.schema import parse_bytes
from anvild.config.trust import authority_of


def _remote(value: str) -> object:
    layer = parse_bytes(f'[beads]\nremote = "{value}"\n'.encode(), "user.toml")
    return layer[("beads", "remote")]


@pytest.mark.parametrize(
    "url",
    [
        "/srv/beads.git",
        "ssh://git@build-1.example/srv/beads.git",
        "git@build-1:beads.git",
        "build-1:/srv/beads.git",
        "https://git.example/team/beads.git",
        "file:///srv/beads.git",
    ],
)
def test_a_git_url_is_kept_as_written(url: str) -> None:
    assert _remote(url) == url


def test_a_path_starting_with_a_tilde_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/ann")
    assert _remote("~/beads.git") == "/home/ann/beads.git"


@pytest.mark.parametrize(
    "url",
    [
        "beads.git",
        "-uupload-pack=touch /tmp/x",
        "ext::sh -c touch% /tmp/x",
        "ext::sh",
        "ftp://host/b.git",
        "a b",
    ],
)
def test_what_is_not_a_git_url_is_refused_naming_what_is(url: str) -> None:
    with pytest.raises(ConfigFileError, match=r"beads\.remote.*expected a git URL: an absolute"):
        _remote(url)


def test_the_host_is_a_name() -> None:
    layer = parse_bytes(b'[beads]\nhost = "build-2.lan"\n', "user.toml")
    assert layer[("beads", "host")] == "build-2.lan"
    with pytest.raises(ConfigFileError, match=r"beads\.host.*expected a name of letters"):
        parse_bytes(b'[beads]\nhost = "build 2"\n', "user.toml")


def test_the_remote_is_a_data_location() -> None:
    assert authority_of(("beads", "remote")) == "data location"
    assert authority_of(("beads", "repo")) == "data location"
