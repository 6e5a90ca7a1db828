"""Prompt layers (order, caps, byte stability) and roles (text, overrides, ceilings, sandbox)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from anvild.session import roles
from anvild.session.errors import InvalidSessionRequest
from anvild.session.prompt import (
    BASE_INSTRUCTIONS,
    MAX_INSTRUCTION_BYTES,
    PromptLayers,
    discover_instructions,
)


def make_repo(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    sub = repo / "pkg" / "mod"
    sub.mkdir(parents=True)
    (repo / ".git").mkdir()
    (tmp_path / "AGENTS.md").write_text("above the repository: never read\n")
    (repo / "AGENTS.md").write_text("root rules\n")
    (repo / "pkg" / "AGENTS.md").write_text("x" * (MAX_INSTRUCTION_BYTES + 10))
    (sub / "AGENTS.md").write_text("module rules\n")
    config = tmp_path / "config"
    config.mkdir()
    (config / "AGENTS.md").write_text("user rules\n")
    return sub, config


def test_the_chain_runs_from_the_user_file_and_the_git_root_down_to_the_cwd(
    tmp_path: Path,
) -> None:
    cwd, config = make_repo(tmp_path)
    found = discover_instructions(cwd, config)
    assert [item.path for item in found] == [
        config / "AGENTS.md",
        tmp_path / "repo" / "AGENTS.md",
        tmp_path / "repo" / "pkg" / "AGENTS.md",
        cwd / "AGENTS.md",
    ]
    capped = found[2]
    assert capped.truncated
    assert len(capped.text.encode()) == MAX_INSTRUCTION_BYTES
    assert not found[0].truncated


def test_layers_render_in_order_and_byte_identically(tmp_path: Path) -> None:
    cwd, config = make_repo(tmp_path)
    layers = PromptLayers(
        instructions=discover_instructions(cwd, config),
        role="reviewer",
        role_text=roles.role_text("reviewer"),
        context="Focus on the parser.",
    )
    prompt = layers.render()
    assert prompt.startswith(BASE_INSTRUCTIONS.strip())
    order = [
        prompt.index("user rules"),
        prompt.index("root rules"),
        prompt.index("module rules"),
        prompt.index("# Your role: reviewer"),
        prompt.index("VERDICT: LGTM"),
        prompt.index("# Session context"),
        prompt.index("Focus on the parser."),
    ]
    assert order == sorted(order)
    assert "only its beginning is shown" in prompt
    assert "never read" not in prompt
    again = PromptLayers(
        instructions=discover_instructions(cwd, config),
        role="reviewer",
        role_text=roles.role_text("reviewer"),
        context="Focus on the parser.",
    )
    assert again.render().encode() == prompt.encode()


def test_base_instructions_stay_short() -> None:
    assert len(BASE_INSTRUCTIONS.splitlines()) < 60
    assert "9P" in BASE_INSTRUCTIONS
    assert "sandbox" in BASE_INSTRUCTIONS


@pytest.mark.parametrize("name", roles.ROLES)
def test_every_role_has_text_a_ceiling_and_a_sandbox(name: str, tmp_path: Path) -> None:
    assert len(roles.role_text(name, user_dir=tmp_path)) > 200
    assert roles.ceiling(name).role == name
    assert roles.sandbox_role(name, user_dir=tmp_path).name in roles.ROLES


def test_reviewer_planner_and_conductor_cannot_write() -> None:
    for name in ("reviewer", "planner", "conductor"):
        ceiling = roles.ceiling(name)
        assert not ceiling.file_writes
        assert not ceiling.mutating_git
    tester = roles.ceiling("tester")
    assert tester.allows_write("tests/test_x.py")
    assert not tester.allows_write("src/x.py")


def test_user_overrides_the_role_text(tmp_path: Path) -> None:
    (tmp_path / "reviewer.txt").write_text("  My own reviewer.\n")
    assert roles.role_text("reviewer", user_dir=tmp_path) == "My own reviewer."


def test_unknown_roles_are_refused_with_the_list() -> None:
    with pytest.raises(InvalidSessionRequest, match="the roles are developer, reviewer"):
        roles.role_text("hacker")
    with pytest.raises(InvalidSessionRequest, match="unknown role"):
        roles.ceiling("root")


def test_the_default_tool_set_runs_bash_under_the_roles_sandbox(tmp_path: Path) -> None:
    from anvild.agent.tools.bash import SandboxWrapper
    from anvild.sandbox import ReadOnly
    from anvild.session.manager import default_tools
    from anvild.session.session import ToolSetup

    role = roles.sandbox_role("reviewer", user_dir=tmp_path)
    tools = default_tools(ToolSetup(tmp_path, "reviewer", ReadOnly(), role, session_id="s1"))
    assert sorted(t.name for t in tools) == [
        "bash",
        "edit_file",
        "glob",
        "grep",
        "read_file",
        "todo_write",
        "write_file",
    ]
    bash = next(t for t in tools if t.name == "bash")
    wrapper = bash._wrapper_for(ReadOnly())  # type: ignore[attr-defined]
    assert isinstance(wrapper, SandboxWrapper)
    assert wrapper.sandbox.role.name == "reviewer"


def test_chain_tools_joins_factories_in_order(tmp_path: Path) -> None:
    from anvild.agent.tools.base import Tool
    from anvild.sandbox import ReadOnly
    from anvild.session import chain_tools, default_tools
    from anvild.session.session import ToolSetup

    role = roles.sandbox_role("reviewer", user_dir=tmp_path)
    setup = ToolSetup(tmp_path, "reviewer", ReadOnly(), role, session_id="s1")
    seen: list[str] = []

    def extra(given: ToolSetup) -> list[Tool]:
        seen.append(given.session_id)
        return [default_tools(given)[0]]

    names = [tool.name for tool in chain_tools(default_tools, extra)(setup)]
    first = default_tools(setup)[0].name
    assert names == [*(tool.name for tool in default_tools(setup)), first]
    assert seen == ["s1"]


def test_every_role_text_ships_its_own_sandbox_file() -> None:
    from anvild.sandbox.roles import BUILTIN_DIR, BUILTIN_ROLES

    texts = sorted(p.stem for p in roles.BUILTIN_TEXT_DIR.glob("*.txt"))
    sandboxes = sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))
    assert texts == sorted(roles.ROLES)
    assert sandboxes == texts
    assert sorted(BUILTIN_ROLES) == texts


def test_the_conductor_sandbox_reads_the_workspace_and_writes_nothing(tmp_path: Path) -> None:
    from anvild.sandbox import ReadOnly
    from anvild.sandbox.roles import GitAccess

    role = roles.sandbox_role("conductor", user_dir=tmp_path / "none")
    assert role.name == "conductor"
    assert role.git is GitAccess.READ_ONLY
    assert not role.network
    assert role.read_write == ()
    assert "{CWD}" in role.read_only
    assert role.default_policy() == ReadOnly(network=False)


def test_the_file_boundary_follows_the_role_ceiling(tmp_path: Path) -> None:
    from anvild.sandbox.files import AccessDenied

    def write(role: str, path: str) -> None:
        roles.file_access(role, tmp_path).update(tmp_path, path, lambda _p, _b: b"x", max_bytes=10)

    write("developer", "src/a.py")
    write("tester", "tests/test_a.py")
    write("tester", "pkg/tests/test_b.py")
    for role, path, why in [
        ("tester", "src/b.py", "writes only under test directories"),
        ("tester", "tests/../src/c.py", "writes only under test directories"),
        ("reviewer", "tests/test_c.py", "outside the writable roots (none)"),
        ("conductor", "notes.md", "outside the writable roots (none)"),
    ]:
        with pytest.raises(AccessDenied, match=re.escape(why)):
            write(role, path)
    assert not (tmp_path / "src" / "b.py").exists()
    assert not (tmp_path / "src" / "c.py").exists()
    assert (tmp_path / "pkg" / "tests" / "test_b.py").read_bytes() == b"x"


def test_no_role_writes_into_anvilds_own_directories_even_from_a_home_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anvild.sandbox.files import AccessDenied

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / ".local" / "share"))
    for role, path in [
        ("developer", ".config/anvil/sandbox-roles/developer.yaml"),
        ("developer", ".config/anvil/config.toml"),
        ("developer", ".local/share/anvil/trust.json"),
        ("tester", ".config/anvil/tests/test_x.py"),
    ]:
        with pytest.raises(AccessDenied, match="a session cannot write there"):
            roles.file_access(role, tmp_path).update(
                tmp_path, path, lambda _p, _b: b"x", max_bytes=10
            )
        assert not (tmp_path / path).exists()
    roles.file_access("developer", tmp_path).update(
        tmp_path, ".config/other/x.txt", lambda _p, _b: b"x", max_bytes=10
    )
    assert (tmp_path / ".config/other/x.txt").read_bytes() == b"x"


def test_the_directories_this_daemon_was_given_are_guarded_too(tmp_path: Path) -> None:
    """A daemon started with its config, role or data directory somewhere else (here inside
    the workspace) protects those, not only the platformdirs defaults."""
    from anvild.sandbox.files import AccessDenied

    roles_dir, data_dir = tmp_path / "my-roles", tmp_path / "anvil-data"
    access = roles.file_access("developer", tmp_path, protected=(roles_dir, None, data_dir))
    for path in ("my-roles/developer.yaml", "anvil-data/trust.json"):
        with pytest.raises(AccessDenied, match="a session cannot write there"):
            access.update(tmp_path, path, lambda _p, _b: b"x", max_bytes=10)
        assert not (tmp_path / path).exists()
    access.update(tmp_path, "src/ok.py", lambda _p, _b: b"x", max_bytes=10)
    assert (tmp_path / "src/ok.py").read_bytes() == b"x"
