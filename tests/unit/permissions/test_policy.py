"""Policy.decide (course 11.2, 11.B; review finding 2): pure, synchronous, table-driven."""

from __future__ import annotations

import posixpath
from typing import Any

import attrs
import pytest

from anvild.agent.permissions.policy import (
    Allow,
    Ask,
    Decision,
    Deny,
    Grants,
    Mode,
    PermissionRequest,
    Policy,
    Remember,
    RoleCeiling,
    resolve_request,
)
from anvild.agent.permissions.rules import RuleSet, parse_rule
from anvild.agent.tools.base import Effects
from anvild.agent.tools.bash import BashTool
from anvild.agent.tools.files import EditFile, ReadFile, WriteFile
from anvild.agent.tools.search import Grep
from anvild.agent.tools.todo import TodoWriteTool
from anvild.sandbox import ReadOnly, WorkspaceWrite

WS = "/work/repo"
TOOLS: dict[str, Any] = {
    t.name: t for t in (BashTool(), EditFile(), ReadFile(), WriteFile(), Grep(), TodoWriteTool())
}


def request(tool: str, **args: Any) -> PermissionRequest:
    effects = TOOLS[tool].effects(args) if tool in TOOLS else Effects.unknown_effects()
    return resolve_request(
        tool, args, effects, cwd=WS, home="/home/dev", canonical=posixpath.normpath
    )


def bash(command: str) -> PermissionRequest:
    return request("bash", command=command)


def policy(
    *,
    allow: tuple[str, ...] = (),
    ask: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    **kwargs: Any,
) -> Policy:
    kwargs.setdefault("sandbox", WorkspaceWrite())
    return Policy(
        WS, rules=RuleSet.parse(allow=allow, ask=ask, deny=deny), home="/home/dev", **kwargs
    )


def kind(decision: Decision) -> str:
    return type(decision).__name__


# -- the acceptance cases --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cargo test --lib", "Allow"),
        ("cargo test", "Allow"),
        ("cargo test && cargo test --doc", "Allow"),
        ("cargo test && rm -rf /", "Deny"),
        ("echo $(cat ~/.ssh/id_rsa)", "Ask"),
        ("git push origin main", "Ask"),
        ("cargo test > out.txt", "Ask"),
        ("FOO=1 cargo test", "Ask"),
        ("cargo test | tee log", "Ask"),
        ("bash -c 'cargo test'", "Ask"),
        ("cargo test '", "Ask"),
        ("", "Deny"),
        ("   ", "Deny"),
    ],
)
def test_course_11_1_commands(command: str, expected: str) -> None:
    p = policy(allow=("bash(cargo test:*)", "bash(echo:*)"))
    assert kind(p.decide(bash(command))) == expected


def test_rm_rf_root_hits_the_hard_deny_even_in_bypass_with_allow_all() -> None:
    p = policy(allow=("bash(*)",), mode=Mode.BYPASS)
    decision = p.decide(bash("cargo test && rm -rf /"))
    assert isinstance(decision, Deny)
    assert "`rm -rf /` is never run" in decision.reason
    assert "No rule or permission mode can allow it" in decision.reason


def test_echo_of_a_key_asks_and_names_the_construct() -> None:
    decision = policy(allow=("bash(echo:*)",)).decide(bash("echo $(cat ~/.ssh/id_rsa)"))
    assert isinstance(decision, Ask)
    assert "outside the shell subset" in decision.reason
    assert "command substitution" in decision.reason


@pytest.mark.parametrize("command", ["", " ", "# nothing"])
def test_an_empty_command_never_auto_allows(command: str) -> None:
    for mode in Mode:
        p = policy(allow=("bash", "bash(*)"), mode=mode, sandbox=ReadOnly())
        assert not isinstance(p.decide(bash(command)), Allow), mode


@pytest.mark.parametrize("command", ['echo "unterminated', "f() { x; }; f", 'eval "$X"', "$X y"])
def test_unparsable_or_unsupported_commands_ask_even_with_allow_all(command: str) -> None:
    for mode in (Mode.DEFAULT, Mode.ACCEPT_EDITS, Mode.BYPASS):
        assert isinstance(policy(allow=("bash(*)", "bash"), mode=mode).decide(bash(command)), Ask)


def test_plan_mode_plus_allow_edit_still_denies_edits() -> None:
    p = policy(allow=("edit_file", "write_file(*)"), mode=Mode.PLAN)
    for req in (
        request("edit_file", file_path="src/a.rs", old_string="a", new_string="b"),
        request("write_file", file_path="src/a.rs", content="x"),
    ):
        decision = p.decide(req)
        assert isinstance(decision, Deny)
        assert "Plan mode makes no changes" in decision.reason


def test_plan_mode_reads_and_todos_are_allowed() -> None:
    p = policy(mode=Mode.PLAN)
    assert p.decide(request("read_file", file_path="src/a.rs")) == Allow()
    assert p.decide(request("todo_write", todos=[])) == Allow()


def test_plan_mode_commands_need_a_read_only_sandbox() -> None:
    writable = policy(allow=("bash(ls:*)",), mode=Mode.PLAN, sandbox=WorkspaceWrite())
    assert isinstance(writable.decide(bash("ls")), Deny)
    read_only = attrs.evolve(writable, sandbox=ReadOnly())
    assert read_only.decide(bash("ls")) == Allow()
    assert isinstance(read_only.decide(bash("ls > listing")), Deny)
    assert isinstance(read_only.decide(bash("git commit -m x")), Deny)
    assert isinstance(read_only.decide(bash("cat x")), Ask)


def test_plan_mode_denies_tools_with_unknown_effects() -> None:
    assert isinstance(
        policy(allow=("mcp__x__*",), mode=Mode.PLAN).decide(request("mcp__x__y")), Deny
    )


def test_allow_read_file_on_an_outside_path_still_asks() -> None:
    p = policy(allow=("read_file", "read_file(*)", "read_file(//etc/**)"))
    decision = p.decide(request("read_file", file_path="/etc/hosts"))
    assert isinstance(decision, Ask)
    assert "outside the workspace" in decision.reason
    assert "whatever the allow rules say" in decision.reason
    assert decision.remember.grants == Grants(read_roots=["/etc/hosts"])


def test_an_outside_grant_lets_the_rules_decide() -> None:
    p = policy(grants=Grants(read_roots=["/etc"]))
    assert p.decide(request("read_file", file_path="/etc/hosts")) == Allow()
    assert isinstance(p.decide(request("read_file", file_path="/var/log/x")), Ask)


def test_dotdot_and_symlinked_paths_are_judged_canonical() -> None:
    p = policy(allow=("read_file",))
    assert isinstance(p.decide(request("read_file", file_path="../../etc/passwd")), Ask)

    def canonical(path: str) -> str:  # src/link -> /etc
        return posixpath.normpath(path).replace(f"{WS}/src/link", "/etc")

    req = resolve_request(
        "read_file",
        {"file_path": "src/link/passwd"},
        Effects.read("src/link/passwd"),
        cwd=WS,
        canonical=canonical,
    )
    assert req.reads[0].as_posix() == "/etc/passwd"
    assert isinstance(p.decide(req), Ask)


def test_accept_edits_allows_workspace_edits_only() -> None:
    p = policy(mode=Mode.ACCEPT_EDITS)
    edit = request("edit_file", file_path="src/a.rs", old_string="a", new_string="b")
    assert p.decide(edit) == Allow()
    assert isinstance(p.decide(request("write_file", file_path="/tmp/x", content="")), Ask)
    assert isinstance(p.decide(bash("cargo build")), Ask)
    assert isinstance(p.decide(request("mcp__x__y")), Ask)


def test_default_mode() -> None:
    p = policy()
    assert p.decide(request("read_file", file_path="src/a.rs")) == Allow()
    assert p.decide(request("grep", pattern="x")) == Allow()
    write = p.decide(request("write_file", file_path="src/a.rs", content=""))
    assert isinstance(write, Ask)
    assert "accept-edits" in write.reason
    assert [str(r) for r in write.remember.rules] == ["write_file(src/a.rs)"]
    assert isinstance(p.decide(bash("ls")), Ask)


def test_bypass_allows_but_escalations_still_need_grants() -> None:
    p = policy(mode=Mode.BYPASS)
    assert p.decide(bash("curl example.com > page.html")) == Allow()
    assert p.decide(request("write_file", file_path="src/a.rs", content="")) == Allow()
    assert isinstance(p.decide(request("write_file", file_path="/etc/x", content="")), Ask)
    assert isinstance(p.decide(bash("echo > ~/.bashrc")), Ask)


def test_deny_plus_network_escalation_stays_denied() -> None:
    p = policy(deny=("mcp__web__fetch",))
    req = attrs.evolve(request("mcp__web__fetch"), effects=Effects(network=True, unknown=True))
    assert isinstance(p.decide(req), Deny)
    assert isinstance(policy().decide(req), Ask)  # without the deny: the escalation asks
    full = attrs.evolve(bash("curl x"), full_access=True)
    assert isinstance(policy(deny=("bash(curl:*)",)).decide(full), Deny)
    assert isinstance(policy(allow=("bash(curl:*)",)).decide(full), Ask)
    granted = policy(allow=("bash(curl:*)",), grants=Grants(full_access=True))
    assert granted.decide(full) == Allow()


def test_deny_beats_ask_beats_allow() -> None:
    allow, ask = ("bash(git:*)",), ("bash(git push:*)",)
    p = policy(allow=allow, ask=ask)
    assert p.decide(bash("git status")) == Allow()
    asked = p.decide(bash("git push"))
    assert isinstance(asked, Ask)
    assert "ask(bash(git push:*))" in asked.reason
    assert not asked.remember  # "always" cannot lift a user's ask rule
    p = policy(allow=allow, ask=ask, deny=("bash(git push:*)",))
    decision = p.decide(bash("git status && git push --force"))
    assert isinstance(decision, Deny)
    assert "deny(bash(git push:*))" in decision.reason


def test_deny_rules_on_paths() -> None:
    p = policy(allow=("read_file",), deny=("read_file(secrets/**)",), mode=Mode.BYPASS)
    assert isinstance(p.decide(request("read_file", file_path="secrets/k")), Deny)
    assert p.decide(request("read_file", file_path="src/k")) == Allow()


def test_a_broad_allow_rule_does_not_bypass_an_outside_grant() -> None:
    p = policy(allow=("edit_file", "write_file"))
    assert isinstance(p.decide(request("write_file", file_path="../x", content="")), Ask)


@pytest.mark.parametrize("role", ["reviewer", "planner"])
def test_read_only_roles_deny_edits_even_with_allow_rules(role: str) -> None:
    p = policy(
        allow=("edit_file", "write_file", "bash(*)"),
        mode=Mode.BYPASS,
        ceiling=RoleCeiling.for_role(role),
    )
    edit = p.decide(request("edit_file", file_path="src/a.rs", old_string="a", new_string="b"))
    assert isinstance(edit, Deny)
    assert f"The {role} role makes no changes" in edit.reason
    assert isinstance(p.decide(bash("git commit -am x")), Deny)
    assert isinstance(p.decide(bash("cargo test && git push")), Deny)
    assert isinstance(p.decide(bash("cargo test > log")), Deny)
    assert isinstance(p.decide(bash("sh -c 'git commit'")), Deny)
    assert p.decide(bash("git log && cargo test")) == Allow()
    assert isinstance(p.decide(request("mcp__x__y")), Deny)


def test_tester_writes_only_under_test_directories() -> None:
    p = policy(mode=Mode.ACCEPT_EDITS, ceiling=RoleCeiling.for_role("tester"))
    assert p.decide(request("write_file", file_path="tests/test_a.py", content="")) == Allow()
    assert p.decide(request("write_file", file_path="pkg/tests/x.rs", content="")) == Allow()
    denied = p.decide(request("write_file", file_path="src/a.py", content=""))
    assert isinstance(denied, Deny)
    assert "only under test directories" in denied.reason
    assert isinstance(p.decide(bash("cargo test > src/out")), Deny)
    assert isinstance(p.decide(bash("git commit -m x")), Ask)  # the tester may commit


def test_unknown_roles_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown role 'hacker'"):
        RoleCeiling.for_role("hacker")


def test_invalid_requests_are_denied_with_the_problem() -> None:
    req = attrs.evolve(request("read_file", file_path="x"), problem="Invalid value for `x`.")
    assert policy(mode=Mode.BYPASS).decide(req) == Deny("Invalid value for `x`.")


def test_always_on_cargo_test_lib_stops_the_next_prompt() -> None:
    p = policy()
    first = p.decide(bash("cargo test --lib"))
    assert isinstance(first, Ask)
    assert first.remember.describe() == ("allow bash(cargo test:*)",)
    p = p.remember(first.remember)
    assert p.decide(bash("cargo test --lib")) == Allow()
    assert p.decide(bash("cargo test")) == Allow()
    assert isinstance(p.decide(bash("cargo build")), Ask)


def test_always_remembers_only_uncovered_segments_and_nothing_for_uncheckable() -> None:
    p = policy(allow=("bash(cargo build:*)",))
    ask = p.decide(bash("cargo build && cargo test"))
    assert isinstance(ask, Ask)
    assert [str(r) for r in ask.remember.rules] == ["bash(cargo test:*)"]
    unsupported = p.decide(bash("eval x"))
    assert isinstance(unsupported, Ask)
    assert not unsupported.remember


def test_always_on_an_outside_read_grants_that_path() -> None:
    p = policy()
    ask = p.decide(request("read_file", file_path="/etc/hosts"))
    assert isinstance(ask, Ask)
    p = p.remember(ask.remember)
    assert p.decide(request("read_file", file_path="/etc/hosts")) == Allow()
    assert isinstance(p.decide(request("read_file", file_path="/etc/shadow")), Ask)


def test_text_subjects_for_other_tools() -> None:
    p = policy(allow=("mcp__db__query(SELECT:*)",))
    req = attrs.evolve(request("mcp__db__query"), text="SELECT 1")
    assert p.decide(req) == Allow()
    assert isinstance(p.decide(attrs.evolve(req, text="DROP TABLE t")), Ask)


def test_mcp_wildcard_rules() -> None:
    p = policy(allow=("mcp__github__*",))
    assert p.decide(request("mcp__github__get_issue")) == Allow()
    assert isinstance(p.decide(request("mcp__gitlab__get_issue")), Ask)


def test_session_rules_are_rules_like_any_other() -> None:
    p = policy().remember(Remember(rules=(parse_rule("edit_file(src/**)"),)))
    edit = request("edit_file", file_path="src/a", old_string="a", new_string="b")
    assert p.decide(edit) == Allow()
    assert p.session_rules == (parse_rule("edit_file(src/**)"),)
