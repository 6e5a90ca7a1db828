"""`[mcp_servers.NAME]`: checked with precise errors, read into `ServerSpec`s, names for the
model that every provider accepts and that stay the same across restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.agent.tools.base import TOOL_NAME_RE
from anvild.config import TrustStore, digest, load
from anvild.config.load import Trust
from anvild.config.schema import ConfigFileError, parse_bytes
from anvild.mcp import servers_of, tool_name
from anvild.mcp.config import spec_from


def check(text: str) -> dict[tuple[str, ...], object]:
    return parse_bytes(text.encode(), "config.toml")


def test_a_stdio_and_an_http_server_are_accepted() -> None:
    layer = check(
        "[mcp_servers.files]\n"
        'command = "npx"\nargs = ["-y", "server"]\nenv = { DEBUG = "1" }\n'
        'tool_timeout = 5\nenabled_tools = ["read"]\nsandbox = false\n'
        '[mcp_servers.gh]\nurl = "https://mcp.example/mcp"\n'
        'headers_env = { Authorization = "GH_TOKEN" }\nroles = ["reviewer"]\nread_only = true\n'
    )
    files = layer[("mcp_servers", "files")]
    assert files == {
        "command": ["npx"],
        "args": ["-y", "server"],
        "env": {"DEBUG": "1"},
        "tool_timeout": 5.0,
        "enabled_tools": ["read"],
        "sandbox": False,
    }
    assert layer[("mcp_servers", "gh")]["roles"] == ["reviewer"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[mcp_servers.x]\nargs = []\n", "set either command"),
        ('[mcp_servers.x]\ncommand = "a"\nurl = "http://h"\n', "not both"),
        ('[mcp_servers.x]\ncommand = "a"\ncolour = 1\n', "mcp_servers.x.colour: unknown key"),
        ('[mcp_servers.x]\nurl = "http://h"\nargs = ["a"]\n', "not used by an HTTP server"),
        ('[mcp_servers.x]\ncommand = "a"\nheaders_env = {}\n', "not used by a stdio server"),
        ('[mcp_servers.x]\ncommand = "a"\ntool_timeout = 0\n', "a number of seconds above 0"),
        ('[mcp_servers.x]\ncommand = "a"\nroles = ["boss"]\n', "unknown role 'boss'"),
        ('[mcp_servers.x]\ncommand = "a"\nsandbox = "no"\n', "expected true or false"),
        ('[mcp_servers.x]\nurl = "ftp://h"\n', "an http:// or https:// URL"),
        (
            '[mcp_servers.x]\nurl = "http://h"\nheaders_env = { A = "not a name" }\n',
            "the name of an environment variable",
        ),
        ('[mcp_servers."bad name"]\ncommand = "a"\n', "expected a name of letters"),
    ],
)
def test_a_bad_table_is_refused_saying_where_and_why(text: str, message: str) -> None:
    with pytest.raises(ConfigFileError) as caught:
        check(text)
    assert message in str(caught.value)
    assert str(caught.value).startswith("config.toml: mcp_servers.")


def test_specs_come_from_the_user_config_with_the_credential_bound_to_its_origin(
    tmp_path: Path,
) -> None:
    user = tmp_path / "config.toml"
    user.write_text(
        '[mcp_servers.gh]\nurl = "https://mcp.example/mcp"\n'
        'headers_env = { Authorization = "GH_TOKEN" }\n'
        '[mcp_servers.local]\ncommand = ["node", "server.js"]\nargs = ["--stdio"]\n'
    )
    config = load(tmp_path, user_file=user, data_dir=tmp_path / "data", project=False)
    gh, local = servers_of(config)
    assert (gh.name, gh.transport, local.transport) == ("gh", "http", "stdio")
    assert local.argv == ("node", "server.js", "--stdio")
    assert gh.credential_origin == "https://mcp.example"
    assert gh.credential_headers({"GH_TOKEN": "t0k"}) == ({"Authorization": "t0k"}, "")
    headers, why = gh.credential_headers({})
    assert headers == {}
    assert "GH_TOKEN is not set" in why


def test_a_granted_project_server_gets_no_credential() -> None:
    table = {"url": "https://mcp.example/mcp", "headers_env": {"Authorization": "GH_TOKEN"}}
    spec = spec_from("gh", table, Trust.PROJECT_GRANTED, "/repo/.anvil/config.toml")
    headers, why = spec.credential_headers({"GH_TOKEN": "t0k"})
    assert headers == {}
    assert "credentials go only to an origin the user config names" in why


def test_roles_and_tool_filters() -> None:
    spec = spec_from(
        "x",
        {"command": ["a"], "roles": ["reviewer"], "disabled_tools": ["rm"]},
        Trust.USER,
        "user",
    )
    assert spec.for_role("reviewer")
    assert not spec.for_role("developer")
    assert spec.exposes("ls")
    assert not spec.exposes("rm")
    only = spec_from("y", {"command": ["a"], "enabled_tools": ["ls"]}, Trust.USER, "user")
    assert only.exposes("ls")
    assert not only.exposes("cat")


def test_the_sharing_key_ignores_the_tool_filters_but_not_the_process() -> None:
    a = spec_from("x", {"command": ["a"], "enabled_tools": ["ls"]}, Trust.USER, "user")
    b = spec_from("x", {"command": ["a"]}, Trust.USER, "user")
    c = spec_from("x", {"command": ["a"], "env": {"K": "v"}}, Trust.USER, "user")
    assert a.key == b.key
    assert a.key != c.key


def test_tool_names_are_valid_bounded_and_stable() -> None:
    assert tool_name("github", "get_issue") == "mcp__github__get_issue"
    assert tool_name("my.server", "do thing/now") == "mcp__my_server__do_thing_now"
    long = tool_name("server", "t" * 100)
    assert len(long) == 64
    assert TOOL_NAME_RE.fullmatch(long)
    assert long == tool_name("server", "t" * 100)  # same on every run
    assert long != tool_name("server", "t" * 99 + "u")  # a shared prefix does not collide
    assert long.startswith("mcp__server__ttt")


def test_a_project_server_and_its_sandbox_false_wait_for_the_grant(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".anvil").mkdir()
    project = repo / ".anvil" / "config.toml"
    project.write_text(
        '[mcp_servers.proj]\ncommand = "node"\nsandbox = false\n'
        '[mcp_servers.web]\nurl = "https://mcp.example/mcp"\n'
        'headers_env = { Authorization = "GH_TOKEN" }\n'
    )
    user = tmp_path / "config.toml"
    user.write_text("")
    data = tmp_path / "data"
    config = load(repo, user_file=user, data_dir=data)
    assert servers_of(config) == ()
    assert {w.key for w in config.warnings} == {"mcp_servers.proj", "mcp_servers.web"}
    TrustStore(data).grant(project, digest(project.read_bytes()))
    proj, web = servers_of(load(repo, user_file=user, data_dir=data))
    assert (proj.name, proj.sandbox) == ("proj", False)
    assert web.credential_origin is None  # a grant never extends a credential
