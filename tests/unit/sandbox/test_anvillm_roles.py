"""AnviLLM's sandbox role files (IDEAS.md, "Role-Specific Sandbox Configs") load as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from anvild.sandbox import ReadOnly, RoleConfigError, WorkspaceWrite
from anvild.sandbox.roles import GitAccess, Role, load_role, parse_role

# Written out as AnviLLM documents them, comments included.
ANVILLM_REVIEWER = """\
# sandbox-roles/reviewer.yaml
filesystem:
  ro:
    - "{CWD}"
    - "/usr"
    - "/lib"
  rw: []  # No write access
network:
  enabled: false
"""

ANVILLM_DEVELOPER = """\
# sandbox-roles/developer.yaml
filesystem:
  ro:
    - "/usr"
    - "/lib"
  rw:
    - "{CWD}"
    - "{TMPDIR}"
network:
  enabled: true
"""


def test_anvillms_reviewer_maps_onto_a_read_only_role_without_network(tmp_path: Path) -> None:
    (tmp_path / "reviewer.yaml").write_text(ANVILLM_REVIEWER)
    role = load_role("reviewer", user_dir=tmp_path, builtin_dir=tmp_path / "none")
    assert role == Role(
        name="reviewer",
        network=False,
        git=GitAccess.READ_ONLY,
        read_only=("{CWD}", "/usr", "/lib"),
        read_write=(),
        source=tmp_path / "reviewer.yaml",
    )
    assert role.default_policy() == ReadOnly(network=False)
    resolved = role.resolve(cwd=Path("/w"), home=Path("/h"), environ={})
    assert resolved.read_only == (Path("/w"), Path("/usr"), Path("/lib"))


def test_anvillms_developer_maps_onto_a_writable_role_with_network() -> None:
    role = parse_role("developer", ANVILLM_DEVELOPER)
    assert (role.network, role.git) == (True, GitAccess.READ_ONLY)  # commits need `git: commit`
    assert role.read_only == ("/usr", "/lib")
    assert role.read_write == ("{CWD}", "{TMPDIR}")
    assert role.default_policy() == WorkspaceWrite(network=True)
    resolved = role.resolve(cwd=Path("/w"), home=Path("/h"), environ={"TMPDIR": "/t"})
    assert resolved.read_write == (Path("/w"), Path("/t"))


def test_anvils_own_keys_may_join_anvillms() -> None:
    text = ANVILLM_DEVELOPER + 'git: commit\ndescription: "dev"\n'
    role = parse_role("developer", text)
    assert (role.git, role.description, role.network) == (GitAccess.COMMIT, "dev", True)
    hidden = parse_role("r", "filesystem: {ro: [/x], hidden: ['{CWD}/.env*']}\n")
    assert (hidden.read_only, hidden.hidden) == (("/x",), ("{CWD}/.env*",))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "network: {enabled: false, proxy: http://x}\n",
            "r.yaml: unknown key network.proxy; AnviLLM's network mapping takes only enabled "
            "(network: {enabled: true|false}), or write network: true|false.",
        ),
        (
            "network: {}\n",
            "r.yaml: network is a mapping without enabled; write network: {enabled: false} "
            "(or network: false).",
        ),
        (
            "network: {enabled: yes please}\n",
            "r.yaml: network.enabled must be true or false, got 'yes please'.",
        ),
        (
            "filesystem: {ro: [/a], read_only: [/b]}\n",
            "r.yaml: filesystem.ro and filesystem.read_only are the same list in AnviLLM's and "
            "anvil's spelling; keep one of them.",
        ),
        (
            "filesystem: {ro: [/a], exec: [/b]}\n",
            "r.yaml: unknown key filesystem.exec; expected ['hidden', 'read_only', 'read_write'] "
            "(or AnviLLM's ro and rw).",
        ),
        (
            "filesystem: {rw: /a}\n",
            "r.yaml: filesystem.read_write must be a list of path strings, got '/a'.",
        ),
        (
            "network: {enabled: true}\nfull_access: true\n",
            "r.yaml: 'full_access' is not a role setting.",
        ),
        (
            "network: {enabled: true}\nbackend: kiro\n",
            "r.yaml: unknown key 'backend'; expected ['description', 'filesystem', 'git', "
            "'network'].",
        ),
    ],
)
def test_a_bad_anvillm_file_is_refused_naming_the_file_the_key_and_the_fix(
    text: str, message: str
) -> None:
    with pytest.raises(RoleConfigError) as caught:
        parse_role("r", text, source=Path("r.yaml"))
    assert str(caught.value).startswith(message)
